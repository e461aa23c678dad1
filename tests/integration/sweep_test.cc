// Sweeps (JobSpec::sharing every) through a real dispatcher and two real workers:
// every trainer gets every batch of the job exactly once, the same batches in the
// same order, while the workers decode each batch once; a worker stopped mid-epoch, a
// trainer that pauses, and a trainer restarted from its saved state change nothing a
// trainer sees.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "ferry/client.h"
#include "integration/test_cluster.h"
#include "testutil.h"

namespace ferry::testing::sweep {
namespace {

constexpr int kClasses = 3;
constexpr int kPerClass = 40;
constexpr int64_t kSamples = kClasses * kPerClass;
constexpr int kBatch = 5;  // 24 batches an epoch; 2 batches a split: 12 splits

class SweepTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    data_ = new TempDir();
    MakeImageFolder(data_->path(), kClasses, kPerClass);
  }
  static void TearDownTestSuite() { delete data_; }

  static JobSpec Job(int64_t epochs, Sharing sharing = Sharing::kEvery) {
    JobSpec j;
    j.dataset = data_->path();
    auto spec = PipelineSpec::FromJson(
        R"({"ops":[{"op":"random_resized_crop","size":24},{"op":"hflip","p":0.5}],"output":{"dtype":"uint8","layout":"NHWC"}})");
    EXPECT_TRUE(spec.ok());
    j.pipeline = *spec;
    j.batch_size = kBatch;
    j.batches_per_split = 2;
    j.epochs = epochs;
    j.seed = 23;
    j.ordering = Ordering::kDeterministic;  // the same sequence for every trainer
    j.sharing = sharing;
    return j;
  }

  static std::unique_ptr<TestCluster> MustStart() {
    auto c = TestCluster::Start();
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? std::move(*c) : nullptr;
  }

  static ClientOptions Trainer(const TestCluster& cluster, const std::string& trainer, int64_t epochs = 2) {
    ClientOptions o = cluster.ClientFor("sweep", Job(epochs));
    o.trainer_id = trainer;
    return o;
  }

  static std::unique_ptr<Client> MustConnect(const ClientOptions& o) {
    auto c = Client::Connect(o);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? std::move(*c) : nullptr;
  }

  // What a trainer saw: per batch "epoch/batch digest", and the indices per epoch.
  struct Seen {
    std::vector<std::string> batches;
    std::map<uint64_t, std::vector<int64_t>> indices;
    Status end;
  };

  static void Take(Client* c, Seen* seen, int64_t max_batches = INT64_MAX) {
    for (int64_t n = 0; n < max_batches; ++n) {
      Result<Batch> b = c->Next();
      if (!b.ok()) {
        seen->end = b.status();
        return;
      }
      seen->batches.push_back(BatchDigest(*b));
      const int64_t* idx = b->indices.as<int64_t>();
      for (int64_t i = 0; i < b->valid_rows(); ++i) seen->indices[b->provenance.epoch].push_back(idx[i]);
    }
  }

  static void ExpectEveryBatchOnce(const Seen& seen, int64_t epochs) {
    EXPECT_EQ(seen.end.code(), StatusCode::kOutOfRange) << seen.end.ToString();
    ASSERT_EQ(int64_t(seen.indices.size()), epochs);
    for (const auto& [epoch, got] : seen.indices) {
      std::vector<int64_t> sorted = got;
      std::sort(sorted.begin(), sorted.end());
      std::vector<int64_t> want(kSamples);
      for (int64_t i = 0; i < kSamples; ++i) want[size_t(i)] = i;
      EXPECT_EQ(sorted, want) << "epoch " << epoch << ": " << got.size() << " indices";
    }
    EXPECT_EQ(int64_t(seen.batches.size()), epochs * 24);
  }

  // A counter of the workers' /metrics, summed over the running ones.
  static double WorkerMetric(TestCluster& cluster, const std::string& name) {
    double sum = 0;
    for (size_t i = 0; i < cluster.num_workers(); ++i) {
      if (!cluster.running(i)) continue;
      const std::string text = cluster.worker(i).MetricsText();
      const size_t at = text.find("\n" + name + " ");
      if (at != std::string::npos) sum += std::stod(text.substr(at + name.size() + 2));
    }
    return sum;
  }

  // The batches of the same job read alone (a job of its own, not shared).
  static std::vector<std::string> Alone(TestCluster& cluster, int64_t epochs) {
    auto c = MustConnect(cluster.ClientFor("alone", Job(epochs, Sharing::kSplits)));
    Seen seen;
    Take(c.get(), &seen);
    EXPECT_EQ(seen.end.code(), StatusCode::kOutOfRange);
    return seen.batches;
  }

  static TempDir* data_;
  Watchdog watchdog_{150, ::testing::UnitTest::GetInstance()->current_test_info()->name()};
};

TempDir* SweepTest::data_ = nullptr;

TEST_F(SweepTest, EveryTrainerTakesEveryBatchOnceAndTheWorkersDecodeEachOnce) {
  auto cluster = MustStart();
  ASSERT_TRUE(cluster);
  constexpr int kTrainers = 3;
  std::vector<std::unique_ptr<Client>> trainers;
  for (int t = 0; t < kTrainers; ++t) {
    trainers.push_back(MustConnect(Trainer(*cluster, "t" + std::to_string(t))));
    ASSERT_TRUE(trainers.back());
  }
  std::vector<Seen> seen(kTrainers);
  std::vector<std::thread> threads;
  for (int t = 0; t < kTrainers; ++t) threads.emplace_back([&, t] { Take(trainers[size_t(t)].get(), &seen[size_t(t)]); });
  for (std::thread& th : threads) th.join();
  for (int t = 0; t < kTrainers; ++t) {
    SCOPED_TRACE("trainer " + std::to_string(t));
    ExpectEveryBatchOnce(seen[size_t(t)], 2);
    EXPECT_EQ(seen[size_t(t)].batches, seen[0].batches) << "the same batches, pixel for pixel, in the same order";
  }
  // 48 batches a trainer: made about once, and served to the other trainers.
  const double made = WorkerMetric(*cluster, "ferry_worker_shared_batches_made_total");
  const double served = WorkerMetric(*cluster, "ferry_worker_shared_batches_served_total");
  EXPECT_GE(made, 48);
  EXPECT_LE(made, 60) << "decoded once a batch (and a little more while lanes drift apart)";
  EXPECT_EQ(made + served, 48.0 * kTrainers) << "every trainer's batch was made or served";
  // And they are the job's batches, as one trainer reading it alone gets them.
  EXPECT_EQ(seen[0].batches, Alone(*cluster, 2));
}

TEST_F(SweepTest, AWorkerStoppedMidEpochChangesNothingATrainerSees) {
  auto cluster = MustStart();
  ASSERT_TRUE(cluster);
  auto a = MustConnect(Trainer(*cluster, "a"));
  auto b = MustConnect(Trainer(*cluster, "b"));
  ASSERT_TRUE(a && b);
  Seen sa, sb;
  Take(a.get(), &sa, 7);
  Take(b.get(), &sb, 5);
  cluster->StopWorker(0);  // as kill -9: its leases of both lanes move on once it misses heartbeats
  std::thread ta([&] { Take(a.get(), &sa); });
  std::thread tb([&] { Take(b.get(), &sb); });
  ta.join();
  tb.join();
  ExpectEveryBatchOnce(sa, 2);
  ExpectEveryBatchOnce(sb, 2);
  EXPECT_EQ(sa.batches, sb.batches);
  EXPECT_EQ(sa.batches, Alone(*cluster, 2));
}

TEST_F(SweepTest, APausedTrainerHoldsNobodyBackAndStillGetsEveryBatch) {
  auto cluster = MustStart();
  ASSERT_TRUE(cluster);
  auto fast = MustConnect(Trainer(*cluster, "fast"));
  auto paused = MustConnect(Trainer(*cluster, "paused"));
  ASSERT_TRUE(fast && paused);
  Seen sf, sp;
  Take(paused.get(), &sp, 3);
  // The paused trainer reads nothing while the other reads the whole job.
  Take(fast.get(), &sf);
  ExpectEveryBatchOnce(sf, 2);
  Take(paused.get(), &sp);
  ExpectEveryBatchOnce(sp, 2);
  EXPECT_EQ(sp.batches, sf.batches);
}

TEST_F(SweepTest, ATrainerRestartedFromItsStateGoesOnExactly) {
  auto cluster = MustStart();
  ASSERT_TRUE(cluster);
  auto other = MustConnect(Trainer(*cluster, "other"));
  ASSERT_TRUE(other);
  Seen so, sr;
  std::string state;
  {
    auto first = MustConnect(Trainer(*cluster, "restarted"));
    ASSERT_TRUE(first);
    Take(first.get(), &sr, 17);
    state = first->SaveState().Serialize();
    EXPECT_EQ(IteratorState::Parse(state)->job, "sweep/restarted") << "the state names the trainer's lane";
  }  // the trainer process ends
  ClientOptions o = Trainer(*cluster, "restarted");
  o.resume_state = state;
  auto second = MustConnect(o);
  ASSERT_TRUE(second);
  std::thread t([&] { Take(other.get(), &so); });
  Take(second.get(), &sr);
  t.join();
  ExpectEveryBatchOnce(sr, 2);
  ExpectEveryBatchOnce(so, 2);
  EXPECT_EQ(sr.batches, so.batches);
  // Another trainer's state is not this one's.
  ClientOptions wrong = Trainer(*cluster, "someone-else");
  wrong.resume_state = state;
  auto refused = Client::Connect(wrong);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("the resume state is of job sweep/restarted"), std::string::npos)
      << refused.status().ToString();
}

}  // namespace
}  // namespace ferry::testing::sweep
