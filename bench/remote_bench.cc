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

std::vector<std::string> SplitCommas(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  for (;;) {
    const size_t comma = s.find(',', start);
    std::string part = s.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (!part.empty()) out.push_back(part);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

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
  o.batch_size = rows;
  const uint64_t bytes = a.batch_bytes / rows * rows;
  o.data = "synthetic:" + std::to_string(bytes) + ":1000";
  o.epochs = 0;
  o.credits = a.credits;
  o.pipeline = PipelineSpec::ImagenetTrain();  // unused by a synthetic source
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

int RunConsume(const ConsumeArgs& a) {
  ClientOptions o;
  if (!a.workers.empty()) o.workers = SplitCommas(a.workers);
  o.dispatcher = a.dispatcher;
  o.job_name = a.job;
  o.consumer_id = a.consumer_id;
  o.batches_per_split = a.batches_per_split;
  o.deterministic = a.deterministic;
  o.parallel_epochs = a.parallel_epochs;
  o.num_samples = a.num_samples;
  if (!a.resume.empty()) {
    std::ifstream in(a.resume);
    std::stringstream text;
    text << in.rdbuf();
    if (!in) {
      std::fprintf(stderr, "error: cannot read %s\n", a.resume.c_str());
      return 1;
    }
    o.resume_state = text.str();
  }
  o.data = a.data;
  auto spec = PipelineSpec::Parse(a.pipeline);
  if (!spec.ok()) {
    std::fprintf(stderr, "error: %s\n", spec.status().ToString().c_str());
    return 2;
  }
  o.pipeline = *spec;
  o.epochs = a.epochs;
  o.batch_size = a.batch_size;
  o.seed = a.seed;
  o.credits = a.credits;
  o.token_file = a.token_file;
  bool ok = false;
  o.last_batch = ParseLastBatch(a.last_batch, &ok);
  if (!ok) {
    std::fprintf(stderr, "error: --last-batch must be keep, drop or pad\n");
    return 2;
  }
  std::ofstream dump;
  if (!a.dump_indices.empty()) {
    dump.open(a.dump_indices, std::ios::app);
    if (!dump) {
      std::fprintf(stderr, "error: cannot write %s\n", a.dump_indices.c_str());
      return 1;
    }
  }
  std::ofstream digests;
  if (!a.dump_digests.empty()) {
    digests.open(a.dump_digests, std::ios::app);
    if (!digests) {
      std::fprintf(stderr, "error: cannot write %s\n", a.dump_digests.c_str());
      return 1;
    }
  }
  auto client = Client::Connect(o);
  if (!client.ok()) {
    std::fprintf(stderr, "error: %s\n", client.status().ToString().c_str());
    return 1;
  }
  const double t0 = WallSeconds();
  int64_t samples = 0, batches = 0;
  double last_draw = 0;
  const bool show = a.progress || isatty(STDERR_FILENO);
  for (;;) {
    if (show && WallSeconds() - last_draw > 0.25) {
      last_draw = WallSeconds();
      const double el = std::max(1e-9, last_draw - t0);
      std::fprintf(stderr, "\r  epoch %lld: %lld images, %.1f img/s   ", (long long)(*client)->epochs_completed(),
                   (long long)samples, samples / el);
      std::fflush(stderr);
    }
    Result<Batch> b = (*client)->Next();
    if (!b.ok()) {
      if (b.status().IsOutOfRange()) break;
      std::fprintf(stderr, "error: %s\n", b.status().ToString().c_str());
      return 1;
    }
    samples += b->valid_rows();
    ++batches;
    if (digests.is_open()) {
      Fingerprinter f;
      f.Add(std::string_view(static_cast<const char*>(b->images.data), b->images.num_bytes()));
      f.Add(std::string_view(static_cast<const char*>(b->labels.data), b->labels.num_bytes()));
      digests << b->provenance.epoch << ' ' << b->provenance.split << ' ' << b->provenance.batch_in_split << ' '
              << f.Hex() << '\n';
      digests.flush();
    }
    if (a.step_ms > 0) std::this_thread::sleep_for(std::chrono::microseconds(int64_t(a.step_ms * 1000)));
    if (dump.is_open()) {
      const int64_t* idx = b->indices.as<int64_t>();
      for (int64_t i = 0; i < b->valid_rows(); ++i) dump << idx[i] << '\n';
      dump.flush();
    }
    const bool stop = a.stop_after >= 0 && batches >= a.stop_after;
    if (!a.save_state.empty() && ((a.save_after < 0 && stop) || batches == a.save_after)) {
      // Atomically: a crash mid-write must not leave half a state.
      const std::string tmp = a.save_state + ".tmp";
      std::ofstream out(tmp, std::ios::trunc);
      out << (*client)->SaveState().Serialize();
      out.close();
      if (!out || std::rename(tmp.c_str(), a.save_state.c_str()) != 0) {
        std::fprintf(stderr, "error: cannot write %s\n", a.save_state.c_str());
        return 1;
      }
      if (!stop) std::fprintf(stderr, "state after %lld batches saved to %s\n", (long long)batches, a.save_state.c_str());
    }
    if (stop) {
      std::printf("stopped after %lld batches (%lld samples)%s\n", (long long)batches, (long long)samples,
                  a.save_state.empty() ? "" : ("; state saved to " + a.save_state).c_str());
      return 0;
    }
  }
  const double wall = WallSeconds() - t0;
  if (show) std::fprintf(stderr, "\n");
  const IteratorStats st = (*client)->stats();
  for (const SkippedSample& s : (*client)->TakeSkipped()) std::fprintf(stderr, "skipped\t%s\t%s\n", s.path.c_str(), s.reason.c_str());
  if (samples == 0 && st.skipped == 0) {
    std::fprintf(stderr, "error: no data received\n");
    return 1;
  }
  std::printf("consume img/s=%.1f wait_frac=%.3f samples=%lld\n", samples / wall, st.wait_seconds / wall,
              static_cast<long long>(samples));
  return 0;
}

}  // namespace ferry::bench
