#include "net/http_server.h"

#include <utility>  // before Asio (Boost 1.74, C++20)

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <deque>
#include <memory>
#include <optional>
#include <thread>

#include "net/listen.h"
#include "net/run_io.h"

namespace ferry::net {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

// Named, not anonymous: HttpServer::Impl holds these connections, and a class with
// external linkage should not hold a type only one file can name (GCC warns when the
// file is compiled inside another unit, as the unity builds do).
namespace http_server_internal {

// At most this many connections at once; when full, the oldest one still waiting for
// its request is closed to make room, so idle or slow sockets (a scanner, a stuck
// client, an attack) cannot lock Kubernetes' probes out and get a healthy daemon
// restarted in a loop. A probe sends its request at once: a second is plenty.
constexpr int kMaxConnections = 64;
constexpr auto kRequestTimeout = std::chrono::seconds(1);

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(tcp::socket socket, const std::map<std::string, HttpServer::Handler>* routes, std::atomic<int>* open)
      : stream_(std::move(socket)), routes_(routes), open_(open) {
    ++*open_;
  }
  ~Connection() { --*open_; }

  // Whether it still waits for its request (closing it loses no answer).
  bool reading() const { return reading_; }
  void Abort() {
    if (reading_) Close();
  }

  void Start() {
    parser_.emplace();
    parser_->header_limit(8 * 1024);
    parser_->body_limit(0);
    stream_.expires_after(kRequestTimeout);
    auto self = shared_from_this();
    http::async_read(stream_, buffer_, *parser_, [self](beast::error_code ec, size_t) { self->OnRead(ec); });
  }

 private:
  void OnRead(beast::error_code ec) {
    reading_ = false;
    if (ec) return Close();
    const auto& req = parser_->get();
    HttpResponse r;
    if (req.method() != http::verb::get && req.method() != http::verb::head) {
      r = {405, "text/plain; charset=utf-8", "GET only\n"};
    } else {
      std::string path(req.target());
      if (auto q = path.find('?'); q != std::string::npos) path.resize(q);
      auto it = routes_->find(path);
      if (it == routes_->end()) {
        r = {404, "text/plain; charset=utf-8", "not found; try /metrics, /healthz or /readyz\n"};
      } else {
        try {
          r = it->second();
        } catch (const std::exception& e) {
          r = {500, "text/plain; charset=utf-8", std::string("error: ") + e.what() + "\n"};
        }
      }
    }
    res_.result(http::int_to_status(unsigned(r.status)));
    res_.version(req.version());
    res_.set(http::field::server, "ferry");
    res_.set(http::field::content_type, r.content_type);
    res_.keep_alive(false);
    res_.body() = req.method() == http::verb::head ? std::string() : std::move(r.body);
    res_.prepare_payload();
    if (req.method() == http::verb::head) res_.content_length(r.body.size());
    auto self = shared_from_this();
    http::async_write(stream_, res_, [self](beast::error_code, size_t) { self->Close(); });
  }

  void Close() {
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
    stream_.close();
  }

  beast::tcp_stream stream_;
  beast::flat_buffer buffer_{8 * 1024};
  std::optional<http::request_parser<http::empty_body>> parser_;
  http::response<http::string_body> res_;
  const std::map<std::string, HttpServer::Handler>* routes_;
  std::atomic<int>* open_;
  bool reading_ = true;  // io thread only
};

}  // namespace http_server_internal

using http_server_internal::Connection;
using http_server_internal::kMaxConnections;

class HttpServer::Impl {
 public:
  explicit Impl(std::map<std::string, Handler> routes) : routes_(std::move(routes)), acceptor_(io_) {}

  Status Start(const std::string& listen) {
    FERRY_ASSIGN_OR_RETURN(address_, Listen(acceptor_, listen));
    Accept();
    thread_ = std::thread([this] { RunIo(io_, "metrics"); });
    return Status::OK();
  }

  ~Impl() {
    asio::post(io_, [this] {
      beast::error_code ec;
      acceptor_.close(ec);
    });
    work_.reset();
    io_.stop();
    if (thread_.joinable()) thread_.join();
  }

  void Accept() {
    acceptor_.async_accept([this](beast::error_code ec, tcp::socket socket) {
      if (ec == asio::error::operation_aborted || !acceptor_.is_open()) return;
      if (!ec) {
        // Full: the oldest connection still waiting for its request makes room.
        while (open_.load() >= kMaxConnections && !waiting_.empty()) {
          std::shared_ptr<Connection> oldest = waiting_.front().lock();
          waiting_.pop_front();
          if (oldest && oldest->reading()) {
            oldest->Abort();
            break;
          }
        }
        auto c = std::make_shared<Connection>(std::move(socket), &routes_, &open_);
        c->Start();
        while (!waiting_.empty() && waiting_.front().expired()) waiting_.pop_front();
        waiting_.push_back(c);
      }
      Accept();
    });
  }

  // Connections refer to routes_ and open_: both outlive io_, whose destruction
  // destroys the handlers still pending.
  const std::map<std::string, Handler> routes_;
  std::atomic<int> open_{0};
  std::deque<std::weak_ptr<Connection>> waiting_;  // io thread only: by accept time
  asio::io_context io_;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work_{asio::make_work_guard(io_)};
  tcp::acceptor acceptor_;
  std::string address_;
  std::thread thread_;
};

Result<std::unique_ptr<HttpServer>> HttpServer::Start(const std::string& listen,
                                                      std::map<std::string, Handler> routes) {
  auto impl = std::make_unique<Impl>(std::move(routes));
  FERRY_RETURN_IF_ERROR(impl->Start(listen));
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(impl)));
}

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
HttpServer::~HttpServer() = default;
std::string HttpServer::address() const { return impl_->address_; }

// --- PromText -----------------------------------------------------------------------

namespace {

// Label values escape \, " and newline; HELP text escapes \ and newline.
std::string Escape(const std::string& s, bool quote) {
  std::string out;
  for (char c : s) {
    if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else if (c == '"' && quote) out += "\\\"";
    else out += c;
  }
  return out;
}

std::string Number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[64];
  if (v == std::floor(v) && std::fabs(v) < 1e15) std::snprintf(buf, sizeof buf, "%.0f", v);
  else std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

}  // namespace

void PromText::Family(const std::string& name, const std::string& type, const std::string& help) {
  out_ += "# HELP " + name + " " + Escape(help, false) + "\n# TYPE " + name + " " + type + "\n";
}

void PromText::Sample(const std::string& name, const std::map<std::string, std::string>& labels, double value) {
  out_ += name;
  if (!labels.empty()) {
    out_ += '{';
    bool first = true;
    for (const auto& [k, v] : labels) {
      if (!first) out_ += ',';
      first = false;
      out_ += k + "=\"" + Escape(v, true) + "\"";
    }
    out_ += '}';
  }
  out_ += ' ' + Number(value) + '\n';
}

void PromText::HistogramSamples(const std::string& name, std::map<std::string, std::string> labels,
                                const Histogram::Snapshot& h) {
  uint64_t cumulative = 0;
  for (size_t i = 0; i < h.counts.size(); ++i) {
    cumulative += h.counts[i];
    labels["le"] = i < h.bounds.size() ? Number(h.bounds[i]) : "+Inf";
    Sample(name + "_bucket", labels, double(cumulative));
  }
  labels.erase("le");
  Sample(name + "_sum", labels, h.sum);
  Sample(name + "_count", labels, double(cumulative));
}

}  // namespace ferry::net
