// Dispatcher mode end to end on an in-process TestCluster: real services on loopback,
// real ferry::Clients, a real JPEG folder. Every test checks the same promise, that
// each sample of an epoch reaches the job's consumers exactly once, while something
// happens at an exact point mid-epoch (between two Next() calls): a worker stops or
// joins or drains, the dispatcher restarts, the client stops and a new one resumes
// from its saved state, or a second consumer shares the job. Deterministic order is
// checked for the same batches whatever the number of workers.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/hash.h"
#include "test_cluster.h"
#include "testutil.h"

namespace ferry::testing {
namespace {

constexpr int kClasses = 3;
constexpr int kPerClass = 40;
constexpr int64_t kSamples = kClasses * kPerClass;
constexpr int kBatch = 5;  // 24 batches an epoch; 2 batches a split: 12 splits

class ClusterTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    data_ = new TempDir();
    MakeImageFolder(data_->path(), kClasses, kPerClass);
  }
  static void TearDownTestSuite() { delete data_; }

  static JobSpec Job(int64_t epochs = 1) {
    JobSpec j;
    j.dataset = data_->path();
    auto spec = PipelineSpec::FromJson(
        R"({"ops":[{"op":"random_resized_crop","size":24},{"op":"hflip","p":0.5}],"output":{"dtype":"uint8","layout":"NHWC"}})");
    EXPECT_TRUE(spec.ok());
    j.pipeline = *spec;
    j.batch_size = kBatch;
    j.batches_per_split = 2;
    j.epochs = epochs;
    j.seed = 11;
    return j;
  }

  static std::unique_ptr<TestCluster> MustStart(const TestClusterOptions& o = {}) {
    auto c = TestCluster::Start(o);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? std::move(*c) : nullptr;
  }

  static std::unique_ptr<Client> MustConnect(const ClientOptions& o) {
    auto c = Client::Connect(o);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? std::move(*c) : nullptr;
  }

  // Takes up to `max_batches` batches (all, by default) and records their indices per
  // epoch. Returns the final status (OutOfRange at the end of the job).
  static Status Take(Client* c, std::map<uint64_t, std::vector<int64_t>>* seen, int64_t max_batches = INT64_MAX) {
    for (int64_t n = 0; n < max_batches; ++n) {
      Result<Batch> b = c->Next();
      if (!b.ok()) return b.status();
      const int64_t* idx = b->indices.as<int64_t>();
      for (int64_t i = 0; i < b->valid_rows(); ++i) (*seen)[b->provenance.epoch].push_back(idx[i]);
    }
    return Status::OK();
  }

  static void ExpectEachOnce(const std::map<uint64_t, std::vector<int64_t>>& seen, int64_t epochs) {
    ASSERT_EQ(int64_t(seen.size()), epochs);
    for (const auto& [epoch, got] : seen) {
      std::vector<int64_t> sorted = got;
      std::sort(sorted.begin(), sorted.end());
      std::vector<int64_t> want(kSamples);
      for (int64_t i = 0; i < kSamples; ++i) want[size_t(i)] = i;
      EXPECT_EQ(sorted, want) << "epoch " << epoch << ": " << got.size() << " indices";
    }
  }

  static TempDir* data_;
  Watchdog watchdog_{120, ::testing::UnitTest::GetInstance()->current_test_info()->name()};
};

TempDir* ClusterTest::data_ = nullptr;

TEST_F(ClusterTest, TwoEpochsExactlyOnceAndTheJobAsTheDispatcherHasIt) {
  auto cluster = MustStart();
  ASSERT_TRUE(cluster);
  auto client = MustConnect(cluster->ClientFor("two-epochs", Job(2)));
  ASSERT_TRUE(client);
  std::map<uint64_t, std::vector<int64_t>> seen;
  EXPECT_EQ(Take(client.get(), &seen).code(), StatusCode::kOutOfRange);
  ExpectEachOnce(seen, 2);
  std::optional<JobSpec> info = client->JobInfo(5);
  ASSERT_TRUE(info.has_value());
  EXPECT_EQ(info->num_samples, kSamples) << "the listing's facts, filled in by the dispatcher";
  EXPECT_NE(info->fingerprint, 0u);
  EXPECT_TRUE(info->SameJobAs(Job(2)));
  EXPECT_EQ(client->epochs_completed(), 2);
  EXPECT_EQ(client->workers_seen(), 2u);
}

TEST_F(ClusterTest, AWorkerStoppedMidEpochLosesNothing) {
  auto cluster = MustStart();
  ASSERT_TRUE(cluster);
  auto client = MustConnect(cluster->ClientFor("stop", Job()));
  ASSERT_TRUE(client);
  std::map<uint64_t, std::vector<int64_t>> seen;
  ASSERT_TRUE(Take(client.get(), &seen, 6).ok());
  cluster->StopWorker(0);  // as kill -9: its leased splits return once it misses heartbeats
  EXPECT_EQ(Take(client.get(), &seen).code(), StatusCode::kOutOfRange);
  ExpectEachOnce(seen, 1);
  // The dispatcher declares it dead once it misses its heartbeats; the epoch may end
  // before that, when the other worker could serve all the stopped one had not
  // finished (a flake in CI when this waited on nothing).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (cluster->dispatcher().stats().core.workers_removed < 1 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_GE(cluster->dispatcher().stats().core.workers_removed, 1);
}

TEST_F(ClusterTest, AWorkerAddedMidEpochTakesSplits) {
  TestClusterOptions o;
  o.workers = 1;
  o.leases_ahead = 1;
  auto cluster = MustStart(o);
  ASSERT_TRUE(cluster);
  auto client = MustConnect(cluster->ClientFor("grow", Job()));
  ASSERT_TRUE(client);
  std::map<uint64_t, std::vector<int64_t>> seen;
  ASSERT_TRUE(Take(client.get(), &seen, 2).ok());
  auto added = cluster->AddWorker();
  ASSERT_TRUE(added.ok());
  EXPECT_EQ(Take(client.get(), &seen).code(), StatusCode::kOutOfRange);
  ExpectEachOnce(seen, 1);
  EXPECT_GT(cluster->worker(*added).stats().batches_sent, 0) << "the new worker served part of the epoch";
}

TEST_F(ClusterTest, AWorkerDrainedMidEpochDeliversWhatItHolds) {
  auto cluster = MustStart();
  ASSERT_TRUE(cluster);
  auto client = MustConnect(cluster->ClientFor("drain", Job()));
  ASSERT_TRUE(client);
  std::map<uint64_t, std::vector<int64_t>> seen;
  ASSERT_TRUE(Take(client.get(), &seen, 4).ok());
  // Draining waits for the consumer to take what the worker holds: consume meanwhile.
  Status end;
  std::thread consumer([&] { end = Take(client.get(), &seen); });
  cluster->DrainWorker(1);
  consumer.join();
  EXPECT_EQ(end.code(), StatusCode::kOutOfRange) << end.ToString();
  ExpectEachOnce(seen, 1);
}

TEST_F(ClusterTest, TheDispatcherRestartedMidEpochLosesNothing) {
  auto cluster = MustStart();
  ASSERT_TRUE(cluster);
  auto client = MustConnect(cluster->ClientFor("restart", Job(2)));
  ASSERT_TRUE(client);
  std::map<uint64_t, std::vector<int64_t>> seen;
  ASSERT_TRUE(Take(client.get(), &seen, 30).ok());  // into epoch 1
  ASSERT_TRUE(cluster->RestartDispatcher().ok());
  EXPECT_EQ(Take(client.get(), &seen).code(), StatusCode::kOutOfRange);
  ExpectEachOnce(seen, 2);
  EXPECT_GT(cluster->dispatcher().stats().core.replayed, 0) << "the new dispatcher replayed the journal";
}

TEST_F(ClusterTest, ANewClientResumesExactlyFromASavedState) {
  auto cluster = MustStart();
  ASSERT_TRUE(cluster);
  std::map<uint64_t, std::vector<int64_t>> seen;
  std::string state;
  {
    auto first = MustConnect(cluster->ClientFor("resume", Job(2)));
    ASSERT_TRUE(first);
    ASSERT_TRUE(Take(first.get(), &seen, 17).ok());
    state = first->SaveState().Serialize();
  }  // the trainer process ends
  ClientOptions o = cluster->ClientFor("", Job(2));
  o.resume_state = state;
  auto second = MustConnect(o);
  ASSERT_TRUE(second);
  EXPECT_EQ(second->consumer_id(), IteratorState::Parse(state)->consumer) << "the state names its consumer";
  EXPECT_EQ(Take(second.get(), &seen).code(), StatusCode::kOutOfRange);
  ExpectEachOnce(seen, 2);
}

TEST_F(ClusterTest, TwoConsumersShareAJob) {
  auto cluster = MustStart();
  ASSERT_TRUE(cluster);
  // Four epochs, and both joined before either takes a batch: the first to join may get
  // every split leased before the other joins (the first two epochs'), but not the
  // later epochs', which go to whichever has fewer in flight.
  auto a = MustConnect(cluster->ClientFor("shared", Job(4)));
  auto b = MustConnect(cluster->ClientFor("shared", Job(4)));
  ASSERT_TRUE(a && b);
  ASSERT_TRUE(a->JobInfo(30) && b->JobInfo(30));
  std::map<uint64_t, std::vector<int64_t>> seen_a, seen_b;
  Status end_a, end_b;
  std::thread ta([&] { end_a = Take(a.get(), &seen_a); });
  std::thread tb([&] { end_b = Take(b.get(), &seen_b); });
  ta.join();
  tb.join();
  EXPECT_EQ(end_a.code(), StatusCode::kOutOfRange) << end_a.ToString();
  EXPECT_EQ(end_b.code(), StatusCode::kOutOfRange) << end_b.ToString();
  std::map<uint64_t, std::vector<int64_t>> both = seen_a;
  for (const auto& [e, v] : seen_b) both[e].insert(both[e].end(), v.begin(), v.end());
  ExpectEachOnce(both, 4);
  EXPECT_FALSE(seen_a.empty());
  EXPECT_FALSE(seen_b.empty());
}

TEST_F(ClusterTest, AConflictingJobIsRefusedWithTheDispatchersReason) {
  auto cluster = MustStart();
  ASSERT_TRUE(cluster);
  auto a = MustConnect(cluster->ClientFor("conflict", Job()));
  ASSERT_TRUE(a);
  ASSERT_TRUE(a->Next().ok());
  JobSpec other = Job();
  other.batch_size = 7;
  auto b = MustConnect(cluster->ClientFor("conflict", other));
  ASSERT_TRUE(b);
  Result<Batch> r = b->Next();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition) << r.status().ToString();
  EXPECT_NE(r.status().message().find("different configuration"), std::string::npos);
}

// Deterministic order: the same batches, pixel for pixel, in the same order, from one
// worker and from three.
TEST_F(ClusterTest, DeterministicOrderIsTheSameWhateverTheWorkers) {
  auto digests = [&](int workers, const std::string& name) {
    TestClusterOptions o;
    o.workers = workers;
    auto cluster = MustStart(o);
    JobSpec job = Job(2);
    job.ordering = Ordering::kDeterministic;
    auto client = MustConnect(cluster->ClientFor(name, job));
    std::vector<std::string> out;
    for (;;) {
      Result<Batch> b = client->Next();
      if (!b.ok()) {
        EXPECT_EQ(b.status().code(), StatusCode::kOutOfRange) << b.status().ToString();
        break;
      }
      Fingerprinter f;
      f.Add(std::string_view(static_cast<const char*>(b->images.data), b->images.num_bytes()));
      f.Add(std::string_view(static_cast<const char*>(b->indices.data), b->indices.num_bytes()));
      out.push_back(std::to_string(b->provenance.epoch) + "/" + std::to_string(b->provenance.batch_in_epoch) + " " +
                    f.Hex());
    }
    return out;
  };
  const std::vector<std::string> one = digests(1, "det-1");
  const std::vector<std::string> three = digests(3, "det-3");
  EXPECT_EQ(one.size(), 48u);
  EXPECT_EQ(one, three);
  for (size_t i = 0; i < one.size(); ++i) {
    EXPECT_EQ(one[i].substr(0, one[i].find(' ')), std::to_string(i / 24) + "/" + std::to_string(i % 24))
        << "split order within each epoch";
  }
}

TEST_F(ClusterTest, TheTokenIsRequiredEverywhere) {
  TestClusterOptions o;
  o.token = "s3cret";
  auto cluster = MustStart(o);
  ASSERT_TRUE(cluster);
  ClientOptions right = cluster->ClientFor("auth", Job());
  auto good = MustConnect(right);
  std::map<uint64_t, std::vector<int64_t>> seen;
  EXPECT_EQ(Take(good.get(), &seen).code(), StatusCode::kOutOfRange);
  ExpectEachOnce(seen, 1);
  ClientOptions wrong = cluster->ClientFor("auth-2", Job());
  wrong.token = "guess";
  auto bad = MustConnect(wrong);
  Result<Batch> r = bad->Next();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnauthenticated) << r.status().ToString();
}

}  // namespace
}  // namespace ferry::testing
