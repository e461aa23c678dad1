// Placement: which workers lease each job's splits, in a fleet where every worker
// taking splits of every job would not scale.
//
// Without it (--workers-per-job 0, the default), every worker leases from every job:
// right for a pool of tens of workers, where each job wants all of them. With 1,000 jobs
// on 10,000 workers, it would have each worker hold max_outstanding splits of every job
// (every heartbeat reply listing thousands), each lease decision look at every job, and
// each client connect to every worker. With --workers-per-job K, each job is placed on
// about K workers (K x its weight, at least one, at most the workers that can serve
// it), and a worker's lease decision looks at the jobs placed on it only.
//
// Glossary
//   key        what is placed: a job, or all the sweep lanes of one content together
//              (JobState::content_key), so that the lanes' splits meet on the workers
//              that share their batches (decisions.cc's held_elsewhere rule would
//              otherwise leave a lane's split to a worker not placed for that lane).
//   candidate  a live worker, not draining, not a trainer's own (hybrid: it serves its
//              job whatever the placement), that has not said it cannot serve the job.
//   members    the workers a key is placed on. Stable: a member stays until it is no
//              longer a candidate (gone, draining, unfit); a new worker takes keys that
//              are short of their count, and new keys go to the workers that hold the
//              fewest keys. Not journaled (a hint, like made_by): a restarted dispatcher
//              places again; a worker keeps the splits it holds wherever it is placed.
//
// Exactly once does not depend on it: placement only decides which workers' heartbeats
// lease a job's pending splits; splits, leases and acknowledgements are what they were.
//
// Thread safety: none; the dispatcher's (one thread).
#ifndef FERRY_DISPATCH_PLACEMENT_H_
#define FERRY_DISPATCH_PLACEMENT_H_

#include <cstdint>
#include <functional>
#include <map>
#include <unordered_map>
#include <set>
#include <string>

#include "dispatch/state.h"

namespace ferry::dispatch {

class Placement {
 public:
  explicit Placement(int workers_per_job) : per_job_(workers_per_job) {}
  bool active() const { return per_job_ > 0; }

  // Brings the members up to date with `state`: members that are no longer candidates
  // leave; keys short of their count are filled from the candidates that hold the
  // fewest keys. `unfit(worker, job)`: the worker said it cannot serve the job.
  // Costs the members (jobs x K), plus, only when some key is short, the workers.
  void Update(const DispatcherState& state, const std::function<bool(const std::string&, const std::string&)>& unfit);

  // The jobs whose splits `worker` leases (every lane of a placed content); empty when
  // none. REQUIRES: active().
  std::set<std::string> JobsOf(const DispatcherState& state, const std::string& worker) const;
  // The workers `job` is placed on. REQUIRES: active().
  const std::set<std::string>& WorkersOf(const JobState& job) const;
  // How many workers a job of `weight` is placed on, of `candidates`.
  int Target(double weight, size_t candidates) const;
  // Keys placed (tests, metrics).
  size_t keys() const { return members_.size(); }

 private:
  static std::string KeyOf(const JobState& j);

  const int per_job_;
  std::map<std::string, std::set<std::string>> members_;  // key -> workers
  std::unordered_map<std::string, std::set<std::string>> keys_of_;  // worker -> keys (hashed: a lookup a heartbeat)
};

}  // namespace ferry::dispatch

#endif  // FERRY_DISPATCH_PLACEMENT_H_
