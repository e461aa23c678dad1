// A loopback server for the transport's tests: accepts connections on 127.0.0.1:0,
// runs the handshake (net/handshake.h) on each, then hands every request frame to a
// callback whose answer (if any) it sends back. Its io thread is its own.
#ifndef FERRY_TESTS_NET_NET_TEST_UTIL_H_
#define FERRY_TESTS_NET_NET_TEST_UTIL_H_

#include <utility>  // before Asio (Boost 1.74, C++20)

#include <atomic>
#include <boost/asio.hpp>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>

#include "net/connection.h"
#include "net/handshake.h"
#include "net/listen.h"

namespace ferry::net::test {

class LoopbackServer {
 public:
  using Handler = std::function<std::optional<wire::OutFrame>(const wire::InFrame&)>;

  // REQUIRES: `handler` is thread-safe (it runs on the server's io thread).
  LoopbackServer(std::string token, Handler handler) : token_(std::move(token)), handler_(std::move(handler)) {
    auto bound = Listen(acceptor_, "127.0.0.1:0");
    address_ = bound.ok() ? *bound : "";
    AcceptLoop(acceptor_, [] { return true; }, [this](boost::asio::ip::tcp::socket s) { OnSocket(std::move(s)); });
    thread_ = std::thread([this] { io_.run(); });
  }
  ~LoopbackServer() {
    boost::asio::post(io_, [this] {
      boost::system::error_code ec;
      acceptor_.close(ec);
      for (auto& c : conns_) c->Close();
      conns_.clear();
    });
    work_.reset();
    thread_.join();
  }

  const std::string& address() const { return address_; }
  int connections() const { return connections_.load(); }

 private:
  void OnSocket(boost::asio::ip::tcp::socket socket) {
    ++connections_;
    auto conn = std::make_shared<FrameConnection>(std::move(socket), wire::FrameLimits{}, DefaultBufferAllocator());
    conns_.insert(conn);
    auto hs = std::make_shared<ServerHandshake>(token_, "loopback", "this server",
                                                std::initializer_list<wire::Role>{wire::Role::kClient, wire::Role::kWorker});
    conn->Send(hs->Challenge());
    auto authenticated = std::make_shared<bool>(false);
    std::weak_ptr<FrameConnection> weak = conn;
    conn->StartReading([this, weak, hs, authenticated](const Status& s, wire::InFrame f) {
      auto c = weak.lock();
      if (!c || !s.ok()) return;
      if (!*authenticated) {
        auto accepted = hs->OnHello(f);
        if (!accepted.ok()) {
          c->Send(wire::EncodeError(accepted.status()));
          c->CloseAfterWrites();
          return;
        }
        *authenticated = true;
        c->Send(std::move(accepted->reply));
        return;
      }
      std::optional<wire::OutFrame> reply = handler_(f);
      if (!reply) return;
      const bool error = reply->type() == wire::MessageType::kError;
      c->Send(std::move(*reply));
      if (error) c->CloseAfterWrites();
    });
  }

  const std::string token_;
  const Handler handler_;
  boost::asio::io_context io_;
  std::optional<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> work_{io_.get_executor()};
  boost::asio::ip::tcp::acceptor acceptor_{io_};
  std::string address_;
  std::set<std::shared_ptr<FrameConnection>> conns_;  // io thread
  std::atomic<int> connections_{0};
  std::thread thread_;
};

}  // namespace ferry::net::test

#endif  // FERRY_TESTS_NET_NET_TEST_UTIL_H_
