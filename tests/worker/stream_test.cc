// A worker's decisions without its sockets (lib/worker/worker_core.h, stream.h): what
// a stream serves and refuses, its memory, its credits, its wait for a dispatcher's
// job and its drain. The io thread is a queue the test runs; time is an argument (a
// job's 60 s wait is checked at t = 60 s, not after a minute); the dispatcher is a
// fake JobSource; the images are real JPEGs decoded by a real producer. Nothing here
// sleeps: a test waits only for work a producer thread posts, with a bound.
#include "worker/stream.h"

#include <gtest/gtest.h>

#include <deque>
#include <functional>
#include <map>
#include <set>
#include <vector>

#include "core/mutex.h"
#include "testutil.h"
#include "wire/codec.h"
#include "wire/wire_test_util.h"

namespace ferry {
namespace {

using wire::MessageType;

constexpr int64_t kMs = 1000'000, kS = 1000'000'000;

// The io thread: work posted from any thread, run by the test.
class Loop {
 public:
  void Post(std::function<void()> fn) {
    MutexLock lock(&mu_);
    q_.push_back(std::move(fn));
    cv_.SignalAll();
  }
  // Runs posted work until `done` holds; false if `seconds` pass first.
  bool RunUntil(const std::function<bool()>& done, double seconds = 30) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(int64_t(seconds * 1000));
    while (!done()) {
      std::function<void()> fn;
      {
        MutexLock lock(&mu_);
        while (q_.empty()) {
          if (std::chrono::steady_clock::now() >= deadline) return false;
          cv_.WaitFor(&mu_, 0.05);
        }
        fn = std::move(q_.front());
        q_.pop_front();
      }
      fn();
    }
    return true;
  }

 private:
  Mutex mu_;
  CondVar cv_;
  std::deque<std::function<void()>> q_ GUARDED_BY(mu_);
};

class FakeHost : public StreamHost {
 public:
  void Send(wire::OutFrame f) override { sent.push_back(wire::test::ToInFrame(f)); }
  void CloseAfterWrites() override { closing = true; }
  void WakeAt(int64_t at_ns) override { wake = at_ns; }
  void CancelWake() override { wake = -1; }
  std::string peer() const override { return "test-peer"; }

  int Count(MessageType t) const {
    int n = 0;
    for (const wire::InFrame& f : sent) n += f.header.type == t;
    return n;
  }
  Status LastError() const {
    for (auto it = sent.rbegin(); it != sent.rend(); ++it)
      if (it->header.type == MessageType::kError) return wire::DecodeError(*it)->status;
    return Status::OK();
  }

  std::vector<wire::InFrame> sent;
  bool closing = false;
  int64_t wake = -1;
};

// The dispatcher, as far as streams see it.
class FakeJobs : public JobSource {
 public:
  std::shared_ptr<const WorkerJob> Job(const std::string& name) const override {
    auto it = jobs.find(name);
    return it == jobs.end() ? nullptr : it->second;
  }
  std::shared_ptr<SplitFeed> Feed(const std::string& job, const std::string& consumer) override {
    auto& f = feeds[{job, consumer}];
    if (!f) f = std::make_shared<SplitFeed>();
    return f;
  }
  void Poke() override { ++pokes; }
  void Want(const std::string& job) override { wanted.insert(job); }
  void Refresh(const std::string& job) override { refreshed.insert(job); }
  const std::string& worker_id() const override { return id; }

  std::map<std::string, std::shared_ptr<const WorkerJob>> jobs;
  std::map<std::pair<std::string, std::string>, std::shared_ptr<SplitFeed>> feeds;
  int pokes = 0;
  std::set<std::string> wanted, refreshed;
  std::string id = "w1";
};

PipelineSpec Small() {
  PipelineSpec p;
  p.Add("random_resized_crop", R"({"size":32})");
  return p;  // uint8 NHWC, 32x32x3
}

class StreamTest : public ::testing::Test {
 protected:
  void SetUp() override {
    images_ = testing::MakeImageFolder(dir_.path(), 2, 5);  // 10 real JPEGs
  }

  void MakeCore(WorkerCoreOptions o = {}, bool dispatcher = false) {
    if (o.memory_budget_bytes == 0) o.memory_budget_bytes = uint64_t(1) << 30;
    WorkerEnv env;
    env.arena = MakeDecodeArena(2);
    env.post = [this](std::function<void()> fn) { loop_.Post(std::move(fn)); };
    env.run_blocking = [](std::function<void()> fn) { fn(); };
    env.retire = [](std::unique_ptr<BatchProducer> p) { p->Stop(); };
    core_ = std::make_unique<WorkerCore>(o, std::move(env), &datasets_, dispatcher ? &jobs_ : nullptr);
  }

  std::shared_ptr<WorkerStream> NewStream(FakeHost* host) { return std::make_shared<WorkerStream>(core_.get(), host); }

  wire::OpenStreamMsg Inline(int64_t epochs, uint32_t credits) const {
    wire::OpenStreamMsg m;
    m.job.dataset = dir_.path();
    m.job.pipeline = Small();
    m.job.batch_size = 4;
    m.job.epochs = epochs;
    m.job.seed = 7;
    m.credits = credits;
    return m;
  }

  wire::OpenStreamMsg Synthetic(uint32_t credits) const {
    wire::OpenStreamMsg m;
    m.job.dataset = "synthetic:4096:1000";
    m.job.batch_size = 4;
    m.job.epochs = 0;  // forever
    m.credits = credits;
    return m;
  }

  wire::OpenStreamMsg ByName(const std::string& job, uint64_t config = 0) const {
    wire::OpenStreamMsg m;
    m.by_name = true;
    m.job_name = job;
    m.consumer_id = "c0";
    m.job_config = config;
    m.credits = 1000;
    return m;
  }

  testing::TempDir dir_;
  std::vector<std::string> images_;
  Loop loop_;
  DatasetCache datasets_{DataRoots()};
  FakeJobs jobs_;
  std::unique_ptr<WorkerCore> core_;
};

TEST_F(StreamTest, AnInlineStreamSendsABatchPerCreditAndEachSampleOncePerEpoch) {
  MakeCore();
  FakeHost host;
  auto s = NewStream(&host);
  s->Open(Inline(/*epochs=*/2, /*credits=*/1), 0);
  ASSERT_TRUE(loop_.RunUntil([&] { return host.Count(MessageType::kBatch) == 1 && s->queued() >= 1; }));
  // The next batch is made and held: no credit, no frame.
  EXPECT_EQ(host.Count(MessageType::kBatch), 1);
  s->Credit(100);
  ASSERT_TRUE(loop_.RunUntil([&] { return host.closing; }));
  // 10 images in batches of 4, kept last: 3 batches and an EndOfEpoch per epoch.
  EXPECT_EQ(host.Count(MessageType::kBatch), 6);
  EXPECT_EQ(host.Count(MessageType::kEndOfEpoch), 2);
  EXPECT_EQ(host.Count(MessageType::kError), 0);
  std::map<uint64_t, std::multiset<int64_t>> seen;
  for (const wire::InFrame& f : host.sent) {
    if (f.header.type != MessageType::kBatch) continue;
    std::vector<SkippedSample> skipped;
    Result<Batch> b = wire::DecodeBatch(f, &skipped);
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    EXPECT_EQ(b->images.shape[1], 32);
    for (int64_t r = 0; r < b->valid_rows(); ++r) seen[b->provenance.epoch].insert(b->indices.as<int64_t>()[r]);
  }
  ASSERT_EQ(seen.size(), 2u);
  for (const auto& [epoch, samples] : seen) {
    EXPECT_EQ(samples.size(), 10u) << "epoch " << epoch;
    EXPECT_EQ(std::set<int64_t>(samples.begin(), samples.end()).size(), 10u) << "epoch " << epoch;
  }
  EXPECT_EQ(core_->counters().streams, 1);
  EXPECT_EQ(core_->counters().batches_sent, 6);
  s->Closed();
  EXPECT_EQ(core_->reserved(), 0u) << "the stream's memory comes back";
}

TEST_F(StreamTest, CreditsPastTheBuffersQueueNothingMore) {
  // A client that grants 2^32 - 1 credits and never reads: a synthetic stream makes no
  // more frames than the stream's buffers at a time, whatever it was granted.
  WorkerCoreOptions o;
  o.allow_synthetic = true;
  o.buffered_batches = 4;
  MakeCore(o);
  FakeHost host;
  auto s = NewStream(&host);
  s->Open(Synthetic(0xFFFFFFFFu), 0);
  EXPECT_LE(host.sent.size(), size_t(core_->buffers() + 1));
  EXPECT_LE(s->credits(), StreamOutbox::kMaxCredits);
  EXPECT_FALSE(host.closing);
}

TEST_F(StreamTest, SyntheticDatasetsNeedAllowSynthetic) {
  MakeCore();
  FakeHost host;
  auto s = NewStream(&host);
  s->Open(Synthetic(4), 0);
  EXPECT_EQ(host.LastError().code(), StatusCode::kPermissionDenied);
  EXPECT_TRUE(host.closing);
}

TEST_F(StreamTest, AStreamPastTheMemoryBudgetIsRefusedAndClosedStreamsGiveItBack) {
  WorkerCoreOptions o;
  o.allow_synthetic = true;
  o.memory_budget_bytes = 6000;  // one synthetic stream of 4096-byte batches, not two
  MakeCore(o);
  FakeHost a, b, c;
  auto sa = NewStream(&a), sb = NewStream(&b), sc = NewStream(&c);
  sa->Open(Synthetic(1), 0);
  EXPECT_EQ(a.Count(MessageType::kError), 0);
  EXPECT_GE(core_->reserved(), 4096u);
  sb->Open(Synthetic(1), 0);
  EXPECT_EQ(b.LastError().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(b.LastError().message().find("--max-memory"), std::string::npos) << b.LastError().message();
  sa->Closed();
  EXPECT_EQ(core_->reserved(), 0u);
  sc->Open(Synthetic(1), 0);
  EXPECT_EQ(c.Count(MessageType::kError), 0);
}

TEST_F(StreamTest, ADrainingWorkerOpensNothingAndDrainEndsAStreamWithUnavailable) {
  MakeCore();
  FakeHost host;
  auto s = NewStream(&host);
  s->Open(Inline(/*epochs=*/0, /*credits=*/2), 0);  // forever
  ASSERT_TRUE(loop_.RunUntil([&] { return host.Count(MessageType::kBatch) == 2; }));
  s->Drain();
  s->Credit(1000);
  ASSERT_TRUE(loop_.RunUntil([&] { return host.closing; }));
  EXPECT_EQ(host.LastError().code(), StatusCode::kUnavailable) << "an epoch cut short: the client goes elsewhere";
  core_->SetDraining();
  FakeHost late;
  NewStream(&late)->Open(Inline(1, 1), 0);
  EXPECT_EQ(late.LastError().code(), StatusCode::kUnavailable);
  EXPECT_TRUE(core_->counters().draining);
}

TEST_F(StreamTest, RequestsAreCheckedBeforeAnythingIsListed) {
  MakeCore();
  FakeHost no_dispatcher, bad_name, bad_shard;
  NewStream(&no_dispatcher)->Open(ByName("job"), 0);
  EXPECT_EQ(no_dispatcher.LastError().code(), StatusCode::kUnimplemented);
  MakeCore({}, /*dispatcher=*/true);
  NewStream(&bad_name)->Open(ByName("job\nforged log line"), 0);
  EXPECT_EQ(bad_name.LastError().code(), StatusCode::kInvalidArgument);
  wire::OpenStreamMsg m = Inline(1, 1);
  m.num_shards = 2;
  m.shard_index = 2;
  NewStream(&bad_shard)->Open(m, 0);
  EXPECT_EQ(bad_shard.LastError().code(), StatusCode::kInvalidArgument);
}

TEST_F(StreamTest, ANamedStreamWaitsForItsJobUntilItsDeadline) {
  MakeCore({}, /*dispatcher=*/true);
  FakeHost host;
  auto s = NewStream(&host);
  const int64_t t0 = 5 * kS;
  s->Open(ByName("job"), t0);
  EXPECT_EQ(jobs_.wanted.count("job"), 1u);
  EXPECT_EQ(jobs_.pokes, 1) << "a consumer waits: ask the dispatcher now";
  EXPECT_EQ(host.wake, t0 + 20 * kMs);
  s->OnTimer(t0 + 59 * kS);
  EXPECT_TRUE(host.sent.empty());
  EXPECT_EQ(host.wake, t0 + 59 * kS + 20 * kMs);
  s->OnTimer(t0 + 60 * kS);
  EXPECT_EQ(host.LastError().code(), StatusCode::kUnavailable);
  EXPECT_NE(host.LastError().message().find("within 60 s"), std::string::npos) << host.LastError().message();
  EXPECT_TRUE(host.closing);
}

TEST_F(StreamTest, ANamedStreamOfAnotherConfigFetchesTheJobAgain) {
  MakeCore({}, /*dispatcher=*/true);
  auto job = std::make_shared<WorkerJob>();
  job->name = "job";
  job->spec.dataset = dir_.path();
  jobs_.jobs["job"] = job;
  FakeHost host;
  auto s = NewStream(&host);
  s->Open(ByName("job", job->spec.ConfigFingerprint() ^ 1), 0);
  EXPECT_EQ(jobs_.refreshed.count("job"), 1u);
  EXPECT_TRUE(host.sent.empty()) << "it waits for the job it asked for";
  EXPECT_GE(host.wake, 0);
}

TEST_F(StreamTest, AJobThisWorkerCannotServeIsRefusedAsUnavailable) {
  MakeCore({}, /*dispatcher=*/true);
  auto job = std::make_shared<WorkerJob>();
  job->name = "job";
  job->status = Status::NotFound("no such dataset: /gone");
  jobs_.jobs["job"] = job;
  FakeHost host;
  NewStream(&host)->Open(ByName("job"), 0);
  EXPECT_EQ(host.LastError().code(), StatusCode::kUnavailable) << "the client tries another worker";
  EXPECT_NE(host.LastError().message().find("/gone"), std::string::npos);
}

TEST_F(StreamTest, ANamedStreamServesTheSplitsLeasedToItsConsumer) {
  MakeCore({}, /*dispatcher=*/true);
  auto ds = datasets_.Open(dir_.path());
  ASSERT_TRUE(ds.ok());
  auto job = std::make_shared<WorkerJob>();
  job->name = "job";
  job->spec.dataset = dir_.path();
  job->spec.pipeline = Small();
  job->spec.batch_size = 2;
  job->spec.batches_per_split = 1;
  job->spec.num_samples = 10;
  job->spec.epochs = 1;
  job->dataset = *ds;
  job->prepared = *PreparedJob::Prepare(job->spec);
  jobs_.jobs["job"] = job;
  FakeHost host;
  auto s = NewStream(&host);
  s->Open(ByName("job"), 0);
  EXPECT_TRUE(s->named());
  EXPECT_EQ(core_->counters().named_streams, 1);
  jobs_.feeds.at({"job", "c0"})->SetHeld({{0, 1}, {0, 3}});
  ASSERT_TRUE(loop_.RunUntil([&] { return host.Count(MessageType::kBatch) == 2; }));
  std::set<int64_t> splits;
  for (const wire::InFrame& f : host.sent) {
    std::vector<SkippedSample> skipped;
    Result<Batch> b = wire::DecodeBatch(f, &skipped);
    ASSERT_TRUE(b.ok());
    splits.insert(b->provenance.split);
  }
  EXPECT_EQ(splits, (std::set<int64_t>{1, 3}));
  EXPECT_EQ(host.Count(MessageType::kEndOfEpoch), 0) << "a split stream's client counts splits";
  s->Closed();
  EXPECT_EQ(core_->counters().named_streams, 0);
}

TEST(DatasetCacheTest, ADatasetIsListedOnceWhileHeldAndConfinedToTheRoots) {
  testing::TempDir root, outside;
  testing::MakeImageFolder(root.path(), 2, 2);
  testing::MakeImageFolder(outside.path(), 2, 2);
  DatasetCache cache(*DataRoots::Make({root.path()}));
  auto a = cache.Open(root.path());
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  auto b = cache.Open(root.path());
  EXPECT_EQ(a->get(), b->get()) << "one listing while a stream holds it";
  EXPECT_EQ(cache.Open(outside.path()).status().code(), StatusCode::kPermissionDenied);
}

TEST(DrainPolicyTest, ADrainWaitsForAcknowledgementsWhileAConsumerIsConnected) {
  DrainPolicy p(/*start=*/0, /*timeout=*/60 * kS);
  EXPECT_EQ(p.Step(100 * kMs, false, true), DrainPolicy::Next::kWait);
  EXPECT_EQ(p.Step(30 * kS, false, true), DrainPolicy::Next::kWait);
  EXPECT_EQ(p.Step(30 * kS + 100 * kMs, true, true), DrainPolicy::Next::kDrained);
}

TEST(DrainPolicyTest, ADrainStopsWaitingASecondAfterTheLastConsumerLeft) {
  DrainPolicy p(0, 60 * kS);
  EXPECT_EQ(p.Step(5 * kS, false, true), DrainPolicy::Next::kWait);
  EXPECT_EQ(p.Step(5 * kS + 900 * kMs, false, false), DrainPolicy::Next::kWait);
  EXPECT_EQ(p.Step(6 * kS + 100 * kMs, false, false), DrainPolicy::Next::kNoConsumer);
}

TEST(DrainPolicyTest, ADrainEndsAtItsTimeout) {
  DrainPolicy p(10 * kS, 60 * kS);
  EXPECT_EQ(p.Step(69 * kS, false, true), DrainPolicy::Next::kWait);
  EXPECT_EQ(p.Step(70 * kS, false, true), DrainPolicy::Next::kTimedOut);
}

}  // namespace
}  // namespace ferry
