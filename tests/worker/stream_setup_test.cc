// Stream set-up on a worker (lib/worker/stream_setup.h), with no sockets: what an
// OpenStream turns into. Point to point, the stream's shard of each epoch, resumed
// after what the client yielded, and refused when the listing differs from the
// client's; through a dispatcher, the leased splits of a feed, or (parallel_epochs)
// every epoch with the worker's own augmentation draws.
#include "worker/stream_setup.h"

#include <gtest/gtest.h>

#include <set>
#include <vector>

#include "data/job_listing.h"
#include "testutil.h"

namespace ferry {
namespace {

wire::OpenStreamMsg Inline(int64_t epochs = 2) {
  wire::OpenStreamMsg m;
  m.job.dataset = "synthetic:";
  m.job.batch_size = 4;
  m.job.epochs = epochs;
  m.job.seed = 3;
  m.num_shards = 2;
  m.shard_index = 1;
  m.first_epoch = 5;
  return m;
}

std::vector<BatchPlan> All(PlanSource& plan, size_t max = 1000) {
  std::vector<BatchPlan> out;
  while (out.size() < max) {
    std::optional<BatchPlan> p = plan.Next();
    if (!p) break;
    out.push_back(std::move(*p));
  }
  return out;
}

TEST(StreamSetupTest, InlineRequestsAreChecked) {
  Result<std::shared_ptr<const PreparedJob>> prepared = PrepareInlineStream(Inline());
  ASSERT_TRUE(prepared.ok()) << prepared.status().ToString();
  EXPECT_EQ((*prepared)->source(), BatchSource::kSynthetic);
  EXPECT_NE((*prepared)->pipeline(), nullptr) << "compiled once, kept for the stream";
  wire::OpenStreamMsg m = Inline();
  m.shard_index = 2;
  EXPECT_EQ(PrepareInlineStream(m).status().code(), StatusCode::kInvalidArgument);
  m = Inline();
  m.num_shards = 0;
  EXPECT_EQ(PrepareInlineStream(m).status().code(), StatusCode::kInvalidArgument);
  m = Inline();
  m.job.batch_size = 0;
  EXPECT_EQ(PrepareInlineStream(m).status().code(), StatusCode::kInvalidArgument);
  m = Inline();
  m.job.pipeline.Add("hflip", R"({"p": 2})");  // p out of [0, 1]: the ops are checked
  EXPECT_EQ(PrepareInlineStream(m).status().code(), StatusCode::kInvalidArgument);
}

TEST(StreamSetupTest, AnInlineStreamServesItsShardOfEachEpoch) {
  std::shared_ptr<const Dataset> ds(MakeSyntheticDataset(20));
  Result<StreamSource> s = InlineStream(Inline(), *PrepareInlineStream(Inline()), ds);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_FALSE(s->splits);
  EXPECT_EQ(s->last_epoch, 6) << "epochs 5 and 6";
  const std::vector<BatchPlan> plans = All(*s->plan);
  ASSERT_EQ(plans.size(), 6u) << "10 samples of each epoch in batches of 4, the last one short";
  std::set<int64_t> epoch5;
  for (const BatchPlan& p : plans) {
    if (p.epoch == 5) epoch5.insert(p.samples.begin(), p.samples.end());
    EXPECT_TRUE(p.epoch == 5 || p.epoch == 6);
  }
  EXPECT_EQ(epoch5.size(), 10u) << "half the dataset: shard 1 of 2";
}

TEST(StreamSetupTest, AResumedStreamStartsAfterWhatTheClientYielded) {
  std::shared_ptr<const Dataset> ds(MakeSyntheticDataset(20));
  wire::OpenStreamMsg m = Inline();
  m.resume_epoch = 5;
  m.resume_batches_done = 2;
  Result<StreamSource> s = InlineStream(m, *PrepareInlineStream(m), ds);
  ASSERT_TRUE(s.ok());
  const std::vector<BatchPlan> plans = All(*s->plan);
  ASSERT_EQ(plans.size(), 4u);
  EXPECT_EQ(plans[0].epoch, 5u);
  EXPECT_EQ(plans[0].batch_in_epoch, 2);
}

TEST(StreamSetupTest, AListingThatDiffersFromTheClientsIsRefused) {
  testing::TempDir dir;
  testing::MakeImageFolder(dir.path(), 2, 3);
  auto ds = OpenDataset(dir.path());
  ASSERT_TRUE(ds.ok());
  std::shared_ptr<const Dataset> shared(std::move(*ds));
  wire::OpenStreamMsg m = Inline();
  m.job.dataset = dir.path();
  m.job.fingerprint = JobFingerprint(shared->fingerprint(), m.job.pipeline);
  EXPECT_TRUE(InlineStream(m, *PrepareInlineStream(m), shared).ok());
  m.job.fingerprint ^= 1;
  EXPECT_EQ(InlineStream(m, *PrepareInlineStream(m), shared).status().code(), StatusCode::kFailedPrecondition);
}

WorkerJob Named(ProcessingMode mode) {
  WorkerJob j;
  j.name = "job";
  j.spec.dataset = "synthetic:";
  j.spec.num_samples = 24;
  j.spec.batch_size = 4;
  j.spec.batches_per_split = 2;
  j.spec.mode = mode;
  j.spec.epochs = 1;
  j.dataset = std::shared_ptr<const Dataset>(MakeSyntheticDataset(24));
  j.prepared = *PreparedJob::Prepare(j.spec);
  return j;
}

TEST(StreamSetupTest, ADispatcherStreamServesTheFeedsSplits) {
  auto feed = std::make_shared<SplitFeed>();
  StreamSource s = NamedStream(Named(ProcessingMode::kDistributedEpoch), feed, "w1");
  EXPECT_TRUE(s.splits);
  feed->SetHeld({{0, 2}});
  const std::vector<BatchPlan> plans = All(*s.plan, 2);
  ASSERT_EQ(plans.size(), 2u);
  EXPECT_EQ(plans[0].split, 2);
  EXPECT_EQ(plans[1].batch_in_split, 1);
  // A newer stream of the same consumer takes the feed over: this one ends.
  StreamSource newer = NamedStream(Named(ProcessingMode::kDistributedEpoch), feed, "w1");
  EXPECT_FALSE(s.plan->Next().has_value());
}

// A parallel_epochs job that goes on from an earlier run's epoch serves its epochs
// from there: `epochs` counts from first_epoch (it served epochs from 0 before).
TEST(StreamSetupTest, ParallelEpochsStartAtTheJobsFirstEpoch) {
  WorkerJob j = Named(ProcessingMode::kParallelEpochs);
  j.spec.first_epoch = 3;
  j.spec.epochs = 2;
  auto feed = std::make_shared<SplitFeed>();
  StreamSource s = NamedStream(j, feed, "w1");
  EXPECT_EQ(s.last_epoch, 4);
  std::set<uint64_t> epochs;
  for (const BatchPlan& p : All(*s.plan)) epochs.insert(p.epoch);
  EXPECT_EQ(epochs, (std::set<uint64_t>{3, 4}));
}

TEST(StreamSetupTest, ParallelEpochsDrawPerWorker) {
  auto feed = std::make_shared<SplitFeed>();
  StreamSource a = NamedStream(Named(ProcessingMode::kParallelEpochs), feed, "w1");
  StreamSource a2 = NamedStream(Named(ProcessingMode::kParallelEpochs), feed, "w1");
  StreamSource b = NamedStream(Named(ProcessingMode::kParallelEpochs), feed, "w2");
  EXPECT_FALSE(a.splits);
  EXPECT_EQ(a.last_epoch, 0);
  EXPECT_EQ(a.job.seed, a2.job.seed) << "a worker with a fixed id repeats itself";
  EXPECT_NE(a.job.seed, b.job.seed) << "workers differ";
  std::set<int64_t> all;
  for (const BatchPlan& p : All(*a.plan)) all.insert(p.samples.begin(), p.samples.end());
  EXPECT_EQ(all.size(), 24u) << "the whole epoch";
}

}  // namespace
}  // namespace ferry
