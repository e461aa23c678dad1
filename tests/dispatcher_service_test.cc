// ferry-dispatcher's service in-process, spoken to over real sockets with the control
// protocol: registration, job creation, leases in heartbeat replies, acks, dead
// workers, and a restart on the same work dir that replays the journal.
#include <utility>  // before Asio (Boost 1.74, C++20)

#include <gtest/gtest.h>

#include <boost/asio.hpp>
#include <algorithm>
#include <set>
#include <thread>

#include "ferry/internal/connection.h"
#include "ferry/internal/control.h"
#include "ferry/internal/frame.h"
#include "ferry/internal/wire.h"
#include "server/dispatcher_service.h"
#include "testutil.h"

namespace ferry {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using internal::InFrame;
using internal::MessageType;

// A blocking control-plane peer: one request, one reply.
class Peer {
 public:
  explicit Peer(const std::string& address) : socket_(io_) {
    auto hp = internal::SplitHostPort(address);
    socket_.connect(tcp::endpoint(asio::ip::make_address(hp->first), hp->second));
    InFrame challenge = Read();
    EXPECT_EQ(challenge.header.type, MessageType::kChallenge);
    internal::HelloMsg h;
    h.role = internal::Role::kTool;
    Write(internal::EncodeHello(h));
    EXPECT_EQ(Read().header.type, MessageType::kHelloOk);
  }

  InFrame Call(internal::OutFrame f) {
    Write(std::move(f));
    return Read();
  }

 private:
  void Write(internal::OutFrame f) {
    std::vector<asio::const_buffer> bufs;
    for (const auto& r : f.ranges()) bufs.emplace_back(r.data, r.size);
    asio::write(socket_, bufs);
  }
  InFrame Read() {
    uint8_t header[internal::kFrameHeaderSize];
    asio::read(socket_, asio::buffer(header));
    auto h = internal::ParseFrameHeader(header, internal::FrameLimits{});
    EXPECT_TRUE(h.ok());
    InFrame f{*h, alloc_->Allocate(size_t(h->length))};
    asio::read(socket_, asio::buffer(f.body->data(), size_t(h->length)));
    return f;
  }

  asio::io_context io_;
  tcp::socket socket_;
  std::shared_ptr<internal::BufferAllocator> alloc_ = internal::DefaultBufferAllocator();
};

internal::JobConfigMsg Job() {
  internal::JobConfigMsg c;
  c.name = "job";
  c.dataset = "synthetic:";
  c.pipeline_json = "{}";
  c.num_samples = 200;
  c.batch_size = 10;
  c.batches_per_split = 2;  // 10 splits per epoch
  c.epochs = 1;
  return c;
}

DispatcherOptions Options(const std::string& dir) {
  DispatcherOptions o;
  o.work_dir = dir;
  o.heartbeat_interval_ms = 50;
  o.heartbeat_timeout_ms = 400;
  o.lease.max_outstanding = 3;
  o.sync = false;  // tmpfs or not, the tests need no durability across power loss
  return o;
}

// The new leases of a heartbeat reply; `held` gets every split the reply says the
// worker holds (new or not).
std::vector<internal::LeaseMsg> Heartbeat(Peer& w, const std::string& id, bool* known = nullptr,
                                          size_t* held = nullptr) {
  auto ok = internal::DecodeHeartbeatOk(w.Call(internal::EncodeHeartbeat({id, false, true, false, {}})));
  EXPECT_TRUE(ok.ok()) << ok.status().ToString();
  if (known) *known = ok->known;
  if (held) *held = ok->leases.size();
  ok->leases.resize(ok->new_leases);
  return ok->leases;
}

TEST(DispatcherServiceTest, LeasesAcksAndRestartReplay) {
  testing::TempDir dir;
  std::set<std::pair<uint64_t, int64_t>> acked;
  {
    auto svc = DispatcherService::Start(Options(dir.path()));
    ASSERT_TRUE(svc.ok()) << svc.status().ToString();
    Peer client((*svc)->address());
    auto info = internal::DecodeJobInfo(client.Call(internal::EncodeGetOrCreateJob(Job(), "c1")));
    ASSERT_TRUE(info.ok()) << info.status().ToString();
    EXPECT_EQ(info->num_samples, 200);

    Peer worker((*svc)->address());
    ASSERT_TRUE(internal::DecodeRegisterWorkerOk(worker.Call(internal::EncodeRegisterWorker("w1", "127.0.0.1:9"))).ok());
    auto leases = Heartbeat(worker, "w1");
    ASSERT_EQ(leases.size(), 3u);
    for (const auto& l : leases) EXPECT_EQ(l.consumer, "c1");
    size_t held = 0;
    EXPECT_TRUE(Heartbeat(worker, "w1", nullptr, &held).empty()) << "holds its maximum of un-acked splits";
    EXPECT_EQ(held, 3u) << "every reply lists the whole set held";

    auto workers = internal::DecodeWorkerList(client.Call(internal::EncodeGetWorkers()));
    ASSERT_TRUE(workers.ok());
    EXPECT_EQ(*workers, std::vector<std::string>{"127.0.0.1:9"});

    internal::AckSplitsMsg ack{"job", "c1", {}};
    for (const auto& l : leases) {
      ack.splits.push_back({l.epoch, l.split});
      acked.insert({l.epoch, l.split});
    }
    auto status = internal::DecodeJobStatus(client.Call(internal::EncodeAckSplits(ack)));
    ASSERT_TRUE(status.ok());
    EXPECT_FALSE(status->finished);
    EXPECT_EQ(Heartbeat(worker, "w1").size(), 3u) << "acks free room for more leases";
  }
  // Restarted on the same work dir: the job, its consumer, the acks and the worker's
  // leases come back from the journal.
  auto svc = DispatcherService::Start(Options(dir.path()));
  ASSERT_TRUE(svc.ok()) << svc.status().ToString();
  EXPECT_GT((*svc)->stats().replayed, 0);
  Peer worker((*svc)->address());
  bool known = false;
  size_t held_after_restart = 0;
  EXPECT_TRUE(Heartbeat(worker, "w1", &known, &held_after_restart).empty()) << "still holds its 3 un-acked leases";
  EXPECT_TRUE(known);
  EXPECT_EQ(held_after_restart, 3u);

  // Drain the whole epoch through w1 and a new worker; every split exactly once.
  Peer client((*svc)->address());
  ASSERT_TRUE(internal::DecodeJobInfo(client.Call(internal::EncodeGetOrCreateJob(Job(), "c1"))).ok());
  Peer w2((*svc)->address());
  ASSERT_TRUE(internal::DecodeRegisterWorkerOk(w2.Call(internal::EncodeRegisterWorker("w2", "127.0.0.1:10"))).ok());
  // The 3 splits w1 held before the restart are acked by the consumer now.
  std::vector<std::pair<uint64_t, int64_t>> held;
  for (int64_t s = 0; s < 10; ++s) {
    if (!acked.count({0, s}) && held.size() < 3) held.push_back({0, s});
  }
  bool finished = false;
  for (int round = 0; round < 50 && !finished; ++round) {
    internal::AckSplitsMsg ack{"job", "c1", {}};
    for (Peer* w : {&worker, &w2}) {
      for (const auto& l : Heartbeat(*w, w == &worker ? "w1" : "w2")) {
        EXPECT_TRUE(acked.insert({l.epoch, l.split}).second) << "split leased twice: " << l.split;
        ack.splits.push_back({l.epoch, l.split});
      }
    }
    if (round == 0) {
      for (const auto& h : held) {
        EXPECT_TRUE(acked.insert(h).second);
        ack.splits.push_back(h);
      }
    }
    auto status = internal::DecodeJobStatus(client.Call(internal::EncodeAckSplits(ack)));
    ASSERT_TRUE(status.ok()) << status.status().ToString();
    finished = status->finished;
  }
  EXPECT_TRUE(finished);
  EXPECT_EQ(acked.size(), 10u);
}

TEST(DispatcherServiceTest, SilentWorkerIsRemovedAndItsSplitsGoToOthers) {
  testing::TempDir dir;
  auto svc = DispatcherService::Start(Options(dir.path()));
  ASSERT_TRUE(svc.ok());
  Peer client((*svc)->address());
  ASSERT_TRUE(internal::DecodeJobInfo(client.Call(internal::EncodeGetOrCreateJob(Job(), "c1"))).ok());
  Peer w1((*svc)->address()), w2((*svc)->address());
  ASSERT_TRUE(internal::DecodeRegisterWorkerOk(w1.Call(internal::EncodeRegisterWorker("w1", "a:1"))).ok());
  ASSERT_TRUE(internal::DecodeRegisterWorkerOk(w2.Call(internal::EncodeRegisterWorker("w2", "b:1"))).ok());
  auto lost = Heartbeat(w1, "w1");
  ASSERT_EQ(lost.size(), 3u);
  // w1 goes silent; w2 keeps heartbeating (its splits acked as it gets them) and
  // must inherit w1's splits.
  std::set<int64_t> got;
  testing::WaitFor([&] {
    internal::AckSplitsMsg ack{"job", "c1", {}};
    for (const auto& l : Heartbeat(w2, "w2")) {
      got.insert(l.split);
      ack.splits.push_back({l.epoch, l.split});
    }
    if (!ack.splits.empty()) {
      EXPECT_TRUE(internal::DecodeJobStatus(client.Call(internal::EncodeAckSplits(ack))).ok());
    }
    return std::all_of(lost.begin(), lost.end(), [&](const auto& l) { return got.count(l.split) > 0; });
  }, 10.0);
  for (const auto& l : lost) EXPECT_TRUE(got.count(l.split)) << "split " << l.split << " was not re-leased";
  EXPECT_GE((*svc)->stats().workers_removed, 1);
  bool known = true;
  (void)Heartbeat(w1, "w1", &known);
  EXPECT_FALSE(known) << "a removed worker is told to register again";
}

TEST(DispatcherServiceTest, ConflictingJobAndBadRequestsAreRefused) {
  testing::TempDir dir;
  auto svc = DispatcherService::Start(Options(dir.path()));
  ASSERT_TRUE(svc.ok());
  Peer a((*svc)->address());
  ASSERT_TRUE(internal::DecodeJobInfo(a.Call(internal::EncodeGetOrCreateJob(Job(), "c1"))).ok());
  Peer b((*svc)->address());
  internal::JobConfigMsg other = Job();
  other.batch_size = 20;
  InFrame reply = b.Call(internal::EncodeGetOrCreateJob(other, "c2"));
  ASSERT_EQ(reply.header.type, MessageType::kError);
  auto err = internal::DecodeError(reply);
  ASSERT_TRUE(err.ok());
  EXPECT_EQ(err->status.code(), StatusCode::kFailedPrecondition);
  Peer c((*svc)->address());
  InFrame bad = c.Call(internal::EncodeCredit(1));  // a data-plane message
  EXPECT_EQ(bad.header.type, MessageType::kError);
}

}  // namespace
}  // namespace ferry
