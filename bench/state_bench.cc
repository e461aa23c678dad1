// ferry-state-bench: what the dispatcher's deciding thread pays, without sockets.
//
// BM_Heartbeats/W/J/S/A/P: its CPU per heartbeat in the steady state of `ferry-bench
// dispatcher-load --workers W --jobs J --splits S --split-ms A --workers-per-job P`
// (every worker heartbeating every 100 ms, each lease acknowledged by the job's consumer
// A ms later, a group commit every 64 requests, a sweep every 250 ms, journal compactions
// as due), driven on one thread at the rate W workers offer, in simulated time.
// `decide_core_share` is the share of one core that rate takes: the deciding thread's
// load at the offered rate, whatever cores the connections have. What dispatcher-load
// cannot show on a machine whose cores its load generator and the kernel's loopback TCP
// already fill. Not counted: the service around it (handing requests between threads,
// the fdatasync's wait).
//
// And what a journal compaction costs the deciding thread, for a state the size of
// `dispatcher-load --jobs 1000 --splits 1000` (a thousand jobs, a thousand splits each,
// eight workers leasing each, half the splits acknowledged). Each figure is the time one
// call holds the calling thread:
//   BM_Snapshot          DispatcherState::Snapshot(), the list of updates a snapshot holds
//   BM_StartCompaction   Journal::StartCompaction() (the snapshot taken, its writing handed
//                        off); and BM_Compact, the whole compaction written synchronously
//                        (what the deciding thread paid for each before the writing moved
//                        to a thread of its own).
#include <benchmark/benchmark.h>
#include <time.h>
#include <unistd.h>

#include <deque>
#include <filesystem>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "core/log.h"
#include "dispatch/dispatcher.h"
#include "dispatch/journal.h"
#include "dispatch/state.h"
#include "wire/control.h"

namespace ferry::dispatch {
namespace {

DispatcherState& BigState(int jobs, int splits) {
  static DispatcherState* s = nullptr;
  static int built_jobs = -1, built_splits = -1;
  if (s != nullptr && built_jobs == jobs && built_splits == splits) return *s;
  delete s;
  s = new DispatcherState;
  const int workers = 8 * jobs;
  for (int w = 0; w < workers; ++w) (void)s->Apply(RegisterWorker{"worker-" + std::to_string(w), "10.0.0.1:7000"});
  for (int j = 0; j < jobs; ++j) {
    const std::string name = "job-" + std::to_string(j);
    JobSpec spec;
    spec.dataset = "/data/imagenet/train";
    spec.batch_size = 256;
    spec.batches_per_split = 1;
    spec.num_samples = int64_t(splits) * 256;
    spec.epochs = 1;
    (void)s->Apply(CreateJob{name, spec});
    (void)s->Apply(AddConsumer{name, "trainer-" + std::to_string(j) + "-rank-0"});
  }
  // Each job's eight workers lease its splits in turn; the first half are acknowledged
  // and the next 32 held (a worker leases up to 4 ahead), the rest pending.
  for (int j = 0; j < jobs; ++j) {
    const std::string name = "job-" + std::to_string(j), consumer = "trainer-" + std::to_string(j) + "-rank-0";
    for (int k = 0; k < splits / 2 + 32 && k < splits; ++k) {
      const SplitId ref{0, k};
      (void)s->Apply(LeaseSplits{name, "worker-" + std::to_string(8 * j + k % 8), {{ref, consumer}}});
      if (k < splits / 2) (void)s->Apply(AckSplits{name, consumer, {ref}});
    }
  }
  built_jobs = jobs;
  built_splits = splits;
  return *s;
}

void BM_Snapshot(benchmark::State& st) {
  const DispatcherState& s = BigState(int(st.range(0)), int(st.range(1)));
  size_t n = 0;
  for (auto _ : st) {
    std::vector<Update> snap = s.Snapshot();
    n = snap.size();
    benchmark::DoNotOptimize(snap);
  }
  st.counters["updates"] = double(n);
}

void CompactBench(benchmark::State& st, bool background) {
  const DispatcherState& s = BigState(int(st.range(0)), int(st.range(1)));
  const std::string dir = std::filesystem::temp_directory_path() / "ferry-state-bench";
  std::filesystem::remove_all(dir);
  std::vector<Update> replay;
  auto j = Journal::Open(dir, &replay);
  if (!j.ok()) {
    st.SkipWithError(j.status().ToString().c_str());
    return;
  }
  for (auto _ : st) {
    if (background) {
      (*j)->StartCompaction(s);
      st.PauseTiming();
      (void)(*j)->FinishCompaction(/*wait=*/true);
      st.ResumeTiming();
    } else {
      (void)(*j)->Compact(s);
    }
  }
  j->reset();
  std::filesystem::remove_all(dir);
}

void BM_StartCompaction(benchmark::State& st) { CompactBench(st, true); }
void BM_Compact(benchmark::State& st) { CompactBench(st, false); }

// A fleet of simulated workers and consumers around one Dispatcher, as
// dispatcher-load's (server/dispatcher_load.cc), in simulated time.
class Fleet {
 public:
  static constexpr int kIntervalMs = 100, kCommitEvery = 64, kSweepMs = 250;

  Fleet(int workers, int jobs, int splits, int split_ms, int workers_per_job)
      : workers_(workers), split_ms_(split_ms) {
    dir_ = std::filesystem::temp_directory_path() / ("ferry-state-bench-fleet-" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir_);
    SetLogLevel(LogLevel::kWarn);  // not a line per worker registered
    DispatcherConfig c;
    c.work_dir = dir_;
    c.heartbeat_interval_ms = kIntervalMs;
    c.heartbeat_timeout_ms = 600000;
    c.workers_per_job = workers_per_job;
    auto d = Dispatcher::Open(c, 0);
    if (!d.ok()) {
      error_ = d.status().ToString();
      return;
    }
    d_ = std::move(*d);
    for (int j = 0; j < jobs; ++j) {
      wire::GetOrCreateJobMsg m;
      m.job.name = "load-" + std::to_string(j);
      m.job.job.dataset = "synthetic:";
      m.job.job.batch_size = 1;
      m.job.job.batches_per_split = 1;
      m.job.job.num_samples = splits;
      m.job.job.epochs = 0;
      m.consumer_id = "bench-consumer";
      auto join = d_->GetOrCreateJob(m);
      if (join.ok() && join->kind == Dispatcher::JoinResult::kNeedsListing) {
        auto created = d_->CreateJob(m, Result<JobSpec>(m.job.job));
        if (!created.ok()) error_ = created.status().ToString();
      }
      in_use_.insert(m.job.name);
    }
    for (int w = 0; w < workers; ++w) {
      wire::HeartbeatMsg h;
      h.worker_id = "sim-worker-" + std::to_string(w);
      (void)d_->RegisterWorker({h.worker_id, "sim:" + std::to_string(w)}, 0);
      hb_.push_back(std::move(h));
    }
    (void)d_->Sync();
    for (int64_t i = 0; i < 3LL * workers * 1000 / kIntervalMs; ++i) Step();  // 3 s: the steady state
  }
  ~Fleet() {
    d_.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  const std::string& error() const { return error_; }

  // One heartbeat, and the acknowledgements, commits and sweeps due by its time.
  void Step() {
    now_us_ += int64_t(kIntervalMs) * 1000 / workers_;  // W workers: W / interval heartbeats a second
    const int64_t now_ms = now_us_ / 1000;
    wire::HeartbeatMsg& h = hb_[next_];
    next_ = (next_ + 1) % hb_.size();
    auto ok = d_->Heartbeat(h, now_ms);
    if (!ok.ok()) {
      error_ = ok.status().ToString();
      return;
    }
    for (const auto& j : ok->jobs)
      if (j.digest != 0) h.have_jobs[j.name] = j.digest;
    for (uint32_t i = 0; i < ok->new_leases; ++i)
      to_ack_.push_back({now_ms + split_ms_, ok->leases[i].job, {ok->leases[i].epoch, ok->leases[i].split}});
    replies_.push_back(std::move(*ok));  // freed by the connections' threads in the service
    if (now_ms - last_ack_ms_ >= 5) {  // each consumer acknowledges what is due, every 5 ms (as there)
      last_ack_ms_ = now_ms;
      std::map<std::string, std::vector<SplitId>> due;
      while (!to_ack_.empty() && std::get<0>(to_ack_.front()) <= now_ms) {
        due[std::get<1>(to_ack_.front())].push_back(std::get<2>(to_ack_.front()));
        to_ack_.pop_front();
      }
      for (auto& [job, splits] : due) {
        wire::AckSplitsMsg a{job, "bench-consumer", std::move(splits)};
        d_->ConsumerSeen(a.job, a.consumer_id, a.load, now_ms);
        (void)d_->AckSplits(a);
        ++requests_;
      }
    }
    if (++requests_ >= kCommitEvery && d_->NeedsSync()) {
      (void)d_->Sync();
      requests_ = 0;
    }
    if (now_ms - last_sweep_ms_ >= kSweepMs) {
      last_sweep_ms_ = now_ms;
      d_->Tick(now_ms, in_use_);
    }
  }
  void FreeReplies() { replies_.clear(); }
  size_t pending_acks() const { return to_ack_.size(); }

 private:
  const int workers_, split_ms_;
  std::string dir_, error_;
  std::unique_ptr<Dispatcher> d_;
  std::vector<wire::HeartbeatMsg> hb_;
  std::set<std::string> in_use_;
  std::deque<std::tuple<int64_t, std::string, SplitId>> to_ack_;
  std::vector<wire::HeartbeatOkMsg> replies_;
  size_t next_ = 0;
  int64_t now_us_ = 0, last_ack_ms_ = 0, last_sweep_ms_ = 0;
  int requests_ = 0;
};

double ThreadCpuSeconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return double(t.tv_sec) + double(t.tv_nsec) * 1e-9;
}

void BM_Heartbeats(benchmark::State& st) {
  const int workers = int(st.range(0));
  Fleet fleet(workers, int(st.range(1)), int(st.range(2)), int(st.range(3)), int(st.range(4)));
  if (!fleet.error().empty()) {
    st.SkipWithError(fleet.error().c_str());
    return;
  }
  int64_t n = 0;
  const double cpu0 = ThreadCpuSeconds();
  for (auto _ : st) {
    fleet.Step();
    if (++n % 1024 == 0) {
      st.PauseTiming();
      fleet.FreeReplies();
      st.ResumeTiming();
    }
  }
  const double cpu = ThreadCpuSeconds() - cpu0;  // with the pauses' own cost: a little high
  if (!fleet.error().empty()) st.SkipWithError(fleet.error().c_str());
  const double offered = double(workers) * 1000.0 / Fleet::kIntervalMs;
  st.counters["offered_per_s"] = offered;
  st.counters["decide_core_share"] = n > 0 ? cpu / double(n) * offered : 0;
  st.counters["leases_in_flight"] = double(fleet.pending_acks());
}

// CPU time is this thread's (the deciding thread's; the snapshot thread's is not counted).
// One job as `dispatcher-load`'s defaults (10,000 splits, acknowledged at once, every
// worker leasing); a thousand jobs as BENCHMARKS.md's second table.
BENCHMARK(BM_Heartbeats)
    ->ArgNames({"workers", "jobs", "splits", "split_ms", "per_job"})
    ->Args({1000, 1, 10000, 0, 0})->Args({4000, 1, 10000, 0, 0})->Args({10000, 1, 10000, 0, 0})
    ->Args({1000, 1000, 1000, 1000, 8})->Args({4000, 1000, 1000, 1000, 8})->Args({10000, 1000, 1000, 1000, 8})
    ->Unit(benchmark::kMicrosecond)->MinTime(3.0);

BENCHMARK(BM_Snapshot)->Args({1000, 1000})->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_StartCompaction)->Args({1000, 1000})->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Compact)->Args({1000, 1000})->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace ferry::dispatch

BENCHMARK_MAIN();
