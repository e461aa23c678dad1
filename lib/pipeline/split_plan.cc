#include "pipeline/split_plan.h"

#include <algorithm>

#include "data/permutation.h"

namespace ferry {

int64_t SplitGeometry::BatchesPerEpoch() const {
  if (batch_size <= 0) return 0;
  return num_samples / batch_size + ((num_samples % batch_size) != 0 && last_batch != LastBatch::kDrop ? 1 : 0);
}

int64_t SplitGeometry::SplitsPerEpoch() const {
  const int64_t k = std::max<int64_t>(1, batches_per_split);
  return (BatchesPerEpoch() + k - 1) / k;
}

std::vector<BatchPlan> SplitGeometry::Plans(const std::vector<int64_t>& perm, uint64_t epoch, int64_t s) const {
  const int64_t k = std::max<int64_t>(1, batches_per_split);
  const int64_t per_epoch = BatchesPerEpoch();
  const int64_t first = s * k, end = std::min(first + k, per_epoch);
  std::vector<BatchPlan> out;
  for (int64_t b = first; b < end; ++b) {
    BatchPlan p;
    p.epoch = epoch;
    p.batch_in_epoch = b;
    p.last_in_epoch = b + 1 == per_epoch;
    p.split = s;
    p.batch_in_split = b - first;
    p.batches_in_split = end - first;
    const int64_t lo = b * batch_size, hi = std::min<int64_t>(lo + batch_size, int64_t(perm.size()));
    p.samples.assign(perm.begin() + lo, perm.begin() + hi);
    p.pad = last_batch == LastBatch::kPad;
    p.rows = p.pad ? batch_size : hi - lo;
    out.push_back(std::move(p));
  }
  return out;
}

size_t SplitFeed::SetHeld(const std::set<SplitKey>& held) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const SplitKey& k : held) {
    if (!held_.count(k)) todo_.insert(k);
  }
  for (auto it = todo_.begin(); it != todo_.end();) it = held.count(*it) ? std::next(it) : todo_.erase(it);
  held_ = held;
  cv_.notify_all();
  return held_.size();
}

size_t SplitFeed::held() const {
  std::lock_guard<std::mutex> lock(mu_);
  return held_.size();
}

uint64_t SplitFeed::Attach() {
  std::lock_guard<std::mutex> lock(mu_);
  todo_ = held_;
  ++generation_;
  cv_.notify_all();
  return generation_;
}

std::optional<SplitKey> SplitFeed::Take(uint64_t generation, const std::atomic<bool>* cancelled) {
  std::unique_lock<std::mutex> lock(mu_);
  if (todo_.empty() && starved_) {
    lock.unlock();
    starved_();
    lock.lock();
  }
  cv_.wait(lock, [&] { return cancelled->load() || generation != generation_ || !todo_.empty(); });
  if (cancelled->load() || generation != generation_) return std::nullopt;
  SplitKey k = *todo_.begin();
  todo_.erase(todo_.begin());
  return k;
}

void SplitFeed::Wake() {
  std::lock_guard<std::mutex> lock(mu_);
  cv_.notify_all();
}

std::optional<BatchPlan> SplitPlan::Next() {
  while (pending_.empty()) {
    std::optional<SplitKey> k = feed_->Take(generation_, &cancelled_);
    if (!k) return std::nullopt;
    auto it = perms_.find(k->epoch);
    if (it == perms_.end()) {
      it = perms_.emplace(k->epoch, EpochPermutation(g_.num_samples, g_.seed, k->epoch, g_.shuffle)).first;
      if (perms_.size() > 2) perms_.erase(perms_.begin() == it ? std::next(perms_.begin()) : perms_.begin());
    }
    pending_ = g_.Plans(it->second, k->epoch, k->split);
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
