// Ranks of a data-parallel trainer on an in-process TestCluster: W clients, each
// rank r of W of one job, read 2 epochs in threads of their own. Every rank takes the
// same number of steps every epoch, and the ranks' batches together are each epoch's
// samples exactly once (under drop, less fewer than W x batch samples; under pad, with
// padding rows and no sample twice): in arrival order, in deterministic order, and
// with a worker stopped mid-epoch.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "ferry/loader.h"
#include "test_cluster.h"
#include "testutil.h"

namespace ferry::testing {
namespace {

constexpr int kRanksClasses = 3;
constexpr int kRanksPerClass = 35;
constexpr int64_t kRanksSamples = kRanksClasses * kRanksPerClass;  // 105
constexpr int kRanksBatch = 4;

struct RankRun {
  Status end;
  std::map<uint64_t, int64_t> steps;              // per epoch
  std::map<uint64_t, std::vector<int64_t>> seen;  // per epoch, valid indices
  std::map<uint64_t, int64_t> padding;            // per epoch, padding rows
  std::map<uint64_t, std::vector<int64_t>> last;  // per epoch, the steps marked last_in_epoch
};

class RanksTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    data_ = new TempDir();
    MakeImageFolder(data_->path(), kRanksClasses, kRanksPerClass);
  }
  static void TearDownTestSuite() { delete data_; }

  static JobSpec Job(int ranks, LastBatch last) {
    JobSpec j;
    j.dataset = data_->path();
    auto spec = PipelineSpec::FromJson(
        R"({"ops":[{"op":"random_resized_crop","size":16}],"output":{"dtype":"uint8","layout":"NHWC"}})");
    j.pipeline = *spec;
    j.batch_size = kRanksBatch;
    j.batches_per_split = 2;
    j.epochs = 2;
    j.num_consumers = ranks;
    j.last_batch = last;
    return j;
  }

  // Runs every rank to the end in its own thread; `between` runs once, after rank 0's
  // `after_steps`-th step (a moment mid-epoch), while the others go on.
  using Open = std::function<Result<std::unique_ptr<BatchIterator>>(int rank)>;

  static std::vector<RankRun> RunRanks(TestCluster& cluster, const std::string& name, const JobSpec& job,
                                       int64_t after_steps = -1, std::function<void()> between = nullptr) {
    return RunRanks(
        job,
        [&](int r) -> Result<std::unique_ptr<BatchIterator>> {
          ClientOptions o = cluster.ClientFor(name, job);
          o.rank = r;
          FERRY_ASSIGN_OR_RETURN(std::unique_ptr<Client> c, Client::Connect(o));
          return std::unique_ptr<BatchIterator>(std::move(c));
        },
        after_steps, std::move(between));
  }

  static std::vector<RankRun> RunRanks(const JobSpec& job, const Open& open, int64_t after_steps = -1,
                                       std::function<void()> between = nullptr) {
    const int w = job.num_consumers;
    std::vector<RankRun> runs(static_cast<size_t>(w));
    std::vector<std::thread> threads;
    for (int r = 0; r < w; ++r) {
      threads.emplace_back([&, r] {
        auto c = open(r);
        if (!c.ok()) {
          runs[size_t(r)].end = c.status();
          return;
        }
        int64_t steps = 0;
        for (;;) {
          Result<Batch> b = (*c)->Next();
          if (!b.ok()) {
            runs[size_t(r)].end = b.status();
            return;
          }
          RankRun& run = runs[size_t(r)];
          const int64_t step = ++run.steps[b->provenance.epoch];
          if (b->provenance.last_in_epoch) run.last[b->provenance.epoch].push_back(step);
          const int64_t* idx = b->indices.as<int64_t>();
          for (int64_t i = 0; i < b->rows(); ++i) {
            if (i < b->valid_rows()) run.seen[b->provenance.epoch].push_back(idx[i]);
            else ++run.padding[b->provenance.epoch];
          }
          if (r == 0 && ++steps == after_steps && between) between();
        }
      });
    }
    for (auto& t : threads) t.join();
    return runs;
  }

  // Equal steps, every epoch, and each epoch's samples once across the ranks.
  static void ExpectEqualStepsAndExactlyOnce(const std::vector<RankRun>& runs, const JobSpec& job) {
    JobSpec listed = job;
    listed.num_samples = kRanksSamples;
    const int64_t per_rank = listed.RankBatches();
    for (uint64_t epoch = job.first_epoch; epoch < job.end_epoch(); ++epoch) {
      std::vector<int64_t> all;
      for (size_t r = 0; r < runs.size(); ++r) {
        EXPECT_EQ(runs[r].end.code(), StatusCode::kOutOfRange) << "rank " << r << ": " << runs[r].end.ToString();
        auto steps = runs[r].steps.find(epoch);
        EXPECT_EQ(steps == runs[r].steps.end() ? 0 : steps->second, per_rank) << "rank " << r << " epoch " << epoch;
        auto last = runs[r].last.find(epoch);
        EXPECT_EQ(last == runs[r].last.end() ? std::vector<int64_t>{} : last->second, std::vector<int64_t>{per_rank})
            << "rank " << r << " epoch " << epoch << ": its last step, and only it, is last_in_epoch";
        auto seen = runs[r].seen.find(epoch);
        if (seen != runs[r].seen.end()) all.insert(all.end(), seen->second.begin(), seen->second.end());
      }
      std::sort(all.begin(), all.end());
      EXPECT_EQ(std::adjacent_find(all.begin(), all.end()), all.end()) << "a sample twice in epoch " << epoch;
      const int64_t w = job.num_consumers;
      if (job.last_batch == LastBatch::kDrop) {
        EXPECT_EQ(int64_t(all.size()), per_rank * w * kRanksBatch);
        EXPECT_LT(kRanksSamples - int64_t(all.size()), w * kRanksBatch) << "drop leaves out fewer than ranks x batch";
      } else {
        EXPECT_EQ(int64_t(all.size()), kRanksSamples) << "pad: every sample of epoch " << epoch;
      }
    }
  }

  // Elastic resume through a dispatcher: `from` ranks read `steps` batches each of
  // epoch 0 and stop with their saved states; `to` ranks read the rest of epoch 0 as a
  // remainder job, then epoch 1 as a job from epoch 1. Epoch 0 is each sample once
  // (before + after, less the drop remainder) with equal steps after; epoch 1 as ever.
  static void ElasticResume(TestCluster& cluster, const JobSpec& base, int from, int to, int64_t steps) {
    const std::string name = "elastic-" + std::to_string(from) + "-" + std::to_string(to) + "-" +
                             std::string(LastBatchName(base.last_batch));
    JobSpec old_job = base;
    old_job.num_consumers = from;
    std::vector<std::vector<int64_t>> before(static_cast<size_t>(from));
    std::vector<IteratorState> states(static_cast<size_t>(from));
    std::vector<std::optional<JobSpec>> listed(static_cast<size_t>(from));
    {
      std::vector<std::unique_ptr<Client>> clients(static_cast<size_t>(from));
      std::vector<std::thread> threads;
      for (int r = 0; r < from; ++r) {
        threads.emplace_back([&, r] {
          ClientOptions o = cluster.ClientFor(name, old_job);
          o.rank = r;
          auto c = Client::Connect(o);
          if (!c.ok()) return;
          for (int64_t i = 0; i < steps; ++i) {
            auto b = (*c)->Next();
            if (!b.ok() || b->provenance.epoch != 0) return;
            const int64_t* idx = b->indices.as<int64_t>();
            for (int64_t k = 0; k < b->valid_rows(); ++k) before[size_t(r)].push_back(idx[k]);
          }
          states[size_t(r)] = (*c)->SaveState();
          listed[size_t(r)] = (*c)->JobInfo(10);
          clients[size_t(r)] = std::move(*c);  // stopped together, once all have saved
        });
      }
      for (auto& t : threads) t.join();
    }
    std::vector<std::vector<int64_t>> yielded;
    for (int r = 0; r < from; ++r) {
      ASSERT_TRUE(listed[size_t(r)].has_value()) << "rank " << r << " did not read its " << steps << " batches";
      auto y = states[size_t(r)].YieldedBatches(*listed[size_t(r)], r, 0);
      ASSERT_TRUE(y.ok()) << y.status().ToString();
      EXPECT_EQ(int64_t(y->size()), steps) << "rank " << r;
      yielded.push_back(*y);
    }
    auto taken = TakenPositions(*listed[0], yielded);
    ASSERT_TRUE(taken.ok()) << taken.status().ToString();

    JobSpec rest = base;
    rest.num_consumers = to;
    rest.taken = *taken;
    rest.first_epoch = 0;
    rest.epochs = 1;
    const auto after = RunRanks(cluster, name + ".rest", rest);
    JobSpec rest_listed = rest;
    rest_listed.num_samples = kRanksSamples;
    std::vector<int64_t> epoch0;
    for (const auto& b : before) epoch0.insert(epoch0.end(), b.begin(), b.end());
    for (int r = 0; r < to; ++r) {
      const RankRun& run = after[size_t(r)];
      EXPECT_EQ(run.end.code(), StatusCode::kOutOfRange) << run.end.ToString();
      EXPECT_EQ(run.steps.size(), 1u);
      EXPECT_EQ(run.steps.count(0) ? run.steps.at(0) : 0, rest_listed.RankBatches()) << "equal steps after, rank " << r;
      if (run.seen.count(0)) epoch0.insert(epoch0.end(), run.seen.at(0).begin(), run.seen.at(0).end());
    }
    std::sort(epoch0.begin(), epoch0.end());
    EXPECT_EQ(std::adjacent_find(epoch0.begin(), epoch0.end()), epoch0.end()) << "a sample twice in epoch 0";
    if (base.last_batch == LastBatch::kPad) {
      EXPECT_EQ(int64_t(epoch0.size()), kRanksSamples);
    } else {
      EXPECT_LT(kRanksSamples - int64_t(epoch0.size()), to * kRanksBatch)
          << "drop: less than the new ranks x batch left out";
    }

    JobSpec next = base;
    next.num_consumers = to;
    next.first_epoch = 1;
    next.epochs = 1;  // epoch 1
    ExpectEqualStepsAndExactlyOnce(RunRanks(cluster, name + ".from1", next), next);
  }

  static TempDir* data_;
  Watchdog watchdog_{150, ::testing::UnitTest::GetInstance()->current_test_info()->name()};
};

TempDir* RanksTest::data_ = nullptr;

TEST_F(RanksTest, FourRanksEqualStepsAndEachSampleOnce) {
  auto cluster = TestCluster::Start();
  ASSERT_TRUE(cluster.ok());
  for (LastBatch last : {LastBatch::kDrop, LastBatch::kPad}) {
    const JobSpec job = Job(4, last);
    const auto runs = RunRanks(**cluster, std::string("four-") + std::string(LastBatchName(last)), job);
    ExpectEqualStepsAndExactlyOnce(runs, job);
  }
}

TEST_F(RanksTest, DeterministicOrderToo) {
  auto cluster = TestCluster::Start({.workers = 3});
  ASSERT_TRUE(cluster.ok());
  JobSpec job = Job(4, LastBatch::kPad);
  job.ordering = Ordering::kDeterministic;
  const auto runs = RunRanks(**cluster, "det", job);
  ExpectEqualStepsAndExactlyOnce(runs, job);
}

TEST_F(RanksTest, AWorkerStoppedMidEpoch) {
  auto cluster = TestCluster::Start({.workers = 2});
  ASSERT_TRUE(cluster.ok());
  const JobSpec job = Job(4, LastBatch::kDrop);
  const auto runs = RunRanks(**cluster, "stop", job, /*after_steps=*/3, [&] { (*cluster)->StopWorker(0); });
  ExpectEqualStepsAndExactlyOnce(runs, job);
}

}  // namespace
}  // namespace ferry::testing

namespace ferry::testing {
namespace {

// Point to point: each rank's client streams from both workers, each serving a share of
// that rank's batches.
TEST_F(RanksTest, PointToPointRanksReadTheirShares) {
  auto cluster = TestCluster::Start({.workers = 2});
  ASSERT_TRUE(cluster.ok());
  for (LastBatch last : {LastBatch::kDrop, LastBatch::kPad}) {
    const JobSpec job = Job(3, last);
    const auto runs = RunRanks(job, [&](int r) -> Result<std::unique_ptr<BatchIterator>> {
      ClientOptions o;
      o.job = job;
      o.workers = {(*cluster)->worker_address(0), (*cluster)->worker_address(1)};
      o.rank = r;
      FERRY_ASSIGN_OR_RETURN(std::unique_ptr<Client> c, Client::Connect(o));
      return std::unique_ptr<BatchIterator>(std::move(c));
    });
    ExpectEqualStepsAndExactlyOnce(runs, job);
  }
}

// Local mode: each rank decodes its own share in-process, as DistributedSampler gives it.
TEST_F(RanksTest, LocalRanksReadTheirShares) {
  for (LastBatch last : {LastBatch::kDrop, LastBatch::kPad}) {
    const JobSpec job = Job(4, last);
    const auto runs = RunRanks(job, [&](int r) -> Result<std::unique_ptr<BatchIterator>> {
      LoaderOptions o;
      o.job = job;
      o.rank = r;
      o.threads = 1;
      FERRY_ASSIGN_OR_RETURN(std::unique_ptr<Loader> l, Loader::Open(o));
      return std::unique_ptr<BatchIterator>(std::move(l));
    });
    ExpectEqualStepsAndExactlyOnce(runs, job);
  }
}

TEST_F(RanksTest, TooFewSamplesForTheRanksIsAClearError) {
  JobSpec job = Job(8, LastBatch::kDrop);
  job.batch_size = 16;  // 8 x 16 = 128 > 105 samples: no batch for anyone
  LoaderOptions o;
  o.job = job;
  auto l = Loader::Open(o);
  ASSERT_FALSE(l.ok());
  EXPECT_NE(l.status().message().find("no batch for each of 8 ranks"), std::string::npos) << l.status().ToString();
}

}  // namespace
}  // namespace ferry::testing

namespace ferry::testing {
namespace {

TEST_F(RanksTest, ElasticFourRanksToTwoMidEpoch) {
  auto cluster = TestCluster::Start();
  ASSERT_TRUE(cluster.ok());
  for (LastBatch last : {LastBatch::kDrop, LastBatch::kPad}) {
    SCOPED_TRACE(LastBatchName(last));
    ElasticResume(**cluster, Job(4, last), 4, 2, /*steps=*/3);
  }
}

TEST_F(RanksTest, ElasticTwoRanksToFourMidEpoch) {
  auto cluster = TestCluster::Start();
  ASSERT_TRUE(cluster.ok());
  ElasticResume(**cluster, Job(2, LastBatch::kPad), 2, 4, /*steps=*/5);
}

}  // namespace
}  // namespace ferry::testing
