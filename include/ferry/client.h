// ferry::Client: the remote iterator a trainer links (CMake: ferry::client). It has the
// same BatchIterator API as the in-process Loader.
//
// Two ways to find the data:
//
// Point to point (ClientOptions::workers). The client connects to each worker named,
// opens one stream per worker with the job inline, and grants `credits` batches of
// prefetch per worker. With N workers, worker i serves every N-th sample of each
// epoch's order (static sharding). A lost connection reconnects with back-off and
// resumes after the last batch received.
//
//   ferry::ClientOptions o;
//   o.workers = {"10.0.0.5:7000", "10.0.0.6:7000"};
//   o.job.dataset = "/datasets/imagenet/train";  // as the workers see it
//   o.job.pipeline = ferry::PipelineSpec::ImagenetTrain();
//   auto client = ferry::Client::Connect(o);
//
// Through a dispatcher (ClientOptions::dispatcher + job_name). The client gets or joins
// the named job (a second client naming it shares its epochs, each sample going to
// one of them), learns the job's workers as they come and go, and streams from each.
// It acknowledges each split once it has yielded all of its batches and drops any
// batch it yielded before, so an epoch arrives exactly once through worker deaths.
// SaveState() is the iterator's position; a new client given it as `resume_state`
// continues with exactly the batches not yet yielded.
//
//   o.dispatcher = "10.0.0.2:7100";
//   o.job_name = "resnet50-run7";
//
// Each batch arrives in one 64-byte-aligned buffer (from `buffers`, e.g. pinned
// memory) and its tensors are views into it: no copy.
//
// Threading: Next() and WaitReady() from one consumer thread; the other methods from
// any thread.
#ifndef FERRY_CLIENT_H_
#define FERRY_CLIENT_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "ferry/buffer.h"
#include "ferry/iterator.h"
#include "ferry/job.h"
#include "ferry/split_id.h"

namespace ferry {

struct ClientOptions {
  // The job: inline to each worker (point to point), or the named job's
  // configuration (dispatcher; a client joining an existing job must agree with it).
  // Point to point, `mode` and `ordering` must stay at their defaults (they need a
  // dispatcher), and a non-zero `num_samples` or `fingerprint` makes each worker check
  // that it lists the dataset the same way (FailedPrecondition otherwise).
  JobSpec job;

  // A rank of a data-parallel trainer: job.num_consumers is the world size, and this
  // client is rank `rank` of it. Every rank gets the same number of batches every
  // epoch (see "ranks" in ferry/job.h) and yields them one epoch at a time. Through a
  // dispatcher the rank is the job's consumer "rank-<rank>"; point to point, each rank
  // reads its own share of every epoch from the workers.
  int rank = 0;

  std::vector<std::string> workers;  // point to point: HOST:PORT of each worker
  std::string dispatcher;            // or: HOST:PORT of ferry-dispatcher ...
  std::string job_name;              // ... and the job to get or join there
  // Dispatcher: a SaveState().Serialize() to continue after (its job and consumer win).
  std::string resume_state;
  uint64_t first_epoch = 0;          // point to point: the first epoch to read

  int credits = 4;                   // prefetch depth per worker, in batches
  std::string token;                 // shared token; empty = $FERRY_TOKEN, or none
  std::string token_file;            // read the token from here instead
  // TLS (PEM files): the CA the servers' certificates are checked against (required
  // for TLS), and this client's certificate and key for servers that require one
  // (mutual TLS). All empty: plain TCP. Host names are not checked (see net/tls.h).
  std::string tls_ca, tls_cert, tls_key;
  // Receive buffers; null = 64-byte-aligned heap buffers recycled by the client.
  std::shared_ptr<BufferAllocator> buffers;
  uint64_t max_batch_bytes = uint64_t{4} << 30;  // a larger Batch frame closes its stream

  // Reconnecting to a worker: delays double from backoff_initial_s up to
  // backoff_max_s; after max_retries consecutive failures the worker is given up
  // (point to point: an error; dispatcher: its splits go to the others).
  int max_retries = 6;
  double backoff_initial_s = 0.1;
  double backoff_max_s = 2.0;
  double poll_interval_s = 0.1;      // dispatcher: how often to look for workers and job status
  double dispatcher_timeout_s = 120; // dispatcher: give up after this long unreachable
  // The CPUs the client's own threads (receiving, and the dispatcher's control loop)
  // run on: keep them off the cores a CPU-bound trainer steps on, so that the kernel's
  // copy out of the socket and the receiving thread's cache traffic land elsewhere.
  // Empty: $FERRY_IO_CPUS ("8-15", as taskset -c writes it) when set, else wherever the
  // threads start (they inherit the creating thread's affinity).
  std::vector<int> io_cpus;
  // Point to point: "ferry-client" when empty. Dispatcher: a random id when empty (a
  // resumed state brings its own).
  std::string consumer_id;
  // A sweep (job.sharing == Sharing::kEvery): this trainer's name. It reads every
  // batch through its lane, the dispatcher job "<job_name>/<trainer_id>" (a saved
  // state names the lane). Empty: the consumer id (a trainer of ranks must name itself).
  std::string trainer_id;
};

// What a dispatcher-mode client has yielded, enough to resume exactly: every split of
// epochs before `first_open` is complete; of later epochs, `done` splits are complete
// and `partial` ones have the listed batches (batch_in_split) yielded.
struct IteratorState {
  using SplitId = ferry::SplitId;
  std::string job, consumer;
  // The job's JobSpec::ConfigFingerprint() (0 in states saved before it was kept): a
  // client refuses to resume a state into a job with other settings.
  uint64_t config = 0;
  uint64_t first_open = 0;
  std::set<SplitId> done;
  std::map<SplitId, std::set<int64_t>> partial;

  // Marks batch `p` as not yielded: one the client counted but its trainer never got
  // (a Python loader's look-ahead at an epoch boundary), so that a client resumed from
  // this state gets it. `splits_per_epoch` (the job's) reopens an epoch the batch
  // closed. InvalidArgument if it was not yielded per this state.
  Status Unyield(const BatchProvenance& p, int64_t splits_per_epoch);

  // Rank `rank` of ranked `job`: the batch indices j of `epoch` this state says it
  // yielded (all of them for an epoch before first_open), for TakenPositions().
  Result<std::vector<int64_t>> YieldedBatches(const JobSpec& job, int64_t rank, uint64_t epoch) const;

  // A small line-oriented text form (names hold no whitespace).
  std::string Serialize() const;
  static Result<IteratorState> Parse(const std::string& text);
};

class Client : public BatchIterator {
 public:
  static Result<std::unique_ptr<Client>> Connect(const ClientOptions& options);
  // Stops the streams; in dispatcher mode acknowledges what was yielded (briefly).
  ~Client() override;

  Result<Batch> Next() override;
  bool WaitReady(double seconds) override;
  std::vector<SkippedSample> TakeSkipped() override;
  IteratorStats stats() const override;

  // Dispatcher mode: the job as the dispatcher has it (num_samples gives the epoch's
  // length), once it has answered; waits up to `seconds`. Point to point: nullopt.
  std::optional<JobSpec> JobInfo(double seconds) const;
  // Point to point: epochs every worker has finished sending. Dispatcher: epochs the
  // whole job has completed.
  int64_t epochs_completed() const;
  // Dispatcher mode: the iterator's state after the last batch Next() returned.
  IteratorState SaveState() const;
  const std::string& consumer_id() const;
  // Reconnects made after transient failures, over all workers.
  int64_t reconnects() const;
  // Dispatcher mode: re-sent batches dropped because they had been yielded already.
  int64_t duplicates_dropped() const;
  // Dispatcher mode: the workers streamed from so far.
  size_t workers_seen() const;

 private:
  class Impl;
  explicit Client(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ferry

#endif  // FERRY_CLIENT_H_
