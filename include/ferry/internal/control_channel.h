// ControlChannel: a blocking request/reply connection to ferry-dispatcher, for the
// control loops of workers and clients (each runs on its own thread, so blocking is
// what they want). Header-only, like the client.
//
// Call() connects and authenticates first when needed (Challenge/Hello/HelloOk), sends
// one request, and returns its reply. Every step has a deadline. Any transport error
// closes the connection and returns Unavailable: the next Call() reconnects, which is
// how workers and clients ride out a dispatcher restart. An Error reply comes back as
// its Status (and closes the connection, as the dispatcher does).
//
// Thread-compatible, except Interrupt(), which any thread may call to make a Call() in
// progress return Cancelled within 50 ms.
#ifndef FERRY_INTERNAL_CONTROL_CHANNEL_H_
#define FERRY_INTERNAL_CONTROL_CHANNEL_H_

#include <utility>  // before Asio: Boost 1.74 uses std::exchange without it in C++20

#include <atomic>
#include <boost/asio.hpp>
#include <chrono>
#include <memory>
#include <string>

#include "ferry/internal/connection.h"
#include "ferry/internal/frame.h"
#include "ferry/internal/wire.h"

namespace ferry::internal {

class ControlChannel {
 public:
  ControlChannel(std::string address, std::string token, Role role, std::string peer_id,
                 std::chrono::milliseconds timeout = std::chrono::seconds(10))
      : address_(std::move(address)),
        token_(std::move(token)),
        role_(role),
        peer_id_(std::move(peer_id)),
        timeout_(timeout),
        buffers_(DefaultBufferAllocator()) {}

  const std::string& address() const { return address_; }

  Result<InFrame> Call(const OutFrame& request) {
    if (interrupted_) return Status::Cancelled("interrupted");
    if (!socket_) {
      Status s = Connect();
      if (!s.ok()) {
        Reset();
        return s;
      }
    }
    Status s = Write(request);
    Result<InFrame> reply = s.ok() ? Read() : Result<InFrame>(s);
    if (!reply.ok()) {
      Reset();
      return reply.status();
    }
    if (reply->header.type == MessageType::kError) {
      Reset();
      auto e = DecodeError(*reply);
      return e.ok() ? e->status : e.status();
    }
    return reply;
  }

  // Makes a Call() in progress, and every later one, return Cancelled.
  void Interrupt() { interrupted_ = true; }

  void Close() { Reset(); }

 private:
  Status Connect() {
    auto hp = SplitHostPort(address_);
    if (!hp.ok()) return hp.status();
    socket_ = std::make_unique<tcp::socket>(io_);
    boost::system::error_code ec;
    tcp::resolver resolver(io_);
    auto endpoints = resolver.resolve(hp->first, std::to_string(hp->second), ec);
    if (ec) return Status::Unavailable("cannot resolve dispatcher " + address_ + ": " + ec.message());
    bool done = false;
    asio::async_connect(*socket_, endpoints, [&](const boost::system::error_code& e, const tcp::endpoint&) {
      ec = e;
      done = true;
    });
    FERRY_RETURN_IF_ERROR(RunUntil(done, "connecting"));
    if (ec) return Status::Unavailable("cannot connect to dispatcher " + address_ + ": " + ec.message());
    socket_->set_option(tcp::no_delay(true), ec);
    FERRY_ASSIGN_OR_RETURN(InFrame challenge_frame, Read());
    FERRY_ASSIGN_OR_RETURN(ChallengeMsg challenge, DecodeChallenge(challenge_frame));
    HelloMsg hello;
    hello.role = role_;
    hello.peer_id = peer_id_;
    if (challenge.auth_required) {
      if (token_.empty())
        return Status(StatusCode::kUnauthenticated, "dispatcher " + address_ + " requires a token (--token-file or FERRY_TOKEN)");
      hello.mac = HelloMac(token_, challenge.nonce);
    }
    FERRY_RETURN_IF_ERROR(Write(EncodeHello(hello)));
    FERRY_ASSIGN_OR_RETURN(InFrame ok, Read());
    if (ok.header.type == MessageType::kError) {
      auto e = DecodeError(ok);
      return e.ok() ? e->status : e.status();
    }
    return DecodeHelloOk(ok).status();
  }

  Status Write(const OutFrame& f) {
    std::vector<asio::const_buffer> bufs;
    for (const ByteRange& r : f.ranges()) bufs.emplace_back(r.data, r.size);
    boost::system::error_code ec;
    bool done = false;
    asio::async_write(*socket_, bufs, [&](const boost::system::error_code& e, size_t) {
      ec = e;
      done = true;
    });
    FERRY_RETURN_IF_ERROR(RunUntil(done, "sending"));
    if (ec) return Status::Unavailable("dispatcher " + address_ + ": " + ec.message());
    return Status::OK();
  }

  Result<InFrame> Read() {
    uint8_t header[kFrameHeaderSize];
    boost::system::error_code ec;
    bool done = false;
    asio::async_read(*socket_, asio::buffer(header), [&](const boost::system::error_code& e, size_t) {
      ec = e;
      done = true;
    });
    FERRY_RETURN_IF_ERROR(RunUntil(done, "waiting for a reply"));
    if (ec) return Status::Unavailable("dispatcher " + address_ + ": " + ec.message());
    FERRY_ASSIGN_OR_RETURN(FrameHeader h, ParseFrameHeader(header, FrameLimits{}));
    InFrame f{h, buffers_->Allocate(size_t(h.length))};
    if (!f.body) return Status::ResourceExhausted("cannot allocate a control reply");
    done = false;
    asio::async_read(*socket_, asio::buffer(f.body->data(), size_t(h.length)),
                     [&](const boost::system::error_code& e, size_t) {
                       ec = e;
                       done = true;
                     });
    FERRY_RETURN_IF_ERROR(RunUntil(done, "reading a reply"));
    if (ec) return Status::Unavailable("dispatcher " + address_ + ": " + ec.message());
    return f;
  }

  // Runs the io_context until `done` or the deadline; on the deadline (or an
  // interrupt) the socket is closed and the handler is run to completion.
  Status RunUntil(bool& done, const char* what) {
    io_.restart();
    const auto deadline = std::chrono::steady_clock::now() + timeout_;
    while (!done && !interrupted_ && std::chrono::steady_clock::now() < deadline) {
      // Short slices, so that an Interrupt() is noticed within 50 ms.
      io_.run_one_until(std::min(deadline, std::chrono::steady_clock::now() + std::chrono::milliseconds(50)));
      if (io_.stopped()) io_.restart();
    }
    if (done) return Status::OK();
    boost::system::error_code ec;
    if (socket_) socket_->close(ec);
    io_.restart();
    while (!done) io_.run_one();  // the aborted handler, which refers to our locals
    if (interrupted_) return Status::Cancelled("interrupted");
    return Status::Unavailable(std::string("dispatcher ") + address_ + ": timed out " + what);
  }

  void Reset() {
    if (socket_) {
      boost::system::error_code ec;
      socket_->close(ec);
    }
    socket_.reset();
  }

  const std::string address_, token_;
  const Role role_;
  const std::string peer_id_;
  const std::chrono::milliseconds timeout_;
  const std::shared_ptr<BufferAllocator> buffers_;
  asio::io_context io_;
  std::unique_ptr<tcp::socket> socket_;
  std::atomic<bool> interrupted_{false};
};

}  // namespace ferry::internal

#endif  // FERRY_INTERNAL_CONTROL_CHANNEL_H_
