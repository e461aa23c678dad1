// The shared-token authentication every connection starts with (see handshake.h):
// HMAC-SHA256(token, "ferry-hello-v1" || nonce), compared in constant time.
#ifndef FERRY_NET_AUTH_H_
#define FERRY_NET_AUTH_H_

#include <string>

#include "ferry/status.h"

namespace ferry::net {

std::string HelloMac(const std::string& token, const std::string& nonce);
bool MacEquals(const std::string& a, const std::string& b);  // constant time
std::string RandomNonce();                                    // 32 bytes from the OS
// `bytes` random bytes as lowercase hex (ids: consumers, workers).
std::string RandomHex(size_t bytes);

// The shared token: the file's contents (trailing whitespace trimmed) if `token_file`
// is set, else $FERRY_TOKEN, else empty (no authentication).
Result<std::string> LoadToken(const std::string& token_file);

}  // namespace ferry::net

#endif  // FERRY_NET_AUTH_H_
