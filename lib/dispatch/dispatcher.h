// Dispatcher: what ferry-dispatcher decides, apart from how requests reach it. Its
// methods take the control plane's request structs (wire/control.h) and return the
// replies, as tf.data's dispatcher_impl does; server/dispatcher_service.cc only maps
// frames to these calls. No sockets, no threads, no clock of its own: the service
// passes the time in, so tests drive it with a fake one.
//
// What it owns
//   state      DispatcherState (state.h): jobs, workers, splits; changed only through
//              Apply(Update), every update journaled first (journal.h).
//   soft state what need not survive a restart: when each worker was last heard from,
//              which jobs are being created, who was told the dispatcher is idle.
//
// Rules
//   liveness   a worker silent for heartbeat_timeout_ms is removed and its un-acked
//              splits return to pending; a client's report that a worker refuses
//              connections removes it at once, but only if it has also missed a
//              heartbeat (the network between them may be at fault).
//   joining    a job name that exists is joined if the request agrees with it
//              (JobSpec::SameJobAs); a new name is created once its dataset is listed
//              (off the service's thread; concurrent requests for it wait).
//   consumers  a consumer of a shared (unranked) job not heard from for
//              consumer_timeout_ms is removed; its splits not done go to the live
//              consumers, so that the job still ends with every split done once.
//   garbage    a finished job (and any parallel_epochs job) that no connection uses
//              any more is removed.
//   idle exit  with exit_when_idle: once every job has finished and every worker has
//              been told so in a heartbeat reply (or a heartbeat timeout passed).
//
// Durability: each request applies and journals its updates before it returns; the
// replies that depend on them may go out only after Sync() (group commit: many
// requests, one fdatasync). NeedsSync() says whether one is due.
//
// Thread-compatible: the service calls it from its one io thread.
#ifndef FERRY_DISPATCH_DISPATCHER_H_
#define FERRY_DISPATCH_DISPATCHER_H_

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "dispatch/advice.h"
#include "dispatch/decisions.h"
#include "dispatch/placement.h"
#include "dispatch/journal.h"
#include "dispatch/state.h"
#include "ferry/job.h"
#include "ferry/status.h"
#include "wire/control.h"

namespace ferry::dispatch {

struct DispatcherConfig {
  std::string work_dir;              // the journal; required
  int heartbeat_interval_ms = 200;   // asked of workers
  int heartbeat_timeout_ms = 2000;   // a worker silent this long is dead
  // A consumer of a shared job silent this long (clients poll every 100 ms while
  // they live, whether or not their trainer is reading) is gone: its unfinished
  // splits go to the live consumers.
  int consumer_timeout_ms = 30000;
  LeasePolicy lease;
  bool exit_when_idle = false;
  // Journal records between snapshots (or twice the last snapshot's, if more).
  uint64_t compact_every = 50000;
  bool sync = true;                  // fdatasync the journal (tests may turn it off)
  // Each job's splits go to about this many workers (dispatch/placement.h), times its
  // weight; 0: every worker leases from every job.
  int workers_per_job = 0;
};

class Dispatcher {
 public:
  // Opens the work dir and replays its journal. Every worker the journal knows gets a
  // full heartbeat timeout from `now_ms` to come back.
  static Result<std::unique_ptr<Dispatcher>> Open(const DispatcherConfig& config, int64_t now_ms);

  // RegisterWorker: the heartbeat interval to use.
  Result<uint32_t> RegisterWorker(const wire::RegisterWorkerMsg& m, int64_t now_ms);
  // Heartbeat: the splits the worker holds (new leases first) and their jobs.
  Result<wire::HeartbeatOkMsg> Heartbeat(const wire::HeartbeatMsg& m, int64_t now_ms);

  // GetOrCreateJob, first step.
  struct JoinResult {
    enum Kind {
      kJoined,        // `job` is the reply
      kNeedsListing,  // a new job: list its dataset (ListJob), then CreateJob()
      kBusy,          // another request is creating it: ask again shortly
    } kind = kJoined;
    wire::NamedJob job;
  };
  Result<JoinResult> GetOrCreateJob(const wire::GetOrCreateJobMsg& m);
  // GetOrCreateJob, second step for kNeedsListing: `listed` is the requested job with
  // its listing facts, or why it could not be listed. Creates and joins the job.
  Result<wire::NamedJob> CreateJob(const wire::GetOrCreateJobMsg& m, const Result<JobSpec>& listed);

  // The reply holds the job's first open epoch and whether it finished only.
  Result<wire::JobStatusMsg> AckSplits(const wire::AckSplitsMsg& m);
  Result<wire::JobStatusMsg> RestoreConsumer(const wire::RestoreConsumerMsg& m);
  Result<wire::JobStatusMsg> GetJobStatus(const wire::GetJobStatusMsg& m) const;
  // Addresses of the workers that serve (not draining), as consumer `consumer` of
  // `job` sees them: a worker that serves only another consumer (hybrid) is left out.
  std::vector<std::string> Workers(const std::string& job = "", const std::string& consumer = "") const;
  // How many workers lease `job`'s splits: its placement's, or every live one.
  size_t JobWorkers(const JobState& job) const {
    return placement_.active() ? placement_.WorkersOf(job).size() : state_.workers().size();
  }
  // Everything a status tool shows (ferry-ctl status): workers and jobs.
  wire::ClusterStatusMsg ClusterStatus(int64_t now_ms) const;
  // ferry-ctl drain: the worker with this id or address takes no new leases (at once,
  // journaled), and its next heartbeat reply tells it to drain: it serves the splits it
  // holds until they are acknowledged, then leaves and exits. Returns ClusterStatus.
  Result<wire::ClusterStatusMsg> DrainWorker(const std::string& id_or_address, int64_t now_ms);
  // Workers(job, consumer), or FailedPrecondition naming each worker's reason when
  // there are workers and every one has said it cannot serve the job.
  Result<std::vector<std::string>> WorkersFor(const std::string& job, const std::string& consumer) const;
  // A client cannot reach the worker at `address`: see "liveness". Returns Workers().
  std::vector<std::string> ReportWorker(const std::string& address, int64_t now_ms);

  // A request from consumer `consumer` of `job` (any of them: joining, acks, status,
  // worker lists): it is alive.
  void ConsumerSeen(const std::string& job, const std::string& consumer, int64_t now_ms);
  // As ConsumerSeen, with the load figures its request carried (for the advice).
  void ConsumerSeen(const std::string& job, const std::string& consumer, const wire::ConsumerLoad& load,
                    int64_t now_ms);
  // The advice for `job` (dispatch/advice.h), and a worker's production figures.
  LoadTracker::Advice Advice(const std::string& job) const;
  LoadTracker::WorkerRate RateOf(const std::string& worker) const { return load_.RateOf(worker); }

  // Time passes: JournalTick() and Sweep(). Dead workers and silent consumers are
  // removed, placement refilled, and finished jobs that no connection uses
  // (`jobs_in_use`) collected.
  void Tick(int64_t now_ms, const std::set<std::string>& jobs_in_use) {
    if (JournalTick(now_ms)) Sweep(now_ms, jobs_in_use);
  }
  // The journal's part (the service calls it every half heartbeat interval): a journal
  // that could not be written is retried, an idle one sealed. False once stopping.
  bool JournalTick(int64_t now_ms);
  // The rest, which walks every job, consumer and worker: the service calls it every
  // SweepIntervalMs() (with 10,000 workers and 1,000 jobs, twenty sweeps a second were
  // a fifth of the deciding thread).
  void Sweep(int64_t now_ms, const std::set<std::string>& jobs_in_use);
  // An eighth of the shortest timeout, between 10 and 250 ms: a timeout acts at most
  // that late.
  int SweepIntervalMs() const {
    return std::clamp(std::min(config_.heartbeat_timeout_ms, config_.consumer_timeout_ms) / 8, 10, 250);
  }
  // With exit_when_idle: true once the dispatcher may exit (see "idle exit").
  bool ShouldExit() const { return should_exit_; }
  // Every job has finished, and at least one ran.
  bool Idle() const;

  bool NeedsSync() const { return dirty_; }
  // Makes every journaled update durable, then compacts the journal when due. On
  // failure, the replies that waited for it must not be sent.
  Status Sync();

  const DispatcherState& state() const { return state_; }
  bool journal_healthy() const { return journal_->healthy(); }
  // Not OK once a sync of the journal failed (Journal::failed()): every request is
  // refused from then on, and the service must stop.
  const Status& fatal() const { return fatal_; }
  const Journal& journal() const { return *journal_; }
  // The work dir's identity (kept in it): clients check it did not change under them.
  const std::string& state_id() const { return state_id_; }
  struct Stats {
    int64_t leases = 0, acks = 0, workers_removed = 0, journal_records = 0;
    int64_t replayed = 0;  // updates replayed from the journal at start
    int64_t returned = 0;  // leased splits that went back to pending (a worker dead, gone or unfit): re-leased
  };
  // Thread-safe.
  Stats stats() const;

 private:
  explicit Dispatcher(const DispatcherConfig& config) : config_(config), placement_(config.workers_per_job) {}
  void UpdatePlacement();
  // Applies and journals `u`. While the journal cannot be written (a full disk), no
  // update is applied and every change is refused with Unavailable; each Commit
  // first tries to write the queued records again. Reads go on.
  Status Commit(const Update& u);
  Status JournalDown(const Status& s);  // logs the outage once; the error for the caller
  void JournalUp();                     // logs the recovery once
  Result<wire::NamedJob> Join(const JobState& j, const JobSpec& want, const std::string& consumer, bool fresh);
  wire::JobStatusMsg StatusOf(const std::string& job, const std::string& consumer, uint64_t epoch) const;
  bool RemoveWorker(const std::string& id);  // false: not now (the journal is down)
  // Why `worker` cannot serve `job` (its last heartbeat said so), or null.
  const std::string* UnfitFor(const std::string& worker, const std::string& job) const;

  const DispatcherConfig config_;
  DispatcherState state_;
  std::string state_id_;
  std::unique_ptr<Journal> journal_;
  bool dirty_ = false;
  bool synced_since_tick_ = false;  // a journal sync since the last Tick()
  bool journal_down_ = false;
  Status fatal_;  // a failed journal sync: final (see fatal())
  int64_t journal_retry_ms_ = 0;
  std::unordered_map<std::string, int64_t> last_seen_ms_;  // (hashed: a lookup per heartbeat among 10,000)
  // Each job's pipeline JSON and digest, made once for the heartbeat replies that name
  // it, by its state's address (jobs_ is a map: stable until the job is removed, when
  // Commit() drops the entry).
  struct JobWire {
    std::shared_ptr<const std::string> pipeline_json;
    uint64_t digest = 0;  // of the job's encoding (wire::NamedJob::digest), never 0
  };
  std::unordered_map<const JobState*, JobWire> job_wire_;
  const JobWire& WireOf(const JobState& j);
  std::map<std::pair<std::string, std::string>, int64_t> consumer_seen_ms_;  // (job, consumer)
  std::set<std::string> creating_;   // jobs whose dataset is being listed
  std::set<std::string> told_idle_;  // workers whose heartbeat reply said idle
  // worker -> job -> why it cannot serve it (restated by each heartbeat)
  std::map<std::string, std::map<std::string, std::string>> unfit_;
  LoadTracker load_;                 // consumers' and workers' load figures: the advice
  Placement placement_;              // which workers lease each job (--workers-per-job)
  int64_t jobs_collected_ = 0;       // finished jobs removed since start
  int64_t idle_since_ms_ = -1;
  bool should_exit_ = false;
  std::atomic<int64_t> leases_{0}, acks_{0}, workers_removed_{0}, journal_records_{0}, returned_{0};
  // Splits leased to `worker` (of `job`, or of every job).
  int64_t LeasedTo(const std::string& worker, const std::string& job = "") const;
  int64_t replayed_ = 0;
};

}  // namespace ferry::dispatch

#endif  // FERRY_DISPATCH_DISPATCHER_H_
