// JobSpec (include/ferry/job.h): its geometry (batches and splits of an epoch under
// each last-batch policy), validation, the one fingerprint function, and what two
// requests for the same job must agree on.
#include "ferry/job.h"

#include <gtest/gtest.h>

#include <utility>

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
  j.pipeline.size = 0;
  EXPECT_EQ(j.Validate().code(), StatusCode::kInvalidArgument) << "the pipeline is checked too";
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
  b.scale_min = 0.5;  // a random_resized_crop parameter: unused by resize + center crop
  EXPECT_EQ(a, b);
  b.size = 160;
  EXPECT_FALSE(a == b);
}

TEST(JobSpecTest, TheFingerprintCoversListingAndPipeline) {
  const uint64_t f = JobFingerprint(42, PipelineSpec::ImagenetTrain());
  EXPECT_EQ(f, JobFingerprint(42, PipelineSpec::ImagenetTrain())) << "stable";
  EXPECT_NE(f, JobFingerprint(43, PipelineSpec::ImagenetTrain()));
  EXPECT_NE(f, JobFingerprint(42, PipelineSpec::ImagenetEval()));
}

TEST(JobSpecTest, BatchBytes) {
  JobSpec j = Job(10, 4, 1, LastBatch::kKeep);
  j.pipeline = PipelineSpec::ImagenetTrain();  // float32 3x224x224
  EXPECT_EQ(j.BatchBytes(), 4 * (3 * 224 * 224 * 4 + 16));
}

}  // namespace
}  // namespace ferry
