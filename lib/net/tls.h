// Optional TLS on every Ferry connection (Asio's SSL over OpenSSL), under the
// token handshake (handshake.h), which runs inside it unchanged.
//
// Files are PEM. A server (worker, dispatcher) needs a certificate and its key; with a
// CA as well, it requires each peer to present a certificate that CA signed (mutual
// TLS). A client (trainer, or a worker towards its dispatcher) needs the CA, against
// which it verifies the server's certificate; with a certificate and key as well, it
// presents them. Host names are not checked: workers are reached at the addresses
// they advertise (pod IPs), so a certificate proves membership of the cluster (a CA of
// its own), not a name. TLS 1.2 at least.
//
// Stream: a TCP socket, plain or inside TLS, behind one interface for FrameConnection
// and ControlChannel.
#ifndef FERRY_NET_TLS_H_
#define FERRY_NET_TLS_H_

#include <utility>  // before Asio: Boost 1.74 uses std::exchange without it in C++20

#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <memory>
#include <optional>
#include <string>

#include "ferry/status.h"

namespace ferry::net {

struct TlsFiles {
  std::string cert, key, ca;  // PEM file paths
  bool enabled() const { return !cert.empty() || !key.empty() || !ca.empty(); }
};

using TlsContext = boost::asio::ssl::context;

// A server's context. InvalidArgument (naming the file and OpenSSL's reason) if a file
// is missing or unreadable, or the key does not match the certificate.
Result<std::shared_ptr<TlsContext>> ServerTlsContext(const TlsFiles& files);
// A client's context: the CA is required (a client that verified nothing would gain
// nothing from TLS but cost).
Result<std::shared_ptr<TlsContext>> ClientTlsContext(const TlsFiles& files);
// Both from one set of flags (a worker serves clients and is a client of its
// dispatcher); null when `files` is empty.
struct TlsContexts {
  std::shared_ptr<TlsContext> server, client;
};
Result<TlsContexts> TlsContextsFor(const TlsFiles& files, bool need_server, bool need_client);

// Why a TLS handshake failed, from its error: OpenSSL's reason, with a hint for the
// usual causes ("wrong version number": the peer does not speak TLS).
std::string TlsError(const boost::system::error_code& ec);
// Whether an error is a TLS refusal (OpenSSL's: a certificate not trusted or missing,
// a peer that does not speak TLS), which does not go away by retrying, rather than
// the network's. A connection that ends without TLS's close_notify (a peer killed,
// or closing after its last frame) is the network's: Ferry's frames are
// length-delimited, so a truncation cannot pass for data.
bool IsTlsRefusal(const boost::system::error_code& ec);
// The Status for a failed TLS read, write or handshake with `peer`: Unauthenticated
// for a refusal (with OpenSSL's reason), else Unavailable.
// `verify`: why the peer's certificate was refused, when it is known (Stream::
// HostMismatch()): it replaces the guess that "certificate verify failed" makes.
Status TlsStatus(const boost::system::error_code& ec, const std::string& peer, const std::string& during,
                 const std::string& verify = "");

class Stream {
 public:
  using tcp = boost::asio::ip::tcp;
  using TlsStream = boost::asio::ssl::stream<tcp::socket>;

  // Plain when `tls` is null.
  Stream(tcp::socket socket, const std::shared_ptr<TlsContext>& tls) : tls_context_(tls) {
    if (tls) {
      tls_ = std::make_unique<TlsStream>(std::move(socket), *tls);
    } else {
      plain_.emplace(std::move(socket));
    }
  }

  bool tls() const { return tls_ != nullptr; }

  // Client side, before the handshake: the server's certificate must name `host`, the
  // host part of the address dialled (an IP address in its IP SANs, or a DNS name in
  // its DNS SANs or CN, by OpenSSL's own checks); a DNS name also goes out as SNI. A
  // CA's signature alone is not enough: any machine the CA signed for could stand in
  // for another.
  void ExpectPeerHost(const std::string& host) {
    if (!tls_ || host.empty()) return;
    SSL* ssl = tls_->native_handle();
    boost::system::error_code ec;
    boost::asio::ip::make_address(host, ec);
    if (!ec) {
      X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), host.c_str());
    } else {
      SSL_set1_host(ssl, host.c_str());
      SSL_set_tlsext_host_name(ssl, host.c_str());
    }
  }
  // After a failed handshake: why the peer's certificate was refused when it is that it
  // does not name the host dialled (ExpectPeerHost), else "".
  std::string HostMismatch() const {
    if (!tls_) return "";
    const long r = SSL_get_verify_result(const_cast<TlsStream&>(*tls_).native_handle());
    if (r != X509_V_ERR_HOSTNAME_MISMATCH && r != X509_V_ERR_IP_ADDRESS_MISMATCH) return "";
    return std::string(X509_verify_cert_error_string(r)) +
           ": the peer's certificate does not name the host dialled, though our --tls-ca signed it";
  }
  tcp::socket& socket() { return tls_ ? tls_->next_layer() : *plain_; }
  const tcp::socket& socket() const { return tls_ ? tls_->next_layer() : *plain_; }

  // The TLS handshake (nothing to do when plain: `handler` runs at once).
  template <typename Handler>
  void AsyncHandshake(bool server, Handler&& handler) {
    if (!tls_) return handler(boost::system::error_code());
    tls_->async_handshake(server ? TlsStream::server : TlsStream::client, std::forward<Handler>(handler));
  }
  template <typename Buffers, typename Condition, typename Handler>
  void AsyncRead(const Buffers& buffers, Condition condition, Handler&& handler) {
    if (tls_) return boost::asio::async_read(*tls_, buffers, condition, std::forward<Handler>(handler));
    boost::asio::async_read(*plain_, buffers, condition, std::forward<Handler>(handler));
  }
  template <typename Buffers, typename Handler>
  void AsyncRead(const Buffers& buffers, Handler&& handler) {
    AsyncRead(buffers, boost::asio::transfer_all(), std::forward<Handler>(handler));
  }
  // Whatever is there, at least one byte (into a staging buffer).
  template <typename Buffers, typename Handler>
  void AsyncReadSome(const Buffers& buffers, Handler&& handler) {
    if (tls_) return tls_->async_read_some(buffers, std::forward<Handler>(handler));
    plain_->async_read_some(buffers, std::forward<Handler>(handler));
  }
  template <typename Buffers, typename Condition, typename Handler>
  void AsyncWrite(const Buffers& buffers, Condition condition, Handler&& handler) {
    if (tls_) return boost::asio::async_write(*tls_, buffers, condition, std::forward<Handler>(handler));
    boost::asio::async_write(*plain_, buffers, condition, std::forward<Handler>(handler));
  }
  template <typename Buffers, typename Handler>
  void AsyncWrite(const Buffers& buffers, Handler&& handler) {
    AsyncWrite(buffers, boost::asio::transfer_all(), std::forward<Handler>(handler));
  }

 private:
  std::shared_ptr<TlsContext> tls_context_;  // outlives tls_
  std::unique_ptr<TlsStream> tls_;
  std::optional<tcp::socket> plain_;
};

}  // namespace ferry::net

#endif  // FERRY_NET_TLS_H_
