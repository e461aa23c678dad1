// DispatcherState: everything the dispatcher knows that must survive a restart, as
// a deterministic state machine. It changes only through Apply(Update), so that
// replaying the journal (see journal.h) rebuilds it exactly. Thread-compatible: the
// dispatcher service owns one and calls it from one thread.
//
// Glossary
//   job        a named JobSpec (include/ferry/job.h), shared by every
//              consumer (client) that names it.
//   split      a contiguous run of `batches_per_split` batches of one epoch's
//              permutation; the unit of leasing, acknowledgement and replay.
//              Split s of epoch e covers permutation positions
//              [s*k*B, min((s+1)*k*B, N)), k = batches_per_split, B = batch_size.
//   lease      split -> (worker that produces it, consumer it is for). A split keeps
//              its consumer for life, so that only that consumer ever sees its
//              batches and can drop re-sent ones (exactly once).
//   ack        the consumer has yielded every batch of the split: it is done.
//
// Split life: pending -> leased -> done; leased -> pending again when its worker is
// removed (dead or gone) before the ack; and, when its consumer is removed (silent
// past the consumer timeout), pending with no consumer, for the live ones to take. That is the whole exactly-once mechanism:
// nothing un-acked is ever forgotten, and content is deterministic, so a re-leased
// split reproduces the same batches.
//
// What is deliberately NOT here: time. Heartbeat times are soft state of the
// service; after a restart every worker gets a fresh timeout.
#ifndef FERRY_DISPATCH_STATE_H_
#define FERRY_DISPATCH_STATE_H_

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <variant>
#include <vector>

#include "ferry/job.h"
#include "ferry/split_id.h"
#include "ferry/status.h"

namespace ferry::dispatch {

// The dispatcher keeps a few words per split of each open epoch; this bounds that
// memory (about 100 bytes a split) whatever a client asks for.
inline constexpr int64_t kMaxSplitsPerEpoch = int64_t(1) << 22;

struct LeasedSplit {
  SplitId ref;
  std::string consumer;
};

// --- Updates: the only way the state changes (and what the journal records). ------
struct CreateJob { std::string name; JobSpec spec; };
struct AddConsumer { std::string job; std::string consumer; };
// serves_job/serves_consumer (both or neither): a trainer's own cores (hybrid) that
// lease only that consumer's splits of that job.
struct RegisterWorker {
  std::string worker;
  std::string address;
  std::string serves_job = {}, serves_consumer = {};
};
struct RemoveWorker { std::string worker; };            // dead or gone: its leases return
struct DrainWorker { std::string worker; };             // takes no new leases
// A worker cannot serve a job (its dataset is missing there, or lists otherwise): its
// leases of the job return to pending, keeping their consumers.
struct ReturnSplits { std::string job; std::string worker; };
struct LeaseSplits { std::string job; std::string worker; std::vector<LeasedSplit> splits; };
struct AckSplits { std::string job; std::string consumer; std::vector<SplitId> splits; };
struct RemoveJob { std::string job; };                  // garbage collection
// A consumer that vanished: its splits not done lose it (leased ones return to
// pending) and go to the job's live consumers; its done splits stay done.
struct RemoveConsumer { std::string job; std::string consumer; };
// Snapshots: pending splits that already belong to `consumer` (a re-leased split
// keeps its consumer, which is what makes it exactly once).
struct AssignSplits { std::string job; std::string consumer; std::vector<SplitId> splits; };
struct JobProgress { std::string job; uint64_t first_open = 0; };  // snapshots: epochs before are complete
// A consumer resumes from a saved iterator state: epochs before `first_open` and the
// `done` splits are complete for it; every other split of it in later epochs is not,
// even if acknowledged after the state was saved (the trainer went on past its
// checkpoint, then restarted from it). Those return to pending, keeping their
// consumer. Moving the job's own first_open (back, or forward for a job recreated
// after garbage collection) is allowed only when this is the job's only consumer.
struct RestoreConsumer {
  std::string job, consumer;
  uint64_t first_open = 0;
  std::vector<SplitId> done;
};

using Update = std::variant<CreateJob, AddConsumer, RegisterWorker, RemoveWorker, DrainWorker, LeaseSplits,
                            AckSplits, RemoveJob, JobProgress, RestoreConsumer, RemoveConsumer, AssignSplits,
                            ReturnSplits>;

enum class SplitStatus : uint8_t { kPending = 0, kLeased = 1, kDone = 2 };

struct EpochState {
  std::vector<SplitStatus> status;
  std::vector<std::string> worker;    // per split, when leased
  std::vector<std::string> consumer;  // per split, once assigned (kept for life)
  int64_t done = 0;
  int64_t leased = 0;
  // No split before this one is pending or leased: where a lease decision starts its
  // scan instead of at split 0 (which costs what the epoch has, on every heartbeat).
  // A hint, not a fact of the state: decisions move it past done splits; a split
  // that stops being done (a restore) moves it back.
  mutable size_t scan_from = 0;
  // No split before this one is pending (they are leased or done): a decision for a
  // job of one consumer jumps here past the splits every other worker holds (with
  // thousands of workers, tens of thousands of them: the scan cost what the fleet
  // holds on every heartbeat). A hint like scan_from: decisions move it forward, a
  // split that becomes pending again (returned, restored, its consumer gone) moves it
  // back.
  mutable size_t pending_from = 0;
  // No split from this one on has a consumer (an upper bound: a split that loses its
  // consumer leaves it). Past it, a shared job's splits are all free, so a decision
  // whose budget is full stops there instead of at the epoch's end.
  size_t assigned_end = 0;
  // A sweep's lane: per split acknowledged, the worker that made it, where the other
  // lanes' copies of the split go (its window may still hold the batches). A hint, not
  // a fact of the state: not journaled, lost on a restart. Empty for other jobs.
  mutable std::vector<std::string> made_by;
  void Assign(size_t s, const std::string& c) {
    consumer[s] = c;
    assigned_end = std::max(assigned_end, s + 1);
  }
};

struct JobState {
  std::string name;
  JobSpec spec;
  // A sweep's lane (spec.sharing == kEvery): JobSpec::ContentKey, which its sibling
  // lanes share (DispatcherState::Lanes); 0 for any other job. Derived from the spec.
  uint64_t content_key = 0;
  std::vector<std::string> consumers;  // in the order they joined
  // Epochs from `first_open` on that have been started; earlier ones are complete
  // and dropped (only their count matters).
  std::map<uint64_t, EpochState> epochs;
  uint64_t first_open = 0;  // the first epoch not yet complete
  // The last epoch completed (first_open - 1), kept with its owners: a consumer of a
  // shared job may resume from a state saved in it after the others completed it (a
  // checkpoint just before an epoch's end). Empty, or that one epoch; snapshots keep it,
  // since whether a restore applies depends on it.
  std::map<uint64_t, EpochState> completed;
  bool finished() const;
  bool HasConsumer(const std::string& c) const;
  // Whether consumer `c` has read anything of the job: a split of its done, or an epoch
  // closed.
  bool ConsumerStarted(const std::string& c) const;
};

struct WorkerState {
  std::string address;
  bool draining = false;
  std::string serves_job, serves_consumer;  // hybrid: only this consumer of this job
  bool ServesOnly() const { return !serves_job.empty(); }
};

class DispatcherState {
 public:
  // Applies one update. An update that does not fit the state (unknown job, a split
  // leased twice...) is refused with an error and changes nothing; the service
  // only journals updates that applied.
  Status Apply(const Update& u);

  const std::map<std::string, JobState>& jobs() const { return jobs_; }
  const std::map<std::string, WorkerState>& workers() const { return workers_; }
  const JobState* job(const std::string& name) const;
  // The sweep lanes of one content (JobState::content_key), the job itself included.
  const std::vector<std::string>& Lanes(uint64_t content_key) const;
  uint64_t applied() const { return applied_; }

  // Splits leased to `worker` and not yet acked, per job. From the lease index: costs
  // what the worker holds, not what the jobs have (every heartbeat asks).
  std::map<std::string, std::vector<LeasedSplit>> LeasesOf(const std::string& worker) const;
  // The same splits without their consumers, as the index holds them (no copy): null
  // when the worker holds none. Valid until the next Apply().
  const std::map<std::string, std::set<SplitId>>* LeaseRefs(const std::string& worker) const {
    auto it = leased_by_worker_.find(worker);
    return it == leased_by_worker_.end() ? nullptr : &it->second;
  }
  // How many splits `worker` holds.
  size_t LeaseCount(const std::string& worker) const;
  // The lease index and the scan hints checked against the splits (tests and the
  // fuzzer): empty if they agree, else what differs.
  std::string CheckLeaseIndex() const;
  // Splits assigned to `consumer` of `job` in `epoch`, in split order, with status.
  std::vector<std::pair<int64_t, SplitStatus>> SplitsOf(const std::string& job, const std::string& consumer,
                                                        uint64_t epoch) const;
  // Whether every split of `epoch` of `job` is done (epochs before first_open are).
  bool EpochComplete(const std::string& job, uint64_t epoch) const;
  // A sequence of updates that rebuilds this state from empty (for snapshots).
  std::vector<Update> Snapshot() const;
  // Every fact a restart must rebuild (workers, jobs, consumers, each open split's
  // status, worker and consumer, the completed epoch's owners), one per line. Two
  // states that must be equal print equal (tests, the control-plane fuzzer).
  std::string DebugString() const;

 private:
  Status ApplyLease(const LeaseSplits& u);
  Status ApplyAck(const AckSplits& u);
  Status ApplyRestore(const RestoreConsumer& u);
  Status ApplyRemoveConsumer(const RemoveConsumer& u);
  Status ApplyAssign(const AssignSplits& u);
  void Advance(JobState& j);
  // Every change of a split from leased goes through these, so that the index stays
  // the splits' own account (CheckLeaseIndex).
  void Unlease(const std::string& job, uint64_t epoch, EpochState& e, size_t s);
  void ReturnLeases(JobState& j, const std::string& worker);  // to pending, keeping consumers
  // The index forgets `j`'s leases in epochs before `before_epoch` (about to be
  // dropped), or all of them (nullopt: the job is).
  void ForgetLeases(const JobState& j, std::optional<uint64_t> before_epoch);

  std::map<std::string, JobState> jobs_;
  // worker -> job -> the splits it holds (status kLeased, worker[s] == worker).
  std::map<std::string, std::map<std::string, std::set<SplitId>>> leased_by_worker_;
  std::map<std::string, WorkerState> workers_;
  // content key -> the lanes of that content (jobs created with sharing every).
  std::map<uint64_t, std::vector<std::string>> lanes_;
  uint64_t applied_ = 0;
};

}  // namespace ferry::dispatch

#endif  // FERRY_DISPATCH_STATE_H_
