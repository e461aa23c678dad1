// HttpServer: the daemons' small HTTP side door for operators (--metrics HOST:PORT):
// GET /metrics (Prometheus text exposition), /healthz (alive) and /readyz (ready to
// serve). Boost.Beast on a thread of its own, so that a slow scraper never delays the
// data or control plane; handlers must be thread-safe.
//
// Bounded like the daemons' other listeners: 8 KiB of request headers, no body, 5 s
// per request, 64 connections at once, one request per connection.
#ifndef FERRY_NET_HTTP_SERVER_H_
#define FERRY_NET_HTTP_SERVER_H_

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "core/histogram.h"
#include "ferry/status.h"

namespace ferry::net {

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

class HttpServer {
 public:
  using Handler = std::function<HttpResponse()>;
  // Listens on `listen` (HOST:PORT; port 0 picks one) and serves `routes` (exact
  // paths, GET and HEAD); any other path is 404, any other method 405.
  static Result<std::unique_ptr<HttpServer>> Start(const std::string& listen, std::map<std::string, Handler> routes);
  ~HttpServer();  // stops accepting, closes connections, joins the thread

  std::string address() const;

  class Impl;

 private:
  explicit HttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Prometheus text exposition (version 0.0.4), written one family at a time:
//   PromText t;
//   t.Family("ferry_batches_sent_total", "counter", "Batches sent to clients.");
//   t.Sample("ferry_batches_sent_total", {}, 42);
//   t.Sample("ferry_job_consumers", {{"job", "run7"}}, 2);
class PromText {
 public:
  void Family(const std::string& name, const std::string& type, const std::string& help);
  void Sample(const std::string& name, const std::map<std::string, std::string>& labels, double value);
  // A family with one unlabelled sample.
  void One(const std::string& name, const std::string& type, const std::string& help, double value) {
    Family(name, type, help);
    Sample(name, {}, value);
  }
  // One histogram's samples (_bucket with cumulative counts and `le`, _sum, _count)
  // under `labels`; call Family(name, "histogram", help) once before.
  void HistogramSamples(const std::string& name, std::map<std::string, std::string> labels,
                        const Histogram::Snapshot& h);
  const std::string& str() const { return out_; }

 private:
  std::string out_;
};

}  // namespace ferry::net

#endif  // FERRY_NET_HTTP_SERVER_H_
