#include "net/handshake.h"

#include <algorithm>

#include "net/auth.h"

namespace ferry::net {

namespace {
// Nonces are 32 random bytes; fewer than 16 is not a nonce.
constexpr size_t kMinNonce = 16;
}  // namespace

ServerHandshake::ServerHandshake(std::string token, std::string server_id, std::string what,
                                 std::initializer_list<wire::Role> roles)
    : token_(std::move(token)), server_id_(std::move(server_id)), what_(std::move(what)), roles_(roles) {}

wire::OutFrame ServerHandshake::Challenge() {
  nonce_ = RandomNonce();
  return wire::EncodeChallenge({nonce_, !token_.empty(), server_id_});
}

Result<ServerHandshake::Accepted> ServerHandshake::OnHello(const wire::InFrame& f) {
  FERRY_ASSIGN_OR_RETURN(wire::HelloMsg h, wire::DecodeHello(f));
  std::string proof;
  auto own = role_tokens_.find(h.role);
  const std::string& token = own != role_tokens_.end() ? own->second : token_;
  if (!token.empty()) {
    if (h.mac.empty())
      return Status(StatusCode::kUnauthenticated, what_ + " requires a token (--token-file or FERRY_TOKEN)");
    if (h.nonce.size() < kMinNonce || !MacEquals(h.mac, ClientProof(token, uint8_t(h.role), nonce_, h.nonce)))
      return Status(StatusCode::kUnauthenticated,
                    "wrong token (" + what_ + " holds another" +
                        (role_tokens_.empty() ? std::string()
                                              : std::string(" for a ") + wire::RoleName(h.role) +
                                                    ": it has separate tokens for workers and trainers") +
                        ")");
    proof = ServerProof(token, nonce_, h.nonce);
  }
  if (std::find(roles_.begin(), roles_.end(), h.role) == roles_.end())
    return Status::PermissionDenied(what_ + " does not serve a " + wire::RoleName(h.role));
  return Accepted{h.role, h.peer_id, wire::EncodeHelloOk(server_id_, state_id_, proof)};
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
    if (c.nonce.size() < kMinNonce) return Status::InvalidArgument(server_ + " sent a Challenge without a nonce");
    server_nonce_ = c.nonce;
    nonce_ = RandomNonce();
    h.nonce = nonce_;
    h.mac = ClientProof(token_, uint8_t(role_), server_nonce_, nonce_);
  } else if (!token_.empty()) {
    return Status(StatusCode::kUnauthenticated,
                  server_ + " does not ask for a token, and this side has one: it is not a server that shares the "
                            "token (started without --token-file or FERRY_TOKEN?); refusing it");
  }
  return wire::EncodeHello(h);
}

Status ClientHandshake::OnHelloOk(const wire::InFrame& f) {
  if (f.header.type == wire::MessageType::kError) return ErrorOf(f);
  FERRY_ASSIGN_OR_RETURN(wire::HelloOkMsg ok, wire::DecodeHelloOk(f));
  if (!token_.empty() && (nonce_.empty() || !MacEquals(ok.mac, ServerProof(token_, server_nonce_, nonce_))))
    return Status(StatusCode::kUnauthenticated,
                  server_ + " did not prove it holds the token (" + (ok.mac.empty() ? "no proof" : "a wrong proof") +
                      "): it holds another token, or is not a Ferry server of this cluster");
  state_id_ = ok.state_id;
  return Status::OK();
}

}  // namespace ferry::net
