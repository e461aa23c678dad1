#include "client/ledger.h"

#include <algorithm>

namespace ferry::client {

void Ledger::Restore(const IteratorState& st) {
  first_open_ = st.first_open;
  done_ = st.done;
  partial_ = st.partial;
}

IteratorState Ledger::Save() const {
  IteratorState st;
  st.first_open = first_open_;
  for (const SplitId& k : done_) {
    if (k.epoch >= first_open_) st.done.insert(k);
  }
  for (const auto& [k, batches] : partial_) {
    if (k.epoch >= first_open_) st.partial[k] = batches;
  }
  return st;
}

void Ledger::SetRanked(const JobSpec* job, int64_t rank, uint64_t first_epoch) {
  rank_ = rank;
  if (job != nullptr) first_open_ = std::max(first_open_, job->first_epoch);  // the job starts there
  cursor_ = std::max(first_epoch, first_open_);
  if (job == nullptr) return;
  job_ = *job;
  per_epoch_ = job->RankBatches();
  // What a restored state says was yielded already.
  yielded_.clear();
  for (const SplitId& k : done_) {
    const auto [first, end] = job->SplitBatches(k.split);
    yielded_[k.epoch] += end - first;
  }
  for (const auto& [k, batches] : partial_) yielded_[k.epoch] += int64_t(batches.size());
  AdvanceCursor();
}

void Ledger::AdvanceCursor() {
  if (cursor_ < first_open_) cursor_ = first_open_;
  while (per_epoch_ > 0) {
    auto it = yielded_.find(cursor_);
    if (it == yielded_.end() || it->second < per_epoch_) return;
    yielded_.erase(it);
    ++cursor_;
  }
}

Ledger::Arrival Ledger::Arrive(Batch batch, size_t stream) {
  if (batch.rows() == 0 && mode_ != Mode::kDeterministic && !ranked()) {
    // Nothing to yield (every file of it was bad): it still counts towards its split,
    // and its credit goes back at once to keep the window full.
    if (accounting() && !Yielded(batch.provenance)) Account(batch.provenance);
    return Arrival::kAccounted;
  }
  const bool held = accounting() && !Yielded(batch.provenance) && MustWait(batch.provenance);
  ready_.push_back({std::move(batch), stream, held});
  return held ? Arrival::kHeld : Arrival::kQueued;
}

bool Ledger::MustWait(const BatchProvenance& p) const {
  if (ranked()) {
    if (p.epoch != cursor_) return true;
    if (mode_ != Mode::kDeterministic || !job_) return false;
    const auto next = NextRankedInOrder();
    return !(next && p.split == next->first.split && p.batch_in_split == next->second);
  }
  // A shared job's consumer yields an epoch once the job has closed the one before (so
  // that the first batch of an epoch says the last one ended).
  if (mode_ == Mode::kArrival) return p.epoch > first_open_;
  const auto next = NextInOrder();
  return !(next && p.epoch == next->first.epoch && p.split == next->first.split && p.batch_in_split == next->second);
}

bool Ledger::Yielded(const BatchProvenance& p) const {
  if (p.epoch < first_open_ || done_.count({p.epoch, p.split})) return true;
  auto q = partial_.find({p.epoch, p.split});
  return q != partial_.end() && q->second.count(p.batch_in_split) > 0;
}

void Ledger::Account(const BatchProvenance& p) {
  if (ranked()) {
    ++yielded_[p.epoch];
    AdvanceCursor();
  }
  if (!accounting()) return;
  const SplitId k{p.epoch, p.split};
  std::set<int64_t>& yielded = partial_[k];
  yielded.insert(p.batch_in_split);
  if (int64_t(yielded.size()) >= p.batches_in_split) {
    partial_.erase(k);
    done_.insert(k);
    to_ack_.push_back(k);
  }
}

int64_t Ledger::FirstUnyielded(const SplitId& k) const {
  int64_t b = 0;
  if (auto p = partial_.find(k); p != partial_.end()) {
    while (p->second.count(b)) ++b;
  }
  return b;
}

std::optional<std::pair<SplitId, int64_t>> Ledger::NextInOrder() const {
  for (uint64_t epoch = StatusEpoch();; ++epoch) {
    auto it = my_splits_.find(epoch);
    if (it == my_splits_.end()) return std::nullopt;
    for (int64_t s : it->second.first) {
      const SplitId k{epoch, s};
      if (done_.count(k)) continue;
      return std::make_pair(k, FirstUnyielded(k));
    }
    if (!it->second.second) return std::nullopt;  // more of my splits may yet be assigned
  }
}

std::optional<std::pair<SplitId, int64_t>> Ledger::NextRankedInOrder() const {
  const int64_t w = job_->num_consumers;
  for (int64_t s = rank_; s < job_->SplitsPerEpoch(); s += w) {
    const SplitId k{cursor_, s};
    if (done_.count(k)) continue;
    return std::make_pair(k, FirstUnyielded(k));
  }
  return std::nullopt;
}

std::optional<size_t> Ledger::Pick() const {
  if (ready_.empty()) return std::nullopt;
  if (ranked()) {
    const bool in_order = mode_ == Mode::kDeterministic && job_.has_value();
    const auto next = in_order ? NextRankedInOrder() : std::nullopt;
    for (size_t i = 0; i < ready_.size(); ++i) {
      const BatchProvenance& p = ready_[i].batch.provenance;
      if (accounting() && Yielded(p)) return i;  // a duplicate: drop it whenever
      if (p.epoch != cursor_) continue;          // another epoch's: it waits (or is stale)
      if (!in_order) return i;
      if (next && p.split == next->first.split && p.batch_in_split == next->second) return i;
    }
    return std::nullopt;
  }
  if (mode_ == Mode::kPointToPoint) return size_t(0);
  if (mode_ == Mode::kArrival) {
    for (size_t i = 0; i < ready_.size(); ++i) {
      const BatchProvenance& p = ready_[i].batch.provenance;
      if (Yielded(p) || p.epoch <= first_open_) return i;
    }
    return std::nullopt;
  }
  const auto next = NextInOrder();
  for (size_t i = 0; i < ready_.size(); ++i) {
    const BatchProvenance& p = ready_[i].batch.provenance;
    if (Yielded(p)) return i;  // a duplicate: drop it whenever
    if (next && p.epoch == next->first.epoch && p.split == next->first.split && p.batch_in_split == next->second)
      return i;
  }
  return std::nullopt;
}

const Batch* Ledger::Peek(bool* duplicate) const {
  const std::optional<size_t> pick = Pick();
  if (!pick) return nullptr;
  const Batch& b = ready_[*pick].batch;
  *duplicate = accounting() && Yielded(b.provenance);
  return &b;
}

Ledger::Taken Ledger::Take() {
  const size_t pick = *Pick();
  Taken t;
  t.batch = std::move(ready_[pick].batch);
  t.stream = ready_[pick].stream;
  t.credit = !ready_[pick].credited;
  ready_.erase(ready_.begin() + std::ptrdiff_t(pick));
  if (accounting() && Yielded(t.batch.provenance)) {
    t.duplicate = true;
    ++duplicates_;
    return t;
  }
  // Point to point, a rank learns its share of an epoch from the batches themselves.
  if (ranked() && per_epoch_ == 0) per_epoch_ = t.batch.provenance.batches_in_epoch;
  // A rank's epoch ends with the batch that completes its count, whichever it is.
  if (ranked()) {
    auto y = yielded_.find(t.batch.provenance.epoch);
    t.batch.provenance.last_in_epoch = (y == yielded_.end() ? 0 : y->second) + 1 == per_epoch_;
  }
  Account(t.batch.provenance);
  return t;
}

int64_t Ledger::QueuedFrom(size_t stream) const {
  int64_t n = 0;
  for (const Queued& a : ready_) n += a.stream == stream && !a.credited ? 1 : 0;
  return n;
}

void Ledger::Acked(size_t n) { to_ack_.erase(to_ack_.begin(), to_ack_.begin() + std::ptrdiff_t(std::min(n, to_ack_.size()))); }

void Ledger::OnStatus(uint64_t epoch, const JobStatus& status) {
  if (epoch >= status.first_open) my_splits_[epoch] = {status.my_splits, status.epoch_fully_assigned};
  // Deterministic order moves to the next epoch once every split of mine in this one
  // is known and done.
  if (status.epoch_fully_assigned) {
    const bool all = std::all_of(status.my_splits.begin(), status.my_splits.end(),
                                 [&](int64_t s) { return done_.count({epoch, s}) > 0; });
    if (all && epoch + 1 > order_epoch_) order_epoch_ = epoch + 1;
  }
  OnProgress(status.first_open, status.finished);
}

void Ledger::OnProgress(uint64_t first_open, bool finished) {
  if (first_open > first_open_) {
    first_open_ = first_open;
    for (auto it = yielded_.begin(); it != yielded_.end();) it = it->first < first_open_ ? yielded_.erase(it) : std::next(it);
    if (ranked()) AdvanceCursor();
    for (auto it = done_.begin(); it != done_.end();) it = it->epoch < first_open_ ? done_.erase(it) : std::next(it);
    for (auto it = partial_.begin(); it != partial_.end();)
      it = it->first.epoch < first_open_ ? partial_.erase(it) : std::next(it);
    for (auto it = my_splits_.begin(); it != my_splits_.end();)
      it = it->first < first_open_ ? my_splits_.erase(it) : std::next(it);
  }
  if (finished) finished_ = true;
}

}  // namespace ferry::client
