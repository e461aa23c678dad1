#include "dispatch/state.h"

#include <algorithm>
#include <limits>

namespace ferry::dispatch {

bool JobState::finished() const { return spec.PastEnd(first_open); }

bool JobState::ConsumerStarted(const std::string& c) const {
  if (first_open > spec.first_epoch) return true;
  for (const auto& [epoch, e] : epochs) {
    for (size_t s = 0; s < e.status.size(); ++s) {
      if (e.status[s] == SplitStatus::kDone && e.consumer[s] == c) return true;
    }
  }
  return false;
}

bool JobState::HasConsumer(const std::string& c) const {
  return std::find(consumers.begin(), consumers.end(), c) != consumers.end();
}

const std::vector<std::string>& DispatcherState::Lanes(uint64_t content_key) const {
  static const std::vector<std::string> kNone;
  auto it = lanes_.find(content_key);
  return it == lanes_.end() ? kNone : it->second;
}

const JobState* DispatcherState::job(const std::string& name) const {
  auto it = jobs_.find(name);
  return it == jobs_.end() ? nullptr : &it->second;
}

namespace {

EpochState* OpenEpoch(JobState& j, uint64_t epoch) {
  if (epoch < j.first_open) return nullptr;
  if (j.spec.PastEnd(epoch)) return nullptr;
  auto it = j.epochs.find(epoch);
  if (it != j.epochs.end()) return &it->second;
  EpochState e;
  const size_t n = size_t(j.spec.SplitsPerEpoch());
  e.status.assign(n, SplitStatus::kPending);
  e.worker.assign(n, std::string());
  e.consumer.assign(n, std::string());
  return &j.epochs.emplace(epoch, std::move(e)).first->second;
}


// Why `consumer` may not hold split `split` of `j` (a ranked job's split is its
// rank's, whatever the update), or an empty string.
std::string NotItsRank(const JobState& j, int64_t split, const std::string& consumer) {
  if (!j.spec.ranked() || RankConsumer(j.spec.SplitRank(split)) == consumer) return {};
  return "split " + std::to_string(split) + " belongs to " + RankConsumer(j.spec.SplitRank(split)) + ", not " +
         consumer;
}

}  // namespace

void DispatcherState::Unlease(const std::string& job, uint64_t epoch, EpochState& e, size_t s) {
  auto wt = leased_by_worker_.find(e.worker[s]);
  if (wt != leased_by_worker_.end()) {
    auto jt = wt->second.find(job);
    if (jt != wt->second.end()) {
      jt->second.erase(SplitId{epoch, int64_t(s)});
      if (jt->second.empty()) wt->second.erase(jt);
    }
    if (wt->second.empty()) leased_by_worker_.erase(wt);
  }
  e.worker[s].clear();
  --e.leased;
}

void DispatcherState::ReturnLeases(JobState& j, const std::string& worker) {
  auto wt = leased_by_worker_.find(worker);
  if (wt == leased_by_worker_.end()) return;
  auto jt = wt->second.find(j.name);
  if (jt == wt->second.end()) return;
  const std::set<SplitId> held = std::move(jt->second);
  wt->second.erase(jt);
  if (wt->second.empty()) leased_by_worker_.erase(wt);
  for (const SplitId& r : held) {
    EpochState& e = j.epochs.at(r.epoch);
    const size_t s = size_t(r.split);
    e.status[s] = SplitStatus::kPending;
    e.pending_from = std::min(e.pending_from, s);
    e.worker[s].clear();
    --e.leased;
  }
}

void DispatcherState::ForgetLeases(const JobState& j, std::optional<uint64_t> before_epoch) {
  for (auto& [worker, jobs] : leased_by_worker_) {
    auto jt = jobs.find(j.name);
    if (jt == jobs.end()) continue;
    if (before_epoch) {
      jt->second.erase(jt->second.begin(),
                       jt->second.lower_bound(SplitId{*before_epoch, std::numeric_limits<int64_t>::min()}));
    } else {
      jt->second.clear();
    }
    if (jt->second.empty()) jobs.erase(jt);
  }
  for (auto it = leased_by_worker_.begin(); it != leased_by_worker_.end();)
    it = it->second.empty() ? leased_by_worker_.erase(it) : std::next(it);
}

void DispatcherState::Advance(JobState& j) {
  for (;;) {
    auto it = j.epochs.find(j.first_open);
    if (it == j.epochs.end() || it->second.done < int64_t(it->second.status.size())) return;
    j.completed.clear();
    // (An epoch of no splits has no owners to keep, and nothing a restore could reopen.)
    if (!it->second.status.empty()) j.completed.emplace(it->first, std::move(it->second));
    j.epochs.erase(it);
    ++j.first_open;
  }
}

Status DispatcherState::ApplyLease(const LeaseSplits& u) {
  auto jt = jobs_.find(u.job);
  if (jt == jobs_.end()) return Status::NotFound("lease: no job " + u.job);
  auto wt = workers_.find(u.worker);
  if (wt == workers_.end()) return Status::NotFound("lease: no worker " + u.worker);
  if (wt->second.draining) return Status::FailedPrecondition("lease: worker " + u.worker + " is draining");
  JobState& j = jt->second;
  // Validate everything first: an update applies whole or not at all.
  std::set<SplitId> seen;
  for (const LeasedSplit& l : u.splits) {
    if (!j.HasConsumer(l.consumer)) return Status::NotFound("lease: no consumer " + l.consumer + " in " + u.job);
    if (l.ref.epoch < j.first_open || j.spec.PastEnd(l.ref.epoch))
      return Status::OutOfRange("lease: epoch out of range");
    if (l.ref.split < 0 || l.ref.split >= j.spec.SplitsPerEpoch()) return Status::OutOfRange("lease: split out of range");
    if (!seen.insert(l.ref).second) return Status::InvalidArgument("lease: split listed twice");
    if (std::string why = NotItsRank(j, l.ref.split, l.consumer); !why.empty())
      return Status::FailedPrecondition("lease: " + why);
    auto et = j.epochs.find(l.ref.epoch);
    if (et != j.epochs.end()) {
      const size_t s = size_t(l.ref.split);
      if (et->second.status[s] != SplitStatus::kPending) return Status::FailedPrecondition("lease: split not pending");
      if (!et->second.consumer[s].empty() && et->second.consumer[s] != l.consumer)
        return Status::FailedPrecondition("lease: split belongs to another consumer");
    }
  }
  if (u.splits.empty()) return Status::OK();
  std::set<SplitId>& held = leased_by_worker_[u.worker][u.job];
  for (const LeasedSplit& l : u.splits) {
    EpochState* e = OpenEpoch(j, l.ref.epoch);
    const size_t s = size_t(l.ref.split);
    e->status[s] = SplitStatus::kLeased;
    e->worker[s] = u.worker;
    e->Assign(s, l.consumer);
    ++e->leased;
    held.insert(held.end(), l.ref);  // (a decision's splits come in order: the hint is usually right)
  }
  return Status::OK();
}

Status DispatcherState::ApplyAck(const AckSplits& u) {
  auto jt = jobs_.find(u.job);
  if (jt == jobs_.end()) return Status::NotFound("ack: no job " + u.job);
  JobState& j = jt->second;
  if (!j.HasConsumer(u.consumer))
    return Status::FailedPrecondition("ack: " + u.consumer + " is not a consumer of job " + u.job +
                                      " (declared gone after the consumer timeout?)");
  for (const SplitId& r : u.splits) {
    if (r.split < 0 || r.split >= j.spec.SplitsPerEpoch()) return Status::OutOfRange("ack: split out of range");
    if (j.spec.PastEnd(r.epoch)) return Status::OutOfRange("ack: epoch out of range");
    // (A consumer's ack of an epoch past the next is refused before it gets here, by
    // Dispatcher::AckSplits. A snapshot may hold such acks: a consumer that restored
    // an older state moved first_open back below what another one had done.)
    if (r.epoch < j.first_open) continue;  // already complete: a duplicate ack is harmless
    // A ranked job's split is its rank's, assigned or not yet.
    if (std::string why = NotItsRank(j, r.split, u.consumer); !why.empty())
      return Status::FailedPrecondition("ack: " + why);
    auto et = j.epochs.find(r.epoch);
    if (et != j.epochs.end()) {
      const std::string& owner = et->second.consumer[size_t(r.split)];
      if (!owner.empty() && owner != u.consumer) return Status::FailedPrecondition("ack: split belongs to another consumer");
    }
  }
  for (const SplitId& r : u.splits) {
    if (r.epoch < j.first_open) continue;
    EpochState* e = OpenEpoch(j, r.epoch);
    const size_t s = size_t(r.split);
    if (e->status[s] == SplitStatus::kDone) continue;
    if (j.content_key != 0 && e->status[s] == SplitStatus::kLeased) {
      if (e->made_by.size() < e->status.size()) e->made_by.resize(e->status.size());
      e->made_by[s] = e->worker[s];
    }
    // A pending split may be acked: its worker died after the consumer had every
    // batch. The consumer is the authority on what it yielded.
    if (e->status[s] == SplitStatus::kLeased) Unlease(j.name, r.epoch, *e, s);
    e->status[s] = SplitStatus::kDone;
    e->worker[s].clear();
    e->Assign(s, u.consumer);
    ++e->done;
  }
  Advance(j);
  return Status::OK();
}

Status DispatcherState::ApplyRestore(const RestoreConsumer& u) {
  auto jt = jobs_.find(u.job);
  if (jt == jobs_.end()) return Status::NotFound("restore: no job " + u.job);
  JobState& j = jt->second;
  if (!j.HasConsumer(u.consumer)) return Status::NotFound("restore: no consumer " + u.consumer + " in " + u.job);
  if (j.spec.epochs > 0 && u.first_open > j.spec.end_epoch())
    return Status::OutOfRange("restore: epoch out of range");
  // Bounded where a peer's request enters (Dispatcher::RestoreConsumer) and here too,
  // since the loop below holds every reopened epoch whole.
  if (u.first_open > kMaxEpoch || u.first_open + kMaxReopenedEpochs < j.first_open)
    return Status::OutOfRange("restore: epoch " + std::to_string(u.first_open) + " is out of range");
  const bool alone = j.consumers.size() == 1;
  // One epoch back is possible with several consumers when its owners are still known.
  const bool reopenable = u.first_open + 1 == j.first_open && j.completed.count(u.first_open) > 0;
  if (u.first_open != j.first_open && !alone && !reopenable)
    return Status::FailedPrecondition(
        "restore: job " + u.job + " is at epoch " + std::to_string(j.first_open) + " and the state at epoch " +
        std::to_string(u.first_open) + "; with several consumers a state can only be restored within the same epoch");
  std::set<SplitId> done(u.done.begin(), u.done.end());
  for (const SplitId& r : done) {
    if (r.split < 0 || r.split >= j.spec.SplitsPerEpoch() || r.epoch < u.first_open ||
        r.epoch > u.first_open + 1 || j.spec.PastEnd(r.epoch))
      return Status::OutOfRange("restore: split out of range");
    if (std::string why = NotItsRank(j, r.split, u.consumer); !why.empty())
      return Status::FailedPrecondition("restore: " + why);
    for (const auto* m : {&j.epochs, reopenable ? &j.completed : nullptr}) {
      if (m == nullptr) continue;
      auto et = m->find(r.epoch);
      if (et != m->end() && !et->second.consumer[size_t(r.split)].empty() &&
          et->second.consumer[size_t(r.split)] != u.consumer)
        return Status::FailedPrecondition("restore: split belongs to another consumer");
    }
  }
  const size_t n = size_t(j.spec.SplitsPerEpoch());
  if (reopenable) {
    // Reopen the last completed epoch as it was: the loop below returns this
    // consumer's splits that the state has not done to pending.
    j.epochs.emplace(u.first_open, std::move(j.completed.at(u.first_open)));
    j.completed.clear();
  } else if (u.first_open < j.first_open) {
    // Reopen completed epochs (this consumer did every split of them; of a ranked
    // job, every split of its rank, and the other ranks, gone, theirs).
    for (uint64_t e = u.first_open; e < j.first_open; ++e) {
      EpochState es;
      es.status.assign(n, SplitStatus::kDone);
      es.worker.assign(n, std::string());
      es.consumer.assign(n, u.consumer);
      es.assigned_end = n;
      if (j.spec.ranked())
        for (size_t s = 0; s < n; ++s) es.consumer[s] = RankConsumer(j.spec.SplitRank(int64_t(s)));
      es.done = int64_t(n);
      j.epochs.emplace(e, std::move(es));
    }
  } else if (u.first_open > j.first_open) {
    // A job created afresh (its predecessor was garbage-collected): skip ahead.
    ForgetLeases(j, u.first_open);
    for (auto e = j.epochs.begin(); e != j.epochs.end();) e = e->first < u.first_open ? j.epochs.erase(e) : std::next(e);
  }
  // The completed epoch is kept only as the one just before first_open (what
  // `reopenable` reads, and what a snapshot writes): moved elsewhere, it goes.
  if (!reopenable && u.first_open != j.first_open) j.completed.clear();
  j.first_open = u.first_open;
  for (auto& [epoch, e] : j.epochs) {
    for (size_t s = 0; s < e.status.size(); ++s) {
      const bool saved_done = done.count(SplitId{epoch, int64_t(s)}) > 0;
      if (saved_done) {
        if (e.status[s] == SplitStatus::kLeased) Unlease(j.name, epoch, e, s);
        if (e.status[s] != SplitStatus::kDone) ++e.done;
        e.status[s] = SplitStatus::kDone;
        e.worker[s].clear();
        e.Assign(s, u.consumer);
      } else if (e.status[s] == SplitStatus::kDone && e.consumer[s] == u.consumer) {
        e.status[s] = SplitStatus::kPending;  // keeps its consumer
        e.scan_from = std::min(e.scan_from, s);
        e.pending_from = std::min(e.pending_from, s);
        --e.done;
      }
    }
  }
  // Saved-done splits of epochs not started yet.
  std::set<uint64_t> started;
  for (const auto& [epoch, e] : j.epochs) started.insert(epoch);
  for (const SplitId& r : done) {
    if (started.count(r.epoch)) continue;
    EpochState* e = OpenEpoch(j, r.epoch);
    if (e == nullptr) continue;
    e->status[size_t(r.split)] = SplitStatus::kDone;
    e->Assign(size_t(r.split), u.consumer);
    ++e->done;
  }
  Advance(j);
  return Status::OK();
}

Status DispatcherState::ApplyRemoveConsumer(const RemoveConsumer& u) {
  auto jt = jobs_.find(u.job);
  if (jt == jobs_.end()) return Status::NotFound("remove consumer: no job " + u.job);
  JobState& j = jt->second;
  auto c = std::find(j.consumers.begin(), j.consumers.end(), u.consumer);
  if (c == j.consumers.end()) return Status::NotFound("remove consumer: no consumer " + u.consumer + " in " + u.job);
  j.consumers.erase(c);
  for (auto& [epoch, e] : j.epochs) {
    for (size_t s = 0; s < e.status.size(); ++s) {
      if (e.status[s] == SplitStatus::kDone || e.consumer[s] != u.consumer) continue;
      if (e.status[s] == SplitStatus::kLeased) Unlease(j.name, epoch, e, s);
      e.status[s] = SplitStatus::kPending;
      e.pending_from = std::min(e.pending_from, s);
      e.worker[s].clear();
      e.consumer[s].clear();
    }
  }
  return Status::OK();
}

Status DispatcherState::ApplyAssign(const AssignSplits& u) {
  auto jt = jobs_.find(u.job);
  if (jt == jobs_.end()) return Status::NotFound("assign: no job " + u.job);
  JobState& j = jt->second;
  if (!j.HasConsumer(u.consumer)) return Status::NotFound("assign: no consumer " + u.consumer + " in " + u.job);
  for (const SplitId& r : u.splits) {
    if (r.split < 0 || r.split >= j.spec.SplitsPerEpoch() || r.epoch < j.first_open ||
        j.spec.PastEnd(r.epoch))
      return Status::OutOfRange("assign: split out of range");
    if (std::string why = NotItsRank(j, r.split, u.consumer); !why.empty())
      return Status::FailedPrecondition("assign: " + why);
    auto et = j.epochs.find(r.epoch);
    if (et != j.epochs.end() && (et->second.status[size_t(r.split)] != SplitStatus::kPending ||
                                 !et->second.consumer[size_t(r.split)].empty()))
      return Status::FailedPrecondition("assign: split not pending and free");
  }
  for (const SplitId& r : u.splits) OpenEpoch(j, r.epoch)->Assign(size_t(r.split), u.consumer);
  return Status::OK();
}

Status DispatcherState::Apply(const Update& u) {
  Status st = std::visit(
      [this](const auto& x) -> Status {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, CreateJob>) {
          const JobSpec& c = x.spec;
          if (x.name.empty()) return Status::InvalidArgument("job needs a name");
          if (c.batch_size <= 0 || c.batches_per_split <= 0) return Status::InvalidArgument("bad batch or split size");
          if (c.num_samples < 0 || c.SplitsPerEpoch() > kMaxSplitsPerEpoch)
            return Status::InvalidArgument("job " + x.name + ": " + std::to_string(c.SplitsPerEpoch()) +
                                           " splits per epoch is more than the dispatcher tracks (" +
                                           std::to_string(kMaxSplitsPerEpoch) + "); use larger batches or splits");
          auto it = jobs_.find(x.name);
          if (it != jobs_.end()) {
            if (it->second.spec == c) return Status::OK();  // idempotent
            return Status::FailedPrecondition("job " + x.name + " exists with a different configuration");
          }
          JobState j;
          j.name = x.name;
          j.spec = c;
          j.first_open = c.first_epoch;
          if (c.sharing == Sharing::kEvery) {
            j.content_key = c.ContentKey();
            lanes_[j.content_key].push_back(x.name);
          }
          jobs_.emplace(x.name, std::move(j));
          return Status::OK();
        } else if constexpr (std::is_same_v<T, AddConsumer>) {
          auto it = jobs_.find(x.job);
          if (it == jobs_.end()) return Status::NotFound("no job " + x.job);
          if (!it->second.HasConsumer(x.consumer)) it->second.consumers.push_back(x.consumer);
          return Status::OK();
        } else if constexpr (std::is_same_v<T, RegisterWorker>) {
          if (x.serves_job.empty() != x.serves_consumer.empty())
            return Status::InvalidArgument("a worker serves a job's consumer, or everyone");
          WorkerState& w = workers_[x.worker];
          w.address = x.address;
          w.draining = false;  // a worker (re)starting: a drain was of its previous process
          w.serves_job = x.serves_job;
          w.serves_consumer = x.serves_consumer;
          return Status::OK();
        } else if constexpr (std::is_same_v<T, RemoveWorker>) {
          if (workers_.erase(x.worker) == 0) return Status::NotFound("no worker " + x.worker);
          for (auto& [name, j] : jobs_) ReturnLeases(j, x.worker);
          leased_by_worker_.erase(x.worker);
          return Status::OK();
        } else if constexpr (std::is_same_v<T, ReturnSplits>) {
          if (!workers_.count(x.worker)) return Status::NotFound("no worker " + x.worker);
          auto jt = jobs_.find(x.job);
          if (jt == jobs_.end()) return Status::NotFound("no job " + x.job);
          ReturnLeases(jt->second, x.worker);
          return Status::OK();
        } else if constexpr (std::is_same_v<T, DrainWorker>) {
          auto it = workers_.find(x.worker);
          if (it == workers_.end()) return Status::NotFound("no worker " + x.worker);
          it->second.draining = true;
          return Status::OK();
        } else if constexpr (std::is_same_v<T, LeaseSplits>) {
          return ApplyLease(x);
        } else if constexpr (std::is_same_v<T, AckSplits>) {
          return ApplyAck(x);
        } else if constexpr (std::is_same_v<T, RemoveJob>) {
          auto it = jobs_.find(x.job);
          if (it == jobs_.end()) return Status::NotFound("no job " + x.job);
          ForgetLeases(it->second, std::nullopt);
          if (it->second.content_key != 0) {
            auto l = lanes_.find(it->second.content_key);
            if (l != lanes_.end()) {
              std::erase(l->second, x.job);
              if (l->second.empty()) lanes_.erase(l);
            }
          }
          jobs_.erase(it);
          return Status::OK();
        } else if constexpr (std::is_same_v<T, RestoreConsumer>) {
          return ApplyRestore(x);
        } else if constexpr (std::is_same_v<T, RemoveConsumer>) {
          return ApplyRemoveConsumer(x);
        } else if constexpr (std::is_same_v<T, AssignSplits>) {
          return ApplyAssign(x);
        } else if constexpr (std::is_same_v<T, JobProgress>) {
          auto it = jobs_.find(x.job);
          if (it == jobs_.end()) return Status::NotFound("no job " + x.job);
          JobState& j = it->second;
          // Back only on a job just created (a snapshot's job restored to before its
          // first epoch), never over splits.
          if (x.first_open < j.first_open && (!j.epochs.empty() || !j.completed.empty()))
            return Status::FailedPrecondition("job progress cannot go back");
          ForgetLeases(j, x.first_open);
          for (auto e = j.epochs.begin(); e != j.epochs.end();) e = e->first < x.first_open ? j.epochs.erase(e) : std::next(e);
          j.completed.clear();
          j.first_open = x.first_open;
          return Status::OK();
        }
      },
      u);
  if (st.ok()) ++applied_;
  return st;
}

std::map<std::string, std::vector<LeasedSplit>> DispatcherState::LeasesOf(const std::string& worker) const {
  std::map<std::string, std::vector<LeasedSplit>> out;
  auto wt = leased_by_worker_.find(worker);
  if (wt == leased_by_worker_.end()) return out;
  for (const auto& [name, refs] : wt->second) {
    const JobState& j = jobs_.at(name);
    std::vector<LeasedSplit>& l = out[name];
    for (const SplitId& r : refs) l.push_back({r, j.epochs.at(r.epoch).consumer[size_t(r.split)]});
  }
  return out;
}

size_t DispatcherState::LeaseCount(const std::string& worker) const {
  size_t n = 0;
  auto wt = leased_by_worker_.find(worker);
  if (wt != leased_by_worker_.end())
    for (const auto& [name, refs] : wt->second) n += refs.size();
  return n;
}

std::string DispatcherState::CheckLeaseIndex() const {
  std::map<std::string, std::map<std::string, std::set<SplitId>>> scanned;
  for (const auto& [name, j] : jobs_) {
    for (const auto& [epoch, e] : j.epochs) {
      int64_t leased = 0;
      for (size_t s = 0; s < e.status.size(); ++s) {
        if (e.status[s] != SplitStatus::kLeased) continue;
        scanned[e.worker[s]][name].insert(SplitId{epoch, int64_t(s)});
        ++leased;
      }
      if (leased != e.leased) return "job " + name + " epoch " + std::to_string(epoch) + ": leased count differs";
      for (size_t s = e.assigned_end; s < e.consumer.size(); ++s)
        if (!e.consumer[s].empty())
          return "job " + name + " epoch " + std::to_string(epoch) + ": split " + std::to_string(s) +
                 " has a consumer past assigned_end";
      for (size_t s = 0; s < std::min(e.scan_from, e.status.size()); ++s)
        if (e.status[s] != SplitStatus::kDone)
          return "job " + name + " epoch " + std::to_string(epoch) + ": scan hint past split " + std::to_string(s);
      for (size_t s = 0; s < std::min(e.pending_from, e.status.size()); ++s)
        if (e.status[s] == SplitStatus::kPending)
          return "job " + name + " epoch " + std::to_string(epoch) + ": pending hint past split " + std::to_string(s);
    }
    for (const auto& [epoch, e] : j.completed) {
      if (e.leased != 0 || e.done != int64_t(e.status.size()))
        return "job " + name + ": completed epoch " + std::to_string(epoch) + " has splits not done";
      if (epoch + 1 != j.first_open)
        return "job " + name + ": completed epoch " + std::to_string(epoch) + " is not the one before first_open " +
               std::to_string(j.first_open);
    }
  }
  if (scanned == leased_by_worker_) return {};
  std::string out = "lease index differs from the splits:";
  for (const auto& [w, jobs] : leased_by_worker_)
    for (const auto& [job, refs] : jobs) out += " index[" + w + "][" + job + "]=" + std::to_string(refs.size());
  for (const auto& [w, jobs] : scanned)
    for (const auto& [job, refs] : jobs) out += " splits[" + w + "][" + job + "]=" + std::to_string(refs.size());
  return out;
}

std::vector<std::pair<int64_t, SplitStatus>> DispatcherState::SplitsOf(const std::string& job,
                                                                       const std::string& consumer,
                                                                       uint64_t epoch) const {
  std::vector<std::pair<int64_t, SplitStatus>> out;
  const JobState* j = this->job(job);
  if (j == nullptr) return out;
  auto it = j->epochs.find(epoch);
  if (it == j->epochs.end()) return out;
  for (size_t s = 0; s < it->second.status.size(); ++s) {
    if (it->second.consumer[s] == consumer) out.push_back({int64_t(s), it->second.status[s]});
  }
  return out;
}

bool DispatcherState::EpochComplete(const std::string& job, uint64_t epoch) const {
  const JobState* j = this->job(job);
  return j != nullptr && epoch < j->first_open;
}

namespace {

// Acks as a snapshot writes them: consumers removed since, that had done splits, come
// back for their acks and go again (after the live ones, whose order deterministic
// ordering depends on).
void WriteAcks(const JobState& j, std::map<std::string, AckSplits> acks, std::vector<Update>& out) {
  std::vector<std::string> removed;
  for (const auto& [c, a] : acks)
    if (!j.HasConsumer(c)) removed.push_back(c);
  for (const std::string& c : removed) out.push_back(AddConsumer{j.name, c});
  for (auto& [c, a] : acks) out.push_back(std::move(a));
  for (const std::string& c : removed) out.push_back(RemoveConsumer{j.name, c});
}

}  // namespace

std::vector<Update> DispatcherState::Snapshot() const {
  std::vector<Update> out;
  std::vector<Update> drains;  // last, so that the leases below apply
  for (const auto& [id, w] : workers_) {
    out.push_back(RegisterWorker{id, w.address, w.serves_job, w.serves_consumer});
    if (w.draining) drains.push_back(DrainWorker{id});
  }
  for (const auto& [name, j] : jobs_) {
    out.push_back(CreateJob{j.name, j.spec});
    for (const std::string& c : j.consumers) out.push_back(AddConsumer{name, c});
    // CreateJob opens the job at its first epoch; a consumer may have restored it
    // to an earlier one.
    if (!j.completed.empty()) {
      // The epoch completed last, with its owners: a consumer of a shared job may still
      // restore a state saved in it (ApplyRestore's `reopenable`). Written as that
      // epoch opened and acked by its owners, which Advance completes as it did live.
      // Without it, a restore journaled after a compaction was refused on replay, and
      // the dispatcher could not reopen its work dir (found by the control-plane fuzzer).
      const auto& [epoch, e] = *j.completed.begin();
      out.push_back(JobProgress{name, epoch});
      std::map<std::string, AckSplits> owners;
      for (size_t s = 0; s < e.consumer.size(); ++s) {
        AckSplits& a = owners[e.consumer[s]];
        a.job = name;
        a.consumer = e.consumer[s];
        a.splits.push_back(SplitId{epoch, int64_t(s)});
      }
      WriteAcks(j, std::move(owners), out);
    } else if (j.first_open != j.spec.first_epoch) {
      out.push_back(JobProgress{name, j.first_open});
    }
    std::map<std::string, AckSplits> acks;
    std::map<std::string, AssignSplits> owned;
    std::map<std::string, LeaseSplits> leases;
    // The entry of the previous split's consumer or worker, which is mostly this one's:
    // a map lookup per split was most of a thousand jobs' snapshot (Journal takes it on
    // the deciding thread).
    const std::string *ack_key = nullptr, *own_key = nullptr, *lease_key = nullptr;
    AckSplits* ack = nullptr;
    AssignSplits* own = nullptr;
    LeaseSplits* lease = nullptr;
    for (const auto& [epoch, e] : j.epochs) {
      for (size_t s = 0; s < e.status.size(); ++s) {
        const SplitId ref{epoch, int64_t(s)};
        if (e.status[s] == SplitStatus::kDone) {
          if (ack == nullptr || *ack_key != e.consumer[s]) {
            ack_key = &e.consumer[s];
            ack = &acks[e.consumer[s]];
            ack->job = name;
            ack->consumer = e.consumer[s];
          }
          ack->splits.push_back(ref);
        } else if (e.status[s] == SplitStatus::kLeased) {
          if (lease == nullptr || *lease_key != e.worker[s]) {
            lease_key = &e.worker[s];
            lease = &leases[e.worker[s]];
            lease->job = name;
            lease->worker = e.worker[s];
          }
          lease->splits.push_back({ref, e.consumer[s]});
        } else if (!e.consumer[s].empty()) {
          // Pending and already its consumer's (its worker died): written, or after
          // a restart it could go to another consumer, which would repeat its batches.
          if (own == nullptr || *own_key != e.consumer[s]) {
            own_key = &e.consumer[s];
            own = &owned[e.consumer[s]];
            own->job = name;
            own->consumer = e.consumer[s];
          }
          own->splits.push_back(ref);
        }
      }
    }
    WriteAcks(j, std::move(acks), out);
    for (auto& [c, a] : owned) out.push_back(std::move(a));
    for (auto& [w, l] : leases) {
      // A draining worker takes no new leases, but keeps those it holds: restore them
      // before the drain flag would refuse them.
      out.push_back(std::move(l));
    }
  }
  // Drain flags go last so that the leases above apply.
  for (Update& d : drains) out.push_back(std::move(d));
  return out;
}

std::string DispatcherState::DebugString() const {
  std::string out;
  for (const auto& [id, w] : workers_)
    out += "W " + id + " " + w.address + (w.draining ? " d" : "") + " " + w.serves_job + " " + w.serves_consumer + "\n";
  for (const auto& [name, j] : jobs_) {
    out += "J " + name + " " + std::to_string(j.first_open) + "\n";
    for (const auto& c : j.consumers) out += " C " + c + "\n";
    for (const auto& [e, st] : j.epochs) {
      // An epoch none of whose splits is leased, done or assigned is the same as one not
      // started (every rule reads both alike), and a snapshot does not write it.
      const bool untouched = !st.status.empty() && st.done == 0 && st.leased == 0 &&
                             std::all_of(st.consumer.begin(), st.consumer.end(), [](const std::string& c) { return c.empty(); });
      if (untouched) continue;
      out += " E " + std::to_string(e) + " done " + std::to_string(st.done) + " leased " + std::to_string(st.leased) + "\n";
      for (size_t i = 0; i < st.status.size(); ++i)
        out += " S " + std::to_string(e) + "/" + std::to_string(i) + " " + std::to_string(int(st.status[i])) + " " +
               st.worker[i] + " " + st.consumer[i] + "\n";
    }
    for (const auto& [e, st] : j.completed) {
      out += " K " + std::to_string(e);
      for (const std::string& c : st.consumer) out += " " + c;
      out += "\n";
    }
  }
  return out;
}

}  // namespace ferry::dispatch
