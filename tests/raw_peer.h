// A raw peer: Ferry's protocol by hand over a blocking POSIX socket, for tests where a
// peer must misbehave in ways the Client never would (worker_service_test, and the
// real-process failure tests).
#ifndef FERRY_TESTS_RAW_PEER_H_
#define FERRY_TESTS_RAW_PEER_H_

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <optional>
#include <string>

#include "ferry/buffer.h"
#include "net/address.h"
#include "net/auth.h"
#include "wire/codec.h"
#include "wire/control.h"

namespace ferry::testing {

using wire::InFrame;
using wire::MessageType;
using wire::OutFrame;


class RawPeer {
 public:
  explicit RawPeer(const std::string& address) {
    auto hp = net::SplitHostPort(address);
    EXPECT_TRUE(hp.ok());
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(hp->second);
    ::inet_pton(AF_INET, hp->first.c_str(), &a.sin_addr);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    EXPECT_TRUE(connected_) << "connect " << address << ": " << std::strerror(errno);
  }
  ~RawPeer() {
    if (fd_ >= 0) ::close(fd_);
  }
  RawPeer(const RawPeer&) = delete;
  RawPeer& operator=(const RawPeer&) = delete;

  bool connected() const { return connected_; }

  // False once the peer is gone (EPIPE, ECONNRESET): hostile bytes may meet a closed
  // socket, which is what the tests want anyway.
  int fd() const { return fd_; }
  bool Send(const std::string& bytes) {
    size_t off = 0;
    while (off < bytes.size()) {
      const ssize_t n = ::send(fd_, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return false;
      off += size_t(n);
    }
    return true;
  }
  bool Send(const OutFrame& f) { return Send(Flatten(f)); }

  static std::string Flatten(const OutFrame& f) {
    std::string out;
    for (const wire::ByteRange& r : f.ranges()) out.append(static_cast<const char*>(r.data), r.size);
    return out;
  }

  // The next frame, or an error on timeout, EOF or a bad header.
  Result<InFrame> ReadFrame(double timeout_s = 10) {
    uint8_t header[wire::kFrameHeaderSize];
    FERRY_RETURN_IF_ERROR(ReadExactly(header, sizeof header, timeout_s));
    wire::FrameLimits limits;
    FERRY_ASSIGN_OR_RETURN(wire::FrameHeader h, wire::ParseFrameHeader(header, limits));
    InFrame f;
    f.header = h;
    f.body = DefaultBufferAllocator()->Allocate(size_t(h.length));
    FERRY_RETURN_IF_ERROR(ReadExactly(f.body->data(), size_t(h.length), timeout_s));
    return f;
  }

  // Reads the next frame, expecting `type`.
  Result<InFrame> Expect(MessageType type, double timeout_s = 10) {
    FERRY_ASSIGN_OR_RETURN(InFrame f, ReadFrame(timeout_s));
    if (f.header.type != type) {
      std::string what =
          std::string("expected ") + MessageTypeName(type) + ", got " + MessageTypeName(f.header.type);
      if (f.header.type == MessageType::kError) {
        auto e = wire::DecodeError(f);
        if (e.ok()) what += ": " + e->status.ToString();
      }
      return Status::Internal(what);
    }
    return f;
  }

  // Reads and drops whatever comes until the worker closes the connection (EOF or
  // reset): true, or false if it is still open after `timeout_s`.
  bool WaitClosed(double timeout_s = 5) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    char buf[65536];
    for (;;) {
      const int left = int(
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now())
              .count());
      if (left <= 0) return false;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, left) <= 0) continue;
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n == 0) return true;
      if (n < 0) return errno == ECONNRESET || errno == EPIPE;
    }
  }

  // Challenge -> Hello -> HelloOk.
  Status Handshake(const std::string& token = "", std::optional<wire::Role> role = std::nullopt) {
    FERRY_ASSIGN_OR_RETURN(InFrame f, Expect(MessageType::kChallenge));
    FERRY_ASSIGN_OR_RETURN(wire::ChallengeMsg ch, wire::DecodeChallenge(f));
    wire::HelloMsg h;
    h.peer_id = "raw-peer";
    if (role) h.role = *role;
    if (ch.auth_required) {
      h.nonce = net::RandomNonce();
      h.mac = net::ClientProof(token, uint8_t(h.role), ch.nonce, h.nonce);
    }
    Send(wire::EncodeHello(h));
    FERRY_ASSIGN_OR_RETURN(InFrame ok, Expect(MessageType::kHelloOk));
    FERRY_ASSIGN_OR_RETURN(wire::HelloOkMsg hello_ok, wire::DecodeHelloOk(ok));
    if (ch.auth_required && !net::MacEquals(hello_ok.mac, net::ServerProof(token, ch.nonce, h.nonce)))
      return Status(StatusCode::kUnauthenticated, "the server's proof is wrong");
    return Status::OK();
  }

  // Closes with a reset (SO_LINGER 0), as a killed process's kernel might.
  void Abort() {
    linger l{1, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_LINGER, &l, sizeof l);
    ::close(fd_);
    fd_ = -1;
  }

 private:
  Status ReadExactly(uint8_t* out, size_t n, double timeout_s) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    size_t off = 0;
    while (off < n) {
      const int left = int(
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now())
              .count());
      if (left <= 0) return Status::Unavailable("timed out reading");
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, left) <= 0) continue;
      const ssize_t r = ::recv(fd_, out + off, n - off, 0);
      if (r == 0) return Status::Unavailable("EOF");
      if (r < 0) return Status::Unavailable(std::string("recv: ") + std::strerror(errno));
      off += size_t(r);
    }
    return Status::OK();
  }

  int fd_ = -1;
  bool connected_ = false;
};

// A frame header with arbitrary fields (for hostile input).
inline std::string RawHeader(const char magic[4], uint16_t version, uint16_t type, uint64_t length) {
  std::string h(wire::kFrameHeaderSize, '\0');
  std::memcpy(h.data(), magic, 4);
  h[4] = char(version & 0xFF);
  h[5] = char(version >> 8);
  h[6] = char(type & 0xFF);
  h[7] = char(type >> 8);
  for (int i = 0; i < 8; ++i) h[8 + size_t(i)] = char((length >> (8 * i)) & 0xFF);
  return h;
}

}  // namespace ferry::testing

#endif  // FERRY_TESTS_RAW_PEER_H_
