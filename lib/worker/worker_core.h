// The worker's decisions, apart from its sockets and threads: which streams it admits
// and with how much memory, how long a stream waits for the dispatcher to name its
// job, when a drain stops waiting for consumers, and which datasets stay open. The
// service (server/worker_service.cc) is the adapter: it owns the io thread and the
// connections, and hands these classes frames, events and the time.
//
//   WorkerCore    admission (checks, --max-memory, draining) and the environment its
//                 streams share: the decode arena, the stage figures, the counters, the
//                 dispatcher's jobs, the dataset cache, and how to run work later, off
//                 the io thread, or to retire a producer. Thread-compatible: the io
//                 thread owns it (the counters and the environment are thread-safe).
//   DatasetCache  datasets opened once while any stream or job uses them. Thread-safe.
//   DrainPolicy   a dispatcher-mode drain: serve the splits held until acknowledged,
//                 while some consumer is connected, within the timeout. Time is an
//                 argument.
//
// Streams (worker/stream.h) take their decisions from here; tests drive both with a
// fake clock and a fake dispatcher (tests/worker/stream_test.cc), without sockets or
// sleeps.
#ifndef FERRY_WORKER_WORKER_CORE_H_
#define FERRY_WORKER_WORKER_CORE_H_

#include <cstdint>
#include <functional>
#include <chrono>
#include <map>
#include <memory>
#include <string>

#include <oneapi/tbb/task_arena.h>

#include "core/mutex.h"
#include "data/data_roots.h"
#include "data/dataset.h"
#include "ferry/status.h"
#include "pipeline/stats.h"
#include "pyrt/python_pool.h"
#include "text/tokenizer.h"
#include "wire/codec.h"
#include "worker/job_source.h"
#include "worker/worker_metrics.h"

namespace ferry {

class BatchProducer;

class DatasetCache {
 public:
  explicit DatasetCache(DataRoots roots) : roots_(std::move(roots)) {}
  // The open dataset at `path` (confined to the roots), listing it only if no stream
  // or job holds it now.
  Result<std::shared_ptr<const Dataset>> Open(const std::string& path) LOCKS_EXCLUDED(mu_);
  // The job's tokenizer (its model confined to the roots, loaded once while in use);
  // null when the job asks for no tokens.
  Result<std::shared_ptr<const Tokenizer>> OpenTokenizer(const JobSpec& job);

 private:
  const DataRoots roots_;
  TokenizerCache tokenizers_;
  Mutex mu_;
  std::map<std::string, std::weak_ptr<const Dataset>> open_ GUARDED_BY(mu_);
  // Each dataset opened is also held here until kKeepS after it was last opened: a
  // job's check, its streams and its next epoch's streams open it one after another, and
  // a listing of objects (a bucket's keys; shards, whose listing reads them whole) is
  // not to be repeated for each.
  static constexpr double kKeepS = 600;
  struct Kept {
    std::shared_ptr<const Dataset> dataset;
    std::chrono::steady_clock::time_point used;
  };
  std::map<std::string, Kept> kept_ GUARDED_BY(mu_);
};

struct WorkerCoreOptions {
  int buffered_batches = 4;         // per stream (at least 2 are used)
  uint64_t memory_budget_bytes = 0; // all streams' batch memory together
  bool allow_synthetic = false;     // serve "synthetic:" datasets (benchmarks)
  int64_t synthetic_cost_us = 0;    // per batch of a synthetic job's producer
  int64_t job_wait_ns = int64_t(60) * 1000'000'000;  // a named stream waits this long for its job
  int64_t job_poll_ns = int64_t(20) * 1000'000;      // and looks this often
};

// What streams share and need run for them, provided by the service (thread-safe,
// and living longer than every stream and producer).
struct WorkerEnv {
  std::shared_ptr<tbb::task_arena> arena;  // the decode threads all streams share
  std::shared_ptr<PipelineStats> stats = std::make_shared<PipelineStats>();  // their stage figures
  // Runs `fn` on the io thread, later. Callable from any thread.
  std::function<void(std::function<void()>)> post;
  // Runs `fn` off the io thread (listing a dataset can take a second).
  std::function<void(std::function<void()>)> run_blocking;
  // Stops and destroys a producer off the io thread (Stop waits for its tasks).
  std::function<void(std::unique_ptr<BatchProducer>)> retire;
  // The Python processes that run jobs' user code (--allow-user-code); null: this
  // worker refuses user code.
  std::shared_ptr<PythonPool> python;
  // The batches a sweep's lanes share (--share-window); null: each lane makes its own.
  std::shared_ptr<BatchWindow> window;
  // The arena's threads shared among jobs by weight and priority; null: first come
  // first served.
  std::shared_ptr<FairScheduler> scheduler;
};



class WorkerCore {
 public:
  // `jobs`: the dispatcher's jobs (dispatcher mode), or null. `datasets` and `jobs`
  // outlive the core.
  WorkerCore(WorkerCoreOptions o, WorkerEnv env, DatasetCache* datasets, JobSource* jobs);

  // Whether an OpenStream is served, before anything is listed or reserved: a stream
  // by name needs a dispatcher and a consumer id; names follow core/names.h; an inline
  // job must be one a worker can run; synthetic datasets need allow_synthetic; a
  // draining worker opens nothing.
  // An inline job comes back compiled (PrepareInlineStream); a job by name, null.
  Result<std::shared_ptr<const PreparedJob>> Admit(const wire::OpenStreamMsg& m) const;
  // Where this worker opens a job's data: its dataset cache, its Python processes
  // (none without --allow-user-code), synthetic data with allow_synthetic.
  DataOpeners openers() const;

  // A stream's batch memory, taken when it opens and given back when it closes.
  // ResourceExhausted past the budget, saying what the stream needs and what is left.
  Status Reserve(uint64_t bytes);
  void Release(uint64_t bytes);
  uint64_t reserved() const { return reserved_; }
  uint64_t memory_budget() const { return o_.memory_budget_bytes; }

  // Batch buffers per stream: being filled, queued or being written.
  int buffers() const { return o_.buffered_batches < 2 ? 2 : o_.buffered_batches; }
  // Frames a synthetic stream keeps queued: a few beyond the credits, like a
  // producer, and never more than its buffers, whatever the client granted.
  int64_t SyntheticQueueTarget(int64_t credits) const;

  void SetDraining() { draining_ = true; counters_.draining = true; }
  bool draining() const { return draining_; }

  const WorkerCoreOptions& options() const { return o_; }
  const WorkerEnv& env() const { return env_; }
  const std::shared_ptr<tbb::task_arena>& arena() const { return env_.arena; }
  const std::shared_ptr<PipelineStats>& pipeline_stats() const { return env_.stats; }
  WorkerCounters& counters() { return counters_; }
  const WorkerCounters& counters() const { return counters_; }
  DatasetCache& datasets() const { return *datasets_; }
  JobSource* jobs() const { return jobs_; }

 private:
  const WorkerCoreOptions o_;
  const WorkerEnv env_;
  DatasetCache* const datasets_;
  JobSource* const jobs_;
  WorkerCounters counters_;
  uint64_t reserved_ = 0;
  bool draining_ = false;
};

// A dispatcher-mode drain: the worker takes no new leases and serves the splits it
// holds until the dispatcher says every one is acknowledged, as long as some consumer
// is connected to take them (none for `no_consumer_ns`: nobody will), and at most
// `timeout_ns`. Then its streams end and the rest go back to the dispatcher.
class DrainPolicy {
 public:
  enum class Next { kWait, kDrained, kNoConsumer, kTimedOut };
  DrainPolicy(int64_t start_ns, int64_t timeout_ns, int64_t no_consumer_ns = 1000'000'000)
      : deadline_(start_ns + timeout_ns), no_consumer_ns_(no_consumer_ns), last_consumer_(start_ns) {}
  // At `now`: whether the link says all is acknowledged, and whether a consumer's
  // stream is open.
  Next Step(int64_t now, bool acknowledged, bool consumer_connected);

 private:
  const int64_t deadline_, no_consumer_ns_;
  int64_t last_consumer_;
};

}  // namespace ferry

#endif  // FERRY_WORKER_WORKER_CORE_H_
