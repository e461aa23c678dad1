#include "net/control_channel.h"

#include <vector>

#include "net/address.h"
#include "net/handshake.h"

namespace ferry::net {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using wire::InFrame;
using wire::OutFrame;

ControlChannel::ControlChannel(std::string address, std::string token, wire::Role role, std::string peer_id,
                               std::chrono::milliseconds timeout, std::shared_ptr<TlsContext> tls)
    : address_(std::move(address)),
      token_(std::move(token)),
      role_(role),
      peer_id_(std::move(peer_id)),
      timeout_(timeout),
      buffers_(DefaultBufferAllocator()),
      tls_(std::move(tls)) {}

ControlChannel::~ControlChannel() { Reset(); }

Result<InFrame> ControlChannel::Call(const OutFrame& request) {
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
  if (reply->header.type == wire::MessageType::kError) {
    Reset();
    auto e = wire::DecodeError(*reply);
    return e.ok() ? e->status : e.status();
  }
  return reply;
}

Status ControlChannel::Connect() {
  FERRY_ASSIGN_OR_RETURN(auto hp, SplitHostPort(address_));
  socket_ = std::make_unique<Stream>(tcp::socket(io_), tls_);
  boost::system::error_code ec;
  tcp::resolver resolver(io_);
  auto endpoints = resolver.resolve(hp.first, std::to_string(hp.second), ec);
  if (ec) return Status::Unavailable("cannot resolve dispatcher " + address_ + ": " + ec.message());
  bool done = false;
  asio::async_connect(socket_->socket(), endpoints, [&](const boost::system::error_code& e, const tcp::endpoint&) {
    ec = e;
    done = true;
  });
  FERRY_RETURN_IF_ERROR(RunUntil(done, "connecting"));
  if (ec) return Status::Unavailable("cannot connect to dispatcher " + address_ + ": " + ec.message());
  socket_->socket().set_option(tcp::no_delay(true), ec);
  if (socket_->tls()) {
    socket_->ExpectPeerHost(hp.first);
    done = false;
    socket_->AsyncHandshake(false, [&](const boost::system::error_code& e) {
      ec = e;
      done = true;
    });
    FERRY_RETURN_IF_ERROR(RunUntil(done, "in the TLS handshake"));
    if (ec) return TlsStatus(ec, "dispatcher " + address_, "handshake", socket_->HostMismatch());
  }
  ClientHandshake hs(token_, role_, peer_id_, "dispatcher " + address_);
  FERRY_ASSIGN_OR_RETURN(InFrame challenge, Read());
  FERRY_ASSIGN_OR_RETURN(OutFrame hello, hs.OnChallenge(challenge));
  FERRY_RETURN_IF_ERROR(Write(hello));
  FERRY_ASSIGN_OR_RETURN(InFrame ok, Read());
  FERRY_RETURN_IF_ERROR(hs.OnHelloOk(ok));
  server_state_ = hs.state_id();
  return Status::OK();
}

Status ControlChannel::Write(const OutFrame& f) {
  std::vector<asio::const_buffer> bufs;
  for (const wire::ByteRange& r : f.ranges()) bufs.emplace_back(r.data, r.size);
  boost::system::error_code ec;
  bool done = false;
  socket_->AsyncWrite(bufs, [&](const boost::system::error_code& e, size_t) {
    ec = e;
    done = true;
  });
  FERRY_RETURN_IF_ERROR(RunUntil(done, "sending"));
  if (ec) return Status::Unavailable("dispatcher " + address_ + ": " + ec.message());
  return Status::OK();
}

Result<InFrame> ControlChannel::Read() {
  uint8_t header[wire::kFrameHeaderSize];
  boost::system::error_code ec;
  bool done = false;
  socket_->AsyncRead(asio::buffer(header), [&](const boost::system::error_code& e, size_t) {
    ec = e;
    done = true;
  });
  FERRY_RETURN_IF_ERROR(RunUntil(done, "waiting for a reply"));
  // With TLS 1.3 a server that refuses our certificate says so after the handshake: its
  // alert is what the first read gets.
  if (ec && IsTlsRefusal(ec)) return TlsStatus(ec, "dispatcher " + address_, "session");
  if (ec) return Status::Unavailable("dispatcher " + address_ + ": " + ec.message());
  FERRY_ASSIGN_OR_RETURN(wire::FrameHeader h, wire::ParseFrameHeader(header, wire::ControlReplyLimits()));
  InFrame f{h, buffers_->Allocate(size_t(h.length))};
  if (!f.body) return Status::ResourceExhausted("cannot allocate a control reply");
  done = false;
  socket_->AsyncRead(asio::buffer(f.body->data(), size_t(h.length)),
                   [&](const boost::system::error_code& e, size_t) {
                     ec = e;
                     done = true;
                   });
  FERRY_RETURN_IF_ERROR(RunUntil(done, "reading a reply"));
  if (ec) return Status::Unavailable("dispatcher " + address_ + ": " + ec.message());
  return f;
}

// Runs the io_context until `done` or the deadline; on the deadline (or an interrupt)
// the socket is closed and the handler is run to completion.
Status ControlChannel::RunUntil(bool& done, const char* what) {
  io_.restart();
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  while (!done && !interrupted_ && std::chrono::steady_clock::now() < deadline) {
    // Short slices, so that an Interrupt() is noticed within 50 ms.
    io_.run_one_until(std::min(deadline, std::chrono::steady_clock::now() + std::chrono::milliseconds(50)));
    if (io_.stopped()) io_.restart();
  }
  if (done) return Status::OK();
  boost::system::error_code ec;
  if (socket_) socket_->socket().close(ec);
  io_.restart();
  while (!done) io_.run_one();  // the aborted handler, which refers to our locals
  if (interrupted_) return Status::Cancelled("interrupted");
  return Status::Unavailable(std::string("dispatcher ") + address_ + ": timed out " + what);
}

void ControlChannel::Reset() {
  if (socket_) {
    boost::system::error_code ec;
    socket_->socket().close(ec);
  }
  socket_.reset();
}

}  // namespace ferry::net
