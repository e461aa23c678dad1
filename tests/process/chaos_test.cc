// Chaos tests of the dispatcher path, with real processes: ferry-dispatcher,
// ferry-worker --dispatcher, and ferry-consume --dispatcher --job. In each, an
// epoch of a real JPEG folder must reach the job's consumers exactly once, counted by
// sample index (--dump-indices), while something goes wrong mid-epoch:
//   1. a worker is killed with SIGKILL;
//   2. a worker joins;
//   3. the dispatcher is killed with SIGKILL and restarted on its work dir;
//   4. the consumer stops, saving its state, and a new process resumes from it;
//   5. two consumers share the job;
// plus: resuming from a checkpoint the trainer had gone past, deterministic order
// (the same batches, pixel for pixel, from 1 worker and from 3), parallel_epochs
// (each worker yields the whole epoch), SIGTERM draining a worker that holds splits,
// and --exit-when-idle.
//
// "Mid-epoch" is made reliable by a consumer that simulates a training step after each
// batch (--step-ms), so an epoch takes seconds; the trigger waits for a number of
// indices in the dump. Every wait is bounded; children die with the test.
#include <gtest/gtest.h>
#include <signal.h>

#include <cstdlib>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

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

constexpr char kChaosSpecJson[] =
    R"({"ops":[{"op":"random_resized_crop","size":32}],"output":{"dtype":"uint8","layout":"NHWC"}})";
constexpr int kChaosClasses = 3;
constexpr int kChaosPerClass = 100;
constexpr int64_t kChaosSamples = kChaosClasses * kChaosPerClass;
constexpr int kChaosBatch = 5;  // 60 batches; 2 batches per split: 30 splits

class ChaosTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    data_ = new TempDir();
    MakeImageFolder(data_->path(), kChaosClasses, kChaosPerClass);
  }
  static void TearDownTestSuite() { delete data_; }

  void SetUp() override {
    const char* w = std::getenv("FERRY_WORKER_BIN");
    const char* b = std::getenv("FERRY_CONSUME_BIN");
    const char* d = std::getenv("FERRY_DISPATCHER_BIN");
    if (!w || !*w || !b || !*b || !d || !*d)
      GTEST_SKIP() << "FERRY_WORKER_BIN / FERRY_CONSUME_BIN / FERRY_DISPATCHER_BIN are not set (CTest sets them)";
    worker_bin_ = w;
    consume_bin_ = b;
    dispatcher_bin_ = d;
  }

  // A dispatcher with a fast heartbeat, so that dead workers are found in about a second.
  std::unique_ptr<Child> StartDispatcher(const std::string& listen, std::vector<std::string> extra = {}) {
    const std::string name = "dispatcher" + std::to_string(children_++);
    std::vector<std::string> argv = {dispatcher_bin_,          "--listen", listen, "--work-dir", dir_ / "journal",
                                     "--heartbeat-interval-ms", "100",      "--heartbeat-timeout-ms", "1000"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    auto c = std::make_unique<Child>(argv, dir_ / (name + ".out"), dir_ / (name + ".err"));
    dispatcher_ = WaitForListening(*c, name);
    return c;
  }

  std::unique_ptr<Child> StartWorker(std::vector<std::string> extra = {}) {
    const std::string name = "worker" + std::to_string(children_++);
    std::vector<std::string> argv = {worker_bin_, "--listen", "127.0.0.1:0", "--threads", "1",
                                     "--dispatcher", dispatcher_, "--drain-timeout", "20"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    auto c = std::make_unique<Child>(argv, dir_ / (name + ".out"), dir_ / (name + ".err"));
    WaitForListening(*c, name);
    return c;
  }

  std::unique_ptr<Child> StartConsume(const std::string& name, const std::string& dump,
                                      std::vector<std::string> extra = {}, const std::string& step_ms = "25",
                                      const std::string& job = "job") {
    std::vector<std::string> argv = {consume_bin_,   "--dispatcher", dispatcher_,
                                     "--job",      job,            "--data",       data_->path(),
                                     "--pipeline", kChaosSpecJson,      "--batch-size", std::to_string(kChaosBatch),
                                     "--batches-per-split", "2",   "--epochs",     "1",
                                     "--dump-indices", dump,       "--step-ms",    step_ms};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return std::make_unique<Child>(argv, dir_ / (name + ".out"), dir_ / (name + ".err"));
  }

  // Waits until the dump holds at least n indices (the consumer is mid-epoch).
  static bool DumpReaches(const std::string& dump, size_t n) {
    return WaitFor([&] { return Lines(ReadFile(dump)).size() >= n; }, 40);
  }

  static void ExpectExitsZero(Child& c, double seconds, const std::string& what) {
    const std::optional<int> rc = c.Wait(seconds);
    ASSERT_TRUE(rc.has_value()) << what << " did not finish: " << c.err();
    EXPECT_EQ(*rc, 0) << what << ": " << c.err();
  }

  static TempDir* data_;
  TempDir dir_;
  std::string worker_bin_, consume_bin_, dispatcher_bin_, dispatcher_;
  int children_ = 0;
  Watchdog watchdog_{120, ::testing::UnitTest::GetInstance()->current_test_info()->name()};
};

TempDir* ChaosTest::data_ = nullptr;

TEST_F(ChaosTest, KillNineAWorkerMidEpoch) {
  auto d = StartDispatcher("127.0.0.1:0");
  auto w1 = StartWorker();
  auto w2 = StartWorker();
  const std::string dump = dir_ / "indices.txt";
  auto consume = StartConsume("consume", dump);
  ASSERT_TRUE(DumpReaches(dump, kChaosSamples / 4)) << consume->err();
  ASSERT_LT(Lines(ReadFile(dump)).size(), size_t(kChaosSamples)) << "the epoch ended before the kill";
  w1->Kill();
  ExpectExitsZero(*consume, 60, "consume");
  ExpectEachIndexOnce(ReadFile(dump), kChaosSamples);
  // Found dead by the client's report (its connections refused, its heartbeat missed),
  // or else by the heartbeat timeout.
  const std::string log = d->err();
  EXPECT_TRUE(log.find("refuses a client's connections") != std::string::npos ||
              log.find("missed its heartbeats") != std::string::npos)
      << log;
}

TEST_F(ChaosTest, AWorkerStartedMidEpochTakesSplits) {
  auto d = StartDispatcher("127.0.0.1:0");
  auto w1 = StartWorker();
  const std::string dump = dir_ / "indices.txt";
  auto consume = StartConsume("consume", dump);
  ASSERT_TRUE(DumpReaches(dump, kChaosSamples / 5)) << consume->err();
  auto w2 = StartWorker();
  ExpectExitsZero(*consume, 60, "consume");
  ExpectEachIndexOnce(ReadFile(dump), kChaosSamples);
  // The newcomer served part of the epoch: its drain report counts the batches sent.
  w2->Signal(SIGTERM);
  ExpectExitsZero(*w2, 30, "worker 2");
  long long connections = 0, streams = 0, batches = 0;
  const std::string log = w2->err();
  const size_t at = log.find("drained: ");
  ASSERT_NE(at, std::string::npos) << log;
  ASSERT_EQ(std::sscanf(log.c_str() + at, "drained: %lld connections, %lld streams, %lld batches sent", &connections,
                        &streams, &batches),
            3);
  EXPECT_GT(batches, 0) << "the worker started mid-epoch took no split";
}

TEST_F(ChaosTest, KillNineTheDispatcherAndRestartIt) {
  const std::string listen = "127.0.0.1:" + std::to_string(FreePort());
  auto d = StartDispatcher(listen);
  auto w1 = StartWorker();
  auto w2 = StartWorker();
  const std::string dump = dir_ / "indices.txt";
  auto consume = StartConsume("consume", dump);
  ASSERT_TRUE(DumpReaches(dump, kChaosSamples / 4)) << consume->err();
  d->Kill();
  const size_t at_kill = Lines(ReadFile(dump)).size();
  ASSERT_LT(at_kill, size_t(kChaosSamples)) << "the epoch ended before the kill";
  // Down for a while: workers keep streaming the splits they hold; then it comes back
  // on the same address and work dir, replays its journal, and everyone reconnects.
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  auto d2 = StartDispatcher(listen);
  ExpectExitsZero(*consume, 60, "consume");
  ExpectEachIndexOnce(ReadFile(dump), kChaosSamples);
  EXPECT_NE(d2->err().find("replayed"), std::string::npos) << d2->err();
}

TEST_F(ChaosTest, StopAClientAndResumeANewOneFromItsState) {
  auto d = StartDispatcher("127.0.0.1:0");
  auto w1 = StartWorker();
  auto w2 = StartWorker();
  const std::string dump = dir_ / "indices.txt";
  const std::string state = dir_ / "state.txt";
  // 23 batches: mid-split (2 batches per split), so the state has an open split.
  auto first = StartConsume("first", dump, {"--consumer-id", "trainer", "--stop-after", "23", "--save-state", state});
  ExpectExitsZero(*first, 60, "first consume");
  EXPECT_NE(first->out().find("state saved"), std::string::npos) << first->out();
  EXPECT_EQ(Lines(ReadFile(dump)).size(), size_t(23 * kChaosBatch));
  const std::string saved = ReadFile(state);
  EXPECT_NE(saved.find("partial"), std::string::npos) << saved;
  auto second = StartConsume("second", dump, {"--resume", state});
  ExpectExitsZero(*second, 60, "resumed consume");
  ExpectEachIndexOnce(ReadFile(dump), kChaosSamples);
}

// The trainer checkpoints (saves the state) after 17 batches, goes on to batch 41 and
// dies; a new process resumes from the checkpoint. The splits completed and
// acknowledged after the checkpoint must come again: together with the first 17
// batches, the resumed run is exactly one epoch.
TEST_F(ChaosTest, ResumeFromACheckpointTheTrainerHadGonePast) {
  auto d = StartDispatcher("127.0.0.1:0");
  auto w1 = StartWorker();
  const std::string dump = dir_ / "first.txt", resumed = dir_ / "resumed.txt";
  const std::string state = dir_ / "state.txt";
  auto first = StartConsume("first", dump, {"--consumer-id", "trainer", "--save-after", "17", "--save-state", state,
                                            "--stop-after", "41"});
  ExpectExitsZero(*first, 60, "first consume");
  std::vector<std::string> lines = Lines(ReadFile(dump));
  ASSERT_EQ(lines.size(), size_t(41 * kChaosBatch));
  lines.resize(17 * kChaosBatch);  // what the checkpoint had yielded
  auto second = StartConsume("second", resumed, {"--resume", state});
  ExpectExitsZero(*second, 60, "resumed consume");
  std::string joined;
  for (const std::string& l : lines) joined += l + "\n";
  ExpectEachIndexOnce(joined + ReadFile(resumed), kChaosSamples);
  EXPECT_NE(d->err().find("resumed from a saved state"), std::string::npos) << d->err();
}

TEST_F(ChaosTest, DeterministicOrderIsTheSameWhateverTheWorkers) {
  auto d = StartDispatcher("127.0.0.1:0");
  std::vector<std::unique_ptr<Child>> workers;
  workers.push_back(StartWorker());
  std::string digests[2];
  for (int run = 0; run < 2; ++run) {
    if (run == 1) {
      workers.push_back(StartWorker());
      workers.push_back(StartWorker());
    }
    const std::string tag = std::to_string(run);
    const std::string dump = dir_ / ("indices" + tag + ".txt"), digest = dir_ / ("digests" + tag + ".txt");
    auto c = StartConsume("run" + tag, dump, {"--deterministic", "--dump-digests", digest}, "0", "det" + tag);
    ExpectExitsZero(*c, 60, "run " + tag);
    ExpectEachIndexOnce(ReadFile(dump), kChaosSamples);
    digests[run] = ReadFile(digest);
  }
  EXPECT_EQ(Lines(digests[0]).size(), size_t(kChaosSamples / kChaosBatch));
  EXPECT_EQ(digests[0], digests[1]) << "1 worker and 3 workers yielded different sequences";
}

// Deterministic order through a worker's death (issue 11, case 3): the dead worker's
// splits come back below splits the survivors hold, and the client yields nothing past
// a missing split. Each consumer's next split is leased past the lease-ahead, so the
// survivors take them; the sequence is the undisturbed one, batch for batch.
TEST_F(ChaosTest, DeterministicOrderSurvivesAKilledWorker) {
  auto d = StartDispatcher("127.0.0.1:0", {"--leases-ahead", "2"});
  std::vector<std::unique_ptr<Child>> workers;
  workers.push_back(StartWorker());
  const std::string base_dump = dir_ / "base.txt", base_digest = dir_ / "base-digests.txt";
  auto base = StartConsume("base", base_dump, {"--deterministic", "--dump-digests", base_digest}, "0", "det-base");
  ExpectExitsZero(*base, 60, "undisturbed run");
  workers.push_back(StartWorker());
  workers.push_back(StartWorker());
  const std::string dump = dir_ / "indices.txt", digest = dir_ / "digests.txt";
  auto c = StartConsume("killed", dump, {"--deterministic", "--dump-digests", digest}, "25", "det-kill");
  ASSERT_TRUE(DumpReaches(dump, kChaosSamples / 4)) << c->err();
  workers[1]->Signal(SIGKILL);
  ExpectExitsZero(*c, 60, "the run with a worker killed");
  ExpectEachIndexOnce(ReadFile(dump), kChaosSamples);
  EXPECT_EQ(ReadFile(digest), ReadFile(base_digest)) << "a worker's death changed the sequence";
  EXPECT_NE(d->err().find("removed"), std::string::npos) << "the killed worker was not declared dead: " << d->err();
}

// parallel_epochs: no sharding; each worker yields the whole epoch.
TEST_F(ChaosTest, ParallelEpochsEveryWorkerYieldsTheWholeEpoch) {
  auto d = StartDispatcher("127.0.0.1:0");
  auto w1 = StartWorker();
  auto w2 = StartWorker();
  // Both workers registered before the client asks for the list.
  const std::string dump = dir_ / "indices.txt";
  auto c = StartConsume("consume", dump, {"--parallel-epochs"}, "0", "parallel");
  ExpectExitsZero(*c, 60, "consume");
  std::map<int64_t, int> count;
  for (const std::string& l : Lines(ReadFile(dump))) ++count[std::stoll(l)];
  EXPECT_EQ(count.size(), size_t(kChaosSamples));
  for (const auto& [index, n] : count) EXPECT_EQ(n, 2) << "index " << index;
}

TEST_F(ChaosTest, TwoClientsShareOneJob) {
  auto d = StartDispatcher("127.0.0.1:0");
  auto w1 = StartWorker();
  auto w2 = StartWorker();
  const std::string dump_a = dir_ / "a.txt", dump_b = dir_ / "b.txt";
  auto a = StartConsume("a", dump_a);
  auto b = StartConsume("b", dump_b);
  ExpectExitsZero(*a, 60, "consumer a");
  ExpectExitsZero(*b, 60, "consumer b");
  const size_t na = Lines(ReadFile(dump_a)).size(), nb = Lines(ReadFile(dump_b)).size();
  EXPECT_GT(na, 0u) << "consumer a got nothing";
  EXPECT_GT(nb, 0u) << "consumer b got nothing";
  ExpectEachIndexOnce(ReadFile(dump_a) + ReadFile(dump_b), kChaosSamples);
}

TEST_F(ChaosTest, SigtermDrainsAWorkerThatHoldsSplits) {
  auto d = StartDispatcher("127.0.0.1:0");
  auto w1 = StartWorker();
  auto w2 = StartWorker();
  const std::string dump = dir_ / "indices.txt";
  auto consume = StartConsume("consume", dump);
  ASSERT_TRUE(DumpReaches(dump, kChaosSamples / 4)) << consume->err();
  w1->Signal(SIGTERM);
  // It serves the splits it holds, then leaves; the other worker finishes the epoch.
  ExpectExitsZero(*w1, 40, "draining worker");
  ExpectExitsZero(*consume, 60, "consume");
  ExpectEachIndexOnce(ReadFile(dump), kChaosSamples);
  EXPECT_NE(d->err().find("is draining"), std::string::npos) << d->err();
}

TEST_F(ChaosTest, TheDispatchersTokenIsEnforced) {
  testing::WriteFile(dir_ / "token", "s3cret\n");
  auto d = StartDispatcher("127.0.0.1:0", {"--token-file", dir_ / "token"});
  auto w1 = StartWorker({"--token-file", dir_ / "token"});
  {
    auto c = StartConsume("no-token", dir_ / "none.txt", {}, "0", "tok");
    const std::optional<int> rc = c->Wait(30);
    ASSERT_TRUE(rc.has_value());
    EXPECT_NE(*rc, 0);
    EXPECT_NE(c->err().find("Unauthenticated"), std::string::npos) << c->err();
    EXPECT_NE(c->err().find("requires a token"), std::string::npos) << c->err();
  }
  const std::string dump = dir_ / "indices.txt";
  auto c = StartConsume("token", dump, {"--token-file", dir_ / "token"}, "0", "tok");
  ExpectExitsZero(*c, 60, "consume with the token");
  ExpectEachIndexOnce(ReadFile(dump), kChaosSamples);
}

TEST_F(ChaosTest, ExitWhenIdleStopsTheDispatcherAndWorkers) {
  auto d = StartDispatcher("127.0.0.1:0", {"--exit-when-idle"});
  auto w1 = StartWorker({"--exit-when-idle"});
  const std::string dump = dir_ / "indices.txt";
  auto consume = StartConsume("consume", dump, {}, "0");
  ExpectExitsZero(*consume, 60, "consume");
  ExpectEachIndexOnce(ReadFile(dump), kChaosSamples);
  ExpectExitsZero(*w1, 30, "idle worker");
  ExpectExitsZero(*d, 30, "idle dispatcher");
}

}  // namespace
}  // namespace ferry
