// In-process cluster tests: WorkerService instances on loopback (port 0) and the
// header-only ferry::Client, over a small real ImageFolder. They check the data plane
// end to end: static sharding covers each epoch exactly once, batches land in the
// receive buffers without copies, tokens are enforced, hostile or broken peers are
// cut off without disturbing good ones, a slow consumer stalls only itself, closed
// connections are cleaned up, Drain() ends streams, and a client resumes on a
// restarted worker without losing or repeating a sample.
//
// Raw peers (plain POSIX sockets) speak the protocol by hand where a test needs to
// misbehave in ways the Client never would.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "ferry/client.h"
#include "ferry/pipeline_spec.h"
#include "net/address.h"
#include "net/auth.h"
#include "wire/codec.h"
#include "wire/control.h"
#include "server/worker_service.h"
#include "raw_peer.h"
#include "testutil.h"

namespace ferry {
namespace {

using wire::InFrame;
using wire::MessageType;
using wire::OutFrame;
using testing::MakeImageFolder;
using testing::RawHeader;
using testing::RawPeer;
using testing::TempDir;
using testing::WaitFor;
using testing::Watchdog;

constexpr char kSpecJson[] =
    R"({"ops":[{"op":"random_resized_crop","size":32}],"output":{"dtype":"uint8","layout":"NHWC"}})";
constexpr int kClasses = 2;
constexpr int kPerClass = 25;
constexpr int64_t kSamples = kClasses * kPerClass;
constexpr int kBatch = 7;
constexpr double kTestSeconds = 60;  // the watchdog of each test

// ---------------------------------------------------------------------------------
// What a consumer saw.

struct Row {
  uint64_t epoch;
  int64_t index;
  int64_t label;
};

struct Consumed {
  std::vector<Row> rows;         // valid rows, in order
  std::vector<int64_t> padding;  // (index, label) pairs of padding rows, flattened
  int64_t batches = 0;
  std::vector<int64_t> batch_rows;
  Status end;  // what ended it: OutOfRange, or an error
};

void Record(const Batch& b, Consumed* c) {
  ++c->batches;
  c->batch_rows.push_back(b.rows());
  EXPECT_EQ(b.images.dtype, DType::kUint8);
  EXPECT_EQ(b.images.rank, 4);
  EXPECT_EQ(b.images.shape[0], b.rows());
  EXPECT_EQ(b.images.shape[1], 32);
  EXPECT_EQ(b.images.shape[2], 32);
  EXPECT_EQ(b.images.shape[3], 3);
  const int64_t* idx = b.indices.as<int64_t>();
  const int64_t* lab = b.labels.as<int64_t>();
  for (int64_t r = 0; r < b.rows(); ++r) {
    if (r < b.valid_rows()) {
      c->rows.push_back({b.provenance.epoch, idx[r], lab[r]});
    } else {
      c->padding.push_back(idx[r]);
      c->padding.push_back(lab[r]);
    }
  }
}

// Reads until the end of data or an error (at most `max_batches`).
Consumed ConsumeAll(BatchIterator* it, int64_t max_batches = INT64_MAX) {
  Consumed c;
  while (c.batches < max_batches) {
    Result<Batch> b = it->Next();
    if (!b.ok()) {
      c.end = b.status();
      break;
    }
    Record(*b, &c);
  }
  return c;
}

// The sample indices of `epoch` (all epochs if -1), sorted.
std::vector<int64_t> Indices(const std::vector<Row>& rows, int64_t epoch = -1) {
  std::vector<int64_t> out;
  for (const Row& r : rows)
    if (epoch < 0 || int64_t(r.epoch) == epoch) out.push_back(r.index);
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<int64_t> Iota(int64_t n) {
  std::vector<int64_t> v(size_t(n), 0);
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = i;
  return v;
}

// No (epoch, index) pair twice.
void ExpectNoDuplicates(const std::vector<Row>& rows) {
  std::set<std::pair<uint64_t, int64_t>> seen;
  for (const Row& r : rows)
    EXPECT_TRUE(seen.insert({r.epoch, r.index}).second)
        << "epoch " << r.epoch << " index " << r.index << " twice";
}

// ---------------------------------------------------------------------------------
// The fixture: one small ImageFolder for the whole suite.

class WorkerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    paths_ = new std::vector<std::string>(MakeImageFolder(dir_->path(), kClasses, kPerClass));
  }
  static void TearDownTestSuite() {
    delete paths_;
    delete dir_;
  }

  static WorkerOptions WorkerOpts(const std::string& token = "") {
    WorkerOptions o;
    o.listen = "127.0.0.1:0";
    o.threads = 1;
    o.token = token;
    o.drain_timeout_s = 10;
    o.id = "test-worker";
    o.allow_synthetic = true;  // the synthetic-source tests
    return o;
  }

  static std::unique_ptr<WorkerService> StartWorker(const WorkerOptions& o) {
    Result<std::unique_ptr<WorkerService>> w = WorkerService::Start(o);
    EXPECT_TRUE(w.ok()) << w.status().ToString();
    return w.ok() ? std::move(*w) : nullptr;
  }
  static std::unique_ptr<WorkerService> StartWorker(const std::string& token = "") {
    return StartWorker(WorkerOpts(token));
  }

  static PipelineSpec Spec() {
    Result<PipelineSpec> s = PipelineSpec::FromJson(kSpecJson);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return *s;
  }

  static ClientOptions ClientOpts(std::vector<std::string> workers) {
    ClientOptions o;
    o.workers = std::move(workers);
    o.job.dataset = dir_->path();
    o.job.pipeline = Spec();
    o.job.batch_size = kBatch;
    o.job.seed = 42;
    o.job.epochs = 1;
    o.credits = 2;
    o.max_retries = 1;
    o.backoff_initial_s = 0.05;
    o.backoff_max_s = 0.05;
    return o;
  }

  static std::unique_ptr<Client> Connect(const ClientOptions& o) {
    Result<std::unique_ptr<Client>> c = Client::Connect(o);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? std::move(*c) : nullptr;
  }

  // The job a raw peer opens: the whole dataset from one worker.
  static wire::OpenStreamMsg RawJob(uint32_t credits, int64_t epochs = 1) {
    wire::OpenStreamMsg m;
    m.job.dataset = dir_->path();
    m.job.pipeline = Spec();
    m.job.batch_size = kBatch;
    m.job.seed = 42;
    m.job.epochs = epochs;
    m.credits = credits;
    m.consumer_id = "raw-peer";
    return m;
  }

  // Label of sample `index` from its path (root/class_<k>/...).
  static int64_t LabelOf(int64_t index) {
    const std::string& p = (*paths_)[size_t(index)];
    const size_t at = p.rfind("/class_");
    return std::stoll(p.substr(at + 7));
  }

  static void ExpectLabelsMatch(const std::vector<Row>& rows) {
    for (const Row& r : rows) {
      ASSERT_GE(r.index, 0);
      ASSERT_LT(r.index, kSamples);
      EXPECT_EQ(r.label, LabelOf(r.index)) << "index " << r.index;
    }
  }

  static void ExpectEpochExactlyOnce(const std::vector<Row>& rows, int64_t epoch) {
    EXPECT_EQ(Indices(rows, epoch), Iota(kSamples)) << "epoch " << epoch;
  }

  static TempDir* dir_;
  static std::vector<std::string>* paths_;
  Watchdog watchdog_{kTestSeconds, ::testing::UnitTest::GetInstance()->current_test_info()->name()};
};

TempDir* WorkerTest::dir_ = nullptr;
std::vector<std::string>* WorkerTest::paths_ = nullptr;

// ---------------------------------------------------------------------------------
// Sharding: every sample exactly once

TEST_F(WorkerTest, TwoWorkersServeEachIndexExactlyOnce) {
  auto w0 = StartWorker(), w1 = StartWorker();
  ASSERT_TRUE(w0 && w1);
  auto client = Connect(ClientOpts({w0->address(), w1->address()}));
  ASSERT_TRUE(client);
  const Consumed c = ConsumeAll(client.get());
  EXPECT_TRUE(c.end.IsOutOfRange()) << c.end.ToString();
  ExpectEpochExactlyOnce(c.rows, 0);
  ExpectLabelsMatch(c.rows);
  EXPECT_TRUE(c.padding.empty());
  // Each worker's shard is 25 samples: 7+7+7+4 under "keep".
  EXPECT_EQ(c.batches, 8);
  std::vector<int64_t> sizes = c.batch_rows;
  std::sort(sizes.begin(), sizes.end());
  EXPECT_EQ(sizes, (std::vector<int64_t>{4, 4, 7, 7, 7, 7, 7, 7}));
  EXPECT_EQ(client->stats().samples, kSamples);
  EXPECT_EQ(client->stats().batches, 8);
  EXPECT_EQ(client->epochs_completed(), 1);
  EXPECT_EQ(client->reconnects(), 0);
  // Further calls keep saying "end of data".
  EXPECT_TRUE(client->Next().status().IsOutOfRange());
  EXPECT_EQ(w0->stats().streams, 1);
  EXPECT_EQ(w1->stats().streams, 1);
  EXPECT_EQ(w0->stats().batches_sent + w1->stats().batches_sent, 8);
  EXPECT_EQ(w0->stats().bad_frames + w1->stats().bad_frames, 0);
}

// The same worker named twice is two shards of it: two streams, each epoch once.
TEST_F(WorkerTest, OneWorkerNamedTwiceServesTwoShards) {
  auto w = StartWorker();
  ASSERT_TRUE(w);
  auto client = Connect(ClientOpts({w->address(), w->address()}));
  ASSERT_TRUE(client);
  const Consumed c = ConsumeAll(client.get());
  EXPECT_TRUE(c.end.IsOutOfRange()) << c.end.ToString();
  ExpectEpochExactlyOnce(c.rows, 0);
  EXPECT_EQ(w->stats().streams, 2);
  EXPECT_EQ(client->epochs_completed(), 1);
}

TEST_F(WorkerTest, TwoEpochsEachExactlyOnce) {
  auto w0 = StartWorker(), w1 = StartWorker();
  ASSERT_TRUE(w0 && w1);
  ClientOptions o = ClientOpts({w0->address(), w1->address()});
  o.job.epochs = 2;
  o.first_epoch = 5;
  auto client = Connect(o);
  ASSERT_TRUE(client);
  const Consumed c = ConsumeAll(client.get());
  EXPECT_TRUE(c.end.IsOutOfRange()) << c.end.ToString();
  ASSERT_EQ(c.rows.size(), size_t(2 * kSamples));
  ExpectEpochExactlyOnce(c.rows, 5);
  ExpectEpochExactlyOnce(c.rows, 6);
  ExpectLabelsMatch(c.rows);
  EXPECT_EQ(client->epochs_completed(), 2);
  // Shuffled per epoch: the two epochs' orders differ.
  std::vector<int64_t> e5, e6;
  for (const Row& r : c.rows) (r.epoch == 5 ? e5 : e6).push_back(r.index);
  EXPECT_NE(e5, e6);
}

TEST_F(WorkerTest, PadKeepsBatchesFullWithPaddingRows) {
  auto w0 = StartWorker(), w1 = StartWorker();
  ASSERT_TRUE(w0 && w1);
  ClientOptions o = ClientOpts({w0->address(), w1->address()});
  o.job.last_batch = LastBatch::kPad;
  auto client = Connect(o);
  ASSERT_TRUE(client);
  const Consumed c = ConsumeAll(client.get());
  EXPECT_TRUE(c.end.IsOutOfRange()) << c.end.ToString();
  ExpectEpochExactlyOnce(c.rows, 0);
  ExpectLabelsMatch(c.rows);
  for (int64_t r : c.batch_rows) EXPECT_EQ(r, kBatch);
  // Each shard's last batch holds 4 samples and 3 padding rows: index -1, label -1.
  ASSERT_EQ(c.padding.size(), 2u * 2 * 3);
  for (int64_t v : c.padding) EXPECT_EQ(v, -1);
}

TEST_F(WorkerTest, DropLeavesOutEachShardsShortBatch) {
  auto w0 = StartWorker(), w1 = StartWorker();
  ASSERT_TRUE(w0 && w1);
  ClientOptions o = ClientOpts({w0->address(), w1->address()});
  o.job.last_batch = LastBatch::kDrop;
  auto client = Connect(o);
  ASSERT_TRUE(client);
  const Consumed c = ConsumeAll(client.get());
  EXPECT_TRUE(c.end.IsOutOfRange()) << c.end.ToString();
  EXPECT_EQ(c.rows.size(), 2u * 21);
  ExpectNoDuplicates(c.rows);
  ExpectLabelsMatch(c.rows);
  for (int64_t r : c.batch_rows) EXPECT_EQ(r, kBatch);
}

TEST_F(WorkerTest, SameSeedSamePixelsFromEitherWorkerCount) {
  // Determinism across the transport: one worker or two, sample i has the same pixels.
  auto w0 = StartWorker(), w1 = StartWorker();
  ASSERT_TRUE(w0 && w1);
  auto pixels = [&](std::vector<std::string> workers) {
    std::map<int64_t, std::string> out;
    auto client = Connect(ClientOpts(std::move(workers)));
    for (;;) {
      Result<Batch> b = client->Next();
      if (!b.ok()) {
        EXPECT_TRUE(b.status().IsOutOfRange()) << b.status().ToString();
        break;
      }
      const size_t row = b->images.num_bytes() / size_t(b->rows());
      for (int64_t r = 0; r < b->valid_rows(); ++r)
        out[b->indices.as<int64_t>()[r]] = std::string(b->images.as<char>() + size_t(r) * row, row);
    }
    return out;
  };
  const auto one = pixels({w0->address()});
  const auto two = pixels({w0->address(), w1->address()});
  ASSERT_EQ(one.size(), size_t(kSamples));
  EXPECT_TRUE(one == two);
}

// ---------------------------------------------------------------------------------
// Zero copy on receive

TEST_F(WorkerTest, BatchesLandInTheUsersBuffers) {
  auto w = StartWorker();
  ASSERT_TRUE(w);
  std::mutex mu;
  std::map<uintptr_t, size_t> live;  // start -> size
  int64_t allocations = 0;
  auto alloc = [&](size_t n) -> void* {
    void* p = std::aligned_alloc(64, (n + 63) / 64 * 64);
    std::lock_guard<std::mutex> lock(mu);
    live[reinterpret_cast<uintptr_t>(p)] = n;
    ++allocations;
    return p;
  };
  auto release = [&](void* p, size_t n) {
    {
      std::lock_guard<std::mutex> lock(mu);
      auto it = live.find(reinterpret_cast<uintptr_t>(p));
      EXPECT_TRUE(it != live.end());
      if (it != live.end()) {
        EXPECT_EQ(it->second, n);
        live.erase(it);
      }
    }
    std::free(p);
  };
  // The range of a live user buffer holding [p, p+n), or 0.
  auto owner_of = [&](const void* p, size_t n) -> uintptr_t {
    std::lock_guard<std::mutex> lock(mu);
    const auto q = reinterpret_cast<uintptr_t>(p);
    auto it = live.upper_bound(q);
    if (it == live.begin()) return 0;
    --it;
    return q >= it->first && q + n <= it->first + it->second ? it->first : 0;
  };
  {
    ClientOptions o = ClientOpts({w->address()});
    o.buffers = FunctionBufferAllocator(alloc, release);
    auto client = Connect(o);
    ASSERT_TRUE(client);
    std::vector<Batch> kept;
    std::set<uintptr_t> buffers;
    for (;;) {
      Result<Batch> b = client->Next();
      if (!b.ok()) {
        EXPECT_TRUE(b.status().IsOutOfRange()) << b.status().ToString();
        break;
      }
      const uintptr_t images = owner_of(b->images.data, b->images.num_bytes());
      EXPECT_NE(images, 0u) << "images are not in a user buffer";
      EXPECT_EQ(owner_of(b->labels.data, b->labels.num_bytes()), images);
      EXPECT_EQ(owner_of(b->indices.data, b->indices.num_bytes()), images);
      buffers.insert(images);
      kept.push_back(std::move(*b));  // keep them all: each must still have its own buffer
    }
    EXPECT_EQ(kept.size(), 8u);
    EXPECT_EQ(buffers.size(), kept.size());
    // Batches outlive the client; their buffers stay valid until they go.
    client.reset();
    for (const Batch& b : kept) EXPECT_NE(owner_of(b.images.data, b.images.num_bytes()), 0u);
  }
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_GE(allocations, 8);
  EXPECT_TRUE(live.empty()) << live.size() << " user buffers were never freed";
}

// ---------------------------------------------------------------------------------
// Authentication

TEST_F(WorkerTest, TokenIsRequiredAndChecked) {
  auto w = StartWorker("s3cret");
  ASSERT_TRUE(w);
  {
    ClientOptions o = ClientOpts({w->address()});
    o.token = "s3cret";
    auto client = Connect(o);
    const Consumed c = ConsumeAll(client.get());
    EXPECT_TRUE(c.end.IsOutOfRange()) << c.end.ToString();
    ExpectEpochExactlyOnce(c.rows, 0);
  }
  {
    const char* env = std::getenv("FERRY_TOKEN");
    ASSERT_TRUE(env == nullptr || *env == '\0') << "unset FERRY_TOKEN to run this test";
    auto client = Connect(ClientOpts({w->address()}));  // no token
    Result<Batch> b = client->Next();
    ASSERT_FALSE(b.ok());
    EXPECT_EQ(b.status().code(), StatusCode::kUnauthenticated) << b.status().ToString();
    EXPECT_NE(b.status().message().find("token"), std::string::npos) << b.status().ToString();
  }
  {
    ClientOptions o = ClientOpts({w->address()});
    o.token = "guess";
    auto client = Connect(o);
    Result<Batch> b = client->Next();
    ASSERT_FALSE(b.ok());
    EXPECT_EQ(b.status().code(), StatusCode::kUnauthenticated) << b.status().ToString();
    EXPECT_NE(b.status().message().find("wrong token"), std::string::npos) << b.status().ToString();
    EXPECT_EQ(client->reconnects(), 0) << "a refused token is permanent";
  }
  {
    // A raw peer that ignores the challenge and sends an empty MAC.
    RawPeer p(w->address());
    ASSERT_TRUE(p.Expect(MessageType::kChallenge).ok());
    p.Send(wire::EncodeHello({wire::Role::kClient, "", "raw"}));
    Result<InFrame> f = p.Expect(MessageType::kError);
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    auto e = wire::DecodeError(*f);
    ASSERT_TRUE(e.ok());
    EXPECT_EQ(e->status.code(), StatusCode::kUnauthenticated);
    EXPECT_NE(e->status.message().find("token"), std::string::npos);
    EXPECT_TRUE(p.WaitClosed());
  }
  // The client without a token refused itself (the challenge said a token is
  // required); the wrong token and the raw peer's empty MAC reached the worker.
  EXPECT_TRUE(WaitFor([&] { return w->stats().auth_failures == 2; }, 5)) << w->stats().auth_failures;
  EXPECT_EQ(w->stats().streams, 1);
}

// A client that has a token refuses a worker that asks for none: an open worker cannot
// prove it is one of the cluster's (anyone could listen at that address), and the
// refusal says so, once, with no retries.
TEST_F(WorkerTest, AClientWithATokenRefusesAWorkerThatAsksForNone) {
  auto w = StartWorker();
  ASSERT_TRUE(w);
  ClientOptions o = ClientOpts({w->address()});
  o.token = "secret";
  auto client = Connect(o);
  Result<Batch> b = client->Next();
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), StatusCode::kUnauthenticated) << b.status().ToString();
  EXPECT_NE(b.status().message().find("does not ask for a token"), std::string::npos) << b.status().ToString();
  EXPECT_EQ(client->reconnects(), 0) << "a refused server is permanent";
  EXPECT_EQ(w->stats().streams, 0);
}

// ---------------------------------------------------------------------------------
// Hostile and broken peers

struct BadInput {
  std::string name;
  bool handshake_first;  // complete the handshake before sending `bytes`
  std::string bytes;
};

std::vector<BadInput> BadInputs() {
  std::mt19937_64 rng(99);
  auto random_bytes = [&](size_t n) {
    std::string s(n, '\0');
    for (char& c : s) c = char(rng());
    return s;
  };
  std::vector<BadInput> v;
  std::string garbage = random_bytes(64);
  garbage[0] = 'G';  // surely not "FRY1"
  v.push_back({"garbage bytes", false, garbage});
  v.push_back({"HTTP request", false, "GET / HTTP/1.1\r\nHost: worker\r\n\r\n"});
  v.push_back({"wrong magic", false, RawHeader("FRY2", 1, 2, 64) + std::string(64, '\0')});
  v.push_back({"wrong version", false, RawHeader("FRY1", 9, 2, 64) + std::string(64, '\0')});
  v.push_back({"oversized Batch (64 GiB)", false, RawHeader("FRY1", 1, 6, uint64_t{64} << 30)});
  v.push_back({"Batch within the batch limit (1 GiB), sent to a worker", false,
               RawHeader("FRY1", 1, 6, uint64_t{1} << 30) + std::string(4096, '\0')});
  v.push_back({"oversized Hello (2 MiB)", false, RawHeader("FRY1", 1, 2, 2 << 20) + std::string(4096, '\0')});
  v.push_back({"length not whole words", false, RawHeader("FRY1", 1, 2, 13) + std::string(13, '\0')});
  {
    std::string body = random_bytes(64);
    std::memset(body.data(), 0xFF, 4);  // a segment count of 2^32
    v.push_back({"Hello with a malformed segment table", false, RawHeader("FRY1", 1, 2, 64) + body});
  }
  {
    std::string body = random_bytes(64);
    const uint32_t table[2] = {0, 1000};  // one segment of 1000 words in a 64-byte body
    std::memcpy(body.data(), table, sizeof table);
    v.push_back({"Hello whose segment exceeds the body", false, RawHeader("FRY1", 1, 2, 64) + body});
  }
  {
    std::string body = random_bytes(128);
    const uint32_t table[2] = {0, 15};
    std::memcpy(body.data(), table, sizeof table);
    v.push_back({"Hello of random words", false, RawHeader("FRY1", 1, 2, 128) + body});
  }
  v.push_back({"unknown message type 99", false, RawHeader("FRY1", 1, 99, 8) + std::string(8, '\0')});
  v.push_back({"unknown message type 0", false, RawHeader("FRY1", 1, 0, 8) + std::string(8, '\0')});
  v.push_back({"Credit before Hello", false, RawPeer::Flatten(wire::EncodeCredit(1000))});
  v.push_back({"a dispatcher's message (RegisterWorker)", false,
               RawPeer::Flatten(wire::EncodeRegisterWorker({"w", "127.0.0.1:1"}))});
  v.push_back({"OpenStream before Hello", false, RawPeer::Flatten(wire::EncodeOpenStream({}))});
  v.push_back({"Hello twice", true, RawPeer::Flatten(wire::EncodeHello({}))});
  v.push_back({"Credit before OpenStream", true, RawPeer::Flatten(wire::EncodeCredit(4))});
  v.push_back({"truncated OpenStream", true, [] {
                 // The frame's length is right, but its segment table claims one word
                 // more than the body holds.
                 std::string f = RawPeer::Flatten(wire::EncodeOpenStream({}));
                 f[wire::kFrameHeaderSize + 4] = char(uint8_t(f[wire::kFrameHeaderSize + 4]) + 1);
                 return f;
               }()});
  return v;
}

TEST_F(WorkerTest, BadFramesAreCutOffWithoutDisturbingOthers) {
  WorkerOptions wo = WorkerOpts();
  auto w = StartWorker(wo);
  ASSERT_TRUE(w);
  // A good client streams two epochs; it takes one batch, then waits while the hostile
  // peers do their worst, then takes the rest.
  ClientOptions o = ClientOpts({w->address()});
  o.job.epochs = 2;
  o.credits = 1;
  auto client = Connect(o);
  ASSERT_TRUE(client);
  std::promise<void> go;
  std::shared_future<void> go_future = go.get_future().share();
  std::atomic<int64_t> first{0};
  auto consumer = std::async(std::launch::async, [&] {
    Consumed c = ConsumeAll(client.get(), 1);
    first = c.batches;
    go_future.wait();
    Consumed rest = ConsumeAll(client.get());
    rest.rows.insert(rest.rows.begin(), c.rows.begin(), c.rows.end());
    return rest;
  });
  ASSERT_TRUE(WaitFor([&] { return first == 1; }, 20));

  const std::vector<BadInput> inputs = BadInputs();
  const int64_t bad_before = w->stats().bad_frames;
  int64_t expected = 0;
  for (const BadInput& in : inputs) {
    SCOPED_TRACE(in.name);
    RawPeer p(w->address());
    ASSERT_TRUE(p.connected());
    if (in.handshake_first) {
      ASSERT_TRUE(p.Handshake().ok());
    } else {
      ASSERT_TRUE(p.Expect(MessageType::kChallenge).ok());
    }
    p.Send(in.bytes);
    EXPECT_TRUE(p.WaitClosed(5)) << in.name << ": the worker kept the connection open";
    ++expected;
    EXPECT_TRUE(WaitFor([&] { return w->stats().bad_frames == bad_before + expected; }, 5))
        << in.name << ": bad_frames " << w->stats().bad_frames - bad_before << ", expected " << expected;
  }
  EXPECT_TRUE(WaitFor([&] { return w->stats().open_connections == 1; }, 5)) << w->stats().open_connections;

  go.set_value();
  ASSERT_EQ(consumer.wait_for(std::chrono::seconds(30)), std::future_status::ready);
  const Consumed c = consumer.get();
  EXPECT_TRUE(c.end.IsOutOfRange()) << c.end.ToString();
  ExpectEpochExactlyOnce(c.rows, 0);
  ExpectEpochExactlyOnce(c.rows, 1);
  ExpectLabelsMatch(c.rows);
  EXPECT_EQ(client->reconnects(), 0);
  EXPECT_EQ(w->stats().streams, 1);
}

TEST_F(WorkerTest, SilentPeersAreDroppedAfterTheHandshakeTimeout) {
  WorkerOptions wo = WorkerOpts();
  wo.handshake_timeout_s = 0.3;
  auto w = StartWorker(wo);
  ASSERT_TRUE(w);
  {
    RawPeer silent(w->address());
    ASSERT_TRUE(silent.Expect(MessageType::kChallenge).ok());
    RawPeer half(w->address());  // says Hello, never opens a stream
    ASSERT_TRUE(half.Handshake().ok());
    Result<InFrame> e = silent.Expect(MessageType::kError, 5);
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    EXPECT_NE(wire::DecodeError(*e)->status.message().find("timed out"), std::string::npos);
    EXPECT_TRUE(silent.WaitClosed(5));
    EXPECT_TRUE(half.WaitClosed(5));
  }
  EXPECT_TRUE(WaitFor([&] { return w->stats().open_connections == 0; }, 5));
  // A peer that never closes its end is closed after the worker's linger time.
  RawPeer stubborn(w->address());
  ASSERT_TRUE(stubborn.Expect(MessageType::kChallenge).ok());
  EXPECT_TRUE(stubborn.WaitClosed(5));
  EXPECT_TRUE(WaitFor([&] { return w->stats().open_connections == 0; }, 5));
}

TEST_F(WorkerTest, BadJobsAreRefusedWithAnError) {
  auto w = StartWorker();
  ASSERT_TRUE(w);
  {
    ClientOptions o = ClientOpts({w->address()});
    o.job.dataset = dir_->path() + "/no-such-dir";
    auto client = Connect(o);
    Result<Batch> b = client->Next();
    ASSERT_FALSE(b.ok());
    EXPECT_FALSE(b.status().IsOutOfRange()) << b.status().ToString();
    EXPECT_NE(b.status().message().find("no-such-dir"), std::string::npos) << b.status().ToString();
  }
  auto refused = [&](wire::OpenStreamMsg m) -> Status {
    RawPeer p(w->address());
    FERRY_RETURN_IF_ERROR(p.Handshake());
    p.Send(wire::EncodeOpenStream(m));
    FERRY_ASSIGN_OR_RETURN(InFrame f, p.Expect(MessageType::kError));
    FERRY_ASSIGN_OR_RETURN(wire::ErrorMsg e, wire::DecodeError(f));
    EXPECT_TRUE(p.WaitClosed());
    return e.status;
  };
  wire::OpenStreamMsg m = RawJob(1);
  m.num_shards = 0;
  EXPECT_EQ(refused(m).code(), StatusCode::kInvalidArgument);
  m = RawJob(1);
  m.shard_index = 2;
  m.num_shards = 2;
  EXPECT_EQ(refused(m).code(), StatusCode::kInvalidArgument);
  m = RawJob(1);
  m.job.batch_size = 0;
  EXPECT_EQ(refused(m).code(), StatusCode::kInvalidArgument);
  m = RawJob(1);
  m.job.pipeline.ops[0].params = R"({"size": 0})";  // an invalid pipeline
  EXPECT_EQ(refused(m).code(), StatusCode::kInvalidArgument);
  m = RawJob(1);
  m.job.fingerprint = 12345;  // not this listing's
  EXPECT_EQ(refused(m).code(), StatusCode::kFailedPrecondition);
  m = RawJob(1);
  m.by_name = true;
  m.job_name = "some-job";
  EXPECT_EQ(refused(m).code(), StatusCode::kUnimplemented);
  m = RawJob(1);
  m.job.dataset = "synthetic:100:1";  // not a multiple of the batch size
  EXPECT_EQ(refused(m).code(), StatusCode::kInvalidArgument);
  m.job.dataset = "synthetic:7:2000000000000";  // absurdly many batches
  EXPECT_EQ(refused(m).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(WaitFor([&] { return w->stats().open_connections == 0; }, 5));
}

// The client grants credits as its consumer takes batches, also while a resumed
// stream is still opening (the worker lists the dataset off its io thread then): a
// Credit that arrives before the first batch is not a protocol error.
TEST_F(WorkerTest, CreditWhileTheStreamOpensIsAccepted) {
  auto w = StartWorker();
  ASSERT_TRUE(w);
  for (int attempt = 0; attempt < 5; ++attempt) {
    RawPeer p(w->address());
    ASSERT_TRUE(p.Handshake().ok());
    // One write: the Credit is read while the worker still opens the stream.
    p.Send(RawPeer::Flatten(wire::EncodeOpenStream(RawJob(0))) +
           RawPeer::Flatten(wire::EncodeCredit(2)));
    for (int i = 0; i < 2; ++i) {
      Result<InFrame> f = p.Expect(MessageType::kBatch);
      ASSERT_TRUE(f.ok()) << "batch " << i << ": " << f.status().ToString();
      ASSERT_TRUE(wire::DecodeBatch(*f, nullptr).ok());
    }
  }
  EXPECT_EQ(w->stats().bad_frames, 0);
}

TEST_F(WorkerTest, StreamsEndWithEndOfEpochAndRawPeersGetEverything) {
  // The protocol by hand, from Challenge to the last EndOfEpoch.
  auto w = StartWorker();
  ASSERT_TRUE(w);
  RawPeer p(w->address());
  ASSERT_TRUE(p.Handshake().ok());
  p.Send(wire::EncodeOpenStream(RawJob(100, 2)));
  std::vector<Row> rows;
  int eoe = 0;
  for (;;) {
    Result<InFrame> f = p.ReadFrame();
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    if (f->header.type == MessageType::kBatch) {
      Consumed c;
      Result<Batch> b = wire::DecodeBatch(*f, nullptr);
      ASSERT_TRUE(b.ok());
      Record(*b, &c);
      rows.insert(rows.end(), c.rows.begin(), c.rows.end());
      continue;
    }
    ASSERT_EQ(f->header.type, MessageType::kEndOfEpoch);
    auto e = wire::DecodeEndOfEpoch(*f);
    ASSERT_TRUE(e.ok());
    EXPECT_EQ(e->epoch, uint64_t(eoe));
    EXPECT_EQ(e->batches, 8);
    EXPECT_EQ(e->samples, kSamples);
    ++eoe;
    if (e->last) break;
  }
  EXPECT_EQ(eoe, 2);
  ExpectEpochExactlyOnce(rows, 0);
  ExpectEpochExactlyOnce(rows, 1);
  EXPECT_TRUE(p.WaitClosed());
}

// The synthetic source (ferry-bench transport) serves ready-made batches of any byte
// size that is a multiple of the batch size, also sizes that are not whole words.
TEST_F(WorkerTest, SyntheticBatchesOfAnySize) {
  auto w = StartWorker();
  ASSERT_TRUE(w);
  for (uint64_t bytes : {7ull, 7ull * 9, 7ull * 1024, 4096ull * 7}) {
    SCOPED_TRACE(bytes);
    RawPeer p(w->address());
    ASSERT_TRUE(p.Handshake().ok());
    wire::OpenStreamMsg m = RawJob(3);
    m.job.dataset = "synthetic:" + std::to_string(bytes) + ":2";
    p.Send(wire::EncodeOpenStream(m));
    for (int i = 0; i < 2; ++i) {
      Result<InFrame> f = p.Expect(MessageType::kBatch);
      ASSERT_TRUE(f.ok()) << f.status().ToString();
      Result<Batch> b = wire::DecodeBatch(*f, nullptr);
      ASSERT_TRUE(b.ok()) << b.status().ToString();
      EXPECT_EQ(b->rows(), kBatch);
      EXPECT_EQ(b->images.num_bytes(), bytes);
      for (size_t k = 0; k < bytes; ++k) ASSERT_EQ(b->images.as<uint8_t>()[k], 0x5a) << k;
      for (int64_t r = 0; r < kBatch; ++r) EXPECT_EQ(b->indices.as<int64_t>()[r], r);
    }
    Result<InFrame> e = p.Expect(MessageType::kEndOfEpoch);
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    EXPECT_TRUE(wire::DecodeEndOfEpoch(*e)->last);
  }
}

// ---------------------------------------------------------------------------------
// Slow and vanished clients

TEST_F(WorkerTest, SlowClientStallsOnlyItself) {
  WorkerOptions wo = WorkerOpts();
  wo.buffered_batches = 3;
  auto w = StartWorker(wo);
  ASSERT_TRUE(w);
  ClientOptions oa = ClientOpts({w->address()});
  oa.job.epochs = 2;  // 16 batches; it takes one and then stops
  oa.credits = 2;
  auto a = Connect(oa);
  ASSERT_TRUE(a);
  Consumed a_first = ConsumeAll(a.get(), 1);
  ASSERT_EQ(a_first.batches, 1);

  ClientOptions ob = ClientOpts({w->address()});
  ob.job.epochs = 3;
  ob.job.seed = 7;
  const auto t0 = std::chrono::steady_clock::now();
  auto b = Connect(ob);
  ASSERT_TRUE(b);
  const Consumed cb = ConsumeAll(b.get());
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_TRUE(cb.end.IsOutOfRange()) << cb.end.ToString();
  for (int e = 0; e < 3; ++e) ExpectEpochExactlyOnce(cb.rows, e);
  EXPECT_LT(seconds, 30);
  // A was sent no more than its credits allow (2, plus 1 for the batch it took),
  // however long B ran: the worker holds a bounded number of A's batches.
  EXPECT_LE(w->stats().batches_sent, 24 + 3);
  // B closed; A is still there, stalled.
  EXPECT_TRUE(WaitFor([&] { return w->stats().open_connections == 1; }, 5)) << w->stats().open_connections;

  // A was stalled, not broken: it takes the rest now, each sample exactly once.
  Consumed ca = ConsumeAll(a.get());
  EXPECT_TRUE(ca.end.IsOutOfRange()) << ca.end.ToString();
  ca.rows.insert(ca.rows.end(), a_first.rows.begin(), a_first.rows.end());
  ExpectEpochExactlyOnce(ca.rows, 0);
  ExpectEpochExactlyOnce(ca.rows, 1);
  EXPECT_EQ(w->stats().batches_sent, 24 + 16);
}

TEST_F(WorkerTest, ClosedConnectionsAreCleanedUp) {
  auto w = StartWorker();
  ASSERT_TRUE(w);
  ASSERT_TRUE(WaitFor([&] { return w->stats().open_connections == 0; }, 5));
  {
    // Mid-stream, with a reset, never having read most of what it asked for.
    RawPeer p(w->address());
    ASSERT_TRUE(p.Handshake().ok());
    p.Send(wire::EncodeOpenStream(RawJob(4, 0)));
    ASSERT_TRUE(p.Expect(MessageType::kBatch).ok());
    EXPECT_EQ(w->stats().open_connections, 1);
    p.Abort();
  }
  EXPECT_TRUE(WaitFor([&] { return w->stats().open_connections == 0; }, 5)) << w->stats().open_connections;
  {
    // Right after the Challenge, with an orderly close.
    RawPeer p(w->address());
    ASSERT_TRUE(p.Expect(MessageType::kChallenge).ok());
  }
  EXPECT_TRUE(WaitFor([&] { return w->stats().open_connections == 0; }, 5)) << w->stats().open_connections;
  {
    // While the stream opens.
    RawPeer p(w->address());
    ASSERT_TRUE(p.Handshake().ok());
    p.Send(wire::EncodeOpenStream(RawJob(4, 0)));
  }
  EXPECT_TRUE(WaitFor([&] { return w->stats().open_connections == 0; }, 5)) << w->stats().open_connections;
  {
    // A Client destroyed mid-epoch (endless epochs), next to one that stays.
    ClientOptions o = ClientOpts({w->address()});
    o.job.epochs = 0;
    auto stays = Connect(o);
    ASSERT_EQ(ConsumeAll(stays.get(), 1).batches, 1);
    auto goes = Connect(o);
    ASSERT_EQ(ConsumeAll(goes.get(), 2).batches, 2);
    EXPECT_TRUE(WaitFor([&] { return w->stats().open_connections == 2; }, 5));
    goes.reset();
    EXPECT_TRUE(WaitFor([&] { return w->stats().open_connections == 1; }, 5)) << w->stats().open_connections;
    ASSERT_EQ(ConsumeAll(stays.get(), 10).batches, 10);
  }
  EXPECT_TRUE(WaitFor([&] { return w->stats().open_connections == 0; }, 5)) << w->stats().open_connections;
  EXPECT_EQ(w->stats().bad_frames, 0);
}

// ---------------------------------------------------------------------------------
// Drain, restart and resume

TEST_F(WorkerTest, DrainEndsTheStreamAndTheClientGivesUp) {
  auto w = StartWorker();
  ASSERT_TRUE(w);
  ClientOptions o = ClientOpts({w->address()});
  o.job.epochs = 0;  // forever: only the drain ends it
  auto client = Connect(o);
  ASSERT_TRUE(client);
  Consumed c = ConsumeAll(client.get(), 3);
  ASSERT_EQ(c.batches, 3);
  w->Drain();
  auto drained = std::async(std::launch::async, [&] { w->WaitDrained(); });
  Consumed rest = ConsumeAll(client.get());
  c.rows.insert(c.rows.end(), rest.rows.begin(), rest.rows.end());
  ASSERT_FALSE(rest.end.ok());
  EXPECT_EQ(rest.end.code(), StatusCode::kUnavailable) << rest.end.ToString();
  EXPECT_NE(rest.end.message().find("gave up"), std::string::npos) << rest.end.ToString();
  EXPECT_EQ(client->reconnects(), 1);
  // What it received before the end: in flight at the drain, nothing twice.
  EXPECT_LE(rest.batches, 1 + o.credits + 2 + 4);
  ExpectNoDuplicates(c.rows);
  ExpectLabelsMatch(c.rows);
  ASSERT_EQ(drained.wait_for(std::chrono::seconds(15)), std::future_status::ready);
  EXPECT_EQ(w->stats().open_connections, 0);
  // No new connections while (and after) draining.
  EXPECT_EQ(w->stats().connections, 1);
}

TEST_F(WorkerTest, DrainWithNoClientsFinishesAtOnce) {
  auto w = StartWorker();
  ASSERT_TRUE(w);
  w->Drain();
  auto drained = std::async(std::launch::async, [&] { w->WaitDrained(); });
  ASSERT_EQ(drained.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  w->Drain();  // idempotent
  w->WaitDrained();
}

// The client resumes after the last batch it received when its worker goes away and
// comes back on the same address: nothing lost, nothing repeated.
void ResumeAcrossRestart(bool graceful, std::unique_ptr<WorkerService> first,
                         const std::function<std::unique_ptr<WorkerService>(const std::string&)>& start,
                         const ClientOptions& base) {
  const std::string address = first->address();
  ClientOptions o = base;
  o.workers = {address};
  o.job.epochs = 2;
  o.credits = 2;
  o.max_retries = 10;
  o.backoff_initial_s = 0.02;
  o.backoff_max_s = 0.5;
  auto client = Client::Connect(o);
  ASSERT_TRUE(client.ok());
  std::atomic<int64_t> taken{0};
  std::atomic<bool> hold{false};
  auto consumer = std::async(std::launch::async, [&] {
    Consumed c;
    for (;;) {
      while (hold) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      Result<Batch> b = (*client)->Next();
      if (!b.ok()) {
        c.end = b.status();
        return c;
      }
      Record(*b, &c);
      if (++taken == 5) hold = true;  // mid-epoch 0 (8 batches an epoch)
    }
  });
  ASSERT_TRUE(WaitFor([&] { return taken >= 5; }, 20));
  if (graceful) {
    // Drain: in-flight batches are delivered, then the stream ends with Unavailable.
    hold = false;
    first->Drain();
    first->WaitDrained();
  }
  first.reset();  // hard stop (after a drain: nothing left)
  // The client's queue still holds prefetched batches: let the consumer take them
  // while the client reconnects, so that it grants credits during the reopen.
  hold = false;
  std::unique_ptr<WorkerService> second;
  ASSERT_TRUE(WaitFor(
      [&] {
        second = start(address);
        return second != nullptr;
      },
      5));
  ASSERT_EQ(consumer.wait_for(std::chrono::seconds(30)), std::future_status::ready);
  const Consumed c = consumer.get();
  EXPECT_TRUE(c.end.IsOutOfRange()) << c.end.ToString();
  EXPECT_EQ(Indices(c.rows, 0), Iota(kSamples)) << "epoch 0";
  EXPECT_EQ(Indices(c.rows, 1), Iota(kSamples)) << "epoch 1";
  EXPECT_GE((*client)->reconnects(), 1);
  EXPECT_EQ(second->stats().streams, 1);
  EXPECT_LT(second->stats().batches_sent, 16) << "the second worker started over instead of resuming";
}

TEST_F(WorkerTest, ResumesAfterTheWorkerIsStoppedAndRestarted) {
  auto start = [](const std::string& address) -> std::unique_ptr<WorkerService> {
    WorkerOptions o = WorkerOpts();
    o.listen = address;
    Result<std::unique_ptr<WorkerService>> w = WorkerService::Start(o);
    return w.ok() ? std::move(*w) : nullptr;
  };
  ResumeAcrossRestart(/*graceful=*/false, StartWorker(), start, ClientOpts({}));
}

TEST_F(WorkerTest, ResumesAfterTheWorkerIsDrainedAndRestarted) {
  auto start = [](const std::string& address) -> std::unique_ptr<WorkerService> {
    WorkerOptions o = WorkerOpts();
    o.listen = address;
    Result<std::unique_ptr<WorkerService>> w = WorkerService::Start(o);
    return w.ok() ? std::move(*w) : nullptr;
  };
  ResumeAcrossRestart(/*graceful=*/true, StartWorker(), start, ClientOpts({}));
}

TEST_F(WorkerTest, StoppingAWorkerMidStreamIsClean) {
  // Destroying a WorkerService with streams in flight closes them (the clients see the
  // connection drop) and leaves nothing running behind (ASan/LSan check the rest).
  auto w = StartWorker();
  ASSERT_TRUE(w);
  ClientOptions o = ClientOpts({w->address()});
  o.job.epochs = 0;
  o.max_retries = 0;
  auto c1 = Connect(o);
  auto c2 = Connect(o);
  ASSERT_EQ(ConsumeAll(c1.get(), 2).batches, 2);
  ASSERT_EQ(ConsumeAll(c2.get(), 1).batches, 1);
  RawPeer handshaking(w->address());
  ASSERT_TRUE(handshaking.Expect(MessageType::kChallenge).ok());
  w.reset();
  EXPECT_TRUE(handshaking.WaitClosed(5));
  for (Client* c : {c1.get(), c2.get()}) {
    const Consumed rest = ConsumeAll(c);
    EXPECT_FALSE(rest.end.ok());
    EXPECT_EQ(rest.end.code(), StatusCode::kUnavailable) << rest.end.ToString();
  }
}

}  // namespace
}  // namespace ferry
