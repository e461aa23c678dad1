// A daemon's listening socket, shared by ferry-worker and ferry-dispatcher: binding it,
// and the accept loop.
#ifndef FERRY_NET_LISTEN_H_
#define FERRY_NET_LISTEN_H_

#include <utility>  // before Asio (Boost 1.74, C++20)

#include <boost/asio.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "core/log.h"

#include "ferry/status.h"
#include "net/address.h"

namespace ferry::net {

// Resolves HOST:PORT (port 0: any free port), binds and listens. Returns the address
// actually bound, "host:port".
inline Result<std::string> Listen(boost::asio::ip::tcp::acceptor& acceptor, const std::string& address) {
  namespace asio = boost::asio;
  using tcp = asio::ip::tcp;
  FERRY_ASSIGN_OR_RETURN(auto hp, SplitHostPort(address));
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

// Accepts connections for as long as the acceptor is open and `accepting()` holds,
// handing each socket to `on_socket` (on the acceptor's executor). A failed accept
// (out of descriptors, say) is retried after 100 ms, never in a spin; a closed
// acceptor ends the loop. A connection accepted just as `accepting()` turned false is
// dropped.
inline void AcceptLoop(boost::asio::ip::tcp::acceptor& acceptor, std::function<bool()> accepting,
                       std::function<void(boost::asio::ip::tcp::socket)> on_socket,
                       std::function<boost::asio::any_io_executor()> socket_executor = nullptr) {
  namespace asio = boost::asio;
  auto handler = [&acceptor, accepting, on_socket, socket_executor](const boost::system::error_code& ec,
                                                                     asio::ip::tcp::socket socket) {
    if (ec) {
      if (ec == asio::error::operation_aborted || !acceptor.is_open()) return;
      LogWarn("accept failed: %s", ec.message().c_str());
      auto t = std::make_shared<asio::steady_timer>(acceptor.get_executor(), std::chrono::milliseconds(100));
      t->async_wait([&acceptor, accepting, on_socket, socket_executor, t](const boost::system::error_code& e) {
        if (!e && acceptor.is_open() && accepting()) AcceptLoop(acceptor, accepting, on_socket, socket_executor);
      });
      return;
    }
    if (!acceptor.is_open() || !accepting()) return;
    on_socket(std::move(socket));
    AcceptLoop(acceptor, accepting, on_socket, socket_executor);
  };
  // With `socket_executor`, each accepted socket belongs to the executor it returns (a
  // daemon spreading its connections over several io threads); the handler still runs
  // on the acceptor's.
  if (socket_executor) acceptor.async_accept(socket_executor(), std::move(handler));
  else acceptor.async_accept(std::move(handler));
}

// Admission: what a daemon lets an unauthenticated peer hold. A connection that has
// not finished its handshake may send only a small frame (wire::PreAuthLimits), must
// finish within `handshake_timeout_s`, and counts against `max_handshaking`; every
// connection counts against `max_connections`.
struct AdmissionLimits {
  int max_connections = 4096;
  int max_handshaking = 128;
  double handshake_timeout_s = 10;
};

// Makes room for one more connection among `sessions` (each with handshaking(),
// serial() and Close(); Close() may defer its removal from the set). False: the daemon
// is at max_connections and the new socket should be closed. At max_handshaking the
// oldest connection still handshaking is closed instead of the new one: an honest
// peer finishes its handshake in one round trip, so only a silent or slow one is old
// in that state, and a flood of them cannot lock honest peers out. `refused` counts
// both (the log says so once per hundred).
template <typename Sessions>
bool MakeRoom(const Sessions& sessions, const AdmissionLimits& limits, int64_t* refused) {
  if (int64_t(sessions.size()) >= limits.max_connections) {
    if ((*refused)++ % 100 == 0)
      LogWarn("at --max-connections (%d): refusing a connection (%lld refused so far)", limits.max_connections,
          (long long)*refused);
    return false;
  }
  int handshaking = 0;
  typename Sessions::value_type oldest{};
  for (const auto& s : sessions) {
    if (!s->handshaking()) continue;
    ++handshaking;
    if (!oldest || s->serial() < oldest->serial()) oldest = s;
  }
  if (handshaking >= limits.max_handshaking && oldest) {
    if ((*refused)++ % 100 == 0)
      LogWarn("%d connections are handshaking (--max-handshaking): closing the oldest", handshaking);
    oldest->Close();
  }
  return true;
}

}  // namespace ferry::net

#endif  // FERRY_NET_LISTEN_H_
