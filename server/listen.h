// Binding a daemon's listening socket, shared by ferry-worker and ferry-dispatcher.
#ifndef FERRY_SERVER_LISTEN_H_
#define FERRY_SERVER_LISTEN_H_

#include <utility>  // before Asio (Boost 1.74, C++20)

#include <boost/asio.hpp>
#include <string>

#include "ferry/internal/connection.h"
#include "ferry/status.h"

namespace ferry {

// Resolves HOST:PORT (port 0: any free port), binds and listens. Returns the address
// actually bound, "host:port".
inline Result<std::string> Listen(boost::asio::ip::tcp::acceptor& acceptor, const std::string& address) {
  namespace asio = boost::asio;
  using tcp = asio::ip::tcp;
  FERRY_ASSIGN_OR_RETURN(auto hp, internal::SplitHostPort(address));
  boost::system::error_code ec;
  tcp::resolver resolver(acceptor.get_executor());
  auto results = resolver.resolve(hp.first, std::to_string(hp.second), ec);
  if (ec || results.empty()) return Status::InvalidArgument("cannot resolve " + address + ": " + ec.message());
  const tcp::endpoint ep = results.begin()->endpoint();
  acceptor.open(ep.protocol(), ec);
  if (!ec) acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) acceptor.bind(ep, ec);
  if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return Status::Unavailable("cannot listen on " + address + ": " + ec.message());
  const tcp::endpoint bound = acceptor.local_endpoint();
  return bound.address().to_string() + ":" + std::to_string(bound.port());
}

}  // namespace ferry

#endif  // FERRY_SERVER_LISTEN_H_
