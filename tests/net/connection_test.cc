// FrameConnection (lib/net/connection.h) on loopback: frames arrive whole and in
// order both ways, each side's handler gets exactly one final Status, a header over
// the receiver's limit closes the connection before any allocation, garbage closes
// it too, and CloseAfterWrites delivers what was queued before the peer reads EOF.
// The staged reader (one read takes a small frame whole, frames already read wait
// while reads are held) gets every byte of any stream however the kernel cuts it.
#include "net/connection.h"

#include <gtest/gtest.h>

#include <chrono>
#include <random>
#include <string>
#include <vector>

#include "net/listen.h"
#include "wire/codec.h"

namespace ferry::net {
namespace {

namespace asio = boost::asio;

// Both ends of one loopback connection, on one io_context the test runs by hand.
struct Pair {
  asio::io_context io;
  std::shared_ptr<FrameConnection> a, b;
  std::vector<wire::MessageType> got_a, got_b;
  std::vector<Status> end_a, end_b;

  explicit Pair(wire::FrameLimits limits_b = {}) {
    tcp::acceptor acceptor(io);
    auto bound = Listen(acceptor, "127.0.0.1:0");
    EXPECT_TRUE(bound.ok());
    tcp::socket client(io), server(io);
    bool accepted = false, connected = false;
    acceptor.async_accept(server, [&](const boost::system::error_code& ec) { accepted = !ec; });
    client.async_connect(acceptor.local_endpoint(), [&](const boost::system::error_code& ec) { connected = !ec; });
    RunUntil([&] { return accepted && connected; });
    a = std::make_shared<FrameConnection>(std::move(client), wire::FrameLimits{}, DefaultBufferAllocator());
    b = std::make_shared<FrameConnection>(std::move(server), limits_b, DefaultBufferAllocator());
    a->StartReading([this](const Status& s, wire::InFrame f) {
      if (s.ok()) got_a.push_back(f.header.type);
      else end_a.push_back(s);
    });
    b->StartReading([this](const Status& s, wire::InFrame f) {
      if (s.ok()) got_b.push_back(f.header.type);
      else end_b.push_back(s);
    });
  }

  template <typename Cond>
  bool RunUntil(Cond cond, double seconds = 10) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(int(seconds * 1000));
    while (!cond() && std::chrono::steady_clock::now() < deadline) {
      io.run_for(std::chrono::milliseconds(5));
      if (io.stopped()) io.restart();
    }
    return cond();
  }
};

// A FrameConnection whose peer is a raw socket the test writes bytes to, on one
// io_context the test runs by hand.
struct RawPeer {
  asio::io_context io;
  tcp::acceptor acceptor{io};
  tcp::socket raw{io};
  std::shared_ptr<FrameConnection> conn;

  RawPeer() {
    EXPECT_TRUE(Listen(acceptor, "127.0.0.1:0").ok());
    raw.connect(acceptor.local_endpoint());
    conn = std::make_shared<FrameConnection>(acceptor.accept(), wire::FrameLimits{}, DefaultBufferAllocator());
  }
  void RunFor(int ms) {
    io.run_for(std::chrono::milliseconds(ms));
    if (io.stopped()) io.restart();
  }
};

TEST(FrameConnectionTest, FramesArriveInOrderBothWays) {
  Pair p;
  int sent = 0;
  for (uint32_t i = 0; i < 50; ++i) p.a->Send(wire::EncodeCredit(i), [&] { ++sent; });
  p.b->Send(wire::EncodeHelloOk("x"));
  p.b->Send(wire::EncodeEndOfEpoch({}));
  ASSERT_TRUE(p.RunUntil([&] { return p.got_b.size() == 50 && p.got_a.size() == 2; }));
  EXPECT_EQ(sent, 50) << "every on_sent callback ran";
  EXPECT_EQ(p.got_a, (std::vector<wire::MessageType>{wire::MessageType::kHelloOk, wire::MessageType::kEndOfEpoch}));
  p.a->Close();
  ASSERT_TRUE(p.RunUntil([&] { return p.end_a.size() == 1 && p.end_b.size() == 1; }));
  EXPECT_EQ(p.end_a[0].code(), StatusCode::kCancelled) << "closed by us";
  EXPECT_EQ(p.end_b[0].code(), StatusCode::kUnavailable) << "closed by the peer: " << p.end_b[0].ToString();
  p.RunUntil([] { return false; }, 0.05);
  EXPECT_EQ(p.end_a.size(), 1u) << "exactly one final status";
  EXPECT_EQ(p.end_b.size(), 1u);
}

TEST(FrameConnectionTest, AFrameOverTheLimitClosesTheConnection) {
  wire::FrameLimits small;
  small.max_control_bytes = 64;
  Pair p(small);
  p.a->Send(wire::EncodeCredit(1));
  p.a->Send(wire::EncodeError(Status::Internal(std::string(500, 'x'))));  // over 64 bytes
  p.a->Send(wire::EncodeCredit(2));
  ASSERT_TRUE(p.RunUntil([&] { return !p.end_b.empty(); }));
  EXPECT_EQ(p.got_b.size(), 1u) << "the frames before it arrived, none after";
  EXPECT_EQ(p.end_b[0].code(), StatusCode::kResourceExhausted) << p.end_b[0].ToString();
  EXPECT_TRUE(p.b->closed());
}

TEST(FrameConnectionTest, GarbageClosesTheConnection) {
  RawPeer p;
  std::vector<Status> end;
  int frames = 0;
  p.conn->StartReading([&](const Status& s, wire::InFrame) {
    if (s.ok()) ++frames;
    else end.push_back(s);
  });
  asio::write(p.raw, asio::buffer(std::string("GET / HTTP/1.1\r\n\r\n")));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (end.empty() && std::chrono::steady_clock::now() < deadline) p.RunFor(5);
  ASSERT_EQ(end.size(), 1u);
  EXPECT_EQ(frames, 0);
  EXPECT_EQ(end[0].code(), StatusCode::kInvalidArgument) << end[0].ToString();
  EXPECT_TRUE(p.conn->closed());
}

TEST(FrameConnectionTest, CloseAfterWritesDeliversWhatWasQueued) {
  Pair p;
  for (uint32_t i = 0; i < 20; ++i) p.b->Send(wire::EncodeCredit(i));
  p.b->Send(wire::EncodeError(Status::Unavailable("draining")));
  p.b->CloseAfterWrites(std::chrono::milliseconds(500));
  p.b->Send(wire::EncodeCredit(99));  // after the close: dropped
  ASSERT_TRUE(p.RunUntil([&] { return !p.end_a.empty(); }));
  ASSERT_EQ(p.got_a.size(), 21u) << "every queued frame, then EOF";
  EXPECT_EQ(p.got_a.back(), wire::MessageType::kError);
  EXPECT_EQ(p.end_a[0].code(), StatusCode::kUnavailable);
}


// The bytes a frame puts on the wire.
std::string WireBytes(const wire::OutFrame& f) {
  std::string out;
  for (const wire::ByteRange& r : f.ranges()) out.append(reinterpret_cast<const char*>(r.data), r.size);
  return out;
}

// Error frames of many sizes (16 B of header plus a few bytes, around the 1 KiB stage,
// past the 64 KiB where the kernel is asked to wait for a good piece), written by a
// raw socket in pieces cut anywhere (one byte, a header's half, thousands), sometimes
// with a pause: each arrives whole, in order, with its own bytes.
TEST(FrameConnectionTest, FramesCutAnywhereArriveWholeAndInOrder) {
  RawPeer p;
  std::vector<std::string> got;
  std::vector<Status> end;
  p.conn->StartReading([&](const Status& s, wire::InFrame f) {
    if (!s.ok()) return end.push_back(s);
    auto m = wire::DecodeError(f);
    got.push_back(m.ok() ? m->status.message() : "undecodable: " + m.status().ToString());
  });
  std::mt19937 rng(7);
  const std::vector<size_t> sizes = {0, 1, 3, 900, 1000, 1010, 1024, 2000, 5, 70000, 4, 300000, 2, 999, 1100, 7};
  std::vector<std::string> want;
  std::string stream;
  for (int round = 0; round < 3; ++round) {
    for (size_t n : sizes) {
      std::string text(n, 'a');
      for (char& c : text) c = char('a' + rng() % 26);
      want.push_back(text);
      stream += WireBytes(wire::EncodeError(Status::Internal(text)));
    }
  }
  const auto run_a_bit = [&] { p.RunFor(3); };
  size_t at = 0;
  const size_t cuts[] = {1, 7, 8, 16, 17, 100, 1023, 1024, 1500, 4096, 65536};
  while (at < stream.size()) {
    const size_t n = std::min(stream.size() - at, cuts[rng() % std::size(cuts)]);
    asio::write(p.raw, asio::buffer(stream.data() + at, n));
    at += n;
    if (rng() % 3 == 0) run_a_bit();  // the reader sees this piece alone
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (got.size() < want.size() && end.empty() && std::chrono::steady_clock::now() < deadline) run_a_bit();
  ASSERT_TRUE(end.empty()) << end[0].ToString();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(got[i], want[i]) << "frame " << i;
  p.raw.close();
  while (end.empty() && std::chrono::steady_clock::now() < deadline) run_a_bit();
  ASSERT_EQ(end.size(), 1u);
  EXPECT_EQ(end[0].code(), StatusCode::kUnavailable) << end[0].ToString();
}

// Frames that came in one read wait while reads are held (a dispatcher holding a peer
// with requests in flight), and all follow on ResumeReads(), in order; and bytes that
// arrived while held are read after it (epoll raised no event for them then).
TEST(FrameConnectionTest, HeldReadsHoldFramesAlreadyReadUntilResumed) {
  RawPeer p;
  FrameConnection* conn = p.conn.get();
  std::vector<uint32_t> got;
  conn->StartReading([&](const Status& s, wire::InFrame f) {
    if (!s.ok()) return;
    got.push_back(*wire::DecodeCredit(f));
    if (got.size() == 1 || got.size() == 5) conn->HoldReads();
  });
  const auto run_for = [&](int ms) { p.RunFor(ms); };
  std::string five;
  for (uint32_t i = 1; i <= 5; ++i) five += WireBytes(wire::EncodeCredit(i));
  asio::write(p.raw, asio::buffer(five));
  for (int i = 0; i < 50 && got.empty(); ++i) run_for(5);
  run_for(50);
  EXPECT_EQ(got, (std::vector<uint32_t>{1})) << "held after the first: the other four wait, read already";
  conn->ResumeReads();
  for (int i = 0; i < 100 && got.size() < 5; ++i) run_for(5);
  EXPECT_EQ(got, (std::vector<uint32_t>{1, 2, 3, 4, 5}));
  // Held again after the fifth; these arrive meanwhile, and must be read on resuming.
  std::string more;
  for (uint32_t i = 6; i <= 8; ++i) more += WireBytes(wire::EncodeCredit(i));
  asio::write(p.raw, asio::buffer(more));
  run_for(50);
  EXPECT_EQ(got.size(), 5u);
  conn->ResumeReads();
  for (int i = 0; i < 100 && got.size() < 8; ++i) run_for(5);
  EXPECT_EQ(got, (std::vector<uint32_t>{1, 2, 3, 4, 5, 6, 7, 8}));
}

}  // namespace
}  // namespace ferry::net
