// The dispatcher's state machine, decisions and journal, without sockets.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <set>

#include "dispatch/decisions.h"
#include "dispatch/journal.h"
#include "dispatch/state.h"
#include "core/philox.h"
#include "testutil.h"

namespace ferry::dispatch {
namespace {

JobConfig Config(const std::string& name = "job", int64_t n = 100, int32_t batch = 10, int32_t per_split = 2,
                 int64_t epochs = 2) {
  JobConfig c;
  c.name = name;
  c.dataset = "/data";
  c.pipeline_json = "{}";
  c.num_samples = n;
  c.batch_size = batch;
  c.batches_per_split = per_split;
  c.epochs = epochs;
  return c;
}

void MustApply(DispatcherState& s, const Update& u) {
  Status st = s.Apply(u);
  ASSERT_TRUE(st.ok()) << st.ToString();
}

TEST(JobConfigTest, SplitGeometry) {
  JobConfig c = Config("j", 95, 10, 3);
  c.last_batch = LastBatch::kKeep;
  EXPECT_EQ(c.BatchesPerEpoch(), 10);
  EXPECT_EQ(c.SplitsPerEpoch(), 4);
  EXPECT_EQ(c.SplitBatches(3), (std::pair<int64_t, int64_t>{9, 10}));
  c.last_batch = LastBatch::kDrop;
  EXPECT_EQ(c.BatchesPerEpoch(), 9);
  EXPECT_EQ(c.SplitsPerEpoch(), 3);
}

TEST(StateTest, LeaseAckAdvancesEpochs) {
  DispatcherState s;
  MustApply(s, CreateJob{Config()});
  MustApply(s, AddConsumer{"job", "c1"});
  MustApply(s, RegisterWorker{"w1", "127.0.0.1:1"});
  // 10 batches / 2 per split = 5 splits per epoch.
  auto leases = DecideLeases(s, "w1", LeasePolicy{3});
  ASSERT_EQ(leases.size(), 1u);
  ASSERT_EQ(leases[0].splits.size(), 3u);
  MustApply(s, leases[0]);
  EXPECT_TRUE(DecideLeases(s, "w1", LeasePolicy{3}).empty()) << "holds its maximum";
  MustApply(s, AckSplits{"job", "c1", {{0, 0}, {0, 1}, {0, 2}}});
  // Leasing continues through the rest of epoch 0 and into epoch 1.
  leases = DecideLeases(s, "w1", LeasePolicy{3});
  ASSERT_EQ(leases.size(), 1u);
  ASSERT_EQ(leases[0].splits.size(), 3u);
  EXPECT_EQ(leases[0].splits[0].ref, (SplitRef{0, 3}));
  EXPECT_EQ(leases[0].splits[2].ref, (SplitRef{1, 0}));
  MustApply(s, leases[0]);
  EXPECT_FALSE(s.EpochComplete("job", 0));
  MustApply(s, AckSplits{"job", "c1", {{0, 3}, {0, 4}}});
  EXPECT_TRUE(s.EpochComplete("job", 0));
  EXPECT_EQ(s.job("job")->first_open, 1u);
}

TEST(DecisionsTest, TheTailOfAJobIsSharedFairly) {
  DispatcherState s;
  MustApply(s, CreateJob{Config("job", 100, 10, 1, 1)});  // 1 epoch of 10 one-batch splits
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

// Leases every pending split to w1 and acks it; returns the splits, in order.
std::vector<SplitRef> LeaseAndAckAll(DispatcherState& s, const std::string& consumer) {
  std::vector<SplitRef> got;
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
  MustApply(s, CreateJob{Config()});
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
  std::vector<SplitRef> got = LeaseAndAckAll(s, "c1");
  std::set<SplitRef> want = {{0, 3}, {0, 4}, {1, 0}, {1, 2}, {1, 3}, {1, 4}};
  EXPECT_EQ(std::set<SplitRef>(got.begin(), got.end()), want);
  EXPECT_EQ(got.size(), want.size());
  MustApply(s, AckSplits{"job", "c1", {{1, 1}}});
  EXPECT_TRUE(s.job("job")->finished());
}

TEST(StateTest, RestoreIntoAFreshJobSkipsCompletedEpochs) {
  DispatcherState s;
  MustApply(s, CreateJob{Config()});
  MustApply(s, AddConsumer{"job", "c1"});
  MustApply(s, RegisterWorker{"w1", "a"});
  MustApply(s, RestoreConsumer{"job", "c1", 1, {{1, 0}, {1, 4}}});
  std::vector<SplitRef> got = LeaseAndAckAll(s, "c1");
  std::set<SplitRef> want = {{1, 1}, {1, 2}, {1, 3}};
  EXPECT_EQ(std::set<SplitRef>(got.begin(), got.end()), want);
  EXPECT_TRUE(s.job("job")->finished());
}

TEST(StateTest, RestoreWithSeveralConsumersMustStayInTheEpoch) {
  DispatcherState s;
  MustApply(s, CreateJob{Config()});
  MustApply(s, AddConsumer{"job", "c1"});
  MustApply(s, AddConsumer{"job", "c2"});
  EXPECT_EQ(s.Apply(RestoreConsumer{"job", "c1", 1, {}}).code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(s.Apply(RestoreConsumer{"job", "c1", 0, {{0, 0}}}).ok());
  EXPECT_EQ(s.Apply(RestoreConsumer{"job", "c2", 0, {{0, 0}}}).code(), StatusCode::kFailedPrecondition)
      << "split 0/0 is c1's";
}

TEST(StateTest, DeadWorkerSplitsReturnWithTheirConsumer) {
  DispatcherState s;
  MustApply(s, CreateJob{Config()});
  MustApply(s, AddConsumer{"job", "c1"});
  MustApply(s, AddConsumer{"job", "c2"});
  MustApply(s, RegisterWorker{"w1", "a"});
  MustApply(s, RegisterWorker{"w2", "b"});
  auto l1 = DecideLeases(s, "w1", LeasePolicy{4});
  ASSERT_EQ(l1.size(), 1u);
  MustApply(s, l1[0]);
  std::map<SplitRef, std::string> owner;
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

TEST(StateTest, AckOfAPendingSplitCounts) {
  // A worker can die after its consumer received every batch of a split: the
  // consumer's ack must still complete it.
  DispatcherState s;
  MustApply(s, CreateJob{Config("job", 20, 10, 1, 1)});
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
  MustApply(s, CreateJob{Config()});
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
  EXPECT_FALSE(s.Apply(CreateJob{Config("job", 5)}).ok()) << "same name, other config";
  EXPECT_TRUE(s.Apply(CreateJob{Config()}).ok()) << "same config: idempotent";
  EXPECT_EQ(s.applied(), applied + 1);
}

TEST(StateTest, DrainingWorkerGetsNoLeases) {
  DispatcherState s;
  MustApply(s, CreateJob{Config()});
  MustApply(s, AddConsumer{"job", "c1"});
  MustApply(s, RegisterWorker{"w1", "a"});
  MustApply(s, DrainWorker{"w1"});
  EXPECT_TRUE(DecideLeases(s, "w1", LeasePolicy{4}).empty());
}

TEST(StateTest, DeterministicOrderingAssignsRoundRobin) {
  DispatcherState s;
  JobConfig c = Config();
  c.ordering = Ordering::kDeterministic;
  MustApply(s, CreateJob{c});
  MustApply(s, AddConsumer{"job", "c1"});
  MustApply(s, AddConsumer{"job", "c2"});
  MustApply(s, RegisterWorker{"w1", "a"});
  auto l = DecideLeases(s, "w1", LeasePolicy{5});
  ASSERT_EQ(l.size(), 1u);
  for (const auto& x : l[0].splits) EXPECT_EQ(x.consumer, x.ref.split % 2 == 0 ? "c1" : "c2");
}

TEST(StateTest, GarbageCollectsFinishedUnusedJobs) {
  DispatcherState s;
  MustApply(s, CreateJob{Config("a", 10, 10, 1, 1)});
  MustApply(s, CreateJob{Config("b", 10, 10, 1, 1)});
  MustApply(s, AddConsumer{"a", "c"});
  MustApply(s, AckSplits{"a", "c", {{0, 0}}});
  auto gc = DecideGarbage(s, {});
  ASSERT_EQ(gc.size(), 1u);
  EXPECT_EQ(gc[0].job, "a");
  EXPECT_TRUE(DecideGarbage(s, {"a"}).empty()) << "still in use";
}

// A random walk of updates, journaled; replaying the journal (with and without a
// compaction in the middle) must rebuild the same state.
DispatcherState RandomWalk(Journal* journal, DispatcherState s, int steps, uint64_t seed, bool compact_midway) {
  SampleRng rng(seed, 0, 0);
  const std::vector<std::string> workers = {"w1", "w2", "w3"};
  for (int i = 0; i < steps; ++i) {
    Update u;
    const uint64_t pick = rng.Below(10);
    const std::string w = workers[rng.Below(3)];
    if (pick < 2) {
      u = RegisterWorker{w, "addr-" + w};
    } else if (pick < 6) {
      auto l = DecideLeases(s, w, LeasePolicy{3});
      if (l.empty()) continue;
      u = l[0];
    } else if (pick < 9) {
      auto leases = s.LeasesOf(w);
      if (leases.empty() || leases["job"].empty()) continue;
      const auto& one = leases["job"][rng.Below(leases["job"].size())];
      u = AckSplits{"job", one.consumer, {one.ref}};
    } else {
      if (!s.workers().count(w)) continue;
      u = RemoveWorker{w};
    }
    if (!s.Apply(u).ok()) continue;
    EXPECT_TRUE(journal->Append(u).ok());
    if (compact_midway && i == steps / 2) {
      EXPECT_TRUE(journal->Compact(s).ok());
    }
  }
  return s;
}

std::string Describe(const DispatcherState& s) {
  std::string out;
  for (const auto& [id, w] : s.workers()) out += "W " + id + " " + w.address + (w.draining ? " d" : "") + "\n";
  for (const auto& [name, j] : s.jobs()) {
    out += "J " + name + " " + std::to_string(j.first_open) + "\n";
    for (const auto& c : j.consumers) out += " C " + c + "\n";
    for (const auto& [e, st] : j.epochs) {
      for (size_t i = 0; i < st.status.size(); ++i)
        out += " S " + std::to_string(e) + "/" + std::to_string(i) + " " + std::to_string(int(st.status[i])) + " " +
               st.worker[i] + " " + st.consumer[i] + "\n";
    }
  }
  return out;
}

class JournalTest : public ::testing::TestWithParam<bool> {};

TEST_P(JournalTest, ReplayRebuildsTheState) {
  testing::TempDir dir;
  std::vector<Update> replay;
  auto j = Journal::Open(dir.path(), &replay);
  ASSERT_TRUE(j.ok()) << j.status().ToString();
  (*j)->set_sync(false);
  EXPECT_TRUE(replay.empty());
  DispatcherState s;
  for (const Update& u : {Update(CreateJob{Config("job", 200, 10, 2, 3)}), Update(AddConsumer{"job", "c1"}),
                          Update(AddConsumer{"job", "c2"})}) {
    MustApply(s, u);
    ASSERT_TRUE((*j)->Append(u).ok());
  }
  s = RandomWalk(j->get(), std::move(s), 400, 7, GetParam());
  // The walk must have exercised leases, acks and deaths, not stood still.
  EXPECT_GT(s.applied(), 150u);
  EXPECT_GT(s.job("job")->first_open, 0u);
  j->reset();

  auto j2 = Journal::Open(dir.path(), &replay);
  ASSERT_TRUE(j2.ok());
  DispatcherState r;
  for (const Update& u : replay) ASSERT_TRUE(r.Apply(u).ok());
  EXPECT_EQ(Describe(r), Describe(s));
}

INSTANTIATE_TEST_SUITE_P(WithAndWithoutCompaction, JournalTest, ::testing::Bool());

TEST(JournalFileTest, TornTailIsDroppedCorruptMiddleIsAnError) {
  testing::TempDir dir;
  std::vector<Update> replay;
  {
    auto j = Journal::Open(dir.path(), &replay);
    ASSERT_TRUE(j.ok());
    for (int i = 0; i < 3; ++i) ASSERT_TRUE((*j)->Append(RegisterWorker{"w" + std::to_string(i), "a"}).ok());
  }
  const std::string path = dir.path() + "/journal-0";
  std::string bytes = testing::ReadFile(path);
  testing::WriteFile(path, bytes.substr(0, bytes.size() - 3));  // crash mid-append
  {
    auto j = Journal::Open(dir.path(), &replay);
    ASSERT_TRUE(j.ok()) << j.status().ToString();
    EXPECT_EQ(replay.size(), 2u);
    ASSERT_TRUE((*j)->Append(RegisterWorker{"w9", "a"}).ok()) << "appends after the cut";
  }
  {
    auto j = Journal::Open(dir.path(), &replay);
    ASSERT_TRUE(j.ok());
    ASSERT_EQ(replay.size(), 3u);
    EXPECT_EQ(std::get<RegisterWorker>(replay[2]).worker, "w9");
  }
  bytes = testing::ReadFile(path);
  bytes[10] ^= 0x55;  // inside the first record
  testing::WriteFile(path, bytes);
  auto bad = Journal::Open(dir.path(), &replay);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kDataLoss);
}

TEST(UpdateCodecTest, RoundTripAndGarbage) {
  const std::vector<Update> all = {CreateJob{Config()}, AddConsumer{"j", "c"}, RegisterWorker{"w", "h:1"},
                                   RemoveWorker{"w"}, DrainWorker{"w"}, LeaseSplits{"j", "w", {{{3, 4}, "c"}}},
                                   AckSplits{"j", "c", {{1, 2}, {1, 3}}}, RemoveJob{"j"}, JobProgress{"j", 5},
                                   RestoreConsumer{"j", "c", 3, {{3, 1}, {4, 0}}}};
  for (const Update& u : all) {
    Result<Update> back = DecodeUpdate(EncodeUpdate(u));
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(EncodeUpdate(*back), EncodeUpdate(u));
  }
  SampleRng rng(3, 0, 0);
  for (int i = 0; i < 2000; ++i) {
    std::string junk(rng.Below(40), '\0');
    for (char& c : junk) c = char(rng.Below(256));
    (void)DecodeUpdate(junk);  // must not crash
  }
}

}  // namespace
}  // namespace ferry::dispatch
