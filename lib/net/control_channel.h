// ControlChannel: a blocking request/reply connection to ferry-dispatcher, for the
// control loops of workers and clients (each runs on its own thread, so blocking is
// what they want).
//
// Call() connects and authenticates first when needed (handshake.h), sends one
// request, and returns its reply. Every step has a deadline. Any transport error
// closes the connection and returns Unavailable: the next Call() reconnects, which is
// how workers and clients ride out a dispatcher restart. An Error reply comes back as
// its Status (and closes the connection, as the dispatcher does).
//
// Thread-compatible, except Interrupt(), which any thread may call to make a Call() in
// progress return Cancelled within 50 ms.
#ifndef FERRY_NET_CONTROL_CHANNEL_H_
#define FERRY_NET_CONTROL_CHANNEL_H_

#include <utility>  // before Asio: Boost 1.74 uses std::exchange without it in C++20

#include <atomic>
#include <boost/asio.hpp>
#include <chrono>
#include <memory>
#include <string>

#include "ferry/buffer.h"
#include "ferry/status.h"
#include "wire/codec.h"
#include "wire/message.h"
#include "net/tls.h"

namespace ferry::net {

class ControlChannel {
 public:
  // `tls`: a client TLS context (net/tls.h), or null for plain TCP.
  ControlChannel(std::string address, std::string token, wire::Role role, std::string peer_id,
                 std::chrono::milliseconds timeout = std::chrono::seconds(10),
                 std::shared_ptr<TlsContext> tls = nullptr);
  ~ControlChannel();

  const std::string& address() const { return address_; }

  Result<wire::InFrame> Call(const wire::OutFrame& request);

  // Makes a Call() in progress, and every later one, return Cancelled.
  void Interrupt() { interrupted_ = true; }
  void Close() { Reset(); }
  // The dispatcher's state identity, from the latest handshake ("" before one).
  const std::string& server_state() const { return server_state_; }

 private:
  Status Connect();
  Status Write(const wire::OutFrame& f);
  Result<wire::InFrame> Read();
  Status RunUntil(bool& done, const char* what);
  void Reset();

  const std::string address_, token_;
  const wire::Role role_;
  const std::string peer_id_;
  const std::chrono::milliseconds timeout_;
  const std::shared_ptr<BufferAllocator> buffers_;
  boost::asio::io_context io_;
  const std::shared_ptr<TlsContext> tls_;
  std::unique_ptr<Stream> socket_;
  std::atomic<bool> interrupted_{false};
  std::string server_state_;
};

}  // namespace ferry::net

#endif  // FERRY_NET_CONTROL_CHANNEL_H_
