// The dispatcher's decisions, apart from its state (state.h) and its transport (the
// service): pure functions from the state (plus soft facts such as heartbeat times)
// to the Updates to apply. Testable without sockets or clocks.
#ifndef FERRY_DISPATCH_DECISIONS_H_
#define FERRY_DISPATCH_DECISIONS_H_

#include <cstdint>
#include <map>
#include <unordered_map>
#include <set>
#include <string>
#include <vector>

#include "dispatch/state.h"

namespace ferry::dispatch {

struct LeasePolicy {
  // Splits a worker may hold un-acked per job: leasing several ahead keeps the data
  // path off the dispatcher's round trip.
  int max_outstanding = 4;
};

// Splits to lease to `worker` now, one LeaseSplits per job (none if it holds enough,
// is draining, or nothing is pending). Pending splits are taken in epoch order,
// looking at most one epoch ahead of the first open one. A split already assigned to
// a consumer keeps it; a new one goes to its rank in a ranked job (once that rank has
// joined), to consumers[split % m] under deterministic ordering, else to the consumer
// with the fewest splits in flight. A worker that serves only one consumer of one job
// (a trainer's own cores, "hybrid") leases only splits that are, or become, that
// consumer's. Each consumer's lowest unfinished split is leased even past the
// lease-ahead (see decisions.cc). Jobs in `unfit` (the worker cannot serve them) get
// nothing. `only` (placement.h): the jobs placed on the worker, the only ones looked at;
// null: every job.
std::vector<LeaseSplits> DecideLeases(const DispatcherState& state, const std::string& worker,
                                      const LeasePolicy& policy, const std::set<std::string>& unfit = {},
                                      const std::set<std::string>* only = nullptr);

// Workers not heard from within `timeout_ms`: to be removed (their leases return).
// Workers missing from `last_seen_ms` count as just seen (after a restart, every
// worker gets a full timeout to reconnect).
std::vector<RemoveWorker> DecideDeadWorkers(const DispatcherState& state,
                                            const std::unordered_map<std::string, int64_t>& last_seen_ms, int64_t now_ms,
                                            int64_t timeout_ms);

// Consumers of (job, consumer) not heard from within `timeout_ms`: to be removed, so
// that their unfinished splits go to the live consumers. Only shared jobs: a ranked
// job's splits belong to their rank, which comes back by resuming (its trainer
// restarts from a checkpoint), and parallel_epochs jobs have no splits. Consumers
// missing from `last_seen_ms` count as just seen (a full timeout after a restart).
std::vector<RemoveConsumer> DecideGoneConsumers(
    const DispatcherState& state, const std::map<std::pair<std::string, std::string>, int64_t>& last_seen_ms,
    int64_t now_ms, int64_t timeout_ms);

// Finished jobs (and parallel_epochs jobs) that no consumer is connected to any more.
std::vector<RemoveJob> DecideGarbage(const DispatcherState& state, const std::set<std::string>& jobs_in_use);

// Whether every job has finished (for --exit-when-idle). False with no jobs at all.
bool AllJobsFinished(const DispatcherState& state);

}  // namespace ferry::dispatch

#endif  // FERRY_DISPATCH_DECISIONS_H_
