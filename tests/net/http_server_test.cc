// The daemons' HTTP side door (lib/net/http_server.h): routes, methods, limits, many
// scrapers at once (TSan runs this), and the Prometheus text it serves.
#include "net/http_server.h"

#include <gtest/gtest.h>

#include <utility>  // before Asio (Boost 1.74, C++20)

#include <atomic>
#include <boost/asio.hpp>
#include <string>
#include <thread>
#include <vector>

namespace ferry::net {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

// Sends `request` raw and returns everything the server sent before closing.
std::string Exchange(const std::string& address, const std::string& request) {
  asio::io_context io;
  tcp::socket s(io);
  const auto colon = address.rfind(':');
  s.connect(tcp::endpoint(asio::ip::make_address(address.substr(0, colon)),
                          uint16_t(std::stoi(address.substr(colon + 1)))));
  asio::write(s, asio::buffer(request));
  std::string out;
  boost::system::error_code ec;
  char buf[4096];
  for (;;) {
    const size_t n = s.read_some(asio::buffer(buf), ec);
    out.append(buf, n);
    if (ec) break;
  }
  return out;
}

std::string Get(const std::string& address, const std::string& path, const std::string& method = "GET") {
  return Exchange(address, method + " " + path + " HTTP/1.1\r\nHost: x\r\n\r\n");
}

TEST(HttpServerTest, RoutesMethodsAndLimits) {
  std::atomic<int> calls{0};
  auto server = HttpServer::Start("127.0.0.1:0", {{"/metrics", [&] {
                                                      ++calls;
                                                      return HttpResponse{200, "text/plain", "x 1\n"};
                                                    }},
                                                   {"/readyz", [] { return HttpResponse{503, "text/plain", "no\n"}; }},
                                                   {"/boom", []() -> HttpResponse { throw std::runtime_error("bad"); }}});
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  const std::string a = (*server)->address();
  std::string r = Get(a, "/metrics");
  EXPECT_EQ(r.rfind("HTTP/1.1 200", 0), 0u) << r;
  EXPECT_NE(r.find("\r\n\r\nx 1\n"), std::string::npos) << r;
  EXPECT_EQ(Get(a, "/metrics?x=1").rfind("HTTP/1.1 200", 0), 0u) << "a query string is ignored";
  EXPECT_EQ(Get(a, "/readyz").rfind("HTTP/1.1 503", 0), 0u);
  EXPECT_EQ(Get(a, "/nope").rfind("HTTP/1.1 404", 0), 0u);
  EXPECT_EQ(Get(a, "/metrics", "POST").rfind("HTTP/1.1 405", 0), 0u);
  EXPECT_EQ(Get(a, "/boom").rfind("HTTP/1.1 500", 0), 0u) << "a handler's exception is a 500, not a crash";
  r = Get(a, "/metrics", "HEAD");
  EXPECT_EQ(r.rfind("HTTP/1.1 200", 0), 0u);
  EXPECT_EQ(r.find("x 1"), std::string::npos) << "HEAD has no body";
  // 16 KiB of headers: refused (closed) without a handler call.
  const int before = calls.load();
  r = Exchange(a, "GET /metrics HTTP/1.1\r\nX-Big: " + std::string(16 << 10, 'a') + "\r\n\r\n");
  EXPECT_EQ(r.find("x 1"), std::string::npos);
  EXPECT_EQ(calls.load(), before);
  // Garbage: closed, and the server goes on.
  Exchange(a, "\x01\x02\x03 not http\r\n\r\n");
  // Scrapers at once.
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 20; ++i) ok += Get(a, "/metrics").rfind("HTTP/1.1 200", 0) == 0 ? 1 : 0;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok.load(), 160);
}

TEST(HttpServerTest, PrometheusTextEscapesAndFormats) {
  PromText t;
  t.Family("ferry_x_total", "counter", "Line one\nwith a \\ backslash.");
  t.Sample("ferry_x_total", {}, 3);
  t.Sample("ferry_x_total", {{"job", "a \"quoted\"\nname\\"}, {"b", "c"}}, 2.5);
  t.One("ferry_y", "gauge", "Y.", 1e20);
  EXPECT_EQ(t.str(),
            "# HELP ferry_x_total Line one\\nwith a \\\\ backslash.\n"
            "# TYPE ferry_x_total counter\n"
            "ferry_x_total 3\n"
            "ferry_x_total{b=\"c\",job=\"a \\\"quoted\\\"\\nname\\\\\"} 2.5\n"
            "# HELP ferry_y Y.\n"
            "# TYPE ferry_y gauge\n"
            "ferry_y 1e+20\n");
}

TEST(HttpServerTest, HistogramBucketsAreCumulativeWithSumAndCount) {
  Histogram h;
  h.Observe(10e-6);  // first bucket (le 2.5e-05)
  h.Observe(25e-6);  // on a bound: that bucket
  h.Observe(1e-3);   // le 0.0016
  h.Observe(100);    // past the last bound: +Inf only
  const Histogram::Snapshot s = h.Read();
  EXPECT_EQ(s.count, 4u);
  EXPECT_NEAR(s.sum, 100.001035, 1e-6);
  EXPECT_EQ(s.counts[0], 2u);
  EXPECT_EQ(s.counts[Histogram::kBuckets], 1u);
  PromText t;
  t.Family("ferry_s_seconds", "histogram", "S.");
  t.HistogramSamples("ferry_s_seconds", {{"stage", "read"}}, s);
  const std::string& x = t.str();
  EXPECT_NE(x.find("ferry_s_seconds_bucket{le=\"2.5e-05\",stage=\"read\"} 2\n"), std::string::npos) << x;
  EXPECT_NE(x.find("ferry_s_seconds_bucket{le=\"0.0008\",stage=\"read\"} 2\n"), std::string::npos) << x;
  EXPECT_NE(x.find("ferry_s_seconds_bucket{le=\"0.0016\",stage=\"read\"} 3\n"), std::string::npos) << x;
  EXPECT_NE(x.find("ferry_s_seconds_bucket{le=\"+Inf\",stage=\"read\"} 4\n"), std::string::npos) << x;
  EXPECT_NE(x.find("ferry_s_seconds_count{stage=\"read\"} 4\n"), std::string::npos) << x;
  EXPECT_NE(x.find("ferry_s_seconds_sum{stage=\"read\"} 100.001035\n"), std::string::npos) << x;
}

}  // namespace
}  // namespace ferry::net
