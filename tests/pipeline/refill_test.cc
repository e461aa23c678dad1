// BadSamples::kRefill through the in-process Loader, on a real ImageFolder where some
// JPEGs are corrupt (a whole batch's worth in one place): every batch holds the next
// good samples of its refill group's order, so batches are full but each group's last;
// every good sample arrives exactly once, with the pixels it has under skip; every bad
// one is reported once; the batch count does not change; and a stream resumed at any
// batch continues with exactly the batches of an uninterrupted run. Checked against a
// model of the rule (ExpectedBatches), for plain and ranked jobs, keep and pad.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "data/dataset.h"
#include "data/permutation.h"
#include "ferry/loader.h"
#include "image/image_test_util.h"
#include "testutil.h"

namespace ferry {
namespace {

using testing::EncodeJpeg;
using testing::MakeDirs;
using testing::TempDir;
using testing::WriteFile;

constexpr int kFiles = 40, kBatch = 4, kPerGroup = 3;
// Files 8-11 are batch 2 of an unshuffled epoch: a whole batch of bad samples.
const std::set<int> kBad = {5, 8, 9, 10, 11, 13, 22, 23, 39};

PipelineSpec RefillSpec() { return testing::Uint8Spec(16, /*rrc=*/true, /*hflip=*/0.5); }

// One class of kFiles files, f_00.jpg ... (listing order = file order); kBad corrupt.
std::string MakeFolder(const TempDir& tmp) {
  const std::string root = tmp.path() + "/tree";
  MakeDirs(root + "/c");
  for (int i = 0; i < kFiles; ++i) {
    char name[32];
    std::snprintf(name, sizeof name, "/c/f_%02d.jpg", i);
    WriteFile(root + name, kBad.count(i) ? testing::JpegSoiThenNoise(3000, uint64_t(i)) + "\xFF\xD9"
                                         : EncodeJpeg(40 + i, 30 + 2 * i, uint64_t(i)));
  }
  return root;
}

struct Got {
  int64_t batch_in_epoch = 0;
  uint64_t epoch = 0;
  int64_t rows = 0;
  std::vector<int64_t> indices;  // valid rows
  std::vector<std::string> pixels;
  bool padding_ok = true;        // rows past valid are padding rows
};

struct Stream {
  std::vector<Got> batches;
  std::vector<SkippedSample> skipped;
};

Stream Read(const LoaderOptions& o) {
  Stream run;
  auto loader = Loader::Open(o);
  EXPECT_TRUE(loader.ok()) << loader.status().ToString();
  if (!loader.ok()) return run;
  const size_t sample_bytes = testing::SampleBytes(o.job.pipeline);
  for (;;) {
    Result<Batch> b = (*loader)->Next();
    if (!b.ok()) {
      EXPECT_EQ(b.status().code(), StatusCode::kOutOfRange) << b.status().ToString();
      break;
    }
    Got g;
    g.batch_in_epoch = b->provenance.batch_in_epoch;
    g.epoch = b->provenance.epoch;
    g.rows = b->rows();
    const auto* idx = b->indices.as<int64_t>();
    const auto* labels = b->labels.as<int64_t>();
    const auto* px = static_cast<const char*>(b->images.data);
    for (int64_t r = 0; r < b->rows(); ++r) {
      if (r < b->valid_rows()) {
        g.indices.push_back(idx[r]);
        g.pixels.emplace_back(px + size_t(r) * sample_bytes, sample_bytes);
      } else if (idx[r] != -1 || labels[r] != -1 ||
                 std::any_of(px + size_t(r) * sample_bytes, px + size_t(r + 1) * sample_bytes,
                             [](char c) { return c != 0; })) {
        g.padding_ok = false;
      }
    }
    run.batches.push_back(std::move(g));
    for (SkippedSample& s : (*loader)->TakeSkipped()) run.skipped.push_back(std::move(s));
  }
  for (SkippedSample& s : (*loader)->TakeSkipped()) run.skipped.push_back(std::move(s));
  return run;
}

// The rule, written out: the planned samples of each batch a stream makes (in order),
// grouped kPerGroup at a time; batch i of a group gets the group's good samples
// [i*B, (i+1)*B).
std::vector<std::vector<int64_t>> ExpectedBatches(const std::vector<std::vector<int64_t>>& planned) {
  std::vector<std::vector<int64_t>> out;
  for (size_t g = 0; g < planned.size(); g += kPerGroup) {
    std::vector<int64_t> good;
    for (size_t b = g; b < std::min(planned.size(), g + kPerGroup); ++b)
      for (int64_t i : planned[b])
        if (!kBad.count(int(i))) good.push_back(i);
    for (size_t b = g, at = 0; b < std::min(planned.size(), g + kPerGroup); ++b) {
      const size_t n = std::min(planned[b].size(), good.size() - at);
      out.emplace_back(good.begin() + int64_t(at), good.begin() + int64_t(at + n));
      at += n;
    }
  }
  return out;
}

// The planned samples of a plain job's epoch, or of rank `rank` of `world` (pad).
std::vector<std::vector<int64_t>> Planned(const JobSpec& job, uint64_t epoch, int world, int rank) {
  const std::vector<int64_t> perm = EpochPermutation(kFiles, job.seed, epoch, job.shuffle);
  std::vector<std::vector<int64_t>> out;
  if (world == 0) {
    for (int64_t lo = 0; lo < kFiles; lo += kBatch)
      out.emplace_back(perm.begin() + lo, perm.begin() + std::min<int64_t>(lo + kBatch, kFiles));
    return out;
  }
  const int64_t rounds = (kFiles + int64_t(world) * kBatch - 1) / (int64_t(world) * kBatch);
  for (int64_t j = 0; j < rounds; ++j) {
    const int64_t g = j * world + rank, lo = std::min<int64_t>(g * kBatch, kFiles),
                  hi = std::min<int64_t>((g + 1) * kBatch, kFiles);
    out.emplace_back(perm.begin() + lo, perm.begin() + hi);
  }
  return out;
}

// (last-batch policy, shuffle, world size: 0 = a plain job)
class RefillTest : public ::testing::TestWithParam<std::tuple<LastBatch, bool, int>> {};

TEST_P(RefillTest, BatchesHoldTheGroupsNextGoodSamplesAndResumeExactly) {
  const auto [last_batch, shuffle, world] = GetParam();
  TempDir tmp;
  const std::string root = MakeFolder(tmp);
  LoaderOptions o;
  o.job.dataset = root;
  o.job.pipeline = RefillSpec();
  o.job.batch_size = kBatch;
  o.job.batches_per_split = kPerGroup;
  o.job.last_batch = last_batch;
  o.job.shuffle = shuffle;
  o.job.seed = 5;
  o.job.epochs = 2;
  o.job.num_consumers = world;
  o.job.bad_samples = BadSamples::kRefill;
  o.threads = 2;
  o.prefetch = 1;  // the smallest pool: refill must not need more than it has

  // Each sample's pixels under skip (a sample's pixels depend on it, not on its row).
  std::map<std::pair<uint64_t, int64_t>, std::string> pixels_of;
  for (int rank = 0; rank < std::max(1, world); ++rank) {
    LoaderOptions skip = o;
    skip.job.bad_samples = BadSamples::kSkip;
    skip.rank = rank;
    for (const Got& g : Read(skip).batches)
      for (size_t r = 0; r < g.indices.size(); ++r) pixels_of[{g.epoch, g.indices[r]}] = g.pixels[r];
  }

  for (int rank = 0; rank < std::max(1, world); ++rank) {
    o.rank = rank;
    const Stream whole = Read(o);
    std::map<std::pair<uint64_t, int64_t>, const Got*> by_batch;
    for (const Got& g : whole.batches) by_batch[{g.epoch, g.batch_in_epoch}] = &g;
    for (uint64_t epoch = 0; epoch < 2; ++epoch) {
      const auto planned = Planned(o.job, epoch, world, rank);
      const auto expected = ExpectedBatches(planned);
      for (size_t b = 0; b < expected.size(); ++b) {
        SCOPED_TRACE("rank " + std::to_string(rank) + " epoch " + std::to_string(epoch) + " batch " +
                     std::to_string(b));
        auto it = by_batch.find({epoch, int64_t(b)});
        if (it == by_batch.end()) {
          // In-process, a batch left empty is delivered only padded or as an epoch's last.
          EXPECT_TRUE(expected[b].empty());
          EXPECT_NE(last_batch, LastBatch::kPad);
          continue;
        }
        const Got& g = *it->second;
        EXPECT_EQ(g.indices, expected[b]);
        EXPECT_EQ(g.rows, last_batch == LastBatch::kPad ? kBatch : int64_t(expected[b].size()));
        EXPECT_TRUE(g.padding_ok);
        for (size_t r = 0; r < g.indices.size(); ++r)
          EXPECT_EQ(g.pixels[r], pixels_of.at({epoch, g.indices[r]})) << "sample " << g.indices[r];
        // Full, unless the last of its group to hold samples.
        if ((b + 1) % kPerGroup != 0 && b + 1 != expected.size() && !expected[b + 1].empty()) {
          EXPECT_EQ(g.indices.size(), planned[b].size());
        }
      }
    }
    // Every good sample of the rank's share exactly once an epoch; each bad one
    // reported once per epoch (it is read again each epoch).
    for (uint64_t epoch = 0; epoch < 2; ++epoch) {
      std::multiset<int64_t> got, want;
      for (const Got& g : whole.batches)
        if (g.epoch == epoch) got.insert(g.indices.begin(), g.indices.end());
      for (const auto& p : Planned(o.job, epoch, world, rank))
        for (int64_t i : p)
          if (!kBad.count(int(i))) want.insert(i);
      EXPECT_EQ(got, want) << "epoch " << epoch;
    }
    int64_t bad_planned = 0;
    for (uint64_t epoch = 0; epoch < 2; ++epoch)
      for (const auto& p : Planned(o.job, epoch, world, rank))
        bad_planned += std::count_if(p.begin(), p.end(), [](int64_t i) { return kBad.count(int(i)) > 0; });
    EXPECT_EQ(int64_t(whole.skipped.size()), bad_planned);

    // Resumed at every batch of the first epoch: the rest is the whole run's.
    const int64_t per_epoch = int64_t(Planned(o.job, 0, world, rank).size());
    for (int64_t at = 1; at < per_epoch; ++at) {
      SCOPED_TRACE("resumed at batch " + std::to_string(at));
      LoaderOptions r = o;
      r.first_epoch = 0;
      r.resume_batches = at;
      const Stream resumed = Read(r);
      std::vector<const Got*> want;
      for (const Got& g : whole.batches)
        if (g.epoch > 0 || g.batch_in_epoch >= at) want.push_back(&g);
      ASSERT_EQ(resumed.batches.size(), want.size());
      for (size_t i = 0; i < want.size(); ++i) {
        EXPECT_EQ(resumed.batches[i].epoch, want[i]->epoch);
        EXPECT_EQ(resumed.batches[i].batch_in_epoch, want[i]->batch_in_epoch);
        EXPECT_EQ(resumed.batches[i].indices, want[i]->indices);
        EXPECT_EQ(resumed.batches[i].pixels, want[i]->pixels);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Refill, RefillTest,
    ::testing::Values(std::make_tuple(LastBatch::kKeep, false, 0), std::make_tuple(LastBatch::kPad, false, 0),
                      std::make_tuple(LastBatch::kKeep, true, 0), std::make_tuple(LastBatch::kPad, true, 2),
                      std::make_tuple(LastBatch::kPad, false, 2)),
    [](const ::testing::TestParamInfo<std::tuple<LastBatch, bool, int>>& info) {
      return std::string(std::get<0>(info.param) == LastBatch::kPad ? "Pad" : "Keep") +
             (std::get<1>(info.param) ? "Shuffled" : "InOrder") +
             (std::get<2>(info.param) ? "Ranks" + std::to_string(std::get<2>(info.param)) : std::string());
    });

// Without refill nothing moves: a bad sample leaves its batch a row short.
TEST(RefillTest, SkipLeavesBatchesShort) {
  TempDir tmp;
  LoaderOptions o;
  o.job.dataset = MakeFolder(tmp);
  o.job.pipeline = RefillSpec();
  o.job.batch_size = kBatch;
  o.job.shuffle = false;
  o.threads = 2;
  const Stream run = Read(o);
  std::vector<std::vector<int64_t>> got;
  for (const Got& g : run.batches) got.push_back(g.indices);
  ASSERT_GE(got.size(), 2u);
  EXPECT_EQ(got[1], (std::vector<int64_t>{4, 6, 7}));  // 5 is bad
  EXPECT_EQ(run.skipped.size(), kBad.size());
}

}  // namespace
}  // namespace ferry
