#include "remote_bench.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
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

// A timed window after a warm-up: Count() at the end of each whole unit received says
// whether it counts (the warm-up's do not; the first after it starts the clocks).
class Window {
 public:
  Window(double warmup_s, double seconds) : warm_end_(WallSeconds() + warmup_s), seconds_(seconds) {}
  bool Count() {
    const double now = WallSeconds();
    if (!timing_) {
      if (now >= warm_end_) {
        timing_ = true;
        t0_ = now;
        c0_ = ProcessCpuSeconds();
      }
      return false;
    }
    over_ = now - t0_ >= seconds_;
    return true;
  }
  bool over() const { return over_; }
  bool timing() const { return timing_; }
  double wall() const { return WallSeconds() - t0_; }
  double cpu() const { return ProcessCpuSeconds() - c0_; }

 private:
  const double warm_end_, seconds_;
  double t0_ = 0, c0_ = 0;
  bool timing_ = false, over_ = false;
};

// Pinning (--pin): the receiving process on one CPU, every sender on another. On
// loopback, a sender and a receiver that share a core copy through that core's
// caches, a speed-up no network between hosts gives; pinned, both sides pay what they
// would between hosts, and the comparison measures the receiving side itself.
struct Pinning {
  int receiver = -1, senders = -1;  // CPUs; -1 = not pinned
};

Pinning ChoosePinning(bool pin) {
  Pinning p;
  cpu_set_t set;
  if (!pin || sched_getaffinity(0, sizeof set, &set) != 0) return p;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (!CPU_ISSET(c, &set)) continue;
    if (p.receiver < 0) p.receiver = c;
    else if (p.senders < 0) p.senders = c;
  }
  if (p.senders < 0) p.receiver = -1;  // one CPU: nothing to separate
  return p;
}

void PinTo(int cpu) {
  if (cpu < 0) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  sched_setaffinity(0, sizeof set, &set);
}

// Raw TCP on loopback: `streams` child processes each write `bytes`-sized chunks as
// fast as they can; this process reads them all with one thread (poll over the
// sockets, as the client's one io thread does), each into its own buffer. The same
// bytes ferry moves, minus Ferry.
double RawTcpGBps(uint64_t bytes, double seconds, int streams, int sender_cpu, double* cpu_per_gb) {
  const int lfd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (bind(lfd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || listen(lfd, streams) != 0 ||
      getsockname(lfd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    std::perror("raw tcp: listen");
    return 0;
  }
  const int bufsize = 4 << 20;
  std::vector<pid_t> children;
  for (int k = 0; k < streams; ++k) {
    const pid_t child = fork();
    if (child == 0) {
      PinTo(sender_cpu);
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
    children.push_back(child);
  }
  std::vector<pollfd> fds;
  std::vector<std::vector<char>> bufs;
  std::vector<size_t> offs(size_t(streams), 0);
  for (int k = 0; k < streams; ++k) {
    const int fd = accept(lfd, nullptr, nullptr);
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bufsize, sizeof bufsize);
    fds.push_back({fd, POLLIN, 0});
    bufs.emplace_back(bytes);
  }
  // Warm up briefly, then count whole chunks.
  Window window(0.5, seconds);
  uint64_t total = 0;
  bool done = false;
  while (!done) {
    if (poll(fds.data(), fds.size(), 1000) <= 0) break;
    for (size_t k = 0; k < fds.size() && !done; ++k) {
      if ((fds[k].revents & (POLLIN | POLLERR | POLLHUP)) == 0) continue;
      const ssize_t r = recv(fds[k].fd, bufs[k].data() + offs[k], bytes - offs[k], MSG_DONTWAIT);
      if (r == 0) done = true;
      if (r <= 0) continue;
      offs[k] += size_t(r);
      if (offs[k] < bytes) continue;
      offs[k] = 0;
      if (!window.Count()) continue;
      total += bytes;
      done = window.over();
    }
  }
  const double wall = window.wall();
  *cpu_per_gb = total > 0 ? window.cpu() / (double(total) / 1e9) : 0;
  for (const pollfd& p : fds) close(p.fd);
  close(lfd);
  for (pid_t c : children) {
    kill(c, SIGKILL);
    waitpid(c, nullptr, 0);
  }
  return window.timing() && wall > 0 ? double(total) / wall / 1e9 : 0;
}

// A ferry-worker process listening on loopback; its address, or "" on failure.
struct WorkerProcess {
  pid_t pid = -1;
  FILE* out = nullptr;
  std::string address;
};

WorkerProcess StartWorker(const std::string& bin, int buffered, int cpu, const std::string& tls_dir = "") {
  WorkerProcess w;
  int out[2];
  if (pipe(out) != 0) return w;
  std::vector<std::string> args = {bin, "--listen", "127.0.0.1:0", "--threads", "1", "--buffered-batches",
                                   std::to_string(buffered), "--allow-synthetic"};
  if (!tls_dir.empty()) {
    for (const char* f : {"--tls-cert", "/server.pem", "--tls-key", "/server.key", "--tls-ca", "/ca.pem"}) {
      args.push_back(f[0] == '/' ? tls_dir + f : f);
    }
  }
  std::vector<char*> argv;
  for (std::string& x : args) argv.push_back(x.data());
  argv.push_back(nullptr);
  w.pid = fork();
  if (w.pid == 0) {
    PinTo(cpu);
    dup2(out[1], STDOUT_FILENO);
    close(out[0]);
    execv(bin.c_str(), argv.data());
    _exit(127);
  }
  close(out[1]);
  char line[256] = {0};
  w.out = fdopen(out[0], "r");
  if (!w.out || !std::fgets(line, sizeof line, w.out)) return w;
  std::string address = line;
  const size_t on = address.find("on ");
  if (on == std::string::npos) return w;
  address = address.substr(on + 3);
  while (!address.empty() && std::isspace(static_cast<unsigned char>(address.back()))) address.pop_back();
  w.address = address;
  return w;
}

void StopWorker(WorkerProcess& w) {
  if (w.pid > 0) {
    kill(w.pid, SIGTERM);
    waitpid(w.pid, nullptr, 0);
  }
  if (w.out) fclose(w.out);
}

}  // namespace

int RunTransport(const TransportArgs& a, const char* argv0) {
  const std::string worker = a.worker_bin.empty() ? SiblingBinary(argv0, "../server/ferry-worker") : a.worker_bin;
  if (access(worker.c_str(), X_OK) != 0) {
    std::fprintf(stderr, "error: ferry-worker not found at %s (use --worker-bin)\n", worker.c_str());
    return 1;
  }
  const Pinning pin = ChoosePinning(a.pin);
  cpu_set_t before;
  sched_getaffinity(0, sizeof before, &before);
  PinTo(pin.receiver);
  double raw_cpu_per_gb = 0;
  const double raw = RawTcpGBps(a.batch_bytes, a.seconds, a.workers, pin.senders, &raw_cpu_per_gb);

  // Real ferry-worker processes serving ready-made batches (no decode) to one client in
  // this process; this process's CPU time is the client's.
  std::vector<WorkerProcess> procs;
  std::vector<std::string> addresses;
  for (int k = 0; k < a.workers; ++k) {
    procs.push_back(StartWorker(worker, a.credits + 2, pin.senders, a.tls_dir));
    if (procs.back().address.empty()) {
      std::fprintf(stderr, "error: ferry-worker did not start\n");
      for (auto& p : procs) StopWorker(p);
      return 1;
    }
    addresses.push_back(procs.back().address);
  }
  ClientOptions o;
  o.workers = addresses;
  const int rows = 64;
  o.job.batch_size = rows;
  const uint64_t bytes = a.batch_bytes / rows * rows;
  o.job.dataset = "synthetic:" + std::to_string(bytes) + ":1000";
  o.job.epochs = 0;
  o.credits = a.credits;
  if (!a.tls_dir.empty()) {
    o.tls_ca = a.tls_dir + "/ca.pem";
    o.tls_cert = a.tls_dir + "/client.pem";
    o.tls_key = a.tls_dir + "/client.key";
  }
  auto client = Client::Connect(o);
  if (!client.ok()) {
    std::fprintf(stderr, "error: %s\n", client.status().ToString().c_str());
    return 1;
  }
  Window window(0.5, a.seconds);
  uint64_t total = 0;
  for (;;) {
    Result<Batch> b = (*client)->Next();
    if (!b.ok()) {
      std::fprintf(stderr, "error: %s\n", b.status().ToString().c_str());
      return 1;
    }
    if (!window.Count()) continue;
    total += b->images.num_bytes() + b->labels.num_bytes() + b->indices.num_bytes();
    if (window.over()) break;
  }
  const double wall = window.wall(), cpu = window.cpu();
  client->reset();
  for (auto& p : procs) StopWorker(p);
  sched_setaffinity(0, sizeof before, &before);
  const double ferry = double(total) / wall / 1e9;
  std::printf("raw loopback TCP (%d stream%s into one thread): %.2f GB/s; ferry (%d worker%s, ready-made %.1f MB "
              "batches, %d credits%s): %.2f GB/s; %s\n",
              a.workers, a.workers == 1 ? "" : "s", raw, a.workers, a.workers == 1 ? "" : "s", bytes / 1e6, a.credits,
              a.tls_dir.empty() ? "" : ", mutual TLS", ferry,
              pin.receiver >= 0 ? ("receiver on CPU " + std::to_string(pin.receiver) + ", senders on CPU " +
                                   std::to_string(pin.senders)).c_str()
                                : "not pinned");
  std::printf("transport workers=%d pinned=%d tls=%d ferry_GB/s=%.3f raw_GB/s=%.3f ratio=%.3f client_cpu_per_GB=%.3f "
              "raw_reader_cpu_per_GB=%.3f\n",
              a.workers, pin.receiver >= 0 ? 1 : 0, a.tls_dir.empty() ? 0 : 1, ferry, raw, raw > 0 ? ferry / raw : 0.0,
              cpu / (double(total) / 1e9), raw_cpu_per_gb);
  return 0;
}

}  // namespace ferry::bench
