#include "net/handshake.h"

#include <algorithm>

#include "net/auth.h"

namespace ferry::net {

ServerHandshake::ServerHandshake(std::string token, std::string server_id, std::string what,
                                 std::initializer_list<wire::Role> roles)
    : token_(std::move(token)), server_id_(std::move(server_id)), what_(std::move(what)), roles_(roles) {}

wire::OutFrame ServerHandshake::Challenge() {
  nonce_ = RandomNonce();
  return wire::EncodeChallenge({nonce_, !token_.empty(), server_id_});
}

Result<ServerHandshake::Accepted> ServerHandshake::OnHello(const wire::InFrame& f) {
  FERRY_ASSIGN_OR_RETURN(wire::HelloMsg h, wire::DecodeHello(f));
  if (!token_.empty() && !MacEquals(h.mac, HelloMac(token_, nonce_))) {
    return Status(StatusCode::kUnauthenticated, h.mac.empty() ? what_ + " requires a token (--token-file or FERRY_TOKEN)"
                                                              : "wrong token");
  }
  if (std::find(roles_.begin(), roles_.end(), h.role) == roles_.end())
    return Status::PermissionDenied(what_ + " does not serve a " + wire::RoleName(h.role));
  return Accepted{h.role, h.peer_id, wire::EncodeHelloOk(server_id_, state_id_)};
}

ClientHandshake::ClientHandshake(std::string token, wire::Role role, std::string peer_id, std::string server)
    : token_(std::move(token)), role_(role), peer_id_(std::move(peer_id)), server_(std::move(server)) {}

Status ClientHandshake::ErrorOf(const wire::InFrame& f) const {
  auto e = wire::DecodeError(f);
  return e.ok() ? e->status : e.status();
}

Result<wire::OutFrame> ClientHandshake::OnChallenge(const wire::InFrame& f) {
  if (f.header.type == wire::MessageType::kError) return ErrorOf(f);
  FERRY_ASSIGN_OR_RETURN(wire::ChallengeMsg c, wire::DecodeChallenge(f));
  wire::HelloMsg h;
  h.role = role_;
  h.peer_id = peer_id_;
  if (c.auth_required) {
    if (token_.empty())
      return Status(StatusCode::kUnauthenticated, server_ + " requires a token (token_file, --token-file or FERRY_TOKEN)");
    h.mac = HelloMac(token_, c.nonce);
  }
  return wire::EncodeHello(h);
}

Status ClientHandshake::OnHelloOk(const wire::InFrame& f) {
  if (f.header.type == wire::MessageType::kError) return ErrorOf(f);
  FERRY_ASSIGN_OR_RETURN(wire::HelloOkMsg ok, wire::DecodeHelloOk(f));
  state_id_ = ok.state_id;
  return Status::OK();
}

}  // namespace ferry::net
