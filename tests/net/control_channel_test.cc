// The blocking control channel (lib/net/control_channel.h) against a loopback server:
// replies come back, one connection serves many calls, an Error reply is a Status and
// the next call reconnects, tokens are enforced, and every wait is bounded (a timeout
// is Unavailable, an Interrupt() is Cancelled within 50 ms).
#include "net/control_channel.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "net/net_test_util.h"
#include "wire/codec.h"
#include "wire/control.h"

namespace ferry::net {
namespace {

using test::LoopbackServer;

std::optional<wire::OutFrame> Workers(const wire::InFrame& f) {
  if (f.header.type != wire::MessageType::kGetWorkers) return wire::EncodeError(Status::InvalidArgument("what?"));
  return wire::EncodeWorkerList({"10.0.0.5:7000"});
}

TEST(ControlChannelTest, CallsShareOneConnection) {
  LoopbackServer server("", Workers);
  ControlChannel ch(server.address(), "", wire::Role::kClient, "c1");
  for (int i = 0; i < 3; ++i) {
    Result<wire::InFrame> r = ch.Call(wire::EncodeGetWorkers());
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    auto list = wire::DecodeWorkerList(*r);
    ASSERT_TRUE(list.ok());
    EXPECT_EQ(*list, std::vector<std::string>{"10.0.0.5:7000"});
  }
  EXPECT_EQ(server.connections(), 1);
}

TEST(ControlChannelTest, AnErrorReplyIsItsStatusAndTheNextCallReconnects) {
  LoopbackServer server("", Workers);
  ControlChannel ch(server.address(), "", wire::Role::kClient, "c1");
  Result<wire::InFrame> bad = ch.Call(wire::EncodeCredit(1));
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().message(), "what?");
  EXPECT_TRUE(ch.Call(wire::EncodeGetWorkers()).ok());
  EXPECT_EQ(server.connections(), 2);
}

TEST(ControlChannelTest, TokensAreEnforced) {
  LoopbackServer server("secret", Workers);
  ControlChannel none(server.address(), "", wire::Role::kClient, "c1");
  EXPECT_EQ(none.Call(wire::EncodeGetWorkers()).status().code(), StatusCode::kUnauthenticated);
  ControlChannel wrong(server.address(), "guess", wire::Role::kClient, "c1");
  Result<wire::InFrame> r = wrong.Call(wire::EncodeGetWorkers());
  EXPECT_EQ(r.status().code(), StatusCode::kUnauthenticated);
  ControlChannel right(server.address(), "secret", wire::Role::kClient, "c1");
  EXPECT_TRUE(right.Call(wire::EncodeGetWorkers()).ok());
  ControlChannel tool(server.address(), "secret", wire::Role::kDispatcher, "d");
  EXPECT_EQ(tool.Call(wire::EncodeGetWorkers()).status().code(), StatusCode::kPermissionDenied)
      << "a role the server does not serve";
}

TEST(ControlChannelTest, ASilentServerTimesOut) {
  LoopbackServer server("", [](const wire::InFrame&) { return std::optional<wire::OutFrame>(); });
  ControlChannel ch(server.address(), "", wire::Role::kClient, "c1", std::chrono::milliseconds(200));
  const auto t0 = std::chrono::steady_clock::now();
  Result<wire::InFrame> r = ch.Call(wire::EncodeGetWorkers());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(r.status().message().find("timed out"), std::string::npos) << r.status().ToString();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
}

TEST(ControlChannelTest, InterruptEndsACallInFlight) {
  LoopbackServer server("", [](const wire::InFrame&) { return std::optional<wire::OutFrame>(); });
  ControlChannel ch(server.address(), "", wire::Role::kClient, "c1", std::chrono::seconds(30));
  std::thread interrupter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    ch.Interrupt();
  });
  const auto t0 = std::chrono::steady_clock::now();
  Result<wire::InFrame> r = ch.Call(wire::EncodeGetWorkers());
  interrupter.join();
  EXPECT_EQ(r.status().code(), StatusCode::kCancelled);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  EXPECT_EQ(ch.Call(wire::EncodeGetWorkers()).status().code(), StatusCode::kCancelled) << "and every later call";
}

TEST(ControlChannelTest, NobodyListeningIsUnavailable) {
  std::string address;
  {
    LoopbackServer gone("", Workers);
    address = gone.address();
  }
  ControlChannel ch(address, "", wire::Role::kClient, "c1", std::chrono::seconds(2));
  Result<wire::InFrame> r = ch.Call(wire::EncodeGetWorkers());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_TRUE(r.status().IsTransient()) << "worth retrying";
}

// Issue 25, defect 11: the channel read replies with the default limits, which allow a
// Batch of 4 GiB: a rogue daemon's header alone made the caller reserve that much.
// Replies are control messages of at most 1 MiB; a Batch is refused by its header.
TEST(ControlChannelTest, ABatchForAReplyIsRefusedByItsHeader) {
  LoopbackServer server("", [](const wire::InFrame&) {
    alignas(8) static const uint8_t image[8] = {};
    alignas(8) static const int64_t labels[1] = {0}, indices[1] = {0};
    wire::BatchFrameInput in;
    in.job = "j";
    in.rows = in.valid = 1;
    in.image_dims = {1, 1, 1};
    in.images = image;
    in.labels = labels;
    in.indices = indices;
    return std::optional<wire::OutFrame>(wire::EncodeBatch(in));
  });
  ControlChannel ch(server.address(), "", wire::Role::kClient, "c1");
  Result<wire::InFrame> r = ch.Call(wire::EncodeGetWorkers());
  ASSERT_FALSE(r.ok()) << "a Batch was read as a reply";
  EXPECT_NE(r.status().message().find("Batch"), std::string::npos) << r.status().ToString();
}

}  // namespace
}  // namespace ferry::net
