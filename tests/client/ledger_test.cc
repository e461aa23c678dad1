// The client's bookkeeping (lib/client/ledger.h), with no sockets: batches are made
// up by provenance, and the tests play the parts of the worker streams and the
// dispatcher. What they pin down is exactly-once on the client's side: every batch
// yielded once, re-sent ones dropped, done splits acknowledged once, deterministic
// order released in (epoch, split, batch) order, and a saved state that resumes
// exactly.
#include "client/ledger.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>
#include <tuple>
#include <vector>

namespace ferry::client {
namespace {

// A batch of `rows` rows (0: every file of it was bad) with the given provenance.
Batch MakeBatch(uint64_t epoch, int64_t split, int64_t batch_in_split, int64_t batches_in_split, int64_t rows = 4) {
  Batch b;
  b.labels.rank = 1;
  b.labels.shape[0] = rows;
  b.valid = rows;
  b.provenance.epoch = epoch;
  b.provenance.split = split;
  b.provenance.batch_in_split = batch_in_split;
  b.provenance.batches_in_split = batches_in_split;
  return b;
}

using Key = std::tuple<uint64_t, int64_t, int64_t>;  // (epoch, split, batch_in_split)

Key KeyOf(const Batch& b) { return {b.provenance.epoch, b.provenance.split, b.provenance.batch_in_split}; }

// Takes everything releasable; returns the yielded keys in order (duplicates are
// counted by the ledger and dropped here, as the client does).
std::vector<Key> Drain(Ledger& l) {
  std::vector<Key> out;
  while (l.Releasable()) {
    Ledger::Taken t = l.Take();
    if (!t.duplicate) out.push_back(KeyOf(t.batch));
  }
  return out;
}

// Every batch of every split arrives (on stream 0), in the given order of keys.
void ArriveAll(Ledger& l, const std::vector<Key>& keys, int64_t per_split, size_t stream = 0) {
  for (const auto& [e, s, b] : keys) l.Arrive(MakeBatch(e, s, b, per_split), stream);
}

std::vector<Key> Keys(uint64_t epoch, std::vector<int64_t> splits, int64_t per_split) {
  std::vector<Key> out;
  for (int64_t s : splits)
    for (int64_t b = 0; b < per_split; ++b) out.push_back({epoch, s, b});
  return out;
}

TEST(LedgerTest, ArrivalOrderYieldsEachBatchOnceAndAcknowledgesDoneSplits) {
  Ledger l(Ledger::Mode::kArrival);
  ArriveAll(l, Keys(0, {0, 1}, 2), 2);
  EXPECT_EQ(l.queued(), 4u);
  EXPECT_EQ(Drain(l), Keys(0, {0, 1}, 2));
  EXPECT_EQ(l.to_ack(), (std::vector<SplitId>{{0, 0}, {0, 1}}));
  l.Acked(1);
  EXPECT_EQ(l.to_ack(), (std::vector<SplitId>{{0, 1}}));
  EXPECT_EQ(l.duplicates(), 0);
}

// A worker dies after sending part of split 3; its replacement re-sends the split from
// its start. The ledger drops what was yielded and yields the rest: exactly once.
TEST(LedgerTest, ASplitResentAfterAWorkerDiedIsYieldedExactlyOnce) {
  Ledger l(Ledger::Mode::kArrival);
  ArriveAll(l, {{0, 3, 0}, {0, 3, 1}}, 4, /*stream=*/0);
  EXPECT_EQ(Drain(l).size(), 2u);
  EXPECT_TRUE(l.to_ack().empty()) << "half a split is not done";
  // The replacement (stream 1) sends all four batches of split 3.
  ArriveAll(l, Keys(0, {3}, 4), 4, /*stream=*/1);
  const std::vector<Key> second = Drain(l);
  EXPECT_EQ(second, (std::vector<Key>{{0, 3, 2}, {0, 3, 3}}));
  EXPECT_EQ(l.duplicates(), 2);
  EXPECT_EQ(l.to_ack(), (std::vector<SplitId>{{0, 3}})) << "acknowledged once";
  // Yet another re-send after the split is done: every batch is a duplicate.
  ArriveAll(l, Keys(0, {3}, 4), 4, /*stream=*/2);
  EXPECT_TRUE(Drain(l).empty());
  EXPECT_EQ(l.duplicates(), 6);
  EXPECT_EQ(l.to_ack().size(), 1u);
}

TEST(LedgerTest, DuplicatesStillReturnTheirStreamsCredit) {
  Ledger l(Ledger::Mode::kArrival);
  l.Arrive(MakeBatch(0, 0, 0, 1), 5);
  l.Arrive(MakeBatch(0, 0, 0, 1), 6);
  EXPECT_EQ(l.QueuedFrom(5), 1);
  EXPECT_EQ(l.QueuedFrom(6), 1);
  Ledger::Taken a = l.Take();
  EXPECT_FALSE(a.duplicate);
  EXPECT_EQ(a.stream, 5u);
  Ledger::Taken b = l.Take();
  EXPECT_TRUE(b.duplicate);
  EXPECT_EQ(b.stream, 6u) << "the dropped batch's credit goes back to its own stream";
  EXPECT_EQ(l.QueuedFrom(6), 0);
}

// Peek shows what Take would take, and whether it is a duplicate (the client drops
// those before it says a batch is ready, so that Next() after WaitReady never waits).
TEST(LedgerTest, PeekShowsTheReleasableArrivalAndWhetherItIsADuplicate) {
  Ledger l(Ledger::Mode::kArrival);
  bool duplicate = true;
  EXPECT_EQ(l.Peek(&duplicate), nullptr);
  ArriveAll(l, {{0, 3, 0}}, 2);
  const Batch* b = l.Peek(&duplicate);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(KeyOf(*b), Key(0, 3, 0));
  EXPECT_FALSE(duplicate);
  EXPECT_FALSE(l.Take().duplicate);
  ArriveAll(l, {{0, 3, 0}}, 2);  // re-sent
  b = l.Peek(&duplicate);
  ASSERT_NE(b, nullptr);
  EXPECT_TRUE(duplicate);
  EXPECT_EQ(l.duplicates(), 0) << "peeking counts nothing";
  EXPECT_TRUE(l.Take().duplicate);
  EXPECT_EQ(l.Peek(&duplicate), nullptr);
}

TEST(LedgerTest, EmptyBatchesCountTowardsTheirSplitWithoutBeingQueued) {
  Ledger l(Ledger::Mode::kArrival);
  EXPECT_EQ(l.Arrive(MakeBatch(0, 0, 0, 2, /*rows=*/0), 0), Ledger::Arrival::kAccounted) << "every file bad: its credit returns at once";
  EXPECT_EQ(l.queued(), 0u);
  EXPECT_EQ(l.Arrive(MakeBatch(0, 0, 1, 2), 0), Ledger::Arrival::kQueued);
  EXPECT_EQ(Drain(l).size(), 1u);
  EXPECT_EQ(l.to_ack(), (std::vector<SplitId>{{0, 0}})) << "the empty batch counted";
}

// Deterministic order: batches arrive from three workers in a scrambled order, across
// two open epochs; the ledger releases exactly the order (epoch, split, batch) of this
// consumer's splits, as the dispatcher lists them.
TEST(LedgerTest, DeterministicOrderReleasesSplitOrderWhateverTheArrivalOrder) {
  Ledger l(Ledger::Mode::kDeterministic);
  const int64_t per_split = 3;
  std::vector<Key> want;
  for (uint64_t e : {0u, 1u})
    for (Key k : Keys(e, {1, 4, 6}, per_split)) want.push_back(k);
  std::vector<Key> scrambled = want;
  std::shuffle(scrambled.begin(), scrambled.end(), std::mt19937(5));
  // Before the dispatcher has said which splits are mine, nothing is releasable.
  for (size_t i = 0; i < scrambled.size(); ++i) {
    const auto& [e, s, b] = scrambled[i];
    l.Arrive(MakeBatch(e, s, b, per_split), i % 3);
  }
  EXPECT_FALSE(l.Releasable());
  EXPECT_EQ(l.StatusEpoch(), 0u);
  l.OnStatus(0, JobStatus{0, false, {1, 4, 6}, /*epoch_fully_assigned=*/true});
  std::vector<Key> got = Drain(l);
  EXPECT_EQ(got, Keys(0, {1, 4, 6}, per_split)) << "epoch 1 waits until epoch 0 is known complete";
  // Every split of mine in epoch 0 is done: the next status request is for epoch 1.
  l.OnStatus(0, JobStatus{0, false, {1, 4, 6}, true});
  EXPECT_EQ(l.StatusEpoch(), 1u);
  l.OnStatus(1, JobStatus{0, false, {1, 4, 6}, true});
  for (Key k : Drain(l)) got.push_back(k);
  EXPECT_EQ(got, want);
  EXPECT_EQ(l.to_ack().size(), 6u);
}

TEST(LedgerTest, DeterministicOrderWaitsForSplitsNotYetAssigned) {
  Ledger l(Ledger::Mode::kDeterministic);
  l.Arrive(MakeBatch(0, 5, 0, 1), 0);
  // The dispatcher has assigned me split 2 only so far (and more may come).
  l.OnStatus(0, JobStatus{0, false, {2}, /*epoch_fully_assigned=*/false});
  EXPECT_FALSE(l.Releasable()) << "split 2 comes first";
  l.Arrive(MakeBatch(0, 2, 0, 1), 1);
  EXPECT_EQ(Drain(l), (std::vector<Key>{{0, 2, 0}}));
  EXPECT_FALSE(l.Releasable()) << "split 5 is not known to be mine yet";
  l.OnStatus(0, JobStatus{0, false, {2, 5}, false});
  EXPECT_EQ(Drain(l), (std::vector<Key>{{0, 5, 0}}));
}

TEST(LedgerTest, DeterministicOrderDropsDuplicatesWheneverTheyArrive) {
  Ledger l(Ledger::Mode::kDeterministic);
  l.OnStatus(0, JobStatus{0, false, {0, 1}, true});
  ArriveAll(l, Keys(0, {0}, 2), 2);
  EXPECT_EQ(Drain(l).size(), 2u);
  // A re-send of split 0 while split 1 has not arrived: dropped, not blocking.
  ArriveAll(l, Keys(0, {0}, 2), 2);
  EXPECT_TRUE(Drain(l).empty());
  EXPECT_EQ(l.duplicates(), 2);
  EXPECT_EQ(l.queued(), 0u);
}

TEST(LedgerTest, ProgressDropsCompletedEpochs) {
  Ledger l(Ledger::Mode::kArrival);
  ArriveAll(l, Keys(0, {0}, 1), 1);
  ArriveAll(l, Keys(1, {0}, 1), 1);
  EXPECT_EQ(Drain(l).size(), 1u) << "epoch 1 waits until the job has closed epoch 0";
  l.OnProgress(/*first_open=*/1, /*finished=*/false);
  EXPECT_EQ(l.first_open(), 1u);
  EXPECT_EQ(Drain(l).size(), 1u);
  const IteratorState st = l.Save();
  EXPECT_EQ(st.first_open, 1u);
  EXPECT_EQ(st.done, (std::set<IteratorState::SplitId>{{1, 0}})) << "epoch 0 is summarized by first_open";
  // A late re-send from a complete epoch is a duplicate.
  l.Arrive(MakeBatch(0, 0, 0, 1), 0);
  EXPECT_TRUE(Drain(l).empty());
  EXPECT_EQ(l.duplicates(), 1);
  EXPECT_FALSE(l.finished());
  l.OnProgress(2, true);
  EXPECT_TRUE(l.finished());
}

// Stop mid-split, save, and a new ledger restored from the state yields exactly the
// batches the first did not, whatever is re-sent: the two together are the epoch.
TEST(LedgerTest, ASavedStateResumesExactly) {
  const int64_t per_split = 3;
  const std::vector<Key> epoch = Keys(0, {0, 1, 2, 3}, per_split);
  std::set<Key> first_half;
  IteratorState saved;
  {
    Ledger l(Ledger::Mode::kArrival);
    ArriveAll(l, epoch, per_split);
    for (int i = 0; i < 7; ++i) {
      Ledger::Taken t = l.Take();
      ASSERT_FALSE(t.duplicate);
      first_half.insert(KeyOf(t.batch));
    }
    saved = l.Save();
  }
  EXPECT_EQ(saved.done.size(), 2u);
  EXPECT_EQ(saved.partial.size(), 1u);
  Result<IteratorState> parsed = IteratorState::Parse([&] {
    IteratorState s = saved;
    s.job = "j";
    s.consumer = "c";
    return s.Serialize();
  }());
  ASSERT_TRUE(parsed.ok());
  Ledger resumed(Ledger::Mode::kArrival);
  resumed.Restore(*parsed);
  // The restored consumer's splits come again in full (the dispatcher re-leases them).
  ArriveAll(resumed, epoch, per_split);
  std::set<Key> second_half;
  for (Key k : Drain(resumed)) EXPECT_TRUE(second_half.insert(k).second);
  for (Key k : second_half) EXPECT_FALSE(first_half.count(k)) << "yielded twice";
  EXPECT_EQ(first_half.size() + second_half.size(), epoch.size()) << "lost batches";
}

// Several epochs open at once and batches of both arriving interleaved, with random
// re-sends: every batch is yielded exactly once, epoch after epoch, and every split
// acknowledged once. The dispatcher closes an epoch once its 5 splits are acknowledged.
TEST(LedgerTest, RandomInterleavingsAndResendsStayExactlyOnce) {
  for (uint32_t seed = 0; seed < 20; ++seed) {
    std::mt19937 rng(seed);
    Ledger l(Ledger::Mode::kArrival);
    const int64_t per_split = 1 + int64_t(rng() % 4);
    std::vector<Key> all;
    for (uint64_t e : {0u, 1u, 2u})
      for (Key k : Keys(e, {0, 1, 2, 3, 4}, per_split)) all.push_back(k);
    std::vector<Key> sends = all;
    for (int i = 0; i < 30; ++i) sends.push_back(all[rng() % all.size()]);  // re-sends
    std::shuffle(sends.begin(), sends.end(), rng);
    std::multiset<Key> yielded;
    uint64_t last_epoch = 0;
    auto drain = [&] {
      for (;;) {
        for (Key k : Drain(l)) {
          EXPECT_GE(std::get<0>(k), last_epoch) << "an epoch after a later one";
          last_epoch = std::get<0>(k);
          yielded.insert(k);
        }
        int64_t acked = 0;
        for (const SplitId& k : l.to_ack()) acked += k.epoch == l.first_open() ? 1 : 0;
        if (acked < 5) return;
        l.OnProgress(l.first_open() + 1, false);
      }
    };
    for (const auto& [e, s, b] : sends) {
      l.Arrive(MakeBatch(e, s, b, per_split), rng() % 3);
      if (rng() % 2) drain();
    }
    drain();
    EXPECT_EQ(yielded, std::multiset<Key>(all.begin(), all.end())) << "seed " << seed;
    std::set<SplitId> acked(l.to_ack().begin(), l.to_ack().end());
    EXPECT_EQ(acked.size(), l.to_ack().size()) << "a split acknowledged twice";
    EXPECT_EQ(acked.size(), 15u);
  }
}

// A ranked job: 2 ranks, 12 samples, batches of 2, 1 batch a split: 3 batches a rank,
// rank 1's splits are 1, 3, 5.
JobSpec TwoRanks() {
  JobSpec j;
  j.dataset = "/d";
  j.num_samples = 12;
  j.batch_size = 2;
  j.batches_per_split = 1;
  j.num_consumers = 2;
  j.last_batch = LastBatch::kPad;
  j.epochs = 3;
  return j;
}

TEST(LedgerRanksTest, ARankYieldsOneEpochAtATime) {
  const JobSpec job = TwoRanks();
  Ledger l(Ledger::Mode::kArrival);
  l.SetRanked(&job, /*rank=*/1);
  // Epoch 1's batches arrive before the last of epoch 0 (lease-ahead, a faster worker).
  l.Arrive(MakeBatch(0, 1, 0, 1), 0);
  l.Arrive(MakeBatch(1, 1, 0, 1), 1);
  l.Arrive(MakeBatch(0, 3, 0, 1), 0);
  l.Arrive(MakeBatch(1, 3, 0, 1), 1);
  EXPECT_EQ(Drain(l), (std::vector<Key>{{0, 1, 0}, {0, 3, 0}})) << "epoch 1 waits: 2 of 3 batches of epoch 0 so far";
  l.Arrive(MakeBatch(0, 5, 0, 1, /*rows=*/0), 0);  // every file bad: still a step for the rank
  std::vector<bool> last;
  while (l.Releasable()) last.push_back(l.Take().batch.provenance.last_in_epoch);
  EXPECT_EQ(last, (std::vector<bool>{true, false, false})) << "(0,5) ends the rank's epoch 0, then (1,1), (1,3)";
  EXPECT_EQ(l.epoch_cursor(), 1u);
}

TEST(LedgerRanksTest, DeterministicOrderComesFromTheGeometry) {
  const JobSpec job = TwoRanks();
  Ledger l(Ledger::Mode::kDeterministic);
  l.SetRanked(&job, 1);
  // No status from the dispatcher at all: rank 1's splits are 1, 3, 5 by the geometry.
  for (int64_t s : {5, 3, 1}) l.Arrive(MakeBatch(0, s, 0, 1), 0);
  l.Arrive(MakeBatch(1, 1, 0, 1), 0);
  EXPECT_EQ(Drain(l), (std::vector<Key>{{0, 1, 0}, {0, 3, 0}, {0, 5, 0}, {1, 1, 0}}));
}

TEST(LedgerRanksTest, ARestoredRankResumesItsEpochCount) {
  const JobSpec job = TwoRanks();
  IteratorState st;
  st.first_open = 0;
  st.done = {{0, 1}, {0, 3}};  // two of rank 1's three batches of epoch 0
  Ledger l(Ledger::Mode::kArrival);
  l.Restore(st);
  l.SetRanked(&job, 1);
  EXPECT_EQ(l.epoch_cursor(), 0u);
  l.Arrive(MakeBatch(1, 1, 0, 1), 0);
  EXPECT_FALSE(l.Releasable()) << "one batch of epoch 0 is still to come";
  l.Arrive(MakeBatch(0, 3, 0, 1), 0);  // a re-send: dropped, not counted
  l.Arrive(MakeBatch(0, 5, 0, 1), 0);
  EXPECT_EQ(Drain(l), (std::vector<Key>{{0, 5, 0}, {1, 1, 0}}));
  EXPECT_EQ(l.duplicates(), 1);
}

TEST(LedgerRanksTest, PointToPointLearnsTheShareFromTheBatches) {
  Ledger l(Ledger::Mode::kPointToPoint);
  l.SetRanked(nullptr, 0, /*first_epoch=*/4);
  auto batch = [](uint64_t epoch, int64_t j) {
    Batch b = MakeBatch(epoch, 0, j, 2);
    b.provenance.batch_in_epoch = j;
    b.provenance.batches_in_epoch = 2;
    return b;
  };
  l.Arrive(batch(5, 0), 1);  // worker 1 is ahead
  l.Arrive(batch(4, 0), 0);
  EXPECT_EQ(Drain(l), (std::vector<Key>{{4, 0, 0}}));
  l.Arrive(batch(4, 1), 0);
  EXPECT_EQ(Drain(l), (std::vector<Key>{{4, 0, 1}, {5, 0, 0}}));
}

TEST(LedgerTest, PointToPointIsAPlainQueue) {
  Ledger l(Ledger::Mode::kPointToPoint);
  l.Arrive(MakeBatch(0, 0, 0, 1), 0);
  l.Arrive(MakeBatch(0, 0, 0, 1), 1);  // the same provenance from another worker's shard
  EXPECT_EQ(Drain(l).size(), 2u) << "point to point nothing is deduplicated";
  EXPECT_TRUE(l.to_ack().empty());
}

}  // namespace
}  // namespace ferry::client
