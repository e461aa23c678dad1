// The handshake that opens every Ferry connection, data plane and control plane
// alike, written once for both sides as state machines without I/O: each side's
// transport (async sessions, the blocking control channel) only moves the frames.
//
//   1. server -> client   Challenge  (a fresh nonce Ns; whether a token is required)
//   2. client -> server   Hello      (role, peer id, a fresh nonce Nc, the client's
//                                     proof over role, Ns and Nc: lib/net/auth.h)
//   3. server -> client   HelloOk (with the server's proof over Ns and Nc), or
//                         Error(Unauthenticated | PermissionDenied) and close
//
// Authentication is mutual when a token is set: the server checks the client's proof,
// and the client checks the server's. A client that has a token refuses a server that
// does not ask for one, or does not prove it holds it: it would otherwise hand its
// work (a worker's leases, a trainer's batches) to whoever listens at the address. The
// server also checks the peer's role against the roles it serves (a worker serves
// clients; a dispatcher serves clients, workers and tools); the sessions check each
// request against the role (only workers register and heartbeat, only clients open
// streams and join jobs).
#ifndef FERRY_NET_HANDSHAKE_H_
#define FERRY_NET_HANDSHAKE_H_

#include <initializer_list>
#include <map>
#include <string>
#include <vector>

#include "ferry/status.h"
#include "wire/codec.h"
#include "wire/message.h"

namespace ferry::net {

class ServerHandshake {
 public:
  // `token` empty: no authentication. `what` names the server in errors ("this worker").
  ServerHandshake(std::string token, std::string server_id, std::string what, std::initializer_list<wire::Role> roles);

  // Peers of `role` prove `token` instead of the server's (per-role credentials: a
  // dispatcher's --worker-token-file, so that a trainer's token cannot register a
  // worker). Requires the server's own token to be set too.
  void set_role_token(wire::Role role, std::string token) { role_tokens_[role] = std::move(token); }
  // A dispatcher's state identity, sent in HelloOk.
  void set_state_id(std::string id) { state_id_ = std::move(id); }
  // The first frame to send (draws the nonce).
  wire::OutFrame Challenge();

  struct Accepted {
    wire::Role role;
    std::string peer_id;
    wire::OutFrame reply;  // HelloOk, to send
  };
  // The peer's Hello. An error is the Status to send back (EncodeError) before closing:
  // InvalidArgument (not a Hello), Unauthenticated (no or wrong token),
  // PermissionDenied (a role this server does not serve).
  Result<Accepted> OnHello(const wire::InFrame& f);

 private:
  const std::string token_, server_id_, what_;
  const std::vector<wire::Role> roles_;
  std::map<wire::Role, std::string> role_tokens_;
  std::string nonce_, state_id_;
};

class ClientHandshake {
 public:
  // `server` names the peer in errors ("worker 10.0.0.5:7000").
  ClientHandshake(std::string token, wire::Role role, std::string peer_id, std::string server);

  // The server's Challenge: the Hello to send. Unauthenticated if the server requires
  // a token and we have none, or we have one and the server does not ask for it; an
  // Error frame comes back as its Status.
  Result<wire::OutFrame> OnChallenge(const wire::InFrame& f);
  // The server's answer to Hello: OK for HelloOk (with a valid proof when we have a
  // token; Unauthenticated without); an Error frame as its Status.
  Status OnHelloOk(const wire::InFrame& f);
  // After OnHelloOk: the server's state identity (a dispatcher's; empty otherwise).
  const std::string& state_id() const { return state_id_; }

 private:
  Status ErrorOf(const wire::InFrame& f) const;
  const std::string token_;
  const wire::Role role_;
  const std::string peer_id_, server_;
  std::string server_nonce_, nonce_;
  std::string state_id_;
};

}  // namespace ferry::net

#endif  // FERRY_NET_HANDSHAKE_H_
