// JobSource: what a worker's streams of dispatcher jobs need from its link to the
// dispatcher (DispatcherLink), as an interface, so that a stream's decisions are
// tested with a fake (tests/worker/stream_test.cc) rather than a dispatcher.
// Thread-safe.
#ifndef FERRY_WORKER_JOB_SOURCE_H_
#define FERRY_WORKER_JOB_SOURCE_H_

#include <chrono>
#include <memory>
#include <string>

#include "data/dataset.h"
#include "ferry/job.h"
#include "ferry/status.h"
#include "pipeline/prepared_job.h"
#include "pipeline/split_plan.h"
#include "text/tokenizer.h"

namespace ferry {

// What a worker knows of a dispatcher job.
struct WorkerJob {
  std::string name;
  JobSpec spec;
  std::shared_ptr<const PreparedJob> prepared;  // the spec compiled, once for all its streams
  std::shared_ptr<const Dataset> dataset;
  std::shared_ptr<const Tokenizer> tokenizer;  // the job's "tokens" target's, or null
  Status status;  // not OK: this worker cannot serve the job (and says why)
  std::chrono::steady_clock::time_point opened;  // a failed open is retried after a while
};

class JobSource {
 public:
  virtual ~JobSource() = default;
  // The job's facts once a lease of it (or a wanted job) has arrived; null before.
  virtual std::shared_ptr<const WorkerJob> Job(const std::string& name) const = 0;
  // The feed of (job, consumer), created empty when new.
  virtual std::shared_ptr<SplitFeed> Feed(const std::string& job, const std::string& consumer) = 0;
  // Ask the dispatcher now rather than at the next interval (a consumer waits).
  virtual void Poke() = 0;
  // A client opened a stream for this job: fetch its facts even if no split is leased.
  virtual void Want(const std::string& job) = 0;
  // The facts held are of another job of that name: fetch the job again.
  virtual void Refresh(const std::string& job) = 0;
  // This worker's id at the dispatcher (parallel_epochs streams draw from it).
  virtual const std::string& worker_id() const = 0;
};

}  // namespace ferry

#endif  // FERRY_WORKER_JOB_SOURCE_H_
