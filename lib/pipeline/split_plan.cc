#include "pipeline/split_plan.h"

#include <algorithm>

#include "data/permutation.h"

namespace ferry {

std::vector<BatchPlan> SplitPlans(const JobSpec& job, const std::vector<int64_t>& perm, uint64_t epoch, int64_t s) {
  const int64_t per_epoch = job.BatchesPerEpoch();
  const auto [first, end] = job.SplitBatches(s);
  std::vector<BatchPlan> out;
  for (int64_t b = first; b < end; ++b) {
    BatchPlan p;
    p.epoch = epoch;
    p.batch_in_epoch = b;
    p.last_in_epoch = b + 1 == per_epoch;
    p.split = s;
    p.batch_in_split = b - first;
    p.batches_in_split = end - first;
    const int64_t lo = b * job.batch_size, hi = std::min<int64_t>(lo + job.batch_size, int64_t(perm.size()));
    p.samples.assign(perm.begin() + lo, perm.begin() + hi);
    p.pad = job.last_batch == LastBatch::kPad;
    p.rows = p.pad ? job.batch_size : hi - lo;
    out.push_back(std::move(p));
  }
  return out;
}

size_t SplitFeed::SetHeld(const std::set<SplitKey>& held) {
  MutexLock lock(&mu_);
  for (const SplitKey& k : held) {
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

std::optional<SplitKey> SplitFeed::Take(uint64_t generation, const std::atomic<bool>* cancelled) {
  bool starved;
  {
    MutexLock lock(&mu_);
    starved = todo_.empty();
  }
  if (starved && starved_) starved_();  // without the lock: it takes the link's
  MutexLock lock(&mu_);
  while (!cancelled->load() && generation == generation_ && todo_.empty()) cv_.Wait(&mu_);
  if (cancelled->load() || generation != generation_) return std::nullopt;
  SplitKey k = *todo_.begin();
  todo_.erase(todo_.begin());
  return k;
}

void SplitFeed::Wake() {
  MutexLock lock(&mu_);
  cv_.SignalAll();
}

std::optional<BatchPlan> SplitPlan::Next() {
  while (pending_.empty()) {
    std::optional<SplitKey> k = feed_->Take(generation_, &cancelled_);
    if (!k) return std::nullopt;
    auto it = perms_.find(k->epoch);
    if (it == perms_.end()) {
      it = perms_.emplace(k->epoch, EpochPermutation(job_.num_samples, job_.seed, k->epoch, job_.shuffle)).first;
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
