// The fixture of the real-process tests that start ferry-worker and ferry-dispatcher
// one by one (failure_test.cc, hardening_test.cc): the binaries from CTest's
// environment, a small image folder, a temporary folder per test, a watchdog.
#ifndef FERRY_TESTS_PROCESS_DAEMON_TEST_H_
#define FERRY_TESTS_PROCESS_DAEMON_TEST_H_

#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ferry/pipeline_spec.h"
#include "process_util.h"
#include "raw_peer.h"
#include "testutil.h"

namespace ferry::testing {

constexpr char kSpecJson[] =
    R"({"ops":[{"op":"random_resized_crop","size":32}],"output":{"dtype":"uint8","layout":"NHWC"}})";
constexpr int kClasses = 2;
constexpr int kPerClass = 30;
constexpr int64_t kSamples = kClasses * kPerClass;

class DaemonTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    data_ = new TempDir();
    MakeImageFolder(data_->path(), kClasses, kPerClass);
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

  std::unique_ptr<Child> StartWorker(std::vector<std::string> extra = {}, std::string* address = nullptr) {
    const std::string name = "worker" + std::to_string(children_++);
    std::vector<std::string> argv = {worker_bin_, "--listen", "127.0.0.1:0", "--threads", "1"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    auto c = std::make_unique<Child>(argv, dir_ / (name + ".out"), dir_ / (name + ".err"));
    const std::string a = WaitForListening(*c, name);
    if (address) *address = a;
    return c;
  }

  std::unique_ptr<Child> StartDispatcher(std::vector<std::string> extra = {}, std::string* address = nullptr,
                                         const std::string& listen = "127.0.0.1:0", const std::string& work = "journal") {
    const std::string name = "dispatcher" + std::to_string(children_++);
    std::vector<std::string> argv = {dispatcher_bin_, "--listen", listen, "--work-dir", dir_ / work,
                                     "--heartbeat-interval-ms", "100", "--heartbeat-timeout-ms", "1000"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    auto c = std::make_unique<Child>(argv, dir_ / (name + ".out"), dir_ / (name + ".err"));
    const std::string a = WaitForListening(*c, name);
    if (address) *address = a;
    return c;
  }

  // ferry-consume reading one epoch point to point; exits 0 with every index once.
  void ExpectAnEpochFrom(const std::string& worker) {
    const std::string dump = dir_ / ("indices" + std::to_string(children_++) + ".txt");
    Child c({consume_bin_, "--workers", worker, "--data", data_->path(), "--pipeline", kSpecJson, "--batch-size", "8",
             "--epochs", "1", "--dump-indices", dump},
            dir_ / "consume.out", dir_ / "consume.err");
    const std::optional<int> rc = c.Wait(60);
    ASSERT_TRUE(rc.has_value()) << c.err();
    ASSERT_EQ(*rc, 0) << c.err();
    ExpectEachIndexOnce(ReadFile(dump), kSamples);
  }

  // Opens a stream by hand; the worker's Error, or OK if batches came instead.
  static Status OpenRaw(const std::string& worker, const wire::OpenStreamMsg& m) {
    RawPeer p(worker);
    FERRY_RETURN_IF_ERROR(p.Handshake());
    p.Send(wire::EncodeOpenStream(m));
    FERRY_ASSIGN_OR_RETURN(wire::InFrame f, p.ReadFrame(30));
    if (f.header.type != wire::MessageType::kError) return Status::OK();
    FERRY_ASSIGN_OR_RETURN(wire::ErrorMsg e, wire::DecodeError(f));
    return e.status;
  }

  wire::OpenStreamMsg Job(int32_t batch_size, const std::string& pipeline_json) const {
    wire::OpenStreamMsg m;
    m.job.dataset = data_->path();
    auto spec = PipelineSpec::FromJson(pipeline_json);
    EXPECT_TRUE(spec.ok()) << spec.status().ToString();
    m.job.pipeline = *spec;
    m.job.batch_size = batch_size;
    m.job.epochs = 1;
    m.credits = 2;
    m.consumer_id = "raw";
    return m;
  }

  inline static TempDir* data_ = nullptr;
  TempDir dir_;
  std::string worker_bin_, consume_bin_, dispatcher_bin_;
  int children_ = 0;
  Watchdog watchdog_{120, ::testing::UnitTest::GetInstance()->current_test_info()->name()};
};

}  // namespace ferry::testing

#endif  // FERRY_TESTS_PROCESS_DAEMON_TEST_H_
