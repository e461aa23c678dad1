// Placement (--workers-per-job) through a real dispatcher and real workers: two jobs
// on two workers, one worker each; each job read exactly once, its batches from its
// own worker only; the worker of one stopped mid-epoch, its job moves to the other and
// still loses and repeats nothing.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "ferry/client.h"
#include "integration/test_cluster.h"
#include "testutil.h"

namespace ferry::testing::placement {
namespace {

constexpr int64_t kSamples = 60;

class PlacementClusterTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    data_ = new TempDir();
    MakeImageFolder(data_->path(), 3, 20);
  }
  static void TearDownTestSuite() { delete data_; }

  static JobSpec Job(uint64_t seed) {
    JobSpec j;
    j.dataset = data_->path();
    auto spec = PipelineSpec::FromJson(
        R"({"ops":[{"op":"random_resized_crop","size":16}],"output":{"dtype":"uint8","layout":"NHWC"}})");
    EXPECT_TRUE(spec.ok());
    j.pipeline = *spec;
    j.batch_size = 4;
    j.batches_per_split = 1;
    j.epochs = 1;
    j.seed = seed;  // two jobs of the same data, other orders
    return j;
  }

  // Every index of one epoch, in order received.
  static std::vector<int64_t> Read(Client* c, int64_t max_batches = INT64_MAX) {
    std::vector<int64_t> out;
    for (int64_t n = 0; n < max_batches; ++n) {
      Result<Batch> b = c->Next();
      if (!b.ok()) {
        EXPECT_EQ(b.status().code(), StatusCode::kOutOfRange) << b.status().ToString();
        break;
      }
      for (int64_t i = 0; i < b->valid_rows(); ++i) out.push_back(b->indices.as<int64_t>()[i]);
    }
    return out;
  }

  static void ExpectEachOnce(std::vector<int64_t> got) {
    std::sort(got.begin(), got.end());
    std::vector<int64_t> want(kSamples);
    for (int64_t i = 0; i < kSamples; ++i) want[size_t(i)] = i;
    EXPECT_EQ(got, want);
  }

  static TempDir* data_;
  Watchdog watchdog_{120, ::testing::UnitTest::GetInstance()->current_test_info()->name()};
};

TempDir* PlacementClusterTest::data_ = nullptr;

TEST_F(PlacementClusterTest, EachJobOnItsOwnWorkerAndMovedWhenItStops) {
  TestClusterOptions o;
  o.workers = 2;
  o.workers_per_job = 1;
  auto started = TestCluster::Start(o);
  ASSERT_TRUE(started.ok()) << started.status().ToString();
  TestCluster& cluster = **started;
  // Both workers registered first: a job created while one alone is there is placed on
  // it, and stays (placement is stable; a new worker takes new jobs and those short of
  // their count).
  ASSERT_TRUE(testing::WaitFor(
      [&] {
        for (size_t i = 0; i < cluster.num_workers(); ++i)
          if (!cluster.worker(i).Ready()) return false;
        return true;
      },
      30));
  auto a = Client::Connect(cluster.ClientFor("a", Job(1)));
  auto b = Client::Connect(cluster.ClientFor("b", Job(2)));
  ASSERT_TRUE(a.ok() && b.ok());
  std::vector<int64_t> got_a = Read(a->get(), 3);
  std::vector<int64_t> got_b = Read(b->get());
  ExpectEachOnce(got_b);
  // Each job is placed on one worker, a different one each: each worker made batches
  // of one job only (its per-job thread time).
  size_t worker_of_a = SIZE_MAX;
  for (size_t i = 0; i < cluster.num_workers(); ++i) {
    const std::string m = cluster.worker(i).MetricsText();
    const bool has_a = m.find("ferry_worker_job_busy_seconds_total{ferry_job=\"a\"}") != std::string::npos;
    const bool has_b = m.find("ferry_worker_job_busy_seconds_total{ferry_job=\"b\"}") != std::string::npos;
    EXPECT_NE(has_a, has_b) << "worker " << i << " made batches of " << (has_a ? "both jobs" : "neither job");
    if (has_a) worker_of_a = i;
  }
  ASSERT_NE(worker_of_a, SIZE_MAX);
  // Job a's worker stops: a moves to the other worker and ends exactly once.
  cluster.StopWorker(worker_of_a);
  std::vector<int64_t> rest = Read(a->get());
  got_a.insert(got_a.end(), rest.begin(), rest.end());
  ExpectEachOnce(got_a);
}

}  // namespace
}  // namespace ferry::testing::placement
