#include "net/auth.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <cctype>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace ferry::net {

namespace {

std::string Hmac(const std::string& token, const std::string& msg) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), token.data(), int(token.size()), reinterpret_cast<const unsigned char*>(msg.data()), msg.size(),
       out, &len);
  return std::string(reinterpret_cast<const char*>(out), len);
}

// Length-prefixed, so that no two different (nonce, nonce) pairs give the same bytes.
std::string Field(const std::string& s) { return std::to_string(s.size()) + ":" + s; }

}  // namespace

std::string ClientProof(const std::string& token, uint8_t role, const std::string& server_nonce,
                        const std::string& client_nonce) {
  return Hmac(token, "ferry-hello-v2 client" + std::string(1, char(role)) + Field(server_nonce) + Field(client_nonce));
}

std::string ServerProof(const std::string& token, const std::string& server_nonce, const std::string& client_nonce) {
  return Hmac(token, "ferry-hello-v2 server" + Field(server_nonce) + Field(client_nonce));
}

bool MacEquals(const std::string& a, const std::string& b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

std::string RandomNonce() {
  std::string n(32, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(n.data()), int(n.size())) != 1) std::abort();
  return n;
}

Result<std::string> LoadToken(const std::string& token_file) {
  std::string token;
  if (!token_file.empty()) {
    std::ifstream f(token_file, std::ios::binary);
    if (!f) return Status::NotFound("cannot read token file " + token_file);
    std::stringstream ss;
    ss << f.rdbuf();
    token = ss.str();
    while (!token.empty() && std::isspace(static_cast<unsigned char>(token.back()))) token.pop_back();
    if (token.empty()) return Status::InvalidArgument("token file " + token_file + " is empty");
    return token;
  }
  if (const char* env = std::getenv("FERRY_TOKEN")) token = env;
  return token;
}

std::string RandomHex(size_t bytes) {
  static const char* hex = "0123456789abcdef";
  std::string out;
  while (out.size() < 2 * bytes) {
    for (unsigned char c : RandomNonce()) {
      if (out.size() == 2 * bytes) break;
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

}  // namespace ferry::net
