// The shared-token authentication every connection starts with (see handshake.h).
// Mutual: each side proves it holds the token with an HMAC-SHA256 over both sides'
// fresh nonces, under a label of its own (a proof reflected back at its sender is not
// the other side's), compared in constant time. The client's proof covers its role
// too, so that a recorded Hello cannot be replayed as another role (and cannot be
// replayed at all: the server's nonce is fresh).
#ifndef FERRY_NET_AUTH_H_
#define FERRY_NET_AUTH_H_

#include <cstdint>
#include <string>

#include "ferry/status.h"

namespace ferry::net {

// The client's proof, sent in Hello:
//   HMAC-SHA256(token, "ferry-hello-v2 client" || role || server_nonce || client_nonce)
std::string ClientProof(const std::string& token, uint8_t role, const std::string& server_nonce,
                        const std::string& client_nonce);
// The server's proof, sent in HelloOk:
//   HMAC-SHA256(token, "ferry-hello-v2 server" || server_nonce || client_nonce)
std::string ServerProof(const std::string& token, const std::string& server_nonce, const std::string& client_nonce);
bool MacEquals(const std::string& a, const std::string& b);  // constant time
std::string RandomNonce();                                    // 32 bytes from the OS
// `bytes` random bytes as lowercase hex (ids: consumers, workers).
std::string RandomHex(size_t bytes);

// The shared token: the file's contents (trailing whitespace trimmed) if `token_file`
// is set, else $FERRY_TOKEN, else empty (no authentication).
Result<std::string> LoadToken(const std::string& token_file);

}  // namespace ferry::net

#endif  // FERRY_NET_AUTH_H_
