// PythonPool: user code (JobSpec::user_code) run in Python processes of their own.
//
// A job may carry the trainer's own map-style Dataset (with a transform and a collate
// function), pickled with cloudpickle. A worker started with --allow-user-code (and the
// in-process Loader) makes its batches in a pool of `python3` processes, each its own
// interpreter (no GIL shared), each running Ferry's runtime
// (client/python/ferry/_user_worker.py, embedded in this library) on one end of a
// socket pair. A batch is one request: its sample indices and each sample's seed
// (SampleRng of the job's seed, the epoch and the index, so a random transform draws
// the same whatever process, worker or rank makes it); the reply is the collated batch
// as one memfd, passed with SCM_RIGHTS and mapped here (the frame references it: the
// arrays are written once, by numpy, into the memory the socket sends from).
//
// Faults, without losing or repeating a sample:
//   - an exception in the user's code skips that sample (reported with its type and
//     message), the batch goes on;
//   - a sample past the sample timeout is interrupted (SIGALRM) and skipped; one stuck
//     where no signal reaches (C code) is caught by the watchdog here, its process
//     killed, the sample skipped and the batch made again without it;
//   - a process that dies (a segfault, os._exit, the OOM killer) is replaced and the
//     batch made again; a sample on which processes die twice is skipped;
//   - code that cannot be loaded (a module the worker's Python cannot import) fails
//     Check() at once, naming the module.
//
// Thread-safe: any number of threads may call MakeBatch; each request takes a free
// process (waiting for one) and holds it until its reply.
#ifndef FERRY_PYRT_PYTHON_POOL_H_
#define FERRY_PYRT_PYTHON_POOL_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/mutex.h"
#include "data/dataset.h"
#include "ferry/iterator.h"
#include "ferry/job.h"
#include "ferry/status.h"

namespace ferry {

struct PythonPoolOptions {
  std::string python = "/usr/bin/python3";  // the interpreter (the same image as the trainer's)
  int processes = 1;
  double sample_timeout_s = 0;  // a sample running longer is skipped; 0: no limit
  // The Python processes run as this user (and its group), not as the worker's: they
  // cannot read what only the worker may (its token and key files). "": the worker's.
  std::string user;
};

// Ferry's Python runtime, as embedded at build time.
const std::string& UserWorkerScript();

// A batch's rows as the native pipeline made them, for user code after it
// (UserCodeSpec::input): row r is `row_bytes` at images + r * row_bytes, of `dims`
// (H, W, C uint8, or C, H, W float32), with labels[r].
struct NativeRows {
  const void* images = nullptr;
  size_t row_bytes = 0;
  int64_t rows = 0;
  std::vector<int64_t> dims;
  bool float32 = false;
  const int64_t* labels = nullptr;
};

struct UserBatch {
  std::vector<int64_t> kept;  // the rows' sample indices, in order
  std::vector<SkippedSample> skipped;
  std::string structure;      // JSON: how the trainer rebuilds the batch from `data`
  const void* data = nullptr; // `bytes` (a multiple of 8) of the collated batch
  size_t bytes = 0;
  std::shared_ptr<void> owner;  // the mapping
};

class PythonPool {
 public:
  explicit PythonPool(PythonPoolOptions options);
  ~PythonPool();  // ends every process
  PythonPool(const PythonPool&) = delete;
  PythonPool& operator=(const PythonPool&) = delete;

  // Loads the job's code in a process: FailedPrecondition naming what failed (the
  // module the worker's Python cannot import). `warning`: a difference between the
  // trainer's versions (JobSpec::user_code.versions) and this Python's, or "".
  Status Check(const JobSpec& job, std::string* warning = nullptr);

  // The batch of `samples` (sample indices of `epoch`, in order) of `job`; rows > 0:
  // its tensors padded with zero rows to `rows` (a padded batch of ranks). Blocks until made; returns Cancelled once
  // *cancel becomes true (checked every 50 ms).
  // `native`: user code after the native pipeline; samples[r] is row r's index.
  // `key`: CodeKey(job), which hashes the whole payload: callers making many batches
  // of one job compute it once (0: computed here).
  Result<UserBatch> MakeBatch(const JobSpec& job, uint64_t epoch, const std::vector<int64_t>& samples, int64_t rows,
                              const std::atomic<bool>* cancel = nullptr, const NativeRows* native = nullptr,
                              uint64_t key = 0);
  // What names a job's code in the processes (a digest of its payload).
  static uint64_t CodeKey(const JobSpec& job);

  // The seed a sample's Python code is seeded with (random, numpy, torch).
  static uint64_t SampleSeed(uint64_t job_seed, uint64_t epoch, int64_t index);

  // Starts the processes now (they import numpy, cloudpickle and torch while they
  // wait), so that the first job's code loads in milliseconds. Returns at once.
  void Warm();

  // For tests and /metrics: processes started (the first ones and replacements), and
  // the pids alive now.
  int64_t started() const;
  std::vector<int> pids() const;
  const PythonPoolOptions& options() const { return o_; }

 private:
  struct Proc;
  // A free process (started if need be), or null once `cancel` is set.
  std::shared_ptr<Proc> Acquire(const std::atomic<bool>* cancel);
  void Release(std::shared_ptr<Proc> p);
  Result<std::shared_ptr<Proc>> Spawn();
  Status Load(Proc* p, const JobSpec& job, uint64_t key, std::string* versions);

  const PythonPoolOptions o_;
  mutable Mutex mu_;
  CondVar cv_;
  std::vector<std::shared_ptr<Proc>> idle_ GUARDED_BY(mu_);
  int live_ GUARDED_BY(mu_) = 0;  // processes started and not ended (idle or busy)
  int64_t started_ GUARDED_BY(mu_) = 0;
  std::vector<int> pids_ GUARDED_BY(mu_);
};

// What a worker without --allow-user-code answers a job with user code.
inline Status UserCodeRefused() {
  return Status(StatusCode::kPermissionDenied,
                "this worker runs no user code (a job with a pickled Dataset): start it with --allow-user-code "
                "(see SECURITY.md: the code runs with the worker's privileges, or --user-code-user's)");
}

// Loads a job's user code in one of `pool`'s processes: the import error (naming the
// module) otherwise; refused without a pool. Logs a difference between the trainer's
// Python and package versions and the worker's.
Status CheckUserCode(PythonPool* pool, const JobSpec& job);
// A whole-Dataset job's dataset (indices), once CheckUserCode passed.
Result<std::shared_ptr<const Dataset>> OpenUserCode(PythonPool* pool, const JobSpec& job);

}  // namespace ferry

#endif  // FERRY_PYRT_PYTHON_POOL_H_
