#include "net/tls.h"

#include <openssl/err.h>
#include <openssl/ssl.h>

#include <functional>

namespace ferry::net {

namespace ssl = boost::asio::ssl;

namespace {

Status Load(const std::string& what, const std::string& file, const std::function<void(boost::system::error_code&)>& f) {
  boost::system::error_code ec;
  f(ec);
  if (ec) return Status::InvalidArgument("cannot load " + what + " " + file + ": " + TlsError(ec));
  return Status::OK();
}

std::shared_ptr<TlsContext> NewContext(ssl::context::method method) {
  auto ctx = std::make_shared<TlsContext>(method);
  ctx->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 | ssl::context::no_sslv3 |
                   ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1 | ssl::context::single_dh_use);
  return ctx;
}

Status LoadIdentity(TlsContext& ctx, const TlsFiles& files) {
  FERRY_RETURN_IF_ERROR(Load("--tls-cert", files.cert, [&](auto& ec) { ctx.use_certificate_chain_file(files.cert, ec); }));
  FERRY_RETURN_IF_ERROR(Load("--tls-key", files.key, [&](auto& ec) { ctx.use_private_key_file(files.key, ssl::context::pem, ec); }));
  if (SSL_CTX_check_private_key(ctx.native_handle()) != 1)
    return Status::InvalidArgument("--tls-key " + files.key + " is not the key of --tls-cert " + files.cert);
  return Status::OK();
}

}  // namespace

Result<std::shared_ptr<TlsContext>> ServerTlsContext(const TlsFiles& files) {
  if (files.cert.empty() || files.key.empty())
    return Status::InvalidArgument("TLS: a server needs --tls-cert and --tls-key");
  auto ctx = NewContext(ssl::context::tls_server);
  FERRY_RETURN_IF_ERROR(LoadIdentity(*ctx, files));
  if (!files.ca.empty()) {
    FERRY_RETURN_IF_ERROR(Load("--tls-ca", files.ca, [&](auto& ec) { ctx->load_verify_file(files.ca, ec); }));
    ctx->set_verify_mode(ssl::verify_peer | ssl::verify_fail_if_no_peer_cert);
  }
  return ctx;
}

Result<std::shared_ptr<TlsContext>> ClientTlsContext(const TlsFiles& files) {
  if (files.ca.empty())
    return Status::InvalidArgument("TLS: a client needs --tls-ca (the CA that signed the servers' certificates)");
  if (files.cert.empty() != files.key.empty())
    return Status::InvalidArgument("TLS: give both --tls-cert and --tls-key, or neither");
  auto ctx = NewContext(ssl::context::tls_client);
  FERRY_RETURN_IF_ERROR(Load("--tls-ca", files.ca, [&](auto& ec) { ctx->load_verify_file(files.ca, ec); }));
  ctx->set_verify_mode(ssl::verify_peer);
  if (!files.cert.empty()) FERRY_RETURN_IF_ERROR(LoadIdentity(*ctx, files));
  return ctx;
}

Result<TlsContexts> TlsContextsFor(const TlsFiles& files, bool need_server, bool need_client) {
  TlsContexts out;
  if (!files.enabled()) return out;
  if (need_server) {
    FERRY_ASSIGN_OR_RETURN(out.server, ServerTlsContext(files));
  }
  if (need_client) {
    FERRY_ASSIGN_OR_RETURN(out.client, ClientTlsContext(files));
  }
  return out;
}

bool IsTlsRefusal(const boost::system::error_code& ec) {
  return ec.category() == boost::asio::error::get_ssl_category();
}

Status TlsStatus(const boost::system::error_code& ec, const std::string& peer, const std::string& during,
                 const std::string& verify) {
  std::string why = "TLS " + during + " with " + peer + " failed: " + TlsError(ec);
  if (!verify.empty()) {
    const std::string guess = " (the peer's certificate is not signed by our --tls-ca)";
    if (const size_t at = why.find(guess); at != std::string::npos) why.erase(at, guess.size());
    why += " (" + verify + ")";
  }
  return IsTlsRefusal(ec) ? Status(StatusCode::kUnauthenticated, why) : Status::Unavailable(why);
}

std::string TlsError(const boost::system::error_code& ec) {
  std::string reason = ec.message();
  if (ec.category() == boost::asio::error::get_ssl_category()) {
    const char* r = ERR_reason_error_string(static_cast<unsigned long>(ec.value()));
    if (r != nullptr) reason = r;
  }
  if (reason.find("wrong version number") != std::string::npos || reason.find("packet length too long") != std::string::npos ||
      reason.find("http request") != std::string::npos)
    reason += " (the peer does not speak TLS: set --tls-* on both sides, or on neither)";
  if (ec == ssl::error::stream_truncated || ec == boost::asio::error::eof)
    reason += " (the peer closed the connection: it may have refused our certificate, or not speak TLS)";
  if (reason.find("certificate required") != std::string::npos)
    reason += " (the server requires a client certificate: --tls-cert and --tls-key)";
  if (reason.find("unknown ca") != std::string::npos || reason.find("bad certificate") != std::string::npos)
    reason += " (the peer does not trust our certificate: it is not signed by the peer's --tls-ca)";
  if (reason.find("certificate verify failed") != std::string::npos)
    reason += " (the peer's certificate is not signed by our --tls-ca)";
  return reason;
}

}  // namespace ferry::net
