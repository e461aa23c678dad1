// The dispatcher's state machine (lib/dispatch/state.h), without sockets: leases,
// acks and epochs advancing, restores from saved iterator states, dead workers'
// splits returning with their consumer, and updates that do not fit refused whole.
#include "dispatch/state.h"

#include <gtest/gtest.h>

#include <map>
#include <set>

#include "dispatch/decisions.h"
#include "dispatch_test_util.h"

namespace ferry::dispatch {
namespace {

using namespace ::ferry::dispatch::test;  // NOLINT

// Leases every pending split to w1 and acks it; returns the splits, in order.
std::vector<SplitId> LeaseAndAckAll(DispatcherState& s, const std::string& consumer) {
  std::vector<SplitId> got;
  for (int round = 0; round < 100; ++round) {
    auto leases = DecideLeases(s, "w1", LeasePolicy{4});
    if (leases.empty()) break;
    EXPECT_TRUE(s.Apply(leases[0]).ok());
    AckSplits ack{"job", consumer, {}};
    for (const auto& l : leases[0].splits) {
      got.push_back(l.ref);
      ack.splits.push_back(l.ref);
    }
    EXPECT_TRUE(s.Apply(ack).ok());
  }
  return got;
}

TEST(StateTest, RestoreReopensWhatWasAckedAfterTheSavedState) {
  // 2 epochs of 5 splits. The consumer saved its state after splits 0..2 of epoch 0,
  // went on through epoch 0 and into epoch 1, and acked all that; then it restarted
  // from the saved state.
  DispatcherState s;
  MustApply(s, Create());
  MustApply(s, AddConsumer{"job", "c1"});
  MustApply(s, RegisterWorker{"w1", "a"});
  MustApply(s, LeaseSplits{"job", "w1", {{{0, 0}, "c1"}, {{0, 1}, "c1"}, {{0, 2}, "c1"}, {{0, 3}, "c1"}}});
  MustApply(s, AckSplits{"job", "c1", {{0, 0}, {0, 1}, {0, 2}, {0, 3}}});
  MustApply(s, LeaseSplits{"job", "w1", {{{0, 4}, "c1"}, {{1, 0}, "c1"}, {{1, 1}, "c1"}}});
  MustApply(s, AckSplits{"job", "c1", {{0, 4}, {1, 0}}});
  ASSERT_EQ(s.job("job")->first_open, 1u) << "epoch 0 completed after the state was saved";
  MustApply(s, RestoreConsumer{"job", "c1", 0, {{0, 0}, {0, 1}, {0, 2}}});
  EXPECT_EQ(s.job("job")->first_open, 0u) << "epoch 0 is open again";
  // Exactly the splits the saved state had not completed come out again (1/1 was
  // still leased to w1 and stays so).
  std::vector<SplitId> got = LeaseAndAckAll(s, "c1");
  std::set<SplitId> want = {{0, 3}, {0, 4}, {1, 0}, {1, 2}, {1, 3}, {1, 4}};
  EXPECT_EQ(std::set<SplitId>(got.begin(), got.end()), want);
  EXPECT_EQ(got.size(), want.size());
  MustApply(s, AckSplits{"job", "c1", {{1, 1}}});
  EXPECT_TRUE(s.job("job")->finished());
}

TEST(StateTest, RestoreIntoAFreshJobSkipsCompletedEpochs) {
  DispatcherState s;
  MustApply(s, Create());
  MustApply(s, AddConsumer{"job", "c1"});
  MustApply(s, RegisterWorker{"w1", "a"});
  MustApply(s, RestoreConsumer{"job", "c1", 1, {{1, 0}, {1, 4}}});
  std::vector<SplitId> got = LeaseAndAckAll(s, "c1");
  std::set<SplitId> want = {{1, 1}, {1, 2}, {1, 3}};
  EXPECT_EQ(std::set<SplitId>(got.begin(), got.end()), want);
  EXPECT_TRUE(s.job("job")->finished());
}

TEST(StateTest, RestoreWithSeveralConsumersMustStayInTheEpoch) {
  DispatcherState s;
  MustApply(s, Create());
  MustApply(s, AddConsumer{"job", "c1"});
  MustApply(s, AddConsumer{"job", "c2"});
  EXPECT_EQ(s.Apply(RestoreConsumer{"job", "c1", 1, {}}).code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(s.Apply(RestoreConsumer{"job", "c1", 0, {{0, 0}}}).ok());
  EXPECT_EQ(s.Apply(RestoreConsumer{"job", "c2", 0, {{0, 0}}}).code(), StatusCode::kFailedPrecondition)
      << "split 0/0 is c1's";
}

TEST(StateTest, AStateOneEpochBehindIsRestoredWithSeveralConsumers) {
  // c1 saved its state in epoch 0 with 0/0 done, went on to yield 0/2, and died; c2
  // completed epoch 0 meanwhile. c1's successor reopens epoch 0 for c1's 0/2 only.
  DispatcherState s;
  MustApply(s, Create());  // 2 epochs of 5 splits
  MustApply(s, AddConsumer{"job", "c1"});
  MustApply(s, AddConsumer{"job", "c2"});
  MustApply(s, RegisterWorker{"w1", "a"});
  MustApply(s, LeaseSplits{"job", "w1", {{{0, 0}, "c1"}, {{0, 1}, "c2"}, {{0, 2}, "c1"}, {{0, 3}, "c2"}}});
  MustApply(s, AckSplits{"job", "c1", {{0, 0}, {0, 2}}});
  MustApply(s, LeaseSplits{"job", "w1", {{{0, 4}, "c2"}}});
  MustApply(s, AckSplits{"job", "c2", {{0, 1}, {0, 3}, {0, 4}}});
  ASSERT_EQ(s.job("job")->first_open, 1u);
  EXPECT_EQ(s.Apply(RestoreConsumer{"job", "c1", 0, {{0, 1}}}).code(), StatusCode::kFailedPrecondition)
      << "0/1 is c2's";
  MustApply(s, RestoreConsumer{"job", "c1", 0, {{0, 0}}});
  EXPECT_EQ(s.job("job")->first_open, 0u);
  const auto pending = s.SplitsOf("job", "c1", 0);
  ASSERT_EQ(pending.size(), 2u);
  EXPECT_EQ(pending[1], std::make_pair(int64_t(2), SplitStatus::kPending));
  MustApply(s, AckSplits{"job", "c1", {{0, 2}}});
  EXPECT_EQ(s.job("job")->first_open, 1u);
  // Two epochs back, the owners are gone: refused as before.
  MustApply(s, LeaseSplits{"job", "w1", {{{1, 0}, "c1"}, {{1, 1}, "c1"}, {{1, 2}, "c1"}, {{1, 3}, "c1"}, {{1, 4}, "c2"}}});
  MustApply(s, AckSplits{"job", "c1", {{1, 0}, {1, 1}, {1, 2}, {1, 3}}});
  MustApply(s, AckSplits{"job", "c2", {{1, 4}}});
  EXPECT_TRUE(s.job("job")->finished());
}

TEST(StateTest, DeadWorkerSplitsReturnWithTheirConsumer) {
  DispatcherState s;
  MustApply(s, Create());
  MustApply(s, AddConsumer{"job", "c1"});
  MustApply(s, AddConsumer{"job", "c2"});
  MustApply(s, RegisterWorker{"w1", "a"});
  MustApply(s, RegisterWorker{"w2", "b"});
  auto l1 = DecideLeases(s, "w1", LeasePolicy{4});
  ASSERT_EQ(l1.size(), 1u);
  MustApply(s, l1[0]);
  std::map<SplitId, std::string> owner;
  for (const auto& l : l1[0].splits) owner[l.ref] = l.consumer;
  // Both consumers got work.
  std::set<std::string> consumers;
  for (const auto& [ref, c] : owner) consumers.insert(c);
  EXPECT_EQ(consumers.size(), 2u);

  // w1 dies: nothing it held is lost, and each split keeps its consumer.
  auto dead = DecideDeadWorkers(s, {{"w1", 0}, {"w2", 900}}, 1000, 500);
  ASSERT_EQ(dead.size(), 1u);
  EXPECT_EQ(dead[0].worker, "w1");
  MustApply(s, dead[0]);
  EXPECT_TRUE(s.LeasesOf("w1").empty());
  auto l2 = DecideLeases(s, "w2", LeasePolicy{4});
  ASSERT_EQ(l2.size(), 1u);
  for (const auto& l : l2[0].splits) {
    ASSERT_TRUE(owner.count(l.ref)) << "re-leases the returned splits first";
    EXPECT_EQ(owner[l.ref], l.consumer);
  }
}

TEST(StateTest, ARemovedConsumersUnfinishedSplitsGoToTheLiveOnes) {
  DispatcherState s;
  MustApply(s, Create());  // 2 epochs of 5 splits
  MustApply(s, AddConsumer{"job", "c1"});
  MustApply(s, AddConsumer{"job", "c2"});
  MustApply(s, RegisterWorker{"w1", "a"});
  MustApply(s, LeaseSplits{"job", "w1", {{{0, 0}, "c1"}, {{0, 1}, "c2"}, {{0, 2}, "c1"}, {{0, 3}, "c2"}}});
  MustApply(s, AckSplits{"job", "c1", {{0, 0}}});
  // c1 goes silent: only shared jobs' consumers are timed out, after the timeout.
  const std::map<std::pair<std::string, std::string>, int64_t> seen = {{{"job", "c1"}, 0}, {{"job", "c2"}, 900}};
  auto gone = DecideGoneConsumers(s, seen, 1000, 500);
  ASSERT_EQ(gone.size(), 1u);
  EXPECT_EQ(gone[0].consumer, "c1");
  MustApply(s, gone[0]);
  EXPECT_FALSE(s.job("job")->HasConsumer("c1"));
  EXPECT_EQ(s.LeasesOf("w1")["job"].size(), 2u) << "c1's lease of 0/2 is revoked; c2's stay";
  EXPECT_EQ(s.Apply(AckSplits{"job", "c1", {{0, 2}}}).code(), StatusCode::kFailedPrecondition)
      << "a removed consumer's late ack is refused, not taken for a finished job";
  // The survivor gets every split but 0/0 (done by c1) and completes the job.
  MustApply(s, AckSplits{"job", "c2", {{0, 1}, {0, 3}}});
  std::vector<SplitId> got = LeaseAndAckAll(s, "c2");
  EXPECT_EQ(got.size(), 2u + 5u);  // 0/2, 0/4 and all of epoch 1
  EXPECT_TRUE(s.job("job")->finished());
}

TEST(StateTest, ASnapshotKeepsPendingSplitsOwnersAndRemovedConsumersAcks) {
  DispatcherState s;
  MustApply(s, Create());
  MustApply(s, AddConsumer{"job", "c1"});
  MustApply(s, AddConsumer{"job", "c2"});
  MustApply(s, AddConsumer{"job", "c3"});
  MustApply(s, RegisterWorker{"w1", "a"});
  MustApply(s, LeaseSplits{"job", "w1", {{{0, 0}, "c1"}, {{0, 1}, "c2"}, {{0, 2}, "c3"}}});
  MustApply(s, AckSplits{"job", "c3", {{0, 2}}});
  MustApply(s, RemoveConsumer{"job", "c3"});
  MustApply(s, RemoveWorker{"w1"});  // 0/0 and 0/1: pending, still c1's and c2's
  DispatcherState r;
  for (const Update& u : s.Snapshot()) MustApply(r, u);
  const EpochState& e = r.job("job")->epochs.at(0);
  EXPECT_EQ(e.consumer[0], "c1");
  EXPECT_EQ(e.consumer[1], "c2");
  EXPECT_EQ(e.status[2], SplitStatus::kDone);
  EXPECT_EQ(e.consumer[2], "c3");
  EXPECT_EQ(r.job("job")->consumers, (std::vector<std::string>{"c1", "c2"}));
}

// Found by the dispatcher fuzzer: a job created at its first epoch 2 and restored by
// its consumer to epoch 0 came back from a snapshot at epoch 2 (the snapshot wrote its
// progress only when past 0, and CreateJob opens a job at its first epoch).
TEST(StateTest, ASnapshotKeepsAJobRestoredToBeforeItsFirstEpoch) {
  DispatcherState s;
  CreateJob c = Create();
  c.spec.first_epoch = 2;
  c.spec.epochs = 2;  // epochs 2 and 3
  MustApply(s, c);
  MustApply(s, AddConsumer{"job", "c1"});
  ASSERT_EQ(s.job("job")->first_open, 2u);
  MustApply(s, RestoreConsumer{"job", "c1", 0, {}});
  ASSERT_EQ(s.job("job")->first_open, 0u);
  DispatcherState r;
  for (const Update& u : s.Snapshot()) MustApply(r, u);
  EXPECT_EQ(r.job("job")->first_open, 0u);
  EXPECT_EQ(r.DebugString(), s.DebugString());
  // Progress goes back only on a job that holds no split yet.
  MustApply(r, AckSplits{"job", "c1", {{0, 1}}});
  EXPECT_EQ(r.Apply(JobProgress{"job", 0}).code(), StatusCode::kOk);  // not back
  EXPECT_EQ(r.Apply(JobProgress{"job", 1}).code(), StatusCode::kOk);
  EXPECT_EQ(r.Apply(JobProgress{"job", 0}).code(), StatusCode::kFailedPrecondition);
}

TEST(StateTest, RestoresOfEpochsNotYetOpenAreRefused) {
  DispatcherState s;
  JobSpec forever = Create().spec;
  forever.epochs = 0;
  MustApply(s, CreateJob{"job", forever});
  MustApply(s, AddConsumer{"job", "c1"});
  EXPECT_EQ(s.Apply(RestoreConsumer{"job", "c1", 0, {{5, 0}}}).code(), StatusCode::kOutOfRange);
  EXPECT_TRUE(s.job("job")->epochs.empty());
}

// Found by review: a consumer alone in a job restored an older state (epoch 3) after
// another consumer, since removed, had done splits in epoch 5. The snapshot then held
// an ack two epochs past first_open, which replay refused as "an epoch not yet open":
// the dispatcher could not reopen its work dir. (Reachable with a live consumer too,
// one epoch back.) Far-future acks are refused at the request (DispatcherTest), not in
// the state.
TEST(StateTest, ASnapshotReplaysAfterAConsumerRestoresEpochsBack) {
  DispatcherState s;
  MustApply(s, Create("job", 40, 10, 1, 8));  // 4 splits an epoch, 8 epochs
  MustApply(s, AddConsumer{"job", "a"});
  MustApply(s, AddConsumer{"job", "b"});
  for (uint64_t e = 0; e < 5; ++e) {
    MustApply(s, AckSplits{"job", "a", {{e, 0}, {e, 1}}});
    MustApply(s, AckSplits{"job", "b", {{e, 2}, {e, 3}}});
  }
  MustApply(s, AckSplits{"job", "b", {{5, 2}}});
  MustApply(s, RemoveConsumer{"job", "b"});
  MustApply(s, RestoreConsumer{"job", "a", 3, {}});
  ASSERT_EQ(s.job("job")->first_open, 3u);
  DispatcherState r;
  for (const Update& u : s.Snapshot()) MustApply(r, u);
  EXPECT_EQ(r.DebugString(), s.DebugString());
}

// Found by the control-plane fuzzer: c1 and c2 share a job; c2 completes epoch 0, a
// compaction writes a snapshot, then c1 restores a state saved in epoch 0. Live, the
// restore applied (the completed epoch and its owners were known); the snapshot did
// not keep them, so replaying the journal refused the restore and the dispatcher
// could not reopen its work dir. The snapshot now keeps the completed epoch.
TEST(StateTest, ASnapshotKeepsTheCompletedEpochARestoreReopens) {
  DispatcherState s;
  MustApply(s, Create());  // 2 epochs of 5 splits
  MustApply(s, AddConsumer{"job", "c1"});
  MustApply(s, AddConsumer{"job", "c2"});
  MustApply(s, AddConsumer{"job", "c3"});
  MustApply(s, AckSplits{"job", "c1", {{0, 0}}});
  MustApply(s, AckSplits{"job", "c3", {{0, 4}}});
  MustApply(s, RemoveConsumer{"job", "c3"});  // an owner gone since: still an owner
  MustApply(s, AckSplits{"job", "c2", {{0, 1}, {0, 2}, {0, 3}}});
  ASSERT_EQ(s.job("job")->first_open, 1u);
  DispatcherState r;
  for (const Update& u : s.Snapshot()) MustApply(r, u);
  EXPECT_EQ(r.DebugString(), s.DebugString());
  EXPECT_EQ(r.CheckLeaseIndex(), "");
  const RestoreConsumer restore{"job", "c1", 0, {}};
  MustApply(s, restore);
  MustApply(r, restore);
  EXPECT_EQ(r.DebugString(), s.DebugString());
  EXPECT_EQ(r.job("job")->first_open, 0u) << "epoch 0 reopened for c1's 0/0";
  EXPECT_EQ(r.SplitsOf("job", "c1", 0), (std::vector<std::pair<int64_t, SplitStatus>>{{0, SplitStatus::kPending}}));
  // A consumer that moves the job's first_open alone drops the completed epoch: it is
  // no longer the one before first_open.
  DispatcherState a;
  MustApply(a, Create());
  MustApply(a, AddConsumer{"job", "c1"});
  MustApply(a, AckSplits{"job", "c1", {{0, 0}, {0, 1}, {0, 2}, {0, 3}, {0, 4}}});
  ASSERT_EQ(a.job("job")->completed.size(), 1u);
  MustApply(a, RestoreConsumer{"job", "c1", 2, {}});
  EXPECT_TRUE(a.job("job")->completed.empty());
  EXPECT_EQ(a.CheckLeaseIndex(), "");
}

TEST(StateTest, AckOfAPendingSplitCounts) {
  // A worker can die after its consumer received every batch of a split: the
  // consumer's ack must still complete it.
  DispatcherState s;
  MustApply(s, Create("job", 20, 10, 1, 1));
  MustApply(s, AddConsumer{"job", "c1"});
  MustApply(s, RegisterWorker{"w1", "a"});
  MustApply(s, LeaseSplits{"job", "w1", {{{0, 0}, "c1"}, {{0, 1}, "c1"}}});
  MustApply(s, RemoveWorker{"w1"});
  MustApply(s, AckSplits{"job", "c1", {{0, 0}, {0, 1}}});
  EXPECT_TRUE(s.job("job")->finished());
  EXPECT_TRUE(AllJobsFinished(s));
}

TEST(StateTest, RefusesInconsistentUpdatesWithoutChangingAnything) {
  DispatcherState s;
  MustApply(s, Create());
  MustApply(s, AddConsumer{"job", "c1"});
  MustApply(s, AddConsumer{"job", "c2"});
  MustApply(s, RegisterWorker{"w1", "a"});
  MustApply(s, LeaseSplits{"job", "w1", {{{0, 0}, "c1"}}});
  const uint64_t applied = s.applied();
  EXPECT_FALSE(s.Apply(LeaseSplits{"job", "w1", {{{0, 1}, "c1"}, {{0, 0}, "c1"}}}).ok()) << "0 is leased";
  EXPECT_TRUE(s.LeasesOf("w1")["job"].size() == 1) << "all or nothing";
  EXPECT_FALSE(s.Apply(AckSplits{"job", "c2", {{0, 0}}}).ok()) << "another consumer's split";
  EXPECT_FALSE(s.Apply(LeaseSplits{"job", "nobody", {{{0, 1}, "c1"}}}).ok());
  EXPECT_FALSE(s.Apply(LeaseSplits{"job", "w1", {{{0, 99}, "c1"}}}).ok());
  EXPECT_FALSE(s.Apply(Create("job", 5)).ok()) << "same name, other config";
  EXPECT_TRUE(s.Apply(Create()).ok()) << "same config: idempotent";
  EXPECT_EQ(s.applied(), applied + 1);
}




}  // namespace
}  // namespace ferry::dispatch

namespace ferry::dispatch {
namespace {

using namespace ::ferry::dispatch::test;  // NOLINT

// A job of 4 one-batch splits an epoch and 2 ranks, both joined.
void StartTwoRanks(DispatcherState& s) {
  CreateJob c = Create("job", 40, 10, 1, 2);
  c.spec.num_consumers = 2;
  MustApply(s, c);
  MustApply(s, AddConsumer{"job", "rank-0"});
  MustApply(s, AddConsumer{"job", "rank-1"});
}

// Found by the dispatcher fuzzer: a rank acknowledging (or restoring as done) a split
// of another rank that no one had been given yet took it over, and that rank would
// never see it. A ranked job's split is its rank's, assigned or not.
TEST(StateTest, ARankCannotAcknowledgeOrRestoreAnotherRanksSplit) {
  DispatcherState s;
  StartTwoRanks(s);
  Status st = s.Apply(AckSplits{"job", "rank-1", {{0, 2}}});  // split 2 is rank 0's
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << st.ToString();
  EXPECT_NE(st.message().find("belongs to rank-0"), std::string::npos) << st.ToString();
  st = s.Apply(RestoreConsumer{"job", "rank-1", 0, {{0, 1}, {0, 2}}});
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << st.ToString();
  MustApply(s, AckSplits{"job", "rank-1", {{0, 1}}});  // its own
  MustApply(s, RestoreConsumer{"job", "rank-1", 0, {{0, 1}, {0, 3}}});
}

// Found by a longer run of the dispatcher fuzzer: no update, however it comes, may
// make a ranked job's split another rank's. Restoring the last rank to an epoch
// already complete reopened that epoch with every split the restoring rank's, so the
// other ranks (back later) would never be served theirs; and a lease or a snapshot's
// assignment could name any consumer.
TEST(StateTest, NoUpdateGivesARanksSplitToAnotherRank) {
  DispatcherState s;
  StartTwoRanks(s);
  MustApply(s, RegisterWorker{"w1", "a"});
  Status st = s.Apply(LeaseSplits{"job", "w1", {{{0, 0}, "rank-0"}, {{0, 1}, "rank-0"}}});
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << st.ToString();
  EXPECT_NE(st.message().find("belongs to rank-1"), std::string::npos) << st.ToString();
  EXPECT_EQ(s.job("job")->epochs.count(0), 0u);  // refused whole
  st = s.Apply(AssignSplits{"job", "rank-1", {{0, 0}}});
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << st.ToString();

  // Epoch 0 done by both ranks; rank 1 goes; rank 0 restores to epoch 0.
  MustApply(s, AckSplits{"job", "rank-0", {{0, 0}, {0, 2}}});
  MustApply(s, AckSplits{"job", "rank-1", {{0, 1}, {0, 3}}});
  ASSERT_EQ(s.job("job")->first_open, 1u);
  MustApply(s, RemoveConsumer{"job", "rank-1"});
  MustApply(s, RestoreConsumer{"job", "rank-0", 0, {{0, 0}}});
  const EpochState& e = s.job("job")->epochs.at(0);
  for (int64_t i = 0; i < 4; ++i) EXPECT_EQ(e.consumer[size_t(i)], i % 2 == 0 ? "rank-0" : "rank-1") << i;
  EXPECT_EQ(e.status[2], SplitStatus::kPending);  // rank 0's, not in its saved state
  EXPECT_EQ(e.status[1], SplitStatus::kDone);     // rank 1's, as it was
}

}  // namespace
}  // namespace ferry::dispatch
