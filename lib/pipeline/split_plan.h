// Dynamic sharding on a worker: the splits the dispatcher leased to it, turned into
// batch plans for a BatchProducer.
//
// Glossary (see lib/dispatch/state.h for the dispatcher's side)
//   split      batches [s*k, min((s+1)*k, B)) of epoch e's batch order, k batches per
//              split, B batches per epoch; batch b covers positions [b*bs, (b+1)*bs)
//              of the epoch permutation.
//   held       the splits leased to this worker for one (job, consumer) and not yet
//              acknowledged: the whole set, as every heartbeat reply restates it.
//   todo       held splits the current stream has not planned yet.
//
// A SplitFeed is shared by the worker's dispatcher link (which restates `held`) and
// the stream serving that consumer (whose producer takes from `todo`). A new stream
// for the same consumer (a reconnect) takes over: its todo starts again from every
// held split, because what the old stream sent may not have arrived; the client
// drops batches it already yielded, and content is deterministic, so re-sending is
// exact.
#ifndef FERRY_PIPELINE_SPLIT_PLAN_H_
#define FERRY_PIPELINE_SPLIT_PLAN_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <vector>

#include "core/mutex.h"
#include "ferry/batch.h"
#include "ferry/job.h"
#include "ferry/split_id.h"
#include "pipeline/producer.h"

namespace ferry {

// The order of `epoch`'s samples: the epoch's permutation of [0, num_samples), less a
// remainder job's taken positions (in the permutation's order).
// REQUIRES: job.num_samples is the listing's.
std::vector<int64_t> EpochOrder(const JobSpec& job, uint64_t epoch);

// The plan of rank `rank`'s j-th batch of `epoch` (j-th batch of the epoch when the
// job is not ranked; `rank` is then ignored), given the epoch's permutation: its
// samples, rows and provenance (batch_in_epoch = j; no split). `perm`: EpochOrder().
// REQUIRES: job.num_samples is the listing's.
BatchPlan BatchPlanOf(const JobSpec& job, const std::vector<int64_t>& perm, uint64_t epoch, int64_t rank, int64_t j);

// The plans of split `s` of `epoch` of `job`, given that epoch's permutation.
// REQUIRES: job.num_samples is the listing's.
std::vector<BatchPlan> SplitPlans(const JobSpec& job, const std::vector<int64_t>& perm, uint64_t epoch, int64_t s);

// Rank `rank`'s batches of every epoch of a ranked `job` (RankBatches() of them an
// epoch, j = 0, 1, ...), from shard.first_epoch for job.epochs epochs (<= 0: forever);
// of those, the ones with j % num_shards == shard_index: point to point, worker i of K
// serves that share of the rank's batches. In-process, one shard serves them all.
// REQUIRES: job.ranked(), job.num_samples is the listing's.
class RankPlan : public PlanSource {
 public:
  RankPlan(JobSpec job, int64_t rank, Shard shard) : job_(std::move(job)), rank_(rank), shard_(shard) {}
  std::optional<BatchPlan> Next() override;

 private:
  const JobSpec job_;
  const int64_t rank_;
  const Shard shard_;
  uint64_t epoch_offset_ = 0;
  int64_t next_ = -1;  // the next j of the current epoch; -1: the epoch has not begun
  std::vector<int64_t> perm_;
};

class SplitFeed {
 public:
  // Restates the held set (dispatcher link). New splits join `todo`; splits no longer
  // held (acknowledged, or taken back) leave it. Returns how many are held.
  size_t SetHeld(const std::set<SplitId>& held);
  size_t held() const;

  // A new stream takes over (io thread): todo = every held split. Returns the stream's
  // generation; a Take() of an older generation returns nullopt from now on.
  uint64_t Attach();
  // The lowest split in todo; blocks until there is one. nullopt once the generation
  // is superseded or `*cancelled` is set (then call Wake()).
  std::optional<SplitId> Take(uint64_t generation, const std::atomic<bool>* cancelled);
  void Wake();
  // Called (without the lock) when a Take() finds nothing to do and is about to wait:
  // the worker asks the dispatcher for more splits now rather than at its next
  // heartbeat. Set once, before use.
  void SetStarvedCallback(std::function<void()> f) { starved_ = std::move(f); }

 private:
  mutable Mutex mu_;
  CondVar cv_;
  std::function<void()> starved_;  // set once, before use
  std::set<SplitId> held_ GUARDED_BY(mu_);
  std::set<SplitId> todo_ GUARDED_BY(mu_);
  uint64_t generation_ GUARDED_BY(mu_) = 0;
};

// Plans the batches of the splits taken from a feed, in split order within each
// split. Next() blocks while the feed is empty; Cancel() ends it.
class SplitPlan : public PlanSource {
 public:
  SplitPlan(JobSpec job, std::shared_ptr<SplitFeed> feed, uint64_t generation)
      : job_(std::move(job)), feed_(std::move(feed)), generation_(generation) {}
  std::optional<BatchPlan> Next() override;
  void Cancel() override;

 private:
  const JobSpec job_;
  const std::shared_ptr<SplitFeed> feed_;
  const uint64_t generation_;
  std::atomic<bool> cancelled_{false};
  std::vector<BatchPlan> pending_;  // the rest of the current split, reversed
  // The last two epochs' permutations (a re-leased split of the previous epoch may
  // arrive after the next epoch has started).
  std::map<uint64_t, std::vector<int64_t>> perms_;
};

}  // namespace ferry

#endif  // FERRY_PIPELINE_SPLIT_PLAN_H_
