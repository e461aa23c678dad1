// JobSpec (include/ferry/job.h): its geometry (batches and splits of an epoch under
// each last-batch policy), validation, the one fingerprint function, and what two
// requests for the same job must agree on.
#include "ferry/job.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <utility>
#include <vector>

namespace ferry {
namespace {

JobSpec Job(int64_t n, int32_t batch, int32_t per_split, LastBatch last) {
  JobSpec j;
  j.dataset = "/data";
  j.num_samples = n;
  j.batch_size = batch;
  j.batches_per_split = per_split;
  j.last_batch = last;
  return j;
}

TEST(JobSpecTest, Geometry) {
  JobSpec c = Job(95, 10, 3, LastBatch::kKeep);
  EXPECT_EQ(c.BatchesPerEpoch(), 10);
  EXPECT_EQ(c.SplitsPerEpoch(), 4);
  EXPECT_EQ(c.SplitBatches(0), (std::pair<int64_t, int64_t>{0, 3}));
  EXPECT_EQ(c.SplitBatches(3), (std::pair<int64_t, int64_t>{9, 10}));
  c.last_batch = LastBatch::kPad;
  EXPECT_EQ(c.BatchesPerEpoch(), 10);
  c.last_batch = LastBatch::kDrop;
  EXPECT_EQ(c.BatchesPerEpoch(), 9);
  EXPECT_EQ(c.SplitsPerEpoch(), 3);
  EXPECT_EQ(BatchesIn(100, 10, LastBatch::kKeep), 10) << "no short batch";
  EXPECT_EQ(BatchesIn(0, 10, LastBatch::kKeep), 0);
  EXPECT_EQ(BatchesIn(5, 10, LastBatch::kDrop), 0);
  EXPECT_EQ(BatchesIn(5, 10, LastBatch::kPad), 1);
}

TEST(JobSpecTest, OneDefaultForTheLastBatch) {
  // torch.utils.data.DataLoader's drop_last=False, the same for the Loader, the Client
  // and the wire (each embeds this struct).
  EXPECT_EQ(JobSpec{}.last_batch, LastBatch::kKeep);
}

TEST(JobSpecTest, LastBatchNames) {
  for (LastBatch l : {LastBatch::kDrop, LastBatch::kPad, LastBatch::kKeep}) {
    Result<LastBatch> back = ParseLastBatch(LastBatchName(l));
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(*back, l);
  }
  Result<LastBatch> bad = ParseLastBatch("truncate");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("truncate"), std::string::npos);
}

TEST(JobSpecTest, BadSamplesNamesAndFingerprint) {
  for (BadSamples b : {BadSamples::kSkip, BadSamples::kRefill}) {
    Result<BadSamples> back = ParseBadSamples(BadSamplesName(b));
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(*back, b);
  }
  Result<BadSamples> bad = ParseBadSamples("repeat");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("repeat"), std::string::npos);
  EXPECT_EQ(JobSpec{}.bad_samples, BadSamples::kSkip);
  // Refill moves samples between batches: a state saved under one policy names other
  // batches under the other, so the config fingerprint tells them apart.
  JobSpec a = Job(95, 10, 3, LastBatch::kKeep), b = a;
  b.bad_samples = BadSamples::kRefill;
  EXPECT_NE(a.ConfigFingerprint(), b.ConfigFingerprint());
  EXPECT_FALSE(a.SameJobAs(b));
}

// A sweep's lanes, and jobs of other weights, make the same batches: the content key
// (what decides a batch's bytes) leaves out sharing, ordering, weight and priority; the
// config fingerprint (what a saved state must match) keeps sharing.
TEST(JobSpecTest, SharingWeightAndPriority) {
  JobSpec a;
  a.dataset = "/data/train";
  a.num_samples = 1000;
  a.fingerprint = 7;
  JobSpec b = a;
  b.sharing = Sharing::kEvery;
  b.ordering = Ordering::kDeterministic;
  b.weight = 3;
  b.priority = 2;
  EXPECT_EQ(a.ContentKey(), b.ContentKey());
  EXPECT_NE(a.ConfigFingerprint(), b.ConfigFingerprint());
  JobSpec other_seed = b;
  other_seed.seed = 1;
  EXPECT_NE(b.ContentKey(), other_seed.ContentKey());
  JobSpec other_listing = b;
  other_listing.fingerprint = 8;
  EXPECT_NE(b.ContentKey(), other_listing.ContentKey()) << "another listing: other samples";
  JobSpec weights = a;
  weights.weight = 3;
  EXPECT_EQ(a.ConfigFingerprint(), weights.ConfigFingerprint()) << "a weight changes no batch";
  EXPECT_TRUE(b.Validate().ok());
  b.mode = ProcessingMode::kParallelEpochs;
  EXPECT_NE(b.Validate().message().find("sharing every batch is a distributed_epoch job's"), std::string::npos);
  JobSpec w = a;
  for (double bad : {0.0, -1.0, 1001.0}) {
    w.weight = bad;
    EXPECT_FALSE(w.Validate().ok()) << bad;
  }
  w.weight = 1;
  w.priority = 101;
  EXPECT_FALSE(w.Validate().ok());
}

TEST(JobSpecTest, Validate) {
  EXPECT_TRUE(Job(10, 2, 1, LastBatch::kKeep).Validate().ok());
  JobSpec j = Job(10, 0, 1, LastBatch::kKeep);
  EXPECT_EQ(j.Validate().code(), StatusCode::kInvalidArgument);
  j = Job(10, 2, 0, LastBatch::kKeep);
  EXPECT_EQ(j.Validate().code(), StatusCode::kInvalidArgument);
  j = Job(10, 2, 1, LastBatch::kKeep);
  j.dataset.clear();
  EXPECT_EQ(j.Validate().code(), StatusCode::kInvalidArgument);
  j = Job(10, 2, 1, LastBatch::kKeep);
  j.pipeline.ops.clear();
  EXPECT_EQ(j.Validate().code(), StatusCode::kInvalidArgument) << "the pipeline's form is checked too";
}

TEST(JobSpecTest, TokensAndATokenizerGoTogether) {
  JobSpec j = Job(10, 2, 1, LastBatch::kKeep);
  j.targets = {"text", "tokens"};
  EXPECT_EQ(j.Validate().code(), StatusCode::kInvalidArgument) << "tokens with no model";
  j.tokenizer.model = "/models/spm.model";
  j.tokenizer.length = 32;
  EXPECT_TRUE(j.Validate().ok());
  EXPECT_FALSE(j.geometric_targets()) << "ids do not move with the image";
  const uint64_t with = j.ConfigFingerprint();
  j.tokenizer.add_eos = true;
  EXPECT_NE(j.ConfigFingerprint(), with) << "other ids: another job";
  for (int32_t bad : {0, -3, TokenizerSpec::kMaxLength + 1}) {
    j.tokenizer.length = bad;
    EXPECT_EQ(j.Validate().code(), StatusCode::kInvalidArgument) << bad;
  }
  j.tokenizer.length = 8;
  j.tokenizer.pad_id = -2;
  EXPECT_EQ(j.Validate().code(), StatusCode::kInvalidArgument);
  j.tokenizer.pad_id = -1;
  j.targets = {"text"};
  EXPECT_EQ(j.Validate().code(), StatusCode::kInvalidArgument) << "a model without the tokens target";
}

TEST(JobSpecTest, SameJobIgnoresOnlyTheListingFacts) {
  JobSpec a = Job(10, 2, 1, LastBatch::kKeep);
  JobSpec b = a;
  b.num_samples = 0;
  b.fingerprint = 1234;
  EXPECT_TRUE(b.SameJobAs(a)) << "a request does not know the listing yet";
  EXPECT_FALSE(b == a);
  b.seed = 1;
  EXPECT_FALSE(b.SameJobAs(a));
  b = a;
  b.pipeline = PipelineSpec::ImagenetEval();
  EXPECT_FALSE(b.SameJobAs(a));
  b = a;
  b.ordering = Ordering::kDeterministic;
  EXPECT_FALSE(b.SameJobAs(a));
}

TEST(JobSpecTest, PipelinesCompareByWhatTheyDo) {
  PipelineSpec a = PipelineSpec::ImagenetEval();
  PipelineSpec b = a;
  b.ops[1].params = R"({ "size" : 224 })";  // the same parameters, spelt otherwise
  EXPECT_EQ(a, b);
  b.ops[1].params = R"({"size": 160})";
  EXPECT_FALSE(a == b);
}

TEST(JobSpecTest, TheFingerprintCoversListingAndPipeline) {
  const uint64_t f = JobFingerprint(42, PipelineSpec::ImagenetTrain());
  EXPECT_EQ(f, JobFingerprint(42, PipelineSpec::ImagenetTrain())) << "stable";
  EXPECT_NE(f, JobFingerprint(43, PipelineSpec::ImagenetTrain()));
  EXPECT_NE(f, JobFingerprint(42, PipelineSpec::ImagenetEval()));
}


}  // namespace
}  // namespace ferry

namespace ferry {
namespace {

JobSpec Ranked(int64_t n, int32_t batch, int32_t per_split, int32_t ranks, LastBatch last) {
  JobSpec j = Job(n, batch, per_split, last);
  j.num_consumers = ranks;
  return j;
}

// Every rank's batches, as positions of the epoch's order (-1: padding), by rank.
std::vector<std::vector<int64_t>> RankPositions(const JobSpec& j) {
  std::vector<std::vector<int64_t>> out(size_t(j.num_consumers));
  for (int64_t s = 0; s < j.SplitsPerEpoch(); ++s) {
    const int64_t r = j.SplitRank(s);
    const auto [first, end] = j.SplitBatches(s);
    for (int64_t b = first; b < end; ++b) {
      const auto [lo, hi] = j.BatchPositions(j.GlobalBatch(r, b));
      for (int64_t p = lo; p < hi; ++p) out[size_t(r)].push_back(p);
      for (int64_t p = hi - lo; p < j.batch_size; ++p) out[size_t(r)].push_back(-1);
    }
  }
  return out;
}

TEST(JobSpecRanksTest, EveryRankGetsTheSameNumberOfBatches) {
  // 103 samples, batches of 5, 4 ranks: 5 rounds of 20 samples fit (drop: 3 left out);
  // 6 rounds under pad, the last one mostly padding.
  for (LastBatch last : {LastBatch::kDrop, LastBatch::kPad}) {
    for (int32_t per_split : {1, 2, 4}) {
      const JobSpec j = Ranked(103, 5, per_split, 4, last);
      EXPECT_EQ(j.RankBatches(), last == LastBatch::kDrop ? 5 : 6);
      EXPECT_EQ(j.BatchesPerEpoch(), 4 * j.RankBatches());
      const auto ranks = RankPositions(j);
      std::vector<int64_t> all;
      for (const auto& r : ranks) {
        EXPECT_EQ(int64_t(r.size()), j.RankBatches() * 5) << "equal steps, full batches";
        for (int64_t p : r)
          if (p >= 0) all.push_back(p);
      }
      std::sort(all.begin(), all.end());
      EXPECT_EQ(std::adjacent_find(all.begin(), all.end()), all.end()) << "a position twice";
      if (last == LastBatch::kDrop) {
        EXPECT_EQ(all.size(), 100u) << "fewer than ranks x batch (20) left out";
        EXPECT_LT(103 - int64_t(all.size()), 4 * 5);
      } else {
        EXPECT_EQ(all.size(), 103u) << "every sample, padded, none repeated";
      }
    }
  }
}

TEST(JobSpecRanksTest, SplitsBelongToRanksRoundRobin) {
  const JobSpec j = Ranked(200, 10, 2, 3, LastBatch::kPad);  // 7 batches a rank: 4 splits a rank
  EXPECT_EQ(j.RankBatches(), 7);
  EXPECT_EQ(j.SplitsPerEpoch(), 12);
  for (int64_t s = 0; s < 12; ++s) EXPECT_EQ(j.SplitRank(s), s % 3);
  EXPECT_EQ(j.SplitBatches(10), (std::pair<int64_t, int64_t>{6, 7})) << "rank 1's last split: its 7th batch";
  EXPECT_EQ(j.GlobalBatch(1, 6), 19);
}

TEST(JobSpecRanksTest, OneRankMayKeepAShortBatchSeveralMayNot) {
  JobSpec one = Ranked(23, 5, 2, 1, LastBatch::kKeep);
  EXPECT_TRUE(one.Validate().ok());
  EXPECT_EQ(one.RankBatches(), 5);
  EXPECT_EQ(one.BatchPositions(4), (std::pair<int64_t, int64_t>{20, 23}));
  JobSpec two = Ranked(23, 5, 2, 2, LastBatch::kKeep);
  EXPECT_EQ(two.Validate().code(), StatusCode::kInvalidArgument);
}

TEST(JobSpecRanksTest, ConsumerIdsOfRanks) {
  EXPECT_EQ(RankConsumer(7), "rank-7");
  EXPECT_EQ(ConsumerRank("rank-7"), 7);
  EXPECT_EQ(ConsumerRank("rank-0"), 0);
  for (const char* bad : {"rank-", "rank-07", "rank-x", "trainer", "rank-1a", "rank--1"}) {
    EXPECT_EQ(ConsumerRank(bad), -1) << bad;
  }
}

// Elastic resume: 4 ranks yield part of an epoch, 2 ranks take the rest as a remainder
// job, then 3 ranks the rest of that: each position of the epoch is yielded once.
TEST(JobSpecRemainderTest, TheRestOfAnEpochAcrossWorldSizes) {
  for (LastBatch last : {LastBatch::kDrop, LastBatch::kPad}) {
    const JobSpec four = Ranked(103, 5, 2, 4, last);
    // Arrival order: each rank has yielded some batches, not only a prefix.
    const std::vector<std::vector<int64_t>> yielded4 = {{0, 1, 3}, {0, 1, 2}, {1, 2}, {0, 4}};
    auto taken = TakenPositions(four, yielded4);
    ASSERT_TRUE(taken.ok()) << taken.status().ToString();
    std::vector<int64_t> by4;  // positions the 4 ranks yielded
    for (size_t r = 0; r < 4; ++r)
      for (int64_t j : yielded4[r]) {
        const auto [lo, hi] = four.BatchPositions(four.GlobalBatch(int64_t(r), j));
        for (int64_t p = lo; p < hi; ++p) by4.push_back(p);
      }
    int64_t covered = 0;
    for (const auto& [lo, hi] : *taken) covered += hi - lo;
    EXPECT_EQ(covered, int64_t(by4.size()));

    JobSpec two = Ranked(103, 5, 2, 2, last);
    two.taken = *taken;
    two.first_epoch = 3;
    two.epochs = 1;  // a remainder job is its one epoch
    ASSERT_TRUE(two.Validate().ok()) << two.Validate().ToString();
    ASSERT_TRUE(two.CheckListed().ok());
    EXPECT_EQ(two.epoch_samples(), 103 - covered);
    // The 2 ranks yield their first two batches each, then 3 ranks take what is left.
    taken = TakenPositions(two, {{0, 1}, {0, 1}});
    ASSERT_TRUE(taken.ok()) << taken.status().ToString();
    JobSpec three = Ranked(103, 5, 2, 3, last);
    three.taken = *taken;
    three.first_epoch = 3;
    three.epochs = 1;
    ASSERT_TRUE(three.Validate().ok());
    // Everything, in positions of the full order: 4 ranks', 2 ranks', 3 ranks' batches.
    auto positions_of = [](const JobSpec& j) {
      // Map each position of j's order back to the full order (its segments).
      std::vector<int64_t> full;
      int64_t p = 0;
      for (const auto& [lo, hi] : j.taken) {
        for (; p < lo; ++p) full.push_back(p);
        p = hi;
      }
      for (; p < j.num_samples; ++p) full.push_back(p);
      std::vector<int64_t> out;
      for (const auto& r : RankPositions(j))
        for (int64_t q : r)
          if (q >= 0) out.push_back(full[size_t(q)]);
      return out;
    };
    std::vector<int64_t> all = by4;
    // The 2 ranks' first two batches each.
    {
      std::vector<int64_t> full;
      int64_t p = 0;
      for (const auto& [lo, hi] : two.taken) {
        for (; p < lo; ++p) full.push_back(p);
        p = hi;
      }
      for (; p < 103; ++p) full.push_back(p);
      for (int64_t r = 0; r < 2; ++r)
        for (int64_t j : {0, 1}) {
          const auto [lo, hi] = two.BatchPositions(two.GlobalBatch(r, j));
          for (int64_t q = lo; q < hi; ++q) all.push_back(full[size_t(q)]);
        }
    }
    const std::vector<int64_t> rest = positions_of(three);
    all.insert(all.end(), rest.begin(), rest.end());
    std::sort(all.begin(), all.end());
    EXPECT_EQ(std::adjacent_find(all.begin(), all.end()), all.end()) << "a position twice";
    if (last == LastBatch::kPad) {
      EXPECT_EQ(all.size(), 103u) << "pad: the whole epoch";
    } else {
      EXPECT_LT(103 - int64_t(all.size()), 3 * 5) << "drop: fewer than the last world's ranks x batch left out";
    }
  }
}

TEST(JobSpecRemainderTest, BadTakenRangesAndBatchesAreRefused) {
  JobSpec j = Ranked(50, 5, 1, 2, LastBatch::kPad);
  j.epochs = 1;
  j.taken = {{10, 20}, {15, 30}};
  EXPECT_EQ(j.Validate().code(), StatusCode::kInvalidArgument) << "overlapping";
  j.taken = {{10, 60}};
  EXPECT_TRUE(j.Validate().ok());
  EXPECT_EQ(j.CheckListed().code(), StatusCode::kInvalidArgument) << "past the dataset";
  j.taken = {{0, 50}};
  EXPECT_EQ(j.CheckListed().code(), StatusCode::kInvalidArgument) << "nothing left";
  j.taken = {{0, 10}};
  j.epochs = 2;
  EXPECT_EQ(j.Validate().code(), StatusCode::kInvalidArgument) << "a remainder job has one epoch";
  const JobSpec k = Ranked(50, 5, 1, 2, LastBatch::kPad);
  EXPECT_EQ(TakenPositions(k, {{0}}).status().code(), StatusCode::kInvalidArgument) << "one list per rank";
  EXPECT_EQ(TakenPositions(k, {{0}, {5}}).status().code(), StatusCode::kInvalidArgument) << "rank 1 has 5 batches";
  EXPECT_EQ(TakenPositions(k, {{0, 0}, {}}).status().code(), StatusCode::kInvalidArgument) << "a batch twice";
}

}  // namespace
}  // namespace ferry
