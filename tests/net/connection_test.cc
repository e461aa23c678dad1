// FrameConnection (lib/net/connection.h) on loopback: frames arrive whole and in
// order both ways, each side's handler gets exactly one final Status, a header over
// the receiver's limit closes the connection before any allocation, garbage closes
// it too, and CloseAfterWrites delivers what was queued before the peer reads EOF.
#include "net/connection.h"

#include <gtest/gtest.h>

#include <chrono>
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
  asio::io_context io;
  tcp::acceptor acceptor(io);
  ASSERT_TRUE(Listen(acceptor, "127.0.0.1:0").ok());
  tcp::socket raw(io);
  raw.connect(acceptor.local_endpoint());
  tcp::socket server = acceptor.accept();
  auto conn = std::make_shared<FrameConnection>(std::move(server), wire::FrameLimits{}, DefaultBufferAllocator());
  std::vector<Status> end;
  int frames = 0;
  conn->StartReading([&](const Status& s, wire::InFrame) {
    if (s.ok()) ++frames;
    else end.push_back(s);
  });
  asio::write(raw, asio::buffer(std::string("GET / HTTP/1.1\r\n\r\n")));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (end.empty() && std::chrono::steady_clock::now() < deadline) io.run_for(std::chrono::milliseconds(5));
  ASSERT_EQ(end.size(), 1u);
  EXPECT_EQ(frames, 0);
  EXPECT_EQ(end[0].code(), StatusCode::kInvalidArgument) << end[0].ToString();
  EXPECT_TRUE(conn->closed());
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

}  // namespace
}  // namespace ferry::net
