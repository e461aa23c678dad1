// The dispatcher's decisions (lib/dispatch/decisions.h): pure functions of the state,
// tested without sockets or clocks.
#include "dispatch/decisions.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "dispatch_test_util.h"

namespace ferry::dispatch {
namespace {

using namespace ::ferry::dispatch::test;  // NOLINT

TEST(DecisionsTest, TheTailOfAJobIsSharedFairly) {
  DispatcherState s;
  MustApply(s, Create("job", 100, 10, 1, 1));  // 1 epoch of 10 one-batch splits
  MustApply(s, AddConsumer{"job", "c1"});
  MustApply(s, RegisterWorker{"w1", "a"});
  MustApply(s, RegisterWorker{"w2", "b"});
  auto l1 = DecideLeases(s, "w1", LeasePolicy{4});
  ASSERT_EQ(l1.size(), 1u);
  EXPECT_EQ(l1[0].splits.size(), 4u) << "plenty pending: the full lease-ahead";
  MustApply(s, l1[0]);
  MustApply(s, AckSplits{"job", "c1", {{0, 0}, {0, 1}, {0, 2}, {0, 3}}});
  // 6 pending, 2 workers: w2 takes its share of 3, not 4, leaving 3 for w1.
  auto l2 = DecideLeases(s, "w2", LeasePolicy{4});
  ASSERT_EQ(l2.size(), 1u);
  EXPECT_EQ(l2[0].splits.size(), 3u);
  MustApply(s, l2[0]);
  auto l3 = DecideLeases(s, "w1", LeasePolicy{4});
  ASSERT_EQ(l3.size(), 1u);
  EXPECT_EQ(l3[0].splits.size(), 2u) << "3 pending left, 2 workers: a share of 2";
}

// A sweep: lanes of one content (jobs shared every batch) place each split on one
// worker, the one that holds it (or made it) for another lane.
TEST(DecisionsTest, ASweepsLanesPlaceEachSplitWithItsMaker) {
  DispatcherState s;
  for (const char* lane : {"sweep/a", "sweep/b"}) {
    CreateJob c = Create(lane, 100, 10, 1, 3);  // 3 epochs of 10 one-batch splits
    c.spec.sharing = Sharing::kEvery;
    MustApply(s, c);
    MustApply(s, AddConsumer{lane, "c"});
  }
  MustApply(s, Create("other", 100, 10, 1, 3));  // the same content, not a lane
  MustApply(s, AddConsumer{"other", "c"});
  ASSERT_EQ(s.Lanes(s.job("sweep/a")->content_key).size(), 2u);
  EXPECT_EQ(s.job("other")->content_key, 0u);
  MustApply(s, RegisterWorker{"w1", "a"});
  MustApply(s, RegisterWorker{"w2", "b"});
  // Where the other lane has split (epoch, s): held or made, by which worker.
  auto where = [&](const std::string& lane, uint64_t epoch, int64_t split) -> std::string {
    const JobState* o = s.job(lane == "sweep/a" ? "sweep/b" : "sweep/a");
    auto e = o->epochs.find(epoch);
    if (e == o->epochs.end()) return "";
    if (e->second.status[size_t(split)] == SplitStatus::kLeased) return e->second.worker[size_t(split)];
    if (size_t(split) < e->second.made_by.size()) return e->second.made_by[size_t(split)];
    return "";
  };
  // Applies `worker`'s decision; every lane split it takes is the other lane's there
  // or nowhere. Returns the lanes' splits it took.
  auto decide = [&](const std::string& worker, int budget) {
    std::map<std::string, std::vector<SplitId>> took;
    for (const LeaseSplits& l : DecideLeases(s, worker, LeasePolicy{budget})) {
      for (const LeasedSplit& x : l.splits) {
        if (l.job == "other") continue;
        const std::string at = where(l.job, x.ref.epoch, x.ref.split);
        EXPECT_TRUE(at.empty() || at == worker || !s.workers().count(at))
            << l.job << " split " << x.ref.split << " of epoch " << x.ref.epoch << " is the other lane's on " << at;
        took[l.job].push_back(x.ref);
      }
      MustApply(s, l);
    }
    return took;
  };
  // w1 asks first: both lanes' splits 0-3 (the lanes are asked in one decision).
  auto w1 = decide("w1", 4);
  EXPECT_EQ(w1["sweep/a"], w1["sweep/b"]);
  ASSERT_EQ(w1["sweep/a"].size(), 4u);
  EXPECT_EQ(w1["sweep/a"].front().split, 0);
  // w2 leaves what the other lane holds on w1: both lanes get 4-7.
  auto w2 = decide("w2", 4);
  EXPECT_EQ(w2["sweep/a"], w2["sweep/b"]);
  ASSERT_EQ(w2["sweep/a"].size(), 4u);
  EXPECT_EQ(w2["sweep/a"].front().split, 4);
  // Lane a finishes 0-7; lane b falls behind (0-3 still on w1). w1 and w2 lease on:
  // lane a's next splits; lane b's 4-7 went (made_by) to w2, whose window has them.
  MustApply(s, AckSplits{"sweep/a", "c", {{0, 0}, {0, 1}, {0, 2}, {0, 3}, {0, 4}, {0, 5}, {0, 6}, {0, 7}}});
  EXPECT_EQ(where("sweep/b", 0, 5), "w2") << "made by w2 for lane a";
  decide("w1", 4);
  decide("w2", 4);
  // With w2 gone, nothing lane a made there holds lane b's splits back.
  MustApply(s, RemoveWorker{"w2"});
  auto after = decide("w1", 8);
  bool took_b = false;
  for (const SplitId& x : after["sweep/b"]) took_b = took_b || (x.epoch == 0 && x.split >= 4 && x.split < 8);
  EXPECT_TRUE(took_b) << "the maker is gone: the lane's splits go anywhere";
}

TEST(DecisionsTest, DrainingWorkerGetsNoLeases) {
  DispatcherState s;
  MustApply(s, Create());
  MustApply(s, AddConsumer{"job", "c1"});
  MustApply(s, RegisterWorker{"w1", "a"});
  MustApply(s, DrainWorker{"w1"});
  EXPECT_TRUE(DecideLeases(s, "w1", LeasePolicy{4}).empty());
}

TEST(DecisionsTest, DeterministicOrderingAssignsRoundRobin) {
  DispatcherState s;
  CreateJob c = Create();
  c.spec.ordering = Ordering::kDeterministic;
  MustApply(s, c);
  MustApply(s, AddConsumer{"job", "c1"});
  MustApply(s, AddConsumer{"job", "c2"});
  MustApply(s, RegisterWorker{"w1", "a"});
  auto l = DecideLeases(s, "w1", LeasePolicy{5});
  ASSERT_EQ(l.size(), 1u);
  for (const auto& x : l[0].splits) EXPECT_EQ(x.consumer, x.ref.split % 2 == 0 ? "c1" : "c2");
}

TEST(DecisionsTest, GarbageCollectsFinishedUnusedJobs) {
  DispatcherState s;
  MustApply(s, Create("a", 10, 10, 1, 1));
  MustApply(s, Create("b", 10, 10, 1, 1));
  MustApply(s, AddConsumer{"a", "c"});
  MustApply(s, AckSplits{"a", "c", {{0, 0}}});
  auto gc = DecideGarbage(s, {});
  ASSERT_EQ(gc.size(), 1u);
  EXPECT_EQ(gc[0].job, "a");
  EXPECT_TRUE(DecideGarbage(s, {"a"}).empty()) << "still in use";
}

TEST(DecisionsTest, ARankedJobsSplitsGoToTheirRanksOnceJoined) {
  DispatcherState s;
  CreateJob c = Create("job", 120, 10, 1, 1);  // 3 ranks: 4 batches, 4 splits each
  c.spec.num_consumers = 3;
  MustApply(s, c);
  MustApply(s, AddConsumer{"job", "rank-2"});
  MustApply(s, AddConsumer{"job", "rank-0"});
  MustApply(s, RegisterWorker{"w1", "a"});
  auto l = DecideLeases(s, "w1", LeasePolicy{4});
  ASSERT_EQ(l.size(), 1u);
  ASSERT_EQ(l[0].splits.size(), 4u);
  for (const auto& x : l[0].splits) {
    EXPECT_NE(x.ref.split % 3, 1) << "rank 1 has not joined: its splits wait";
    EXPECT_EQ(x.consumer, "rank-" + std::to_string(x.ref.split % 3));
  }
}

// Hybrid: a trainer's own worker leases only its trainer's splits (of a ranked job,
// its rank's; of a shared job, free splits become its trainer's), never another
// job's, and only its trainer is told of it.
TEST(DecisionsTest, AWorkerServingOneConsumerLeasesOnlyItsSplits) {
  DispatcherState s;
  CreateJob ranked = Create("job", 120, 10, 1, 1);  // 3 ranks: 4 splits each
  ranked.spec.num_consumers = 3;
  MustApply(s, ranked);
  MustApply(s, Create("other", 100, 10, 1, 1));
  for (const char* c : {"rank-0", "rank-1", "rank-2"}) MustApply(s, AddConsumer{"job", c});
  MustApply(s, AddConsumer{"other", "c1"});
  MustApply(s, RegisterWorker{"local1", "127.0.0.1:9", "job", "rank-1"});
  auto l = DecideLeases(s, "local1", LeasePolicy{8});
  ASSERT_EQ(l.size(), 1u) << "nothing of the other job";
  EXPECT_EQ(l[0].job, "job");
  ASSERT_EQ(l[0].splits.size(), 4u) << "all of rank 1's splits, and nothing else";
  for (const auto& x : l[0].splits) {
    EXPECT_EQ(x.ref.split % 3, 1);
    EXPECT_EQ(x.consumer, "rank-1");
  }
  // A shared job: free splits go to the worker's own consumer.
  MustApply(s, Create("shared", 100, 10, 1, 1));
  MustApply(s, AddConsumer{"shared", "a"});
  MustApply(s, AddConsumer{"shared", "b"});
  MustApply(s, RegisterWorker{"local2", "127.0.0.1:8", "shared", "b"});
  MustApply(s, RegisterWorker{"w", "10.0.0.1:7000"});
  auto general = DecideLeases(s, "w", LeasePolicy{2});
  for (const auto& lease : general) MustApply(s, lease);
  auto mine = DecideLeases(s, "local2", LeasePolicy{4});
  ASSERT_EQ(mine.size(), 1u);
  EXPECT_EQ(mine[0].splits.size(), 4u);
  for (const auto& x : mine[0].splits) EXPECT_EQ(x.consumer, "b");
  // A split already another consumer's is left alone.
  for (const auto& lease : general) {
    for (const auto& x : lease.splits) {
      if (lease.job != "shared") continue;
      for (const auto& m : mine[0].splits) EXPECT_FALSE(m.ref == x.ref);
    }
  }
  // Serving a consumer that has not joined: nothing.
  MustApply(s, RegisterWorker{"local3", "127.0.0.1:7", "shared", "c"});
  EXPECT_TRUE(DecideLeases(s, "local3", LeasePolicy{4}).empty());
  // A worker serves a job's consumer, or everyone: not half of it.
  EXPECT_FALSE(s.Apply(RegisterWorker{"bad", "x", "shared", ""}).ok());
}

// A survivor whose lease-ahead is full of the next epoch's splits (held back by its
// consumers until this epoch is done) still takes this epoch's splits a dead worker
// returned: otherwise neither would ever be done.
TEST(DecisionsTest, ASplitReturnedByADeadWorkerIsNotBlockedByLaterLeases) {
  DispatcherState s;
  CreateJob c = Create("job", 40, 10, 1, 2);  // 2 epochs of 4 one-batch splits
  c.spec.num_consumers = 2;
  MustApply(s, c);
  MustApply(s, AddConsumer{"job", "rank-0"});
  MustApply(s, AddConsumer{"job", "rank-1"});
  MustApply(s, RegisterWorker{"w1", "a"});
  MustApply(s, RegisterWorker{"w2", "b"});
  MustApply(s, LeaseSplits{"job", "w1", {{{0, 0}, "rank-0"}, {{0, 1}, "rank-1"}}});
  MustApply(s, LeaseSplits{"job", "w2", {{{0, 2}, "rank-0"}, {{0, 3}, "rank-1"}}});
  auto ahead = DecideLeases(s, "w2", LeasePolicy{4});
  ASSERT_EQ(ahead.size(), 1u);
  ASSERT_EQ(ahead[0].splits.size(), 2u) << "epoch 1's first splits, up to the lease-ahead";
  EXPECT_EQ(ahead[0].splits[0].ref.epoch, 1u);
  MustApply(s, ahead[0]);
  EXPECT_TRUE(DecideLeases(s, "w2", LeasePolicy{4}).empty()) << "w2 holds 4";
  MustApply(s, RemoveWorker{"w1"});
  auto l = DecideLeases(s, "w2", LeasePolicy{4});
  ASSERT_EQ(l.size(), 1u);
  ASSERT_EQ(l[0].splits.size(), 2u) << "w1's returned splits, though w2 holds 4";
  EXPECT_EQ(l[0].splits[0].ref, (SplitId{0, 0}));
  EXPECT_EQ(l[0].splits[1].ref, (SplitId{0, 1}));
  EXPECT_EQ(l[0].splits[1].consumer, "rank-1") << "keeps its consumer";
}

// Ranks in lockstep (DDP): ranks 0, 1 and 3 wait in an all-reduce for rank 2, and
// acknowledge their splits only once yielded, after it. A worker whose lease-ahead is
// full of their splits must still lease rank 2's next split, or no one moves again
// (seen in tests/python/test_ddp.py after a worker was killed).
TEST(DecisionsTest, EachRanksNextSplitIsLeasedPastTheLeaseAhead) {
  DispatcherState s;
  CreateJob c = Create("job", 160, 10, 1, 2);  // 2 epochs of 16 one-batch splits, 4 ranks
  c.spec.num_consumers = 4;
  MustApply(s, c);
  for (const char* r : {"rank-0", "rank-1", "rank-2", "rank-3"}) MustApply(s, AddConsumer{"job", r});
  MustApply(s, RegisterWorker{"w1", "a"});
  MustApply(s, RegisterWorker{"w2", "b"});
  MustApply(s, LeaseSplits{"job", "w1",
                           {{{0, 0}, "rank-0"}, {{0, 1}, "rank-1"}, {{0, 2}, "rank-2"}, {{0, 4}, "rank-0"},
                            {{0, 5}, "rank-1"}, {{0, 6}, "rank-2"}}});
  MustApply(s, AckSplits{"job", "rank-0", {{0, 0}, {0, 4}}});
  MustApply(s, AckSplits{"job", "rank-1", {{0, 1}, {0, 5}}});
  MustApply(s, AckSplits{"job", "rank-2", {{0, 2}, {0, 6}}});
  // Rank 3 ran ahead (it joined first) and holds 3 and 7; ranks 0 and 1 hold 8 and 9.
  MustApply(s, LeaseSplits{"job", "w2", {{{0, 3}, "rank-3"}, {{0, 7}, "rank-3"}, {{0, 8}, "rank-0"},
                                         {{0, 9}, "rank-1"}}});
  auto l = DecideLeases(s, "w2", LeasePolicy{4});
  ASSERT_EQ(l.size(), 1u) << "w2 holds 4 before split 10, yet rank 2 has nothing leased";
  ASSERT_EQ(l[0].splits.size(), 1u) << "only rank 2's next split: the others have theirs";
  EXPECT_EQ(l[0].splits[0].ref, (SplitId{0, 10}));
  EXPECT_EQ(l[0].splits[0].consumer, "rank-2");
  MustApply(s, l[0]);
  EXPECT_TRUE(DecideLeases(s, "w2", LeasePolicy{4}).empty()) << "every rank has its next split leased";
  // w1 has room, and leases within its lease-ahead as before.
  auto more = DecideLeases(s, "w1", LeasePolicy{4});
  ASSERT_EQ(more.size(), 1u);
  EXPECT_EQ(more[0].splits.size(), 4u);
  EXPECT_EQ(more[0].splits[0].ref, (SplitId{0, 11}));
  MustApply(s, more[0]);
  // w2 dies: 3, 7, 8, 9 and 10 return, and w1, its lease-ahead full of 11..14, takes
  // the first 4 by the usual rule (leases after a split do not count against it) and
  // 10 by this one.
  MustApply(s, RemoveWorker{"w2"});
  auto back = DecideLeases(s, "w1", LeasePolicy{4});
  ASSERT_EQ(back.size(), 1u);
  std::vector<SplitId> refs;
  for (const auto& x : back[0].splits) refs.push_back(x.ref);
  EXPECT_EQ(refs, (std::vector<SplitId>{{0, 3}, {0, 7}, {0, 8}, {0, 9}, {0, 10}}));
}

TEST(DecisionsTest, SilentWorkersAreDeadAndUnknownOnesAreNot) {
  DispatcherState s;
  MustApply(s, RegisterWorker{"w1", "a"});
  MustApply(s, RegisterWorker{"w2", "b"});
  MustApply(s, RegisterWorker{"w3", "c"});
  // w3 has no time yet (after a restart): it counts as just seen.
  auto dead = DecideDeadWorkers(s, {{"w1", 0}, {"w2", 600}}, 1000, 500);
  ASSERT_EQ(dead.size(), 1u);
  EXPECT_EQ(dead[0].worker, "w1");
}

TEST(DecisionsTest, AllJobsFinishedNeedsAJob) {
  DispatcherState s;
  EXPECT_FALSE(AllJobsFinished(s)) << "no job at all is not idle";
  MustApply(s, Create("a", 10, 10, 1, 1));
  EXPECT_FALSE(AllJobsFinished(s));
  MustApply(s, AddConsumer{"a", "c"});
  MustApply(s, AckSplits{"a", "c", {{0, 0}}});
  EXPECT_TRUE(AllJobsFinished(s));
}

}  // namespace
}  // namespace ferry::dispatch
