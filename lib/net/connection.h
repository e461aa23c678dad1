// FrameConnection: one TCP connection carrying Ferry frames, on Boost.Asio. Used by
// the client's worker streams and by both daemons' sessions.
//
// Threading: every method, and every callback, runs on the connection's io_context
// thread; a connection is never touched from elsewhere (post to it instead).
//
// Reading: StartReading() reads frames forever. Each frame's header is validated
// (ParseFrameHeader) before its body buffer is allocated; the body lands in one
// 64-byte-aligned buffer from the BufferAllocator: no copy follows. Bytes come in
// through a small staging area (kStageBytes): one read takes a whole small frame,
// header and body, whose bytes are then copied into the body's buffer; a large
// frame's first bytes are copied from there and its rest is read straight into its
// buffer. The handler gets every frame, then exactly one non-OK Status (EOF, error,
// bad frame), after which the connection is closed.
//
// Writing: Send() queues frames; one scatter-gather write is in flight at a time, in
// order, straight from the frames' own memory (header, segment table, segments).
// With SetWriteBound(), a peer that sends requests and does not read the replies stops
// being read once the replies queued to it pass the bound (its requests wait in the
// kernel, which then stops the peer's sends), and is read again when the queue is down
// to half: what one connection holds is bounded.
//
// Closing: Close() at once; CloseAfterWrites() gracefully (a lingering close: see there).
//
// TLS (net/tls.h): given a context, the connection runs inside TLS. StartTls() does
// the TLS handshake; frames sent before it completes wait for it, and reading starts
// after it (StartReading() is called from its callback).
#ifndef FERRY_NET_CONNECTION_H_
#define FERRY_NET_CONNECTION_H_

#include <utility>  // before Asio: Boost 1.74 uses std::exchange without it in C++20

#include <boost/asio.hpp>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <algorithm>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ferry/buffer.h"
#include "ferry/status.h"
#include "net/tls.h"
#include "wire/message.h"

namespace ferry::net {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using wire::ByteRange;
using wire::FrameHeader;
using wire::FrameLimits;
using wire::InFrame;
using wire::OutFrame;

class FrameConnection : public std::enable_shared_from_this<FrameConnection> {
 public:
  using FrameHandler = std::function<void(const Status&, InFrame)>;

  FrameConnection(tcp::socket socket, FrameLimits limits, std::shared_ptr<BufferAllocator> buffers,
                  const std::shared_ptr<TlsContext>& tls = nullptr)
      : stream_(std::move(socket), tls),
        limits_(limits),
        buffers_(std::move(buffers)),
        linger_timer_(stream_.socket().get_executor()) {
    boost::system::error_code ec;
    tcp::socket& s = stream_.socket();
    s.set_option(tcp::no_delay(true), ec);
    // Large kernel buffers let one write move a whole batch with few wake-ups.
    s.set_option(asio::socket_base::send_buffer_size(4 << 20), ec);
    s.set_option(asio::socket_base::receive_buffer_size(4 << 20), ec);
    peer_ = Describe(s);
    tls_pending_ = stream_.tls();
  }

  bool tls() const { return stream_.tls(); }
  // Client side, before StartTls(): the server's certificate must name `host`.
  void ExpectPeerHost(const std::string& host) { stream_.ExpectPeerHost(host); }

  // The TLS handshake, as a server or a client; `done` gets OK, or Unauthenticated
  // with the reason (a certificate refused, a peer without TLS), or Unavailable (the
  // network), and the connection is closed. Without TLS, `done` runs at once with OK.
  void StartTls(bool server, std::function<void(const Status&)> done) {
    if (!stream_.tls()) return done(Status::OK());
    auto self = shared_from_this();
    stream_.AsyncHandshake(server, [self, done = std::move(done)](const boost::system::error_code& ec) {
      if (!ec && self->closed_) return done(Status::Cancelled("connection closed"));
      if (ec) {
        self->Close();
        return done(TlsStatus(ec, self->peer_, "handshake", self->stream_.HostMismatch()));
      }
      self->tls_pending_ = false;
      if (!self->queue_.empty() && !self->writing_) self->WriteNext();
      else if (self->close_after_writes_ && !self->writing_) self->Linger();
      done(Status::OK());
    });
  }

  const std::string& peer() const { return peer_; }
  bool closed() const { return closed_; }
  // The limits for the frames after the one being handled (a server widens them once
  // its peer has authenticated). Call on the connection's executor.
  void SetLimits(FrameLimits limits) { limits_ = limits; }
  size_t queued_frames() const { return queue_.size(); }
  size_t queued_bytes() const { return queued_bytes_; }
  // Past `max_queued_bytes` queued (0: no bound), no further frame is read until the
  // queue is down to half of it; `on_pause` runs each time reading stops for this.
  void SetWriteBound(size_t max_queued_bytes, std::function<void()> on_pause = nullptr) {
    max_queued_bytes_ = max_queued_bytes;
    on_pause_ = std::move(on_pause);
  }

  // Stops reading once the frame being handled (or, between frames, the next one) is
  // done, until ResumeReads(): a server whose requests are answered on another thread
  // holds a peer's reads while a few of its requests are in flight, so a peer that
  // sends without waiting for answers cannot queue unbounded work there. A frame read
  // already (staged) may reach the handler from within ResumeReads().
  void HoldReads() { hold_reads_ = true; }
  void ResumeReads() {
    hold_reads_ = false;
    if (!read_paused_ || closed_ || failed_) return;
    if (max_queued_bytes_ != 0 && queued_bytes_ > max_queued_bytes_) {
      // Paused for the write bound now: WriteNext() reads on once the peer reads.
      if (on_pause_) on_pause_();
      return;
    }
    read_paused_ = false;
    ReadHeader();
  }

  void StartReading(FrameHandler handler) {
    handler_ = std::move(handler);
    ReadHeader();
  }

  // Queues a frame. `on_sent` (optional) runs once it has been written. Frames sent
  // after CloseAfterWrites() are dropped.
  void Send(OutFrame frame, std::function<void()> on_sent = nullptr) {
    if (closed_ || close_after_writes_) return;
    size_t bytes = 0;
    for (const ByteRange& r : frame.ranges()) bytes += r.size;
    queued_bytes_ += bytes;
    queue_.push_back({std::move(frame), std::move(on_sent), bytes});
    if (!writing_ && !tls_pending_) WriteNext();
  }

  // Ends the connection once every queued frame has been written: shuts down the
  // sending side (the peer reads EOF after our last frame), then reads and drops what
  // the peer still sends until it closes too, or for at most `linger`; then closes.
  // The read handler gets no more frames, only the final Status. Closing at once
  // instead would make the kernel reset the connection whenever frames of the peer
  // (e.g. Credits in flight) sit unread, and a reset makes the peer's kernel discard
  // what it has not read yet: our last frames (the final EndOfEpoch, an Error).
  void CloseAfterWrites(std::chrono::milliseconds linger = std::chrono::seconds(2)) {
    if (closed_ || close_after_writes_) return;
    close_after_writes_ = true;
    linger_ = linger;
    if (tls_pending_) return Close();  // nothing can be written before TLS is up
    if (!writing_) Linger();
  }

  // Closes now; queued frames are dropped. The read handler gets Cancelled once.
  void Close() {
    if (closed_) return;
    closed_ = true;
    boost::system::error_code ec;
    linger_timer_.cancel();
    stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
    stream_.socket().close(ec);
    queue_.clear();
    queued_bytes_ = 0;
    if (read_paused_ && !failed_) {
      // No read is pending to report the close: report it as one would.
      read_paused_ = false;
      auto self = shared_from_this();
      asio::post(stream_.socket().get_executor(), [self] { self->Fail(Status::Cancelled("connection closed")); });
    }
  }

  static std::string Describe(const tcp::socket& s) {
    boost::system::error_code ec;
    auto ep = s.remote_endpoint(ec);
    if (ec) return "?";
    return ep.address().to_string() + ":" + std::to_string(ep.port());
  }

 private:
  struct Pending {
    OutFrame frame;
    std::function<void()> on_sent;
    size_t bytes = 0;
  };

  // Whether reading stops here for the bound of SetWriteBound().
  bool PauseForWrites() {
    if (hold_reads_) {
      read_paused_ = true;
      return true;
    }
    if (max_queued_bytes_ == 0 || queued_bytes_ <= max_queued_bytes_) return false;
    read_paused_ = true;
    if (on_pause_) on_pause_();
    return true;
  }

  void Linger() {
    if (closed_ || lingering_) return;
    lingering_ = true;
    boost::system::error_code ec;
    // With TLS too: the frames are length-delimited, so a TLS close_notify would add
    // nothing but a round trip; the peer sees the TCP end after our last record.
    stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
    linger_timer_.expires_after(linger_);
    auto self = shared_from_this();
    linger_timer_.async_wait([self](const boost::system::error_code& e) {
      if (!e) self->Close();  // the read handler then gets Cancelled
    });
  }

  void Fail(const Status& s) {
    if (failed_) return;
    failed_ = true;
    Close();
    if (handler_) {
      FrameHandler h = std::move(handler_);
      handler_ = nullptr;
      h(s, InFrame{});
    }
  }

  // Completion condition "everything, in as few system calls as the kernel allows".
  // Asio's transfer_all caps each read or writev at 64 KiB, which costs hundreds of
  // system calls per batch (ferry-bench transport: 1.50 GB/s with it, 2.37 without).
  struct AllOfIt {
    size_t operator()(const boost::system::error_code& ec, size_t) const { return ec ? 0 : size_t(1) << 30; }
  };

  // Why a staging area: reading a header, then its body, cost a dispatcher three
  // recv a heartbeat (Asio's speculative read finding nothing, the header, the body).
  // A read into the stage takes a small frame whole: two. (Waiting for readiness with
  // async_wait instead of the speculative read costs Asio an epoll_ctl each time: it
  // measured slower.) A large frame pays a copy of at most kStageBytes. Frames already
  // staged are handled without reading (a peer that sent several at once), each in
  // turn, as long as reads are not held.
  size_t staged() const { return stage_end_ - stage_begin_; }

  void ReadHeader() {
    if (staged() >= wire::kFrameHeaderSize) {
      Result<FrameHeader> h = wire::ParseFrameHeader(stage_ + stage_begin_, limits_);
      if (!h.ok()) return Fail(h.status());
      stage_begin_ += wire::kFrameHeaderSize;
      return ReadBody(*h);
    }
    // What is left of a header to the front; the rest of the stage takes what comes.
    std::memmove(stage_, stage_ + stage_begin_, staged());
    stage_end_ = staged();
    stage_begin_ = 0;
    auto self = shared_from_this();
    stream_.AsyncReadSome(asio::buffer(stage_ + stage_end_, kStageBytes - stage_end_),
                          [self](const boost::system::error_code& ec, size_t n) { self->OnStaged(ec, n); });
  }

  void OnStaged(const boost::system::error_code& ec, size_t n) {
    if (ec) return Fail(FromError(ec));
    if (closed_) return Fail(Status::Cancelled("connection closed"));
    stage_end_ += n;
    ReadHeader();
  }

  // A frame body arriving slower than it is read (a worker decoding as it sends)
  // would wake the reader for every few segments; SO_RCVLOWAT makes the kernel report
  // the socket readable only once a good piece of the rest is there (never more than
  // the rest, or the frame's end would never be reported). Fewer wake-ups of a
  // trainer's thread for the same bytes. Not with TLS: the TLS layer may hold part of
  // the rest already, and the kernel would then wait for bytes that never come. Not
  // for a small rest either (a control frame, a heartbeat): two system calls a frame
  // for nothing; a dispatcher answering 10,000 workers spent a fifth of its system
  // calls' time there.
  struct AllOfItInPieces {
    tcp::socket* socket;
    size_t length;
    bool* raised;  // the watermark was raised: lower it once the body is in
    size_t operator()(const boost::system::error_code& ec, size_t done) const {
      if (ec || done >= length) return 0;
      const size_t rest = length - done;
      if (rest < kMinLowWatermark && !*raised) return size_t(1) << 30;
      boost::system::error_code ignored;
      socket->set_option(asio::socket_base::receive_low_watermark(int(std::min<size_t>(rest, kLowWatermark))),
                         ignored);
      *raised = true;
      return size_t(1) << 30;
    }
  };
  static constexpr size_t kLowWatermark = 1 << 20;
  static constexpr size_t kMinLowWatermark = 64 << 10;

  void ReadBody(FrameHeader h) {
    std::shared_ptr<InBuffer> body = buffers_->Allocate(size_t(h.length));
    if (!body) return Fail(Status::ResourceExhausted("cannot allocate a receive buffer of " + std::to_string(h.length) + " bytes"));
    const size_t have = std::min(staged(), size_t(h.length));
    if (have > 0) std::memcpy(body->data(), stage_ + stage_begin_, have);
    stage_begin_ += have;
    if (have == size_t(h.length)) return OnFrameRead(h, std::move(body));
    auto self = shared_from_this();
    auto done = [self, h, body](const boost::system::error_code& ec, size_t) {
      boost::system::error_code ignored;
      if (!ec && self->lowat_raised_) {
        self->stream_.socket().set_option(asio::socket_base::receive_low_watermark(1), ignored);
        self->lowat_raised_ = false;
      }
      if (ec) return self->Fail(self->FromError(ec));
      self->OnFrameRead(h, body);
    };
    const size_t rest = size_t(h.length) - have;
    const asio::mutable_buffer into(body->data() + have, rest);
    if (stream_.tls()) return stream_.AsyncRead(into, AllOfIt(), std::move(done));
    stream_.AsyncRead(into, AllOfItInPieces{&stream_.socket(), rest, &lowat_raised_}, std::move(done));
  }

  // A whole frame is in: to the handler, then on to the next (unless held or closed).
  void OnFrameRead(FrameHeader h, std::shared_ptr<InBuffer> body) {
    if (handler_ && !lingering_) handler_(Status::OK(), InFrame{h, std::move(body)});
    if (failed_) return;
    // Closed meanwhile (by the handler, or before this completion ran): no read is
    // pending to report it, so report it here.
    if (closed_) return Fail(Status::Cancelled("connection closed"));
    if (PauseForWrites()) return;  // WriteNext() or ResumeReads() reads on
    ReadHeader();
  }

  void WriteNext() {
    if (queue_.empty() || closed_) {
      writing_ = false;
      if (close_after_writes_) Linger();
      return;
    }
    writing_ = true;
    const std::vector<ByteRange>& ranges = queue_.front().frame.ranges();
    buffers_out_.clear();
    for (const ByteRange& r : ranges) buffers_out_.emplace_back(r.data, r.size);
    auto self = shared_from_this();
    stream_.AsyncWrite(buffers_out_, AllOfIt(), [self](const boost::system::error_code& ec, size_t) {
      if (self->closed_) return;
      if (ec) {
        self->writing_ = false;
        return self->Fail(self->FromError(ec));
      }
      Pending done = std::move(self->queue_.front());
      self->queue_.pop_front();
      self->queued_bytes_ -= done.bytes;
      done.frame = OutFrame();  // release the batch memory before the callback runs
      if (done.on_sent) done.on_sent();
      if (self->read_paused_ && !self->closed_ && !self->hold_reads_ &&
          self->queued_bytes_ <= self->max_queued_bytes_ / 2) {
        self->read_paused_ = false;
        self->ReadHeader();
      }
      self->WriteNext();
    });
  }

  Status FromError(const boost::system::error_code& ec) const {
    if (ec == asio::error::eof || ec == asio::ssl::error::stream_truncated)
      return Status::Unavailable("connection closed by " + peer_);
    if (ec == asio::error::operation_aborted) return Status::Cancelled("connection closed");
    // With TLS 1.3 a server that refuses our certificate says so after the handshake.
    if (IsTlsRefusal(ec)) return TlsStatus(ec, peer_, "session");
    return Status::Unavailable("connection to " + peer_ + ": " + ec.message());
  }

  Stream stream_;
  FrameLimits limits_;
  const std::shared_ptr<BufferAllocator> buffers_;
  std::string peer_;
  FrameHandler handler_;
  // Read but not yet handled: stage_[stage_begin_, stage_end_). 1 KiB holds a
  // heartbeat, a lease or a credit frame whole; at 10,000 connections it is 10 MB.
  static constexpr size_t kStageBytes = 1024;
  uint8_t stage_[kStageBytes];
  size_t stage_begin_ = 0;
  size_t stage_end_ = 0;
  std::deque<Pending> queue_;
  size_t queued_bytes_ = 0;
  size_t max_queued_bytes_ = 0;     // SetWriteBound(); 0: none
  std::function<void()> on_pause_;
  bool read_paused_ = false;        // no read pending: the queue is past its bound, or reads are held
  bool hold_reads_ = false;         // HoldReads()
  std::vector<asio::const_buffer> buffers_out_;
  bool writing_ = false;
  bool closed_ = false;
  bool failed_ = false;
  bool lowat_raised_ = false;  // SO_RCVLOWAT above 1 (AllOfItInPieces); the io thread's
  bool close_after_writes_ = false;
  bool lingering_ = false;  // our side is shut down; waiting for the peer's EOF
  bool tls_pending_ = false;  // the TLS handshake has not completed: nothing is written
  std::chrono::milliseconds linger_{0};
  asio::steady_timer linger_timer_;
};

}  // namespace ferry::net

#endif  // FERRY_NET_CONNECTION_H_
