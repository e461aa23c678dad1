// Addresses as Ferry's flags and messages write them: "host:port".
#ifndef FERRY_NET_ADDRESS_H_
#define FERRY_NET_ADDRESS_H_

#include <cstdint>
#include <cstdlib>
#include <string>
#include <utility>

#include "ferry/status.h"

namespace ferry::net {

// "host:port" -> (host, port). Port 0 is allowed (listen on any free port).
inline Result<std::pair<std::string, uint16_t>> SplitHostPort(const std::string& s) {
  const size_t colon = s.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == s.size())
    return Status::InvalidArgument("expected HOST:PORT, got '" + s + "'");
  std::string host = s.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  const std::string port_str = s.substr(colon + 1);
  char* end = nullptr;
  const long port = std::strtol(port_str.c_str(), &end, 10);
  if (*end != '\0' || port < 0 || port > 65535) return Status::InvalidArgument("bad port in '" + s + "'");
  return std::make_pair(host, uint16_t(port));
}

}  // namespace ferry::net

#endif  // FERRY_NET_ADDRESS_H_
