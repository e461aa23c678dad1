#include "remote_bench.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <thread>
#include <sstream>
#include <string>
#include <vector>

#include "core/hash.h"
#include "cpu_time.h"
#include "ferry/client.h"
#include "ferry/loader.h"

namespace ferry::bench {

namespace {

std::string SiblingBinary(const char* argv0, const std::string& rel) {
  char buf[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  std::string self = n > 0 ? std::string(buf, size_t(n)) : std::string(argv0);
  const size_t slash = self.rfind('/');
  return (slash == std::string::npos ? std::string(".") : self.substr(0, slash)) + "/" + rel;
}

// Raw TCP on loopback: a child process writes `bytes`-sized chunks as fast as it can;
// this process reads them into one buffer. The same bytes ferry moves, minus Ferry.
double RawTcpGBps(uint64_t bytes, double seconds) {
  const int lfd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (bind(lfd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || listen(lfd, 1) != 0 ||
      getsockname(lfd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    std::perror("raw tcp: listen");
    return 0;
  }
  const int bufsize = 4 << 20;
  const pid_t child = fork();
  if (child == 0) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bufsize, sizeof bufsize);
    if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) _exit(1);
    std::vector<char> chunk(bytes, 0x5a);
    for (;;) {
      size_t off = 0;
      while (off < chunk.size()) {
        const ssize_t w = send(fd, chunk.data() + off, chunk.size() - off, MSG_NOSIGNAL);
        if (w <= 0) _exit(0);
        off += size_t(w);
      }
    }
  }
  const int fd = accept(lfd, nullptr, nullptr);
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bufsize, sizeof bufsize);
  std::vector<char> buf(bytes);
  // Warm up briefly, then time whole chunks.
  const double warm_end = WallSeconds() + 0.5;
  uint64_t total = 0;
  double t0 = 0;
  bool timing = false;
  for (;;) {
    size_t off = 0;
    while (off < buf.size()) {
      const ssize_t r = recv(fd, buf.data() + off, buf.size() - off, 0);
      if (r <= 0) break;
      off += size_t(r);
    }
    const double now = WallSeconds();
    if (!timing) {
      if (now >= warm_end) {
        timing = true;
        t0 = now;
      }
      continue;
    }
    total += off;
    if (now - t0 >= seconds) break;
  }
  const double wall = WallSeconds() - t0;
  close(fd);
  close(lfd);
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  return double(total) / wall / 1e9;
}

}  // namespace

int RunTransport(const TransportArgs& a, const char* argv0) {
  const std::string worker = a.worker_bin.empty() ? SiblingBinary(argv0, "../server/ferry-worker") : a.worker_bin;
  if (access(worker.c_str(), X_OK) != 0) {
    std::fprintf(stderr, "error: ferry-worker not found at %s (use --worker-bin)\n", worker.c_str());
    return 1;
  }
  const double raw = RawTcpGBps(a.batch_bytes, a.seconds);

  // A real ferry-worker process serving ready-made batches (no decode) to a client in
  // this process; this process's CPU time is the client's.
  int out[2];
  if (pipe(out) != 0) return 1;
  const pid_t child = fork();
  if (child == 0) {
    dup2(out[1], STDOUT_FILENO);
    close(out[0]);
    execl(worker.c_str(), worker.c_str(), "--listen", "127.0.0.1:0", "--threads", "1", "--buffered-batches",
          std::to_string(a.credits + 2).c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  close(out[1]);
  char line[256] = {0};
  FILE* f = fdopen(out[0], "r");
  if (!f || !std::fgets(line, sizeof line, f)) {
    std::fprintf(stderr, "error: ferry-worker did not start\n");
    return 1;
  }
  std::string address = line;
  address = address.substr(address.find("on ") + 3);
  while (!address.empty() && std::isspace(static_cast<unsigned char>(address.back()))) address.pop_back();

  ClientOptions o;
  o.workers = {address};
  const int rows = 64;
  o.job.batch_size = rows;
  const uint64_t bytes = a.batch_bytes / rows * rows;
  o.job.dataset = "synthetic:" + std::to_string(bytes) + ":1000";
  o.job.epochs = 0;
  o.credits = a.credits;
  auto client = Client::Connect(o);
  if (!client.ok()) {
    std::fprintf(stderr, "error: %s\n", client.status().ToString().c_str());
    return 1;
  }
  const double warm_end = WallSeconds() + 0.5;
  double t0 = 0, c0 = 0;
  bool timing = false;
  uint64_t total = 0;
  for (;;) {
    Result<Batch> b = (*client)->Next();
    if (!b.ok()) {
      std::fprintf(stderr, "error: %s\n", b.status().ToString().c_str());
      return 1;
    }
    const double now = WallSeconds();
    if (!timing) {
      if (now >= warm_end) {
        timing = true;
        t0 = now;
        c0 = ProcessCpuSeconds();
      }
      continue;
    }
    total += b->images.num_bytes() + b->labels.num_bytes() + b->indices.num_bytes();
    if (now - t0 >= a.seconds) break;
  }
  const double wall = WallSeconds() - t0, cpu = ProcessCpuSeconds() - c0;
  client->reset();
  kill(child, SIGTERM);
  waitpid(child, nullptr, 0);
  fclose(f);
  const double ferry = double(total) / wall / 1e9;
  std::printf("raw loopback TCP: %.2f GB/s; ferry (one worker, ready-made %.1f MB batches, %d credits): %.2f GB/s\n",
              raw, bytes / 1e6, a.credits, ferry);
  std::printf("transport ferry_GB/s=%.3f raw_GB/s=%.3f ratio=%.3f client_cpu_per_GB=%.3f\n", ferry, raw,
              raw > 0 ? ferry / raw : 0.0, cpu / (double(total) / 1e9));
  return 0;
}

}  // namespace ferry::bench
