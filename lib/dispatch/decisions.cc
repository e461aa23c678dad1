#include "dispatch/decisions.h"

#include <algorithm>
#include <set>

namespace ferry::dispatch {

std::vector<LeaseSplits> DecideLeases(const DispatcherState& state, const std::string& worker,
                                      const LeasePolicy& policy, const std::set<std::string>& unfit,
                                      const std::set<std::string>* only) {
  std::vector<LeaseSplits> out;
  auto wt = state.workers().find(worker);
  if (wt == state.workers().end() || wt->second.draining) return out;
  static const std::map<std::string, std::set<SplitId>> kNone;
  const std::map<std::string, std::set<SplitId>>* refs = state.LeaseRefs(worker);
  const auto& held = refs != nullptr ? *refs : kNone;
  const WorkerState& self = wt->second;
  // The jobs looked at: every one, or those placed on the worker (a lookup each, not a
  // walk over a thousand jobs on every heartbeat).
  std::vector<std::pair<const std::string*, const JobState*>> jobs;
  if (only == nullptr) {
    for (const auto& [name, j] : state.jobs()) jobs.push_back({&name, &j});
  } else {
    for (const std::string& name : *only)
      if (const JobState* j = state.job(name)) jobs.push_back({&j->name, j});
  }
  for (const auto& [name_ptr, job_ptr] : jobs) {
    const std::string& name = *name_ptr;
    const JobState& j = *job_ptr;
    if (j.finished() || j.consumers.empty() || j.spec.mode != ProcessingMode::kDistributedEpoch) continue;
    if (unfit.count(name)) continue;
    // A trainer's own worker (hybrid) leases only its trainer's splits of its job.
    if (self.ServesOnly() && (self.serves_job != name || !j.HasConsumer(self.serves_consumer))) continue;
    // The worker's leases of this job, in (epoch, split) order. A candidate split is
    // leased while fewer than max_outstanding leases come before it: leases of later
    // splits do not count against an earlier one. Were they to, a split returned by a
    // dead worker could wait forever behind a survivor's leases of later splits that
    // the consumers hold back until it is done (the next epoch of a ranked job at its
    // barrier, later splits under deterministic order). A worker then holds more than
    // max_outstanding only while earlier splits come back, at most two epochs' worth.
    std::vector<SplitId> mine;  // (a set's order: sorted)
    if (auto h = held.find(name); h != held.end()) mine.assign(h->second.begin(), h->second.end());
    int budget = policy.max_outstanding;  // new leases in this decision, at most
    // Splits in flight per consumer, to balance new assignments: counted (a scan of
    // the open epochs) only when a free split of a shared job has several consumers
    // to go to.
    std::map<std::string, int64_t> in_flight, picked;  // picked: in this decision
    bool counted = false;
    const JobState& jj = j;  // (a structured binding cannot be captured before C++20)
    auto count_in_flight = [&] {
      if (counted) return;
      counted = true;
      for (const std::string& c : jj.consumers) in_flight[c] = 0;
      for (const auto& [epoch, e] : jj.epochs) {
        for (size_t s = e.scan_from; s < e.status.size(); ++s) {
          if (e.status[s] != SplitStatus::kDone && !e.consumer[s].empty()) ++in_flight[e.consumer[s]];
        }
      }
      for (const auto& [c, n] : picked) in_flight[c] += n;
    };
    LeaseSplits lease{name, worker, {}};
    const int64_t per_epoch = j.spec.SplitsPerEpoch();
    const uint64_t last = j.first_open + 1;  // look one epoch ahead at most
    // At the tail of the job, share what is left: a worker takes at most its fair
    // share of the pending splits, so that none holds several of the last splits while
    // another idles (the job would end one worker-split late).
    if (j.spec.PastEnd(last + 1)) {
      int64_t pending = 0;
      for (uint64_t epoch = j.first_open; epoch <= last && !j.spec.PastEnd(epoch); ++epoch) {
        auto et = j.epochs.find(epoch);
        if (et == j.epochs.end()) {
          pending += per_epoch;
          continue;
        }
        pending += int64_t(et->second.status.size()) - et->second.done - et->second.leased;
      }
      int64_t live = 0;
      for (const auto& [id, w] : state.workers()) {
        live += !w.draining && (!w.ServesOnly() || w.serves_job == name) ? 1 : 0;  // those that may take them
      }
      const int64_t share = (pending + std::max<int64_t>(1, live) - 1) / std::max<int64_t>(1, live);
      budget = int(std::min<int64_t>(budget, std::max<int64_t>(1, share)));
    }
    // Past the budget, one rule still leases: a consumer's lowest unfinished split is
    // always leased (when its consumer is fixed: a ranked job, deterministic order, or
    // a split returned with its consumer). Without it, ranks can deadlock: a survivor's
    // budget full of splits of ranks that wait in an all-reduce for the one rank whose
    // next split is pending, and those splits are acknowledged only once yielded, after
    // that all-reduce (seen: 4 DDP ranks, a worker killed, the lease-ahead full of
    // ranks 0, 1 and 3's splits while rank 2 waited for its split 18). With this rule,
    // every consumer always has its next split on a live worker; a worker holds at most
    // max_outstanding plus one split per consumer.
    std::set<std::string> open;  // consumers with an unfinished split earlier in the scan
    const JobState& job = j;  // (a structured binding cannot be captured before C++20)
    // (Once every consumer is in `open`, nothing more can be: the scan over a busy
    // epoch's leased splits then costs a size comparison each.)
    auto first_of = [&open, &job](const std::string& c) {
      return open.size() < job.consumers.size() && job.HasConsumer(c) && open.insert(c).second;
    };
    // A sweep's lane: a split that another lane of the same content holds, or made, on
    // another live worker is that worker's to lease (it makes the batches once, for
    // both, or serves them from its window); this worker leaves it. The lanes thus place
    // each split together, first come first served; with its maker gone, anywhere.
    const std::vector<std::string>* lanes = j.content_key != 0 ? &state.Lanes(j.content_key) : nullptr;
    if (lanes != nullptr && lanes->size() < 2) lanes = nullptr;
    const std::string& lane = name;  // (a structured binding cannot be captured before C++20)
    auto held_elsewhere = [&](uint64_t epoch, int64_t s) {
      for (const std::string& other : *lanes) {
        if (other == lane) continue;
        const JobState* o = state.job(other);
        if (o == nullptr) continue;
        auto oe = o->epochs.find(epoch);
        if (oe == o->epochs.end()) {
          oe = o->completed.find(epoch);  // a lane one epoch ahead, just past it
          if (oe == o->completed.end()) continue;
        }
        const EpochState& e = oe->second;
        if (size_t(s) >= e.status.size()) continue;
        const std::string* holder = nullptr;
        if (e.status[size_t(s)] == SplitStatus::kLeased) holder = &e.worker[size_t(s)];
        else if (e.status[size_t(s)] == SplitStatus::kDone && size_t(s) < e.made_by.size()) holder = &e.made_by[size_t(s)];
        if (holder == nullptr || holder->empty()) continue;
        if (*holder == worker) return false;  // here already: this worker takes it too
        auto hw = state.workers().find(*holder);
        if (hw != state.workers().end() && !hw->second.draining) return true;
      }
      return false;
    };
    size_t before = 0;  // the worker's leases before the candidate
    int leased = 0;     // leased in this decision
    bool full = false;
    for (uint64_t epoch = j.first_open; epoch <= last; ++epoch) {
      if (j.spec.PastEnd(epoch)) break;
      if (full && open.size() >= j.consumers.size()) break;  // every consumer's next split is placed
      auto et = j.epochs.find(epoch);
      int64_t from = 0;
      if (et != j.epochs.end()) {
        const EpochState& e = et->second;
        while (e.scan_from < e.status.size() && e.status[e.scan_from] == SplitStatus::kDone) ++e.scan_from;
        from = int64_t(e.scan_from);
        // Of one consumer: every split in [scan_from, pending_from) is leased (the first
        // one is: not done) or done, and all the scan would do there is note that the
        // consumer has a split in flight (one consumer: the first leased split says it)
        // and count this worker's own leases. Jump, doing just that.
        const size_t jump = std::max(e.scan_from, std::min(e.pending_from, e.status.size()));
        if (j.consumers.size() == 1 && jump > e.scan_from) {
          first_of(e.consumer[e.scan_from]);
          while (before < mine.size() && mine[before] < SplitId{epoch, int64_t(jump)}) ++before;
          from = int64_t(jump);
        }
      }
      bool pending_seen = false;  // the scan from `from` has met a pending split
      // Free splits of a shared job have no fixed consumer: past the last assigned
      // split, a full decision has nothing left to find.
      const bool free_splits_unfixed = !j.spec.ranked() && j.spec.ordering != Ordering::kDeterministic;
      const int64_t assigned_end = et == j.epochs.end() ? 0 : int64_t(et->second.assigned_end);
      for (int64_t s = from; s < per_epoch; ++s) {
        while (before < mine.size() && mine[before] < SplitId{epoch, s}) ++before;
        if (!full && (leased >= budget || int(before) + leased >= policy.max_outstanding)) full = true;
        if (full && open.size() >= j.consumers.size()) break;
        if (full && free_splits_unfixed && s >= assigned_end) break;
        std::string consumer;
        if (et != j.epochs.end()) {
          const SplitStatus st = et->second.status[size_t(s)];
          if (st == SplitStatus::kDone) continue;
          if (st == SplitStatus::kLeased) {
            first_of(et->second.consumer[size_t(s)]);
            continue;
          }
          if (!pending_seen) {
            pending_seen = true;
            et->second.pending_from = std::max(et->second.pending_from, size_t(s));  // none before it
          }
          consumer = et->second.consumer[size_t(s)];
        }
        if (lanes != nullptr && held_elsewhere(epoch, s)) {
          if (!consumer.empty()) first_of(consumer);  // its next split is placed, there
          // Deterministic order (of consumers that join freely) needs a consumer's
          // splits assigned in split order (client/ledger.h): none past this one until
          // its worker has taken it.
          if (j.spec.ordering == Ordering::kDeterministic && !j.spec.ranked()) break;
          continue;
        }
        bool fixed = !consumer.empty();  // the split's consumer does not depend on who leases it
        if (consumer.empty() && j.spec.ranked()) {
          // A ranked job's split belongs to its rank, and waits until that rank joins.
          consumer = RankConsumer(j.spec.SplitRank(s));
          if (!j.HasConsumer(consumer)) continue;
          fixed = true;
        } else if (consumer.empty() && self.ServesOnly() && j.spec.ordering != Ordering::kDeterministic) {
          consumer = self.serves_consumer;  // a shared job's free split: for its trainer
        } else if (consumer.empty()) {
          if (j.spec.ordering == Ordering::kDeterministic) {
            consumer = j.consumers[size_t(s) % j.consumers.size()];
            fixed = true;
          } else if (j.consumers.size() == 1) {
            consumer = j.consumers[0];
          } else {
            count_in_flight();
            consumer = std::min_element(in_flight.begin(), in_flight.end(), [](const auto& a, const auto& b) {
                         return a.second < b.second;
                       })->first;
          }
        }
        const bool next_of_its_consumer = fixed && first_of(consumer);
        if (full && !next_of_its_consumer) continue;
        if (self.ServesOnly() && consumer != self.serves_consumer) continue;  // another trainer's
        ++picked[consumer];
        if (counted) ++in_flight[consumer];
        lease.splits.push_back({{epoch, s}, consumer});
        ++leased;
      }
      // Within the budget, the loop goes on to the next epoch only once every pending
      // split of this one is leased.
    }
    if (!lease.splits.empty()) out.push_back(std::move(lease));
  }
  return out;
}

std::vector<RemoveWorker> DecideDeadWorkers(const DispatcherState& state,
                                            const std::unordered_map<std::string, int64_t>& last_seen_ms, int64_t now_ms,
                                            int64_t timeout_ms) {
  std::vector<RemoveWorker> out;
  for (const auto& [id, w] : state.workers()) {
    auto it = last_seen_ms.find(id);
    if (it != last_seen_ms.end() && now_ms - it->second > timeout_ms) out.push_back({id});
  }
  return out;
}

std::vector<RemoveConsumer> DecideGoneConsumers(
    const DispatcherState& state, const std::map<std::pair<std::string, std::string>, int64_t>& last_seen_ms,
    int64_t now_ms, int64_t timeout_ms) {
  std::vector<RemoveConsumer> out;
  for (const auto& [name, j] : state.jobs()) {
    if (j.finished() || j.spec.ranked() || j.spec.mode != ProcessingMode::kDistributedEpoch) continue;
    for (const std::string& c : j.consumers) {
      auto it = last_seen_ms.find({name, c});
      if (it != last_seen_ms.end() && now_ms - it->second > timeout_ms) out.push_back({name, c});
    }
  }
  return out;
}

std::vector<RemoveJob> DecideGarbage(const DispatcherState& state, const std::set<std::string>& jobs_in_use) {
  std::vector<RemoveJob> out;
  for (const auto& [name, j] : state.jobs()) {
    // parallel_epochs jobs have no splits to finish: they end with their consumers.
    const bool done = j.finished() || j.spec.mode == ProcessingMode::kParallelEpochs;
    if (done && !jobs_in_use.count(name)) out.push_back({name});
  }
  return out;
}

bool AllJobsFinished(const DispatcherState& state) {
  if (state.jobs().empty()) return false;
  for (const auto& [name, j] : state.jobs()) {
    if (!j.finished()) return false;
  }
  return true;
}

}  // namespace ferry::dispatch
