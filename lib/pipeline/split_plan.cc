#include "pipeline/split_plan.h"

#include <algorithm>

#include "data/mixture.h"
#include "data/permutation.h"

namespace ferry {

std::vector<int64_t> EpochOrder(const JobSpec& job, uint64_t epoch) {
  std::vector<int64_t> perm =
      job.mixed() ? MixtureOrder(job, epoch) : EpochPermutation(job.num_samples, job.seed, epoch, job.shuffle);
  if (!job.remainder()) return perm;
  std::vector<int64_t> rest;
  rest.reserve(size_t(std::max<int64_t>(0, job.epoch_samples())));
  auto t = job.taken.begin();
  for (int64_t p = 0; p < int64_t(perm.size()); ++p) {
    while (t != job.taken.end() && t->second <= p) ++t;
    if (t != job.taken.end() && t->first <= p) continue;
    rest.push_back(perm[size_t(p)]);
  }
  return rest;
}

BatchPlan BatchPlanOf(const JobSpec& job, const std::vector<int64_t>& perm, uint64_t epoch, int64_t rank, int64_t j) {
  const int64_t per_epoch = job.ranked() ? job.RankBatches() : job.BatchesPerEpoch();
  const auto [lo, hi] = job.BatchPositions(job.GlobalBatch(rank, j));
  BatchPlan p;
  p.epoch = epoch;
  p.batch_in_epoch = j;
  p.batches_in_epoch = per_epoch;
  p.last_in_epoch = j + 1 == per_epoch;
  p.samples.assign(perm.begin() + lo, perm.begin() + hi);
  // Ranks' batches are all full-sized under drop and pad; a ranked job of one rank may
  // keep a short last batch.
  p.pad = job.last_batch == LastBatch::kPad;
  p.rows = p.pad ? job.batch_size : hi - lo;
  return p;
}

std::vector<BatchPlan> SplitPlans(const JobSpec& job, const std::vector<int64_t>& perm, uint64_t epoch, int64_t s) {
  const auto [first, end] = job.SplitBatches(s);
  const int64_t rank = job.SplitRank(s);
  std::vector<BatchPlan> out;
  for (int64_t j = first; j < end; ++j) {
    BatchPlan p = BatchPlanOf(job, perm, epoch, rank, j);
    p.split = s;
    p.batch_in_split = j - first;
    p.batches_in_split = end - first;
    if (job.bad_samples == BadSamples::kRefill) {
      p.refill_group = s;  // the same groups as SetRefillGroup's in-process
      p.last_in_group = j + 1 == end;
    }
    out.push_back(std::move(p));
  }
  return out;
}

std::optional<BatchPlan> RankPlan::Next() {
  const int64_t per_epoch = job_.RankBatches();
  if (per_epoch == 0) return std::nullopt;
  for (;;) {
    if (job_.epochs > 0 && epoch_offset_ >= uint64_t(job_.epochs)) return std::nullopt;
    const uint64_t epoch = shard_.first_epoch + epoch_offset_;
    if (next_ < 0) {
      perm_ = EpochOrder(job_, epoch);
      next_ = shard_.shard_index;
    }
    if (next_ < per_epoch) {
      const int64_t j = next_;
      next_ += shard_.num_shards;
      BatchPlan p = BatchPlanOf(job_, perm_, epoch, rank_, j);
      const int64_t k = shard_.num_shards;
      SetRefillGroup(job_, (j - shard_.shard_index) / k, (per_epoch - shard_.shard_index + k - 1) / k, &p);
      return p;
    }
    next_ = -1;
    ++epoch_offset_;
  }
}

size_t SplitFeed::SetHeld(const std::set<SplitId>& held) {
  MutexLock lock(&mu_);
  for (const SplitId& k : held) {
    if (!held_.count(k)) todo_.insert(k);
  }
  for (auto it = todo_.begin(); it != todo_.end();) it = held.count(*it) ? std::next(it) : todo_.erase(it);
  held_ = held;
  cv_.SignalAll();
  return held_.size();
}

size_t SplitFeed::held() const {
  MutexLock lock(&mu_);
  return held_.size();
}

uint64_t SplitFeed::Attach() {
  MutexLock lock(&mu_);
  todo_ = held_;
  ++generation_;
  cv_.SignalAll();
  return generation_;
}

std::optional<SplitId> SplitFeed::Take(uint64_t generation, const std::atomic<bool>* cancelled) {
  bool starved;
  {
    MutexLock lock(&mu_);
    starved = todo_.empty();
  }
  if (starved && starved_) starved_();  // without the lock: it takes the link's
  MutexLock lock(&mu_);
  while (!cancelled->load() && generation == generation_ && todo_.empty()) cv_.Wait(&mu_);
  if (cancelled->load() || generation != generation_) return std::nullopt;
  SplitId k = *todo_.begin();
  todo_.erase(todo_.begin());
  return k;
}

void SplitFeed::Wake() {
  MutexLock lock(&mu_);
  cv_.SignalAll();
}

std::optional<BatchPlan> SplitPlan::Next() {
  while (pending_.empty()) {
    std::optional<SplitId> k = feed_->Take(generation_, &cancelled_);
    if (!k) return std::nullopt;
    auto it = perms_.find(k->epoch);
    if (it == perms_.end()) {
      it = perms_.emplace(k->epoch, EpochOrder(job_, k->epoch)).first;
      if (perms_.size() > 2) perms_.erase(perms_.begin() == it ? std::next(perms_.begin()) : perms_.begin());
    }
    pending_ = SplitPlans(job_, it->second, k->epoch, k->split);
    std::reverse(pending_.begin(), pending_.end());
  }
  BatchPlan p = std::move(pending_.back());
  pending_.pop_back();
  return p;
}

void SplitPlan::Cancel() {
  cancelled_ = true;
  feed_->Wake();
}

}  // namespace ferry
