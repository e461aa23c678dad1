// Dynamic sharding on a worker (lib/pipeline/split_plan.h), without sockets: a split's
// batch plans, the split feed (held set, todo, takeover by a new stream), and the
// plan source a stream's producer runs.
#include <gtest/gtest.h>

#include <atomic>
#include <set>
#include <thread>

#include "data/permutation.h"
#include "pipeline/split_plan.h"

namespace ferry {
namespace {

JobSpec Geometry(int64_t n, int32_t batch, int32_t per_split, LastBatch last) {
  JobSpec g;
  g.dataset = "unused";
  g.num_samples = n;
  g.batch_size = batch;
  g.batches_per_split = per_split;
  g.last_batch = last;
  g.seed = 3;
  return g;
}

TEST(SplitGeometryTest, TheSplitsOfAnEpochCoverItExactlyOnce) {
  for (LastBatch last : {LastBatch::kKeep, LastBatch::kDrop, LastBatch::kPad}) {
    const JobSpec g = Geometry(103, 10, 3, last);
    const std::vector<int64_t> perm = EpochPermutation(103, 3, 1, true);
    std::multiset<int64_t> seen;
    int64_t batches = 0;
    for (int64_t s = 0; s < g.SplitsPerEpoch(); ++s) {
      for (const BatchPlan& p : SplitPlans(g, perm, 1, s)) {
        EXPECT_EQ(p.epoch, 1u);
        EXPECT_EQ(p.split, s);
        EXPECT_EQ(p.batch_in_epoch, batches);
        EXPECT_EQ(p.last_in_epoch, batches + 1 == g.BatchesPerEpoch());
        EXPECT_LE(p.batches_in_split, 3);
        EXPECT_EQ(p.rows, last == LastBatch::kPad ? 10 : int64_t(p.samples.size()));
        seen.insert(p.samples.begin(), p.samples.end());
        ++batches;
      }
    }
    EXPECT_EQ(batches, last == LastBatch::kDrop ? 10 : 11);
    EXPECT_EQ(g.SplitsPerEpoch(), last == LastBatch::kDrop ? 4 : 4);
    EXPECT_EQ(seen.size(), last == LastBatch::kDrop ? 100u : 103u);
    EXPECT_EQ(std::set<int64_t>(seen.begin(), seen.end()).size(), seen.size()) << "a sample twice";
  }
}

TEST(SplitGeometryTest, ARemainderJobsOrderIsTheEpochsLessWhatWasTaken) {
  JobSpec g = Geometry(40, 4, 1, LastBatch::kPad);
  g.num_consumers = 2;
  g.first_epoch = 2;
  g.epochs = 3;
  g.taken = {{0, 8}, {12, 16}, {39, 40}};
  const std::vector<int64_t> perm = EpochPermutation(40, 3, 2, true);
  std::vector<int64_t> want(perm.begin() + 8, perm.begin() + 12);
  want.insert(want.end(), perm.begin() + 16, perm.begin() + 39);
  EXPECT_EQ(EpochOrder(g, 2), want);
  EXPECT_EQ(g.epoch_samples(), 27);
  EXPECT_EQ(g.RankBatches(), 4) << "27 samples, rounds of 8: 4 under pad";
}

TEST(SplitFeedTest, HeldSetsTodoAndTakeover) {
  auto feed = std::make_shared<SplitFeed>();
  std::atomic<bool> cancelled{false};
  const uint64_t g1 = feed->Attach();
  feed->SetHeld({{0, 3}, {0, 1}, {1, 0}});
  EXPECT_EQ(feed->Take(g1, &cancelled)->split, 1) << "the lowest split first";
  EXPECT_EQ(feed->Take(g1, &cancelled)->split, 3);
  // {1,0} is acknowledged (no longer held) before it is taken; {0,5} is new.
  feed->SetHeld({{0, 1}, {0, 3}, {0, 5}});
  auto k = feed->Take(g1, &cancelled);
  EXPECT_EQ(k->epoch, 0u);
  EXPECT_EQ(k->split, 5);
  // A new stream of the same consumer: every held split again, and the old stream's
  // taker returns nullopt.
  std::optional<SplitId> old_take = SplitId{9, 9};
  std::thread blocked([&] { old_take = feed->Take(g1, &cancelled); });
  const uint64_t g2 = feed->Attach();
  blocked.join();
  EXPECT_FALSE(old_take.has_value());
  std::set<int64_t> again;
  for (int i = 0; i < 3; ++i) again.insert(feed->Take(g2, &cancelled)->split);
  EXPECT_EQ(again, (std::set<int64_t>{1, 3, 5}));
  // Cancel wakes a blocked Take.
  std::thread waiter([&] { EXPECT_FALSE(feed->Take(g2, &cancelled).has_value()); });
  cancelled = true;
  feed->Wake();
  waiter.join();
}

TEST(SplitPlanTest, PlansEverySplitTakenInOrder) {
  auto feed = std::make_shared<SplitFeed>();
  SplitPlan plan(Geometry(40, 5, 2, LastBatch::kKeep), feed, feed->Attach());
  feed->SetHeld({{0, 2}, {0, 0}});
  std::vector<std::pair<int64_t, int64_t>> got;
  for (int i = 0; i < 4; ++i) {
    auto p = plan.Next();
    ASSERT_TRUE(p.has_value());
    got.push_back({p->split, p->batch_in_split});
  }
  EXPECT_EQ(got, (std::vector<std::pair<int64_t, int64_t>>{{0, 0}, {0, 1}, {2, 0}, {2, 1}}));
  std::thread canceller([&] { plan.Cancel(); });
  EXPECT_FALSE(plan.Next().has_value()) << "nothing held: blocks until cancelled";
  canceller.join();
}

}  // namespace
}  // namespace ferry
