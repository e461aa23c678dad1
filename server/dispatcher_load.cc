// ferry-dispatcher-load and ferry-bench dispatcher-load: a real ferry-dispatcher
// process under N simulated workers, each on its own connection, heartbeating and
// leasing splits, and one simulated consumer acknowledging every leased split. Reports leases per second and
// the heartbeat round-trip latency (p50, p99), which includes the lease decision and
// the journal's fdatasync. The simulated peers run on --load-threads threads (one
// io_context each), so that on a machine with cores to spare the load generator does not
// bound what is offered (one thread answers about 45,000 heartbeats a second).
#include <utility>  // before Asio (Boost 1.74, C++20)

#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "net/address.h"
#include "net/connection.h"
#include "wire/codec.h"
#include "wire/control.h"
#include "server/dispatcher_load.h"

namespace ferry::bench {

namespace {

double WallSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

using net::FrameConnection;
using wire::InFrame;
using wire::MessageType;
namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

// One load thread's: its io_context, and what its peers counted.
struct LoadShard {
  asio::io_context io;
  std::shared_ptr<BufferAllocator> buffers = DefaultBufferAllocator();
  int64_t leases = 0, heartbeats = 0;
  std::vector<double> rtt_ms;
};

struct LoadState {
  tcp::endpoint dispatcher;
  std::vector<std::unique_ptr<LoadShard>> shards;  // the first runs on the calling thread
  // Per job: leased, to acknowledge once due (leased + split_ms: the time a worker takes
  // to make a split; in lease order, so due in order). Workers of any shard add; the
  // consumers (on the first) take.
  std::mutex ack_mu;
  std::map<std::string, std::deque<std::pair<Clock::time_point, SplitId>>> to_ack;
  int split_ms = 0;
  std::atomic<bool> measuring{false}, stopping{false};
  std::atomic<int64_t> errors{0}, registered{0};
  int interval_ms = 100;
};

// One simulated peer: connects, does the handshake, then runs `on_ready`; every
// later frame goes to `on_frame`.
class Peer : public std::enable_shared_from_this<Peer> {
 public:
  Peer(LoadState* s, LoadShard* shard, wire::Role role) : s_(s), shard_(shard), role_(role), timer_(shard->io) {}
  virtual ~Peer() = default;

  // Connects, on its shard's thread.
  void Start() {
    auto self = shared_from_this();
    asio::post(shard_->io, [self] {
      auto socket = std::make_shared<tcp::socket>(self->shard_->io);
      socket->async_connect(self->s_->dispatcher, [self, socket](const boost::system::error_code& ec) {
        if (ec) {
          ++self->s_->errors;
          return;
        }
        // Connected after the round ended (Stop() found no connection to close): close,
        // or the connection's pending read would keep the shard's thread running.
        if (self->s_->stopping) return;
        self->conn_ = std::make_shared<FrameConnection>(std::move(*socket), wire::FrameLimits{}, self->shard_->buffers);
        self->conn_->StartReading([self](const Status& st, InFrame f) { self->OnFrame(st, std::move(f)); });
      });
    });
  }

  // On its shard's thread.
  void Stop() {
    auto self = shared_from_this();
    asio::post(shard_->io, [self] {
      self->timer_.cancel();
      if (self->conn_) self->conn_->Close();
    });
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
  LoadShard* shard_;
  const wire::Role role_;
  std::shared_ptr<FrameConnection> conn_;
  asio::steady_timer timer_;
};

class SimWorker : public Peer {
 public:
  SimWorker(LoadState* s, LoadShard* shard, int index) : Peer(s, shard, wire::Role::kWorker), id_("sim-worker-" + std::to_string(index)), index_(index) {}

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
      shard_->rtt_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - sent_).count());
      ++shard_->heartbeats;
      shard_->leases += int64_t(ok->new_leases);
    }
    // As a worker does (worker/dispatcher_link.cc): keep each job's digest, and name it
    // in the next heartbeats, so that the replies name the job without its spec.
    for (const auto& j : ok->jobs) {
      if (j.digest != 0) have_[j.name] = j.digest;
    }
    // The reply lists every split held, new ones first: ack the new ones.
    ok->leases.resize(ok->new_leases);
    const Clock::time_point due = Clock::now() + std::chrono::milliseconds(s_->split_ms);
    if (!ok->leases.empty()) {
      std::lock_guard<std::mutex> lock(s_->ack_mu);
      for (auto& l : ok->leases) s_->to_ack[l.job].push_back({due, {l.epoch, l.split}});
    }
    Schedule(s_->interval_ms);
  }

  void Schedule(int ms) {
    if (s_->stopping) return;
    auto self = std::static_pointer_cast<SimWorker>(shared_from_this());
    timer_.expires_after(std::chrono::milliseconds(ms));
    timer_.async_wait([self](const boost::system::error_code& ec) {
      if (ec || self->s_->stopping) return;
      self->sent_ = Clock::now();
      wire::HeartbeatMsg h{self->id_, false, true, false, {}, {}};
      h.have_jobs = self->have_;
      self->conn_->Send(wire::EncodeHeartbeat(h));
    });
  }

  std::string id_;
  std::map<std::string, uint64_t> have_;  // job -> digest
  int index_;
  Clock::time_point sent_;
};

class SimConsumer : public Peer {
 public:
  SimConsumer(LoadState* s, LoadShard* shard, wire::NamedJob job) : Peer(s, shard, wire::Role::kClient), job_(std::move(job)) {}
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
      const Clock::time_point now = Clock::now();
      wire::AckSplitsMsg m{self->job_.name, "bench-consumer", {}};
      {
        std::lock_guard<std::mutex> lock(self->s_->ack_mu);
        auto& q = self->s_->to_ack[self->job_.name];
        while (!q.empty() && q.front().first <= now) {
          m.splits.push_back({q.front().second.epoch, q.front().second.split});
          q.pop_front();
        }
      }
      if (m.splits.empty()) return self->AckSoon();
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

// The ferry-dispatcher beside this program (an installation's bin, a wheel's ferry/bin),
// else the build folder's (ferry-bench in build/bench).
std::string DefaultDispatcher() {
  const std::string beside = SiblingBinary("ferry-dispatcher");
  return access(beside.c_str(), X_OK) == 0 ? beside : SiblingBinary("../server/ferry-dispatcher");
}

}  // namespace

namespace {

// The child's resident memory (KiB) and CPU time (s), from /proc.
int64_t RssKib(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::atoll(line.c_str() + 6);
  return 0;
}

// utime + stime of a /proc stat line, in seconds.
double StatCpuSeconds(const std::string& text) {
  const size_t close = text.rfind(')');
  if (close == std::string::npos) return 0;
  std::vector<std::string> fields;
  std::string field;
  for (size_t i = close + 2; i <= text.size(); ++i) {
    if (i == text.size() || text[i] == ' ') {
      fields.push_back(field);
      field.clear();
    } else {
      field += text[i];
    }
  }
  if (fields.size() < 13) return 0;  // utime and stime are fields 14 and 15 (11 and 12 after the name)
  return double(std::atoll(fields[11].c_str()) + std::atoll(fields[12].c_str())) / double(sysconf(_SC_CLK_TCK));
}

double CpuSeconds(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  return StatCpuSeconds(text);
}

// CPU time (s) of the child's thread named `name` (/proc/PID/task/*/comm), 0 if none:
// the dispatcher's deciding thread is "ferry-decide".
double ThreadCpuSeconds(pid_t pid, const std::string& name) {
  std::error_code ec;
  const std::string tasks = "/proc/" + std::to_string(pid) + "/task";
  for (const auto& e : std::filesystem::directory_iterator(tasks, ec)) {
    std::ifstream c(e.path() / "comm");
    std::string comm;
    std::getline(c, comm);
    if (comm != name) continue;
    std::ifstream f(e.path() / "stat");
    std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    return StatCpuSeconds(text);
  }
  return 0;
}

// Bytes of the journal's files (the work dir's).
int64_t DirBytes(const std::string& dir) {
  int64_t n = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec))
    if (e.is_regular_file(ec)) n += int64_t(e.file_size(ec));
  return n;
}

struct Round {
  int workers = 0;
  int64_t registered = 0;  // of them, registered when the timed window began
  double offered = 0, handled = 0, leases = 0, p50 = 0, p99 = 0, cpu_us = 0;
  // The deciding thread's CPU per heartbeat and its busy fraction of one core: it does
  // every decision and journal write, so 1e6 / decide_us is the most heartbeats a
  // second one dispatcher answers with cores to spare for its connections.
  double decide_us = 0, decide_busy = 0;
  double kib_per_worker = 0, kib_per_job = 0;
  int64_t journal_kib = 0, journal_kib_max = 0, errors = 0;
  bool ok = false;
};

Round RunRound(const DispatcherLoadArgs& a, int num_workers, int io_threads, const std::string& bin) {
  Round out;
  out.workers = num_workers;
  char dir_template[] = "/tmp/ferry-dispatcher-load-XXXXXX";
  const char* dir = mkdtemp(dir_template);
  int pipe_fds[2];
  if (dir == nullptr || pipe(pipe_fds) != 0) return out;
  const pid_t child = fork();
  if (child == 0) {
    dup2(pipe_fds[1], STDOUT_FILENO);
    close(pipe_fds[0]);
    const std::string interval = std::to_string(a.interval_ms);
    const std::string per_job = std::to_string(a.workers_per_job);
    const std::string threads = std::to_string(io_threads);
    // Every simulated worker connects at once: more handshakes in flight than the
    // default cap (128, against a flood of unauthenticated peers) allows.
    // (--io-threads only when asked: a dispatcher built before it, --dispatcher-bin,
    // runs with the default.)
    std::vector<const char*> args = {bin.c_str(), "--listen", "127.0.0.1:0", "--work-dir", dir,
                                     "--heartbeat-interval-ms", interval.c_str(), "--heartbeat-timeout-ms", "600000",
                                     "--max-handshaking", "20000", "--max-connections", "40000", "--log-level", "warn",
                                     "--workers-per-job", per_job.c_str()};
    if (io_threads != -1) {
      args.push_back("--io-threads");
      args.push_back(threads.c_str());
    }
    args.push_back(nullptr);
    execv(bin.c_str(), const_cast<char* const*>(args.data()));
    _exit(127);
  }
  close(pipe_fds[1]);
  FILE* f = fdopen(pipe_fds[0], "r");
  char line[256] = {0};
  if (!f || !std::fgets(line, sizeof line, f)) {
    std::fprintf(stderr, "error: ferry-dispatcher did not start\n");
    return out;
  }
  std::string address = line;
  address = address.substr(address.find("on ") + 3);
  while (!address.empty() && std::isspace(static_cast<unsigned char>(address.back()))) address.pop_back();
  auto hp = net::SplitHostPort(address);
  const int64_t rss_start = RssKib(child);

  LoadState s;
  for (int i = 0; i < std::max(1, a.load_threads); ++i) s.shards.push_back(std::make_unique<LoadShard>());
  LoadShard& first = *s.shards[0];
  s.interval_ms = a.interval_ms;
  s.split_ms = a.split_ms;
  s.dispatcher = tcp::endpoint(asio::ip::make_address(hp->first), hp->second);
  std::vector<std::shared_ptr<SimConsumer>> consumers;
  for (int j = 0; j < a.jobs; ++j) {
    wire::NamedJob job;
    job.name = "load-" + std::to_string(j);
    job.job.dataset = "synthetic:";
    job.job.batch_size = 1;  // the dispatcher never sees a sample: only splits count
    job.job.batches_per_split = 1;
    job.job.num_samples = a.splits;  // --splits splits an epoch
    job.job.epochs = 0;
    consumers.push_back(std::make_shared<SimConsumer>(&s, &first, job));
    consumers.back()->Start();
  }
  std::vector<std::shared_ptr<SimWorker>> workers;
  int64_t rss_jobs = -1, rss_workers = -1;

  asio::steady_timer timer(first.io);
  const auto begin = Clock::now();
  double t0 = 0, c_measure = 0, cpu0 = 0, decide0 = 0;
  int64_t journal0 = 0, registered_at_start = 0;
  std::function<void()> phase;
  phase = [&] {
    timer.expires_after(std::chrono::milliseconds(100));
    timer.async_wait([&](const boost::system::error_code&) {
      const double el = std::chrono::duration<double>(Clock::now() - begin).count();
      const bool joined =
          std::all_of(consumers.begin(), consumers.end(), [](const auto& c) { return c->joined(); });
      if (joined && rss_jobs < 0) {
        // Every job created: then the workers, all at once.
        rss_jobs = RssKib(child);
        for (int i = 0; i < num_workers; ++i)
          workers.push_back(std::make_shared<SimWorker>(&s, s.shards[size_t(i) % s.shards.size()].get(), i));
        for (auto& w : workers) w->Start();
      }
      // Timed once every worker registered (or, past a minute, 95% of them: the rest
      // join while the dispatcher is saturated; the offered load counts those that did).
      if (!s.measuring && rss_jobs >= 0 && el > 1.0 &&
          (s.registered == num_workers || (el > 60 && s.registered >= num_workers * 95 / 100))) {
        rss_workers = RssKib(child);
        s.measuring = true;
        t0 = el;
        c_measure = WallSeconds();
        cpu0 = CpuSeconds(child);
        decide0 = ThreadCpuSeconds(child, "ferry-decide");
        journal0 = DirBytes(dir);
        registered_at_start = s.registered;
      }
      if (s.measuring) out.journal_kib_max = std::max(out.journal_kib_max, DirBytes(dir) / 1024);
      if ((s.measuring && el - t0 >= a.seconds) || el > a.seconds + 120) {
        s.stopping = true;
        for (auto& c : consumers) c->Stop();
        for (auto& w : workers) w->Stop();
        return;
      }
      phase();
    });
  };
  phase();
  // The other shards run on threads of their own until their peers are stopped.
  std::vector<std::thread> load_threads;
  std::vector<asio::executor_work_guard<asio::io_context::executor_type>> guards;
  for (size_t i = 1; i < s.shards.size(); ++i) {
    guards.push_back(asio::make_work_guard(s.shards[i]->io));
    load_threads.emplace_back([&s, i] { s.shards[i]->io.run(); });
  }
  first.io.run();
  guards.clear();
  for (auto& t : load_threads) t.join();
  const double wall = WallSeconds() - c_measure;
  const double cpu = CpuSeconds(child) - cpu0;
  const double decide = ThreadCpuSeconds(child, "ferry-decide") - decide0;
  out.journal_kib = DirBytes(dir) / 1024;
  (void)journal0;
  kill(child, SIGTERM);
  waitpid(child, nullptr, 0);
  fclose(f);
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  out.errors = s.errors;
  std::vector<double> rtt_ms;
  int64_t heartbeats = 0, leases = 0;
  for (const auto& sh : s.shards) {
    rtt_ms.insert(rtt_ms.end(), sh->rtt_ms.begin(), sh->rtt_ms.end());
    heartbeats += sh->heartbeats;
    leases += sh->leases;
  }
  if (rtt_ms.empty()) {
    std::fprintf(stderr, "error: %d workers: no heartbeat completed (%lld errors, %lld registered)\n", num_workers,
                 (long long)s.errors.load(), (long long)s.registered.load());
    return out;
  }
  std::sort(rtt_ms.begin(), rtt_ms.end());
  auto pct = [&](double p) { return rtt_ms[std::min(rtt_ms.size() - 1, size_t(p * double(rtt_ms.size())))]; };
  out.registered = std::max(registered_at_start, s.registered.load());
  out.offered = double(out.registered) * 1000.0 / double(a.interval_ms);
  out.handled = double(heartbeats) / wall;
  out.leases = double(leases) / wall;
  out.p50 = pct(0.5);
  out.p99 = pct(0.99);
  out.cpu_us = heartbeats > 0 ? cpu * 1e6 / double(heartbeats) : 0;
  out.decide_us = heartbeats > 0 ? decide * 1e6 / double(heartbeats) : 0;
  out.decide_busy = wall > 0 ? decide / wall : 0;
  out.kib_per_job = rss_jobs >= 0 ? double(rss_jobs - rss_start) / a.jobs : 0;
  out.kib_per_worker = rss_workers >= 0 && rss_jobs >= 0 ? double(rss_workers - rss_jobs) / num_workers : 0;
  out.ok = true;
  return out;
}

}  // namespace

void AddDispatcherLoadOptions(CLI::App* cmd, DispatcherLoadArgs* a) {
  cmd->add_option("--workers", a->workers, "simulated workers; a list (1000,4000,10000) runs a round each")
      ->delimiter(',')
      ->check(CLI::Range(1, 20000));
  cmd->add_option("--jobs", a->jobs, "jobs, each with one consumer")->check(CLI::Range(1, 10000));
  cmd->add_option("--workers-per-job", a->workers_per_job, "the dispatcher's --workers-per-job")
      ->check(CLI::Range(0, 100000));
  cmd->add_option("--split-ms", a->split_ms, "a split is acknowledged this long after its lease (0: at once)")
      ->check(CLI::Range(0, 600000));
  cmd->add_option("--seconds", a->seconds, "timed window")->check(CLI::PositiveNumber);
  cmd->add_option("--interval-ms", a->interval_ms, "heartbeat period of each worker")->check(CLI::Range(1, 60000));
  cmd->add_option("--splits", a->splits, "splits an epoch of the job (the dispatcher tracks up to 4M)")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 22));
  cmd->add_option("--dispatcher-bin", a->dispatcher_bin, "the ferry-dispatcher executable");
  cmd->add_option("--load-threads", a->load_threads,
                  "threads of simulated workers (one answers about 45,000 heartbeats/s; give it cores of its own)")
      ->check(CLI::Range(1, 64));
  cmd->add_option("--io-threads", a->io_threads,
                  "the dispatcher's --io-threads; a list (0,-1) runs every worker count with each, alternated")
      ->delimiter(',')
      ->check(CLI::Range(-1, 64));
}

int RunDispatcherLoad(const DispatcherLoadArgs& a) {
  rlimit r{};  // one socket per simulated worker
  if (getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur < r.rlim_max) {
    r.rlim_cur = r.rlim_max;
    setrlimit(RLIMIT_NOFILE, &r);
  }
  const std::string bin = a.dispatcher_bin.empty() ? DefaultDispatcher() : a.dispatcher_bin;
  if (access(bin.c_str(), X_OK) != 0) {
    std::fprintf(stderr, "error: ferry-dispatcher not found at %s (use --dispatcher-bin)\n", bin.c_str());
    return 1;
  }
  bool all_ok = true;
  std::printf("simulated workers, one heartbeat each per %d ms, leasing; %d job(s), a consumer each acknowledging each split "
              "%d ms after its lease; --workers-per-job %d; journal fsynced; %.0f s timed per round; "
              "%d load thread(s), %u cores\n",
              a.interval_ms, a.jobs, a.split_ms, a.workers_per_job, a.seconds, std::max(1, a.load_threads),
              std::thread::hardware_concurrency());
  for (int n : a.workers) for (int threads : a.io_threads) {
    const Round x = RunRound(a, n, threads, bin);
    all_ok = all_ok && x.ok && x.errors == 0;
    if (!x.ok) continue;
    std::printf("dispatcher workers=%d io_threads=%d registered=%lld jobs=%d splits=%lld offered/s=%.0f heartbeats/s=%.0f handled=%.1f%% "
                "leases/s=%.0f p50_ms=%.2f p99_ms=%.2f cpu_us_per_heartbeat=%.1f decide_us_per_heartbeat=%.1f "
                "decide_busy=%.2f decide_ceiling/s=%.0f kib_per_worker=%.1f "
                "kib_per_job=%.1f journal_kib=%lld journal_kib_max=%lld errors=%lld\n",
                n, threads, (long long)x.registered, a.jobs, (long long)a.splits, x.offered, x.handled, 100 * x.handled / x.offered, x.leases, x.p50,
                x.p99, x.cpu_us, x.decide_us, x.decide_busy, x.decide_us > 0 ? 1e6 / x.decide_us : 0.0, x.kib_per_worker, x.kib_per_job, (long long)x.journal_kib,
                (long long)x.journal_kib_max, (long long)x.errors);
    std::fflush(stdout);
  }
  return all_ok ? 0 : 1;
}

}  // namespace ferry::bench
