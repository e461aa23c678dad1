// Weighted mixtures (JobSpec::mixture, data/mixture.h): the schedule's shares, each
// source's passes exactly once across epochs, determinism, and the in-process Loader
// over three real image folders: every source's pipeline, ranks resumed 4 -> 2 equal to
// the uninterrupted epoch.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "data/mixture.h"
#include "ferry/job.h"
#include "ferry/loader.h"
#include "image/image_test_util.h"
#include "ops/pipeline.h"
#include "pipeline/split_plan.h"
#include "testutil.h"

namespace ferry {
namespace mixture_test {

using testing::MakeImageFolder;
using testing::TempDir;

JobSpec Mixture(std::vector<std::pair<int64_t, double>> sources, int64_t epoch, uint64_t seed = 7) {
  JobSpec job;
  job.dataset = "mixture";
  for (size_t k = 0; k < sources.size(); ++k)
    job.mixture.push_back({"/data/" + std::to_string(k), sources[k].second, "", sources[k].first});
  job.mixture_epoch = epoch;
  job.seed = seed;
  job.num_samples = 0;
  for (const auto& [n, w] : sources) job.num_samples += n;
  return job;
}

// |z| of a binomial count: within tolerance p >= 1e-3 (two-sided) when |z| <= 3.29.
double Z(int64_t count, int64_t n, double p) {
  return std::abs(double(count) - double(n) * p) / std::sqrt(double(n) * p * (1 - p));
}

TEST(MixtureScheduleTest, CountsAreTheWeightsLargestRemainders) {
  EXPECT_EQ(MixtureCounts(Mixture({{10, 0.6}, {10, 0.3}, {10, 0.1}}, 10000)), (std::vector<int64_t>{6000, 3000, 1000}));
  EXPECT_EQ(MixtureCounts(Mixture({{10, 1}, {10, 1}, {10, 1}}, 10)), (std::vector<int64_t>{4, 3, 3}));
  EXPECT_EQ(MixtureCounts(Mixture({{10, 2}, {10, 1}}, 1)), (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(MixtureCounts(Mixture({{10, 5}, {10, 3}, {10, 2}}, 7)), (std::vector<int64_t>{4, 2, 1}));
}

TEST(MixtureScheduleTest, SharesWithinBinomialToleranceOverTenThousandSamples) {
  const std::vector<double> w = {0.6, 0.3, 0.1};
  for (uint64_t seed : {1, 2, 3}) {
    JobSpec job = Mixture({{5000, 0.6}, {2000, 0.3}, {700, 0.1}}, 10000, seed);
    const std::vector<int64_t> order = MixtureOrder(job, 0);
    ASSERT_EQ(order.size(), 10000u);
    // The epoch, and any prefix of it (a run stopped early), and a window in the middle.
    for (auto [lo, hi] : {std::pair<size_t, size_t>{0, 10000}, {0, 1000}, {0, 256}, {4000, 5000}}) {
      std::vector<int64_t> count(3);
      for (size_t p = lo; p < hi; ++p) ++count[size_t(DecodeDraw(job, order[p]).source)];
      for (size_t k = 0; k < 3; ++k)
        EXPECT_LE(Z(count[k], int64_t(hi - lo), w[k]), 3.29)
            << "seed " << seed << " source " << k << " positions [" << lo << ", " << hi << "): " << count[k];
    }
  }
}

// Each source's draws, epoch after epoch, are passes over it: each of its samples once
// a pass, a pass going on across an epoch's end, and a new order each pass.
TEST(MixtureScheduleTest, EachSourcesPassesHoldEverySampleOnceAcrossEpochs) {
  for (bool shuffle : {true, false}) {
    JobSpec job = Mixture({{97, 0.5}, {41, 0.3}, {13, 0.2}}, 1000);
    job.shuffle = shuffle;
    std::vector<std::vector<int64_t>> drawn(3);
    for (uint64_t e = 0; e < 5; ++e) {
      const std::vector<int64_t> order = MixtureOrder(job, e);
      std::set<int64_t> ids(order.begin(), order.end());
      EXPECT_EQ(ids.size(), order.size()) << "a draw id twice in epoch " << e;
      for (int64_t id : order) {
        const MixtureDraw d = DecodeDraw(job, id);
        drawn[size_t(d.source)].push_back(d.index);
      }
    }
    for (size_t k = 0; k < 3; ++k) {
      const size_t n = size_t(job.mixture[k].num_samples);
      std::set<std::vector<int64_t>> orders;
      for (size_t begin = 0; begin + n <= drawn[k].size(); begin += n) {
        std::vector<int64_t> pass(drawn[k].begin() + long(begin), drawn[k].begin() + long(begin + n));
        orders.insert(pass);
        std::sort(pass.begin(), pass.end());
        for (size_t i = 0; i < n; ++i) ASSERT_EQ(pass[i], int64_t(i)) << "source " << k << " pass at " << begin;
      }
      EXPECT_GE(drawn[k].size() / n, 5u);
      if (shuffle) {
        EXPECT_GT(orders.size(), 1u) << "every pass of source " << k << " in the same order";
      }
    }
  }
}

TEST(MixtureScheduleTest, DeterministicForASeedAndEachEpochAlone) {
  const JobSpec a = Mixture({{50, 0.6}, {30, 0.3}, {20, 0.1}}, 500, 11);
  EXPECT_EQ(MixtureOrder(a, 3), MixtureOrder(a, 3));
  EXPECT_NE(MixtureOrder(a, 3), MixtureOrder(a, 4));
  EXPECT_NE(MixtureOrder(a, 3), MixtureOrder(Mixture({{50, 0.6}, {30, 0.3}, {20, 0.1}}, 500, 12), 3));
  // The epoch order the plans use is the mixture's.
  EXPECT_EQ(EpochOrder(a, 2), MixtureOrder(a, 2));
}

TEST(MixtureScheduleTest, WithoutShuffleEachSourceIsEvenlySpaced) {
  JobSpec job = Mixture({{100, 0.6}, {100, 0.3}, {100, 0.1}}, 1000);
  job.shuffle = false;
  const std::vector<int64_t> order = MixtureOrder(job, 0);
  for (size_t at = 0; at + 10 <= order.size(); at += 10) {
    std::vector<int> count(3);
    for (size_t p = at; p < at + 10; ++p) ++count[size_t(DecodeDraw(job, order[p]).source)];
    EXPECT_NEAR(count[0], 6, 1) << at;
    EXPECT_NEAR(count[1], 3, 1) << at;
    EXPECT_NEAR(count[2], 1, 1) << at;
  }
}

TEST(MixtureScheduleTest, ValidateNamesWhatIsWrong) {
  JobSpec job = Mixture({{10, 0.6}, {10, 0.4}}, 100);
  EXPECT_TRUE(job.Validate().ok()) << job.Validate().ToString();
  JobSpec bad = job;
  bad.mixture[1].weight = 0;
  EXPECT_NE(bad.Validate().message().find("mixture source 1: weight"), std::string::npos) << bad.Validate().ToString();
  bad = job;
  bad.mixture_epoch = 0;
  EXPECT_NE(bad.Validate().message().find("mixture_epoch"), std::string::npos);
  bad = job;
  bad.dataset = "/data/x";
  EXPECT_FALSE(bad.Validate().ok());
  bad = job;
  bad.mixture[0].dataset = "synthetic:10:10";
  EXPECT_FALSE(bad.Validate().ok());
  // The sources, weights and epoch decide the draws: a saved state names them.
  bad = job;
  bad.mixture[0].weight = 0.5;
  EXPECT_NE(bad.ConfigFingerprint(), job.ConfigFingerprint());
  bad = job;
  bad.mixture_epoch = 101;
  EXPECT_NE(bad.ConfigFingerprint(), job.ConfigFingerprint());
}

// ---- The in-process Loader over three image folders.

constexpr int kSize = 24;

struct Row {
  int64_t index, label;
  std::string pixels;
  bool operator<(const Row& o) const { return std::tie(index, label, pixels) < std::tie(o.index, o.label, o.pixels); }
  bool operator==(const Row& o) const = default;
};

class MixtureLoaderTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir;
    MakeImageFolder(dir_->path() + "/a", 3, 10, 1);  // 30
    MakeImageFolder(dir_->path() + "/b", 2, 10, 2);  // 20
    MakeImageFolder(dir_->path() + "/c", 2, 4, 3);   // 8
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  static JobSpec Job() {
    JobSpec job;
    job.dataset = "mixture";
    job.mixture = {{dir_->path() + "/a", 0.6, "", 0},
                   {dir_->path() + "/b", 0.3, "", 0},
                   // Its own pipeline: a resize, not the job's random crop; the same rows.
                   {dir_->path() + "/c", 0.1, testing::Uint8Spec(kSize).ToJson(), 0}};
    job.mixture_epoch = 96;
    job.pipeline = testing::Uint8Spec(kSize, /*rrc=*/true, /*hflip=*/0.5);
    job.batch_size = 8;
    job.seed = 5;
    job.epochs = 1;
    job.last_batch = LastBatch::kDrop;
    return job;
  }
  // Every row of the loader's batches (padding left out).
  static std::vector<Row> Rows(const LoaderOptions& o, size_t max_batches = SIZE_MAX,
                               std::vector<int64_t>* batches = nullptr) {
    Result<std::unique_ptr<Loader>> l = Loader::Open(o);
    EXPECT_TRUE(l.ok()) << l.status().ToString();
    std::vector<Row> out;
    if (!l.ok()) return out;
    for (size_t n = 0; n < max_batches; ++n) {
      Result<Batch> b = (*l)->Next();
      if (!b.ok()) break;
      const size_t bytes = b->images.num_bytes() / size_t(b->rows());
      for (int64_t r = 0; r < b->valid_rows(); ++r)
        out.push_back({b->indices.as<int64_t>()[r], b->labels.as<int64_t>()[r],
                       std::string(b->images.as<const char>() + size_t(r) * bytes, bytes)});
      if (batches != nullptr) batches->push_back(b->provenance.batch_in_epoch);
    }
    return out;
  }
  static TempDir* dir_;
};
TempDir* MixtureLoaderTest::dir_ = nullptr;

TEST_F(MixtureLoaderTest, AnEpochDrawsEachSourceByWeightThroughItsPipeline) {
  LoaderOptions o;
  o.job = Job();
  o.threads = 2;
  std::vector<Row> rows = Rows(o);
  ASSERT_EQ(rows.size(), 96u);
  // Indices are the sources' samples one after the other: a [0, 30), b [30, 50), c [50, 58).
  std::vector<int> count(3);
  std::map<int64_t, int> seen;
  for (const Row& r : rows) {
    ASSERT_GE(r.index, 0);
    ASSERT_LT(r.index, 58);
    ++count[r.index < 30 ? 0 : r.index < 50 ? 1 : 2];
    ++seen[r.index];
  }
  EXPECT_EQ(count, (std::vector<int>{58, 29, 9}));  // 57.6, 28.8, 9.6 by largest remainders
  // a: 58 draws of 30 samples: a pass and most of another, none thrice.
  for (int64_t i = 0; i < 30; ++i) EXPECT_GE(seen[i], 1) << i;
  // A sample drawn twice in an epoch (two passes) is augmented differently each time.
  std::map<int64_t, std::set<std::string>> pixels;
  for (const Row& r : rows) pixels[r.index].insert(r.pixels);
  int differ = 0;
  for (const auto& [i, n] : seen)
    if (n == 2 && i < 30) differ += pixels[i].size() == 2 ? 1 : 0;
  EXPECT_GT(differ, 20);
  // c's own pipeline (resize and center crop, no randomness): its rows equal a plain
  // loader's of c with that pipeline.
  LoaderOptions plain;
  plain.job.dataset = dir_->path() + "/c";
  plain.job.pipeline = testing::Uint8Spec(kSize);
  plain.job.batch_size = 8;
  plain.job.shuffle = false;
  const std::vector<Row> c = Rows(plain);
  for (const Row& r : rows) {
    if (r.index < 50) continue;
    EXPECT_EQ(r.pixels, c[size_t(r.index - 50)].pixels) << r.index;
    EXPECT_EQ(r.label, c[size_t(r.index - 50)].label);
  }
  // The same job again: the same rows, in the same order.
  EXPECT_EQ(Rows(o), rows);
}

TEST_F(MixtureLoaderTest, FourRanksResumedAsTwoEqualTheUninterruptedEpoch) {
  LoaderOptions whole;
  whole.job = Job();
  whole.job.num_consumers = 1;
  std::vector<Row> uninterrupted = Rows(whole);
  ASSERT_EQ(uninterrupted.size(), 96u);
  // Four ranks stop after 1, 2, 1 and 0 of their 3 batches each.
  JobSpec four = Job();
  four.num_consumers = 4;
  std::vector<Row> got;
  std::vector<std::vector<int64_t>> yielded(4);
  const size_t stop_after[4] = {1, 2, 1, 0};
  for (int r = 0; r < 4; ++r) {
    LoaderOptions o;
    o.job = four;
    o.rank = r;
    const std::vector<Row> rows = Rows(o, stop_after[r], &yielded[size_t(r)]);
    got.insert(got.end(), rows.begin(), rows.end());
  }
  ASSERT_EQ(got.size(), 4u * 8);
  // The rest of the epoch, as two ranks.
  JobSpec listed = four;
  listed.num_samples = 58;
  listed.mixture[0].num_samples = 30;
  listed.mixture[1].num_samples = 20;
  listed.mixture[2].num_samples = 8;
  Result<std::vector<std::pair<int64_t, int64_t>>> taken = TakenPositions(listed, yielded);
  ASSERT_TRUE(taken.ok()) << taken.status().ToString();
  JobSpec two = Job();
  two.num_consumers = 2;
  two.taken = *taken;
  for (int r = 0; r < 2; ++r) {
    LoaderOptions o;
    o.job = two;
    o.rank = r;
    const std::vector<Row> rows = Rows(o);
    EXPECT_EQ(rows.size(), 32u);
    got.insert(got.end(), rows.begin(), rows.end());
  }
  std::sort(got.begin(), got.end());
  std::sort(uninterrupted.begin(), uninterrupted.end());
  EXPECT_EQ(got, uninterrupted);
}

TEST_F(MixtureLoaderTest, ASourcesPipelineMustMakeTheJobsRows) {
  LoaderOptions o;
  o.job = Job();
  o.job.mixture[2].pipeline = testing::Uint8Spec(kSize + 8).ToJson();
  Result<std::unique_ptr<Loader>> l = Loader::Open(o);
  ASSERT_FALSE(l.ok());
  EXPECT_NE(l.status().message().find("mixture source 2"), std::string::npos) << l.status().ToString();
  EXPECT_NE(l.status().message().find("rows must all be alike"), std::string::npos) << l.status().ToString();
  o.job = Job();
  o.job.mixture[1].dataset = dir_->path() + "/missing";
  l = Loader::Open(o);
  ASSERT_FALSE(l.ok());
  EXPECT_NE(l.status().message().find("mixture source 1"), std::string::npos) << l.status().ToString();
}

}  // namespace mixture_test
}  // namespace ferry
