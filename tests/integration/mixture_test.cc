// Weighted mixtures (JobSpec::mixture) through a real dispatcher and real workers: a
// worker stopped and the dispatcher restarted mid-epoch change no batch a consumer
// sees (the same sequence as the job read without them, and as the in-process Loader
// makes), and each source's passes hold each of its samples exactly once.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ferry/client.h"
#include "ferry/loader.h"
#include "integration/test_cluster.h"
#include "testutil.h"

namespace ferry::testing::mixture {
namespace {

constexpr int64_t kSizes[3] = {30, 20, 8};  // the sources' samples: indices [0, 30), [30, 50), [50, 58)
constexpr int64_t kEpoch = 60;              // draws an epoch: 36, 18, 6
constexpr int64_t kEpochs = 3;

class MixtureClusterTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    data_ = new TempDir();
    MakeImageFolder(data_->path() + "/a", 3, 10, 1);
    MakeImageFolder(data_->path() + "/b", 2, 10, 2);
    MakeImageFolder(data_->path() + "/c", 2, 4, 3);
  }
  static void TearDownTestSuite() { delete data_; }

  static JobSpec Job() {
    JobSpec j;
    j.dataset = "mixture";
    j.mixture = {{data_->path() + "/a", 0.6, "", 0}, {data_->path() + "/b", 0.3, "", 0}, {data_->path() + "/c", 0.1, "", 0}};
    j.mixture_epoch = kEpoch;
    auto spec = PipelineSpec::FromJson(
        R"({"ops":[{"op":"random_resized_crop","size":24},{"op":"hflip","p":0.5}],"output":{"dtype":"uint8","layout":"NHWC"}})");
    EXPECT_TRUE(spec.ok());
    j.pipeline = *spec;
    j.batch_size = 5;  // 12 batches an epoch, 6 splits
    j.batches_per_split = 2;
    j.epochs = kEpochs;
    j.seed = 31;
    j.ordering = Ordering::kDeterministic;
    return j;
  }

  struct Seen {
    std::vector<std::string> batches;  // "epoch/batch digest"
    std::vector<int64_t> indices;      // every row, in order
    Status end;
  };

  static void Take(BatchIterator* it, Seen* seen, int64_t max_batches = INT64_MAX) {
    for (int64_t n = 0; n < max_batches; ++n) {
      Result<Batch> b = it->Next();
      if (!b.ok()) {
        seen->end = b.status();
        return;
      }
      seen->batches.push_back(BatchDigest(*b));
      for (int64_t i = 0; i < b->valid_rows(); ++i) seen->indices.push_back(b->indices.as<int64_t>()[i]);
    }
  }

  static std::unique_ptr<Client> MustConnect(const ClientOptions& o) {
    auto c = Client::Connect(o);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? std::move(*c) : nullptr;
  }

  static TempDir* data_;
  Watchdog watchdog_{150, ::testing::UnitTest::GetInstance()->current_test_info()->name()};
};

TempDir* MixtureClusterTest::data_ = nullptr;

TEST_F(MixtureClusterTest, AWorkerStoppedAndTheDispatcherRestartedLoseAndRepeatNothing) {
  auto started = TestCluster::Start();
  ASSERT_TRUE(started.ok()) << started.status().ToString();
  TestCluster& cluster = **started;

  // The job read without failures, and in-process.
  Seen alone;
  {
    auto c = MustConnect(cluster.ClientFor("alone", Job()));
    ASSERT_TRUE(c);
    Take(c.get(), &alone);
  }
  ASSERT_EQ(alone.end.code(), StatusCode::kOutOfRange) << alone.end.ToString();
  ASSERT_EQ(alone.batches.size(), size_t(kEpochs * 12));
  {
    LoaderOptions o;
    o.job = Job();
    o.threads = 1;
    auto l = Loader::Open(o);
    ASSERT_TRUE(l.ok()) << l.status().ToString();
    Seen local;
    Take(l->get(), &local);
    EXPECT_EQ(local.batches, alone.batches) << "the in-process Loader makes the dispatcher job's batches";
  }

  // The same job with a worker stopped after 7 batches and the dispatcher restarted
  // after 16 (epoch 1), a new worker joining between.
  Seen seen;
  auto c = MustConnect(cluster.ClientFor("mix", Job()));
  ASSERT_TRUE(c);
  Take(c.get(), &seen, 7);
  cluster.StopWorker(0);
  ASSERT_TRUE(cluster.AddWorker().ok());
  Take(c.get(), &seen, 9);
  ASSERT_TRUE(cluster.RestartDispatcher().ok());
  Take(c.get(), &seen);
  EXPECT_EQ(seen.end.code(), StatusCode::kOutOfRange) << seen.end.ToString();
  EXPECT_EQ(seen.batches, alone.batches);

  // Each source's draws, epoch after epoch, are passes holding each sample once.
  std::vector<std::vector<int64_t>> drawn(3);
  for (int64_t i : seen.indices) {
    ASSERT_GE(i, 0);
    ASSERT_LT(i, 58);
    const int k = i < 30 ? 0 : i < 50 ? 1 : 2;
    drawn[size_t(k)].push_back(i - (k == 0 ? 0 : k == 1 ? 30 : 50));
  }
  EXPECT_EQ(drawn[0].size(), size_t(36 * kEpochs));
  EXPECT_EQ(drawn[1].size(), size_t(18 * kEpochs));
  EXPECT_EQ(drawn[2].size(), size_t(6 * kEpochs));
  for (size_t k = 0; k < 3; ++k) {
    const size_t n = size_t(kSizes[k]);
    for (size_t begin = 0; begin < drawn[k].size(); begin += n) {
      std::vector<int64_t> pass(drawn[k].begin() + long(begin), drawn[k].begin() + long(std::min(begin + n, drawn[k].size())));
      std::sort(pass.begin(), pass.end());
      EXPECT_EQ(std::adjacent_find(pass.begin(), pass.end()), pass.end())
          << "source " << k << ": a sample twice in its pass from draw " << begin;
    }
  }
}

TEST_F(MixtureClusterTest, ASourceTheWorkersCannotOpenIsNamed) {
  auto started = TestCluster::Start({.workers = 1});
  ASSERT_TRUE(started.ok()) << started.status().ToString();
  JobSpec j = Job();
  j.mixture[1].dataset = data_->path() + "/missing";
  auto c = Client::Connect((*started)->ClientFor("bad", j));
  Status st = c.ok() ? (*c)->Next().status() : c.status();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("mixture source 1"), std::string::npos) << st.ToString();
}

}  // namespace
}  // namespace ferry::testing::mixture
