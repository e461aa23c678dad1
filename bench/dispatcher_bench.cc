// ferry-bench dispatcher-load: a real ferry-dispatcher process under N simulated
// workers, each on its own connection, heartbeating and leasing splits, and one
// simulated consumer acknowledging every leased split. Reports leases per second and
// the heartbeat round-trip latency (p50, p99), which includes the lease decision and
// the journal's fdatasync.
#include <utility>  // before Asio (Boost 1.74, C++20)

#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cpu_time.h"
#include "net/address.h"
#include "net/connection.h"
#include "wire/codec.h"
#include "wire/control.h"
#include "remote_bench.h"

namespace ferry::bench {

namespace {

using net::FrameConnection;
using wire::InFrame;
using wire::MessageType;
namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

struct LoadState {
  asio::io_context io;
  tcp::endpoint dispatcher;
  std::shared_ptr<BufferAllocator> buffers = DefaultBufferAllocator();
  std::deque<wire::LeaseMsg> to_ack;
  bool measuring = false, stopping = false;
  int64_t leases = 0, heartbeats = 0, errors = 0, registered = 0;
  std::vector<double> rtt_ms;
  int interval_ms = 100;
};

// One simulated peer: connects, does the handshake, then runs `on_ready`; every
// later frame goes to `on_frame`.
class Peer : public std::enable_shared_from_this<Peer> {
 public:
  Peer(LoadState* s, wire::Role role) : s_(s), role_(role), timer_(s->io) {}
  virtual ~Peer() = default;

  void Start() {
    auto self = shared_from_this();
    auto socket = std::make_shared<tcp::socket>(s_->io);
    socket->async_connect(s_->dispatcher, [self, socket](const boost::system::error_code& ec) {
      if (ec) {
        ++self->s_->errors;
        return;
      }
      self->conn_ = std::make_shared<FrameConnection>(std::move(*socket), wire::FrameLimits{}, self->s_->buffers);
      self->conn_->StartReading([self](const Status& st, InFrame f) { self->OnFrame(st, std::move(f)); });
    });
  }

  void Stop() {
    timer_.cancel();
    if (conn_) conn_->Close();
  }

 protected:
  virtual void OnReady() = 0;
  virtual void OnReply(const InFrame& f) = 0;

  void OnFrame(const Status& st, const InFrame& f) {
    if (!st.ok()) {
      if (!s_->stopping) ++s_->errors;
      return;
    }
    if (f.header.type == MessageType::kChallenge) {
      wire::HelloMsg h;
      h.role = role_;
      conn_->Send(wire::EncodeHello(h));
      return;
    }
    if (f.header.type == MessageType::kHelloOk) return OnReady();
    if (f.header.type == MessageType::kError) {
      if (s_->errors++ == 0) {  // the first says why
        auto e = wire::DecodeError(f);
        std::fprintf(stderr, "dispatcher-load: the dispatcher refused a request: %s\n",
                     (e.ok() ? e->status : e.status()).ToString().c_str());
      }
      return;
    }
    OnReply(f);
  }

  LoadState* s_;
  const wire::Role role_;
  std::shared_ptr<FrameConnection> conn_;
  asio::steady_timer timer_;
};

class SimWorker : public Peer {
 public:
  SimWorker(LoadState* s, int index) : Peer(s, wire::Role::kWorker), id_("sim-worker-" + std::to_string(index)), index_(index) {}

 private:
  void OnReady() override { conn_->Send(wire::EncodeRegisterWorker({id_, "sim:" + std::to_string(index_)})); }

  void OnReply(const InFrame& f) override {
    if (f.header.type == MessageType::kRegisterWorkerOk) {
      ++s_->registered;
      return Schedule(int(index_ % s_->interval_ms));  // spread the heartbeats
    }
    if (f.header.type != MessageType::kHeartbeatOk) return;
    auto ok = wire::DecodeHeartbeatOk(f);
    if (!ok.ok()) {
      ++s_->errors;
      return;
    }
    if (s_->measuring) {
      s_->rtt_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - sent_).count());
      ++s_->heartbeats;
      s_->leases += int64_t(ok->new_leases);
    }
    // The reply lists every split held, new ones first: ack the new ones.
    ok->leases.resize(ok->new_leases);
    for (auto& l : ok->leases) s_->to_ack.push_back(std::move(l));
    Schedule(s_->interval_ms);
  }

  void Schedule(int ms) {
    if (s_->stopping) return;
    auto self = std::static_pointer_cast<SimWorker>(shared_from_this());
    timer_.expires_after(std::chrono::milliseconds(ms));
    timer_.async_wait([self](const boost::system::error_code& ec) {
      if (ec || self->s_->stopping) return;
      self->sent_ = Clock::now();
      self->conn_->Send(wire::EncodeHeartbeat({self->id_, false, true, false, {}, {}}));
    });
  }

  std::string id_;
  int index_;
  Clock::time_point sent_;
};

class SimConsumer : public Peer {
 public:
  SimConsumer(LoadState* s, wire::NamedJob job) : Peer(s, wire::Role::kClient), job_(std::move(job)) {}
  bool joined() const { return joined_; }

 private:
  void OnReady() override { conn_->Send(wire::EncodeGetOrCreateJob({job_, "bench-consumer"})); }

  void OnReply(const InFrame& f) override {
    if (f.header.type == MessageType::kJobInfo) joined_ = true;
    // JobInfo or the JobStatus answering an ack: ack what has been leased since.
    AckSoon();
  }

  void AckSoon() {
    if (s_->stopping) return;
    auto self = std::static_pointer_cast<SimConsumer>(shared_from_this());
    timer_.expires_after(std::chrono::milliseconds(5));
    timer_.async_wait([self](const boost::system::error_code& ec) {
      if (ec || self->s_->stopping) return;
      if (self->s_->to_ack.empty()) return self->AckSoon();
      wire::AckSplitsMsg m{self->job_.name, "bench-consumer", {}};
      while (!self->s_->to_ack.empty()) {
        m.splits.push_back({self->s_->to_ack.front().epoch, self->s_->to_ack.front().split});
        self->s_->to_ack.pop_front();
      }
      self->conn_->Send(wire::EncodeAckSplits(m));
    });
  }

  wire::NamedJob job_;
  bool joined_ = false;
};

std::string SiblingBinary(const std::string& rel) {
  char buf[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  std::string self = n > 0 ? std::string(buf, size_t(n)) : std::string(".");
  return self.substr(0, self.rfind('/')) + "/" + rel;
}

}  // namespace

int RunDispatcherLoad(const DispatcherLoadArgs& a) {
  rlimit r{};  // one socket per simulated worker
  if (getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur < r.rlim_max) {
    r.rlim_cur = r.rlim_max;
    setrlimit(RLIMIT_NOFILE, &r);
  }
  const std::string bin = a.dispatcher_bin.empty() ? SiblingBinary("../server/ferry-dispatcher") : a.dispatcher_bin;
  if (access(bin.c_str(), X_OK) != 0) {
    std::fprintf(stderr, "error: ferry-dispatcher not found at %s (use --dispatcher-bin)\n", bin.c_str());
    return 1;
  }
  char dir_template[] = "/tmp/ferry-dispatcher-load-XXXXXX";
  const char* dir = mkdtemp(dir_template);
  int out[2];
  if (dir == nullptr || pipe(out) != 0) return 1;
  const pid_t child = fork();
  if (child == 0) {
    dup2(out[1], STDOUT_FILENO);
    close(out[0]);
    const std::string interval = std::to_string(a.interval_ms);
    // Every simulated worker connects at once: more handshakes in flight than the
    // default cap (128, against a flood of unauthenticated peers) allows.
    execl(bin.c_str(), bin.c_str(), "--listen", "127.0.0.1:0", "--work-dir", dir, "--heartbeat-interval-ms",
          interval.c_str(), "--heartbeat-timeout-ms", "600000", "--max-handshaking", "20000",
          static_cast<char*>(nullptr));
    _exit(127);
  }
  close(out[1]);
  FILE* f = fdopen(out[0], "r");
  char line[256] = {0};
  if (!f || !std::fgets(line, sizeof line, f)) {
    std::fprintf(stderr, "error: ferry-dispatcher did not start\n");
    return 1;
  }
  std::string address = line;
  address = address.substr(address.find("on ") + 3);
  while (!address.empty() && std::isspace(static_cast<unsigned char>(address.back()))) address.pop_back();
  auto hp = net::SplitHostPort(address);

  LoadState s;
  s.interval_ms = a.interval_ms;
  s.dispatcher = tcp::endpoint(asio::ip::make_address(hp->first), hp->second);
  wire::NamedJob job;
  job.name = "load";
  job.job.dataset = "synthetic:";
  job.job.batch_size = 1;  // the dispatcher never sees a sample: only splits count
  job.job.batches_per_split = 1;
  job.job.num_samples = a.splits;  // --splits splits an epoch
  job.job.epochs = 0;
  auto consumer = std::make_shared<SimConsumer>(&s, job);
  consumer->Start();
  std::vector<std::shared_ptr<SimWorker>> workers;
  for (int i = 0; i < a.workers; ++i) workers.push_back(std::make_shared<SimWorker>(&s, i));
  for (auto& w : workers) w->Start();

  asio::steady_timer timer(s.io);
  const auto begin = Clock::now();
  double t0 = 0, c_measure = 0;
  std::function<void()> phase;
  phase = [&] {
    timer.expires_after(std::chrono::milliseconds(100));
    timer.async_wait([&](const boost::system::error_code&) {
      const double el = std::chrono::duration<double>(Clock::now() - begin).count();
      if (!s.measuring && s.registered == a.workers && consumer->joined() && el > 1.0) {
        s.measuring = true;
        t0 = el;
        c_measure = WallSeconds();
      }
      if ((s.measuring && el - t0 >= a.seconds) || el > a.seconds + 60) {
        s.stopping = true;
        consumer->Stop();
        for (auto& w : workers) w->Stop();
        return;
      }
      phase();
    });
  };
  phase();
  s.io.run();
  const double wall = WallSeconds() - c_measure;
  kill(child, SIGTERM);
  waitpid(child, nullptr, 0);
  fclose(f);
  std::string rm = std::string("rm -rf ") + dir;
  if (std::system(rm.c_str()) != 0) std::fprintf(stderr, "warning: could not remove %s\n", dir);
  if (s.rtt_ms.empty()) {
    std::fprintf(stderr, "error: no heartbeat completed (%lld errors, %lld registered)\n", (long long)s.errors,
                 (long long)s.registered);
    return 1;
  }
  std::sort(s.rtt_ms.begin(), s.rtt_ms.end());
  auto pct = [&](double p) { return s.rtt_ms[std::min(s.rtt_ms.size() - 1, size_t(p * double(s.rtt_ms.size())))]; };
  std::printf("%d simulated workers, one heartbeat each per %d ms, leasing and acked at once; %lld errors\n",
              a.workers, a.interval_ms, (long long)s.errors);
  std::printf("dispatcher workers=%d splits=%lld leases/s=%.0f heartbeats/s=%.0f p50_ms=%.2f p99_ms=%.2f\n",
              a.workers, (long long)a.splits, double(s.leases) / wall, double(s.heartbeats) / wall, pct(0.5),
              pct(0.99));
  return s.errors == 0 ? 0 : 1;
}

}  // namespace ferry::bench
