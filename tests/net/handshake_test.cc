// The handshake (lib/net/handshake.h) as the two state machines it is, with no
// sockets: frames go from one side's encoder to the other's decoder.
#include "net/handshake.h"

#include "net/auth.h"

#include <gtest/gtest.h>

#include <string>

#include "wire/wire_test_util.h"

namespace ferry::net {
namespace {

using wire::Role;
using wire::test::ToInFrame;

struct Outcome {
  Status client;  // what the client's side concluded
  Status server;  // what the server's side concluded
  Role role = Role::kClient;
  std::string peer_id;
};

Outcome Shake(const std::string& server_token, const std::string& client_token, Role role,
            std::initializer_list<Role> served = {Role::kClient}) {
  ServerHandshake server(server_token, "srv-1", "this worker", served);
  ClientHandshake client(client_token, role, "trainer-7", "worker 10.0.0.5:7000");
  Outcome o;
  Result<wire::OutFrame> hello = client.OnChallenge(ToInFrame(server.Challenge()));
  if (!hello.ok()) {
    o.client = hello.status();
    return o;
  }
  auto accepted = server.OnHello(ToInFrame(*hello));
  if (!accepted.ok()) {
    o.server = accepted.status();
    // The server sends the refusal as an Error frame; the client reads it as its Status.
    o.client = client.OnHelloOk(ToInFrame(wire::EncodeError(accepted.status())));
    return o;
  }
  o.role = accepted->role;
  o.peer_id = accepted->peer_id;
  o.client = client.OnHelloOk(ToInFrame(accepted->reply));
  return o;
}

TEST(HandshakeTest, NoTokenNoAuthentication) {
  Outcome o = Shake("", "", Role::kClient);
  EXPECT_TRUE(o.client.ok()) << o.client.ToString();
  EXPECT_TRUE(o.server.ok());
  EXPECT_EQ(o.role, Role::kClient);
  EXPECT_EQ(o.peer_id, "trainer-7");
  // A client that has a token refuses a server that asks for none: such a server cannot
  // prove it is one of the cluster's, and would get (or serve) the trainer's data.
  Outcome open = Shake("", "secret", Role::kClient);
  EXPECT_EQ(open.client.code(), StatusCode::kUnauthenticated);
  EXPECT_NE(open.client.message().find("does not ask for a token"), std::string::npos) << open.client.ToString();
}

// A server that asks for the token but cannot prove it holds it (an impostor at the
// address, or one with another token) is refused by the client after its HelloOk.
TEST(HandshakeTest, AServerThatDoesNotProveTheTokenIsRefused) {
  const std::string ns = RandomNonce();
  auto hello_to = [&](ClientHandshake& client) {
    Result<wire::OutFrame> hello = client.OnChallenge(ToInFrame(wire::EncodeChallenge({ns, true, "impostor"})));
    EXPECT_TRUE(hello.ok());
    auto h = wire::DecodeHello(ToInFrame(*hello));
    EXPECT_TRUE(h.ok());
    return *h;
  };
  {
    ClientHandshake client("secret", Role::kWorker, "w", "dispatcher 10.0.0.1:7100");
    (void)hello_to(client);
    Status s = client.OnHelloOk(ToInFrame(wire::EncodeHelloOk("impostor")));
    EXPECT_EQ(s.code(), StatusCode::kUnauthenticated);
    EXPECT_NE(s.message().find("did not prove it holds the token (no proof)"), std::string::npos) << s.ToString();
  }
  {
    ClientHandshake client("secret", Role::kWorker, "w", "dispatcher 10.0.0.1:7100");
    wire::HelloMsg h = hello_to(client);
    EXPECT_EQ(client.OnHelloOk(ToInFrame(wire::EncodeHelloOk("x", "", ServerProof("guess", ns, h.nonce)))).code(),
              StatusCode::kUnauthenticated)
        << "a proof made with another token";
  }
  {
    ClientHandshake client("secret", Role::kWorker, "w", "dispatcher 10.0.0.1:7100");
    wire::HelloMsg h = hello_to(client);
    EXPECT_EQ(client.OnHelloOk(ToInFrame(wire::EncodeHelloOk("x", "", h.mac))).code(), StatusCode::kUnauthenticated)
        << "the client's own proof reflected back";
  }
  {
    ClientHandshake client("secret", Role::kWorker, "w", "dispatcher 10.0.0.1:7100");
    wire::HelloMsg h = hello_to(client);
    EXPECT_TRUE(client.OnHelloOk(ToInFrame(wire::EncodeHelloOk("x", "", ServerProof("secret", ns, h.nonce)))).ok())
        << "the right proof";
  }
}

// The client's proof covers its role: a Hello whose role was changed on the way (a
// client's Hello turned into a worker's) is refused.
TEST(HandshakeTest, AHelloWithAnotherRoleIsRefused) {
  ServerHandshake server("secret", "s", "this dispatcher", {Role::kClient, Role::kWorker});
  ClientHandshake client("secret", Role::kClient, "c", "dispatcher");
  Result<wire::OutFrame> hello = client.OnChallenge(ToInFrame(server.Challenge()));
  ASSERT_TRUE(hello.ok());
  auto h = wire::DecodeHello(ToInFrame(*hello));
  ASSERT_TRUE(h.ok());
  h->role = Role::kWorker;
  EXPECT_EQ(server.OnHello(ToInFrame(wire::EncodeHello(*h))).status().code(), StatusCode::kUnauthenticated);
}

TEST(HandshakeTest, TheRightTokenIsAccepted) {
  Outcome o = Shake("secret", "secret", Role::kClient);
  EXPECT_TRUE(o.client.ok()) << o.client.ToString();
  EXPECT_TRUE(o.server.ok()) << o.server.ToString();
}

TEST(HandshakeTest, AWrongOrMissingTokenIsRefused) {
  Outcome wrong = Shake("secret", "guess", Role::kClient);
  EXPECT_EQ(wrong.server.code(), StatusCode::kUnauthenticated);
  EXPECT_EQ(wrong.client.code(), StatusCode::kUnauthenticated) << "the client learns why";
  Outcome missing = Shake("secret", "", Role::kClient);
  EXPECT_EQ(missing.client.code(), StatusCode::kUnauthenticated) << "refused before sending anything";
  EXPECT_NE(missing.client.message().find("worker 10.0.0.5:7000"), std::string::npos) << missing.client.ToString();
}

TEST(HandshakeTest, RolesTheServerDoesNotServeAreRefused) {
  Outcome o = Shake("", "", Role::kWorker, {Role::kClient, Role::kTool});
  EXPECT_EQ(o.server.code(), StatusCode::kPermissionDenied);
  EXPECT_NE(o.server.message().find("worker"), std::string::npos) << o.server.ToString();
  EXPECT_TRUE(Shake("", "", Role::kWorker, {Role::kClient, Role::kWorker}).server.ok());
}

TEST(HandshakeTest, AHelloForAnotherChallengeIsRefused) {
  // Each Challenge draws a fresh nonce: a Hello recorded from one connection does not
  // open another.
  ServerHandshake first("secret", "s", "this worker", {Role::kClient});
  ServerHandshake second("secret", "s", "this worker", {Role::kClient});
  ClientHandshake client("secret", Role::kClient, "c", "worker");
  Result<wire::OutFrame> hello = client.OnChallenge(ToInFrame(first.Challenge()));
  ASSERT_TRUE(hello.ok());
  (void)second.Challenge();
  EXPECT_TRUE(first.OnHello(ToInFrame(*hello)).ok());
  EXPECT_EQ(second.OnHello(ToInFrame(*hello)).status().code(), StatusCode::kUnauthenticated);
}

TEST(HandshakeTest, WrongFramesAreRefused) {
  ServerHandshake server("", "s", "this worker", {Role::kClient});
  (void)server.Challenge();
  EXPECT_EQ(server.OnHello(ToInFrame(wire::EncodeCredit(3))).status().code(), StatusCode::kInvalidArgument);
  ClientHandshake client("", Role::kClient, "c", "worker");
  EXPECT_EQ(client.OnChallenge(ToInFrame(wire::EncodeCredit(3))).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(client.OnChallenge(ToInFrame(wire::EncodeError(Status::Unavailable("draining")))).status().code(),
            StatusCode::kUnavailable)
      << "an Error instead of a Challenge comes back as its Status";
}

}  // namespace
}  // namespace ferry::net
