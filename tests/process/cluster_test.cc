// Real processes: ferry-worker daemons and the ferry-consume CLI, as an operator
// runs them. Every sample of an epoch arrives exactly once across two workers; SIGTERM
// drains a worker and it exits 0; a worker with a token refuses a client without one;
// and a worker killed with SIGKILL mid-epoch and restarted on the same port loses and
// repeats nothing (the client resumes after the last batch it received).
//
// CTest passes the binaries in FERRY_WORKER_BIN and FERRY_CONSUME_BIN; without them the
// tests skip. Every wait is bounded; children are killed in teardown.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "ferry/loader.h"
#include "pipeline/producer.h"
#include "process_util.h"
#include "testutil.h"

namespace ferry {
namespace {

using testing::Child;
using testing::ExpectEachIndexOnce;
using testing::FreePort;
using testing::Lines;
using testing::MakeImageFolder;
using testing::ReadFile;
using testing::TempDir;
using testing::WaitFor;
using testing::WaitForListening;
using testing::Watchdog;
using testing::WriteFile;

constexpr char kClusterSpecJson[] =
    R"({"ops":[{"op":"random_resized_crop","size":32}],"output":{"dtype":"uint8","layout":"NHWC"}})";
constexpr int kClusterClasses = 2;
constexpr int kClusterPerClass = 150;
constexpr int64_t kClusterSamples = kClusterClasses * kClusterPerClass;
constexpr int kClusterBatch = 7;

class ClusterTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    data_ = new TempDir();
    MakeImageFolder(data_->path(), kClusterClasses, kClusterPerClass);
  }
  static void TearDownTestSuite() { delete data_; }

  void SetUp() override {
    const char* w = std::getenv("FERRY_WORKER_BIN");
    const char* b = std::getenv("FERRY_CONSUME_BIN");
    if (w == nullptr || *w == '\0' || b == nullptr || *b == '\0')
      GTEST_SKIP()
          << "FERRY_WORKER_BIN / FERRY_CONSUME_BIN are not set (CTest sets them)";
    worker_bin_ = w;
    consume_bin_ = b;
  }

  // Starts ferry-worker and waits for its "listening on HOST:PORT" line.
  std::unique_ptr<Child> StartWorker(const std::string& listen, std::vector<std::string> extra = {},
                                     std::string* address = nullptr) {
    const std::string name = "worker" + std::to_string(children_++);
    std::vector<std::string> argv = {worker_bin_, "--listen", listen, "--threads", "1", "--id", name};
    argv.insert(argv.end(), extra.begin(), extra.end());
    auto c = std::make_unique<Child>(argv, dir_ / (name + ".out"), dir_ / (name + ".err"));
    const std::string addr = WaitForListening(*c, name);
    if (address) *address = addr;
    return c;
  }

  std::unique_ptr<Child> StartConsume(const std::string& workers, std::vector<std::string> extra,
                                      const std::string& name) {
    std::vector<std::string> argv = {
        consume_bin_,    "--workers", workers,        "--data",
        data_->path(), "--pipeline", kClusterSpecJson,   "--batch-size", std::to_string(kClusterBatch)};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return std::make_unique<Child>(argv, dir_ / (name + ".out"), dir_ / (name + ".err"));
  }

  // The "drained: N connections, N streams, N batches sent" line of a worker's log.
  static bool DrainedStats(const std::string& log, long long* connections, long long* streams,
                           long long* batches) {
    const size_t at = log.find("drained: ");
    if (at == std::string::npos) return false;
    return std::sscanf(log.c_str() + at, "drained: %lld connections, %lld streams, %lld batches sent",
                       connections, streams, batches) == 3;
  }

  static TempDir* data_;
  TempDir dir_;
  std::string worker_bin_, consume_bin_;
  int children_ = 0;
  Watchdog watchdog_{90, ::testing::UnitTest::GetInstance()->current_test_info()->name()};
};

TempDir* ClusterTest::data_ = nullptr;

TEST_F(ClusterTest, TwoWorkersServeEveryIndexExactlyOnce) {
  std::string a, b;
  auto wa = StartWorker("127.0.0.1:0", {}, &a);
  auto wb = StartWorker("127.0.0.1:0", {}, &b);
  ASSERT_FALSE(a.empty() || b.empty());
  EXPECT_NE(a, b);
  EXPECT_EQ(a.rfind("127.0.0.1:", 0), 0u) << a;
  const std::string dump = dir_ / "indices.txt";
  auto consume = StartConsume(a + "," + b, {"--epochs", "1", "--dump-indices", dump}, "consume");
  const std::optional<int> rc = consume->Wait(60);
  ASSERT_TRUE(rc.has_value()) << "consume did not finish";
  ASSERT_EQ(*rc, 0) << consume->err();
  const std::vector<std::string> out = Lines(consume->out());
  ASSERT_FALSE(out.empty());
  double ips = 0, wait_frac = -1;
  long long samples = 0;
  ASSERT_EQ(std::sscanf(out.back().c_str(), "consume img/s=%lf wait_frac=%lf samples=%lld", &ips, &wait_frac,
                        &samples),
            3)
      << out.back();
  EXPECT_GT(ips, 0);
  EXPECT_GE(wait_frac, 0);
  EXPECT_LE(wait_frac, 1.0001);
  EXPECT_EQ(samples, kClusterSamples);
  ExpectEachIndexOnce(ReadFile(dump), kClusterSamples);

  // SIGTERM drains; with no client left, each worker exits 0 at once.
  for (Child* w : {wa.get(), wb.get()}) {
    w->Signal(SIGTERM);
    const std::optional<int> wrc = w->Wait(15);
    ASSERT_TRUE(wrc.has_value()) << "worker did not exit after SIGTERM";
    EXPECT_EQ(*wrc, 0) << w->err();
    long long connections = 0, streams = 0, batches = 0;
    EXPECT_TRUE(DrainedStats(w->err(), &connections, &streams, &batches)) << w->err();
    EXPECT_EQ(streams, 1);
  }
}

TEST_F(ClusterTest, SigtermMidStreamDrainsAndExitsZero) {
  std::string a;
  auto w = StartWorker("127.0.0.1:0", {"--drain-timeout", "20"}, &a);
  ASSERT_FALSE(a.empty());
  const std::string dump = dir_ / "indices.txt";
  // Endless epochs: only the drain ends the stream.
  auto consume = StartConsume(a, {"--epochs", "0", "--dump-indices", dump}, "consume");
  ASSERT_TRUE(WaitFor([&] { return Lines(ReadFile(dump)).size() >= size_t(3 * kClusterBatch); }, 30))
      << consume->err();
  w->Signal(SIGTERM);
  const std::optional<int> wrc = w->Wait(20);
  ASSERT_TRUE(wrc.has_value()) << "worker did not exit after SIGTERM";
  EXPECT_EQ(*wrc, 0) << w->err();
  EXPECT_NE(w->err().find("draining"), std::string::npos) << w->err();
  // The client retries, finds no worker, and gives up with an error.
  const std::optional<int> rc = consume->Wait(30);
  ASSERT_TRUE(rc.has_value()) << "consume did not give up";
  EXPECT_NE(*rc, 0);
  EXPECT_NE(consume->err().find("Unavailable"), std::string::npos) << consume->err();
}

TEST_F(ClusterTest, TokenFileIsEnforced) {
  WriteFile(dir_ / "token", "s3cret\n");
  WriteFile(dir_ / "wrong", "guess\n");
  std::string a;
  auto w = StartWorker("127.0.0.1:0", {"--token-file", dir_ / "token"}, &a);
  ASSERT_FALSE(a.empty());
  {
    auto consume = StartConsume(a, {"--epochs", "1"}, "no-token");
    const std::optional<int> rc = consume->Wait(30);
    ASSERT_TRUE(rc.has_value());
    EXPECT_NE(*rc, 0);
    EXPECT_NE(consume->err().find("token"), std::string::npos) << consume->err();
    EXPECT_NE(consume->err().find("Unauthenticated"), std::string::npos) << consume->err();
  }
  {
    auto consume = StartConsume(a, {"--epochs", "1", "--token-file", dir_ / "wrong"}, "wrong-token");
    const std::optional<int> rc = consume->Wait(30);
    ASSERT_TRUE(rc.has_value());
    EXPECT_NE(*rc, 0);
    EXPECT_NE(consume->err().find("wrong token"), std::string::npos) << consume->err();
  }
  {
    const std::string dump = dir_ / "indices.txt";
    auto consume = StartConsume(a, {"--epochs", "1", "--token-file", dir_ / "token", "--dump-indices", dump},
                                "good-token");
    const std::optional<int> rc = consume->Wait(60);
    ASSERT_TRUE(rc.has_value());
    EXPECT_EQ(*rc, 0) << consume->err();
    ExpectEachIndexOnce(ReadFile(dump), kClusterSamples);
  }
  {
    // A worker whose token file is missing does not start.
    Child bad({worker_bin_, "--listen", "127.0.0.1:0", "--token-file", dir_ / "missing"}, dir_ / "bad.out",
              dir_ / "bad.err");
    const std::optional<int> rc = bad.Wait(20);
    ASSERT_TRUE(rc.has_value());
    EXPECT_NE(*rc, 0);
    EXPECT_NE(bad.err().find("missing"), std::string::npos) << bad.err();
  }
  w->Signal(SIGTERM);
  const std::optional<int> wrc = w->Wait(15);
  ASSERT_TRUE(wrc.has_value());
  EXPECT_EQ(*wrc, 0) << w->err();
}

// The sample indices the first of two workers serves in epoch 0: the client's static
// sharding, computed the way the worker plans it.
std::set<int64_t> ShardOfFirstWorker(uint64_t seed) {
  JobSpec job;
  job.batch_size = kClusterBatch;
  job.seed = seed;
  job.shuffle = true;
  job.last_batch = LastBatch::kKeep;
  job.epochs = 1;
  StaticShardPlan plan(kClusterSamples, job, Shard{/*shard_index=*/0, /*num_shards=*/2, /*first_epoch=*/0});
  std::set<int64_t> out;
  while (std::optional<BatchPlan> p = plan.Next()) out.insert(p->samples.begin(), p->samples.end());
  return out;
}

// kill -9 one worker mid-epoch, restart it on the same port within the client's retry
// window (about 5 s: 6 retries from 0.1 s, doubling to 2 s): the consume still delivers
// every index exactly once.
//
// So that the kill lands mid-epoch however fast or loaded the machine is, the consumer
// runs in short steps (SIGCONT, 2 ms, SIGSTOP) until the first sample of the doomed
// worker's shard shows up in its dump; with one credit, a worker runs at most one
// batch ahead of what the consumer has taken. The consumer stays stopped while the
// worker dies and comes back.
TEST_F(ClusterTest, KilledWorkerRestartedOnTheSamePortLosesNothing) {
  constexpr uint64_t kSeed = 11;
  const std::set<int64_t> shard_a = ShardOfFirstWorker(kSeed);
  ASSERT_EQ(shard_a.size(), size_t(kClusterSamples / 2));
  const int64_t shard_batches = (int64_t(shard_a.size()) + kClusterBatch - 1) / kClusterBatch;  // 22
  auto shard_a_seen = [&](const std::string& dump) {
    int64_t n = 0;
    for (const std::string& l : Lines(dump)) n += shard_a.count(std::stoll(l)) ? 1 : 0;
    return n;
  };

  const int port = FreePort();
  const std::string a = "127.0.0.1:" + std::to_string(port);
  std::string address_a, b;
  auto wa = StartWorker(a, {}, &address_a);
  auto wb = StartWorker("127.0.0.1:0", {}, &b);
  ASSERT_EQ(address_a, a);
  ASSERT_FALSE(b.empty());
  const std::string dump = dir_ / "indices.txt";
  auto consume = StartConsume(
      a + "," + b,
      {"--epochs", "1", "--credits", "1", "--seed", std::to_string(kSeed), "--dump-indices", dump},
      "consume");
  ASSERT_TRUE(consume->Stop());
  const bool started = WaitFor(
      [&] {
        if (shard_a_seen(ReadFile(dump)) > 0) return true;
        consume->Signal(SIGCONT);
        std::this_thread::sleep_for(std::chrono::milliseconds(2));  // a step, not a wait
        return !consume->Stop();  // it exited: let the assertions below say how
      },
      30);
  ASSERT_TRUE(started) << consume->err();
  const int64_t a_before = shard_a_seen(ReadFile(dump));
  ASSERT_GE(a_before, 1) << consume->err();
  ASSERT_LE(a_before, int64_t(shard_a.size()) - 2 * kClusterBatch) << "worker A finished its shard before the kill";

  wa->Signal(SIGKILL);
  ASSERT_TRUE(wa->Wait(10).has_value());
  std::string address_a2;
  auto wa2 = StartWorker(a, {}, &address_a2);
  ASSERT_EQ(address_a2, a) << wa2->err();
  consume->Signal(SIGCONT);

  const std::optional<int> rc = consume->Wait(60);
  ASSERT_TRUE(rc.has_value()) << "consume did not finish";
  ASSERT_EQ(*rc, 0) << consume->err();
  const std::vector<std::string> out = Lines(consume->out());
  ASSERT_FALSE(out.empty());
  long long samples = 0;
  double ips = 0, wait_frac = 0;
  ASSERT_EQ(std::sscanf(out.back().c_str(), "consume img/s=%lf wait_frac=%lf samples=%lld", &ips, &wait_frac,
                        &samples),
            3)
      << out.back();
  EXPECT_EQ(samples, kClusterSamples);
  ExpectEachIndexOnce(ReadFile(dump), kClusterSamples);

  // The restarted worker served one stream, resumed after what the client had: the
  // rest of the shard, not all of it.
  for (Child* w : {wa2.get(), wb.get()}) {
    w->Signal(SIGTERM);
    const std::optional<int> wrc = w->Wait(15);
    ASSERT_TRUE(wrc.has_value());
    EXPECT_EQ(*wrc, 0) << w->err();
  }
  long long connections = 0, streams = 0, batches = 0;
  ASSERT_TRUE(DrainedStats(wa2->err(), &connections, &streams, &batches)) << wa2->err();
  EXPECT_EQ(streams, 1);
  EXPECT_GT(batches, 0);
  EXPECT_LE(batches, shard_batches - a_before / kClusterBatch)
      << "the restarted worker repeated batches the client already had: it did not resume";
}

}  // namespace
}  // namespace ferry
