// --metrics HOST:PORT on the daemons: GET /metrics (Prometheus text), /healthz (the
// process answers) and /readyz (ready to serve: 503 otherwise), for Prometheus and
// Kubernetes probes (net/http_server.h).
#ifndef FERRY_SERVER_METRICS_HTTP_H_
#define FERRY_SERVER_METRICS_HTTP_H_

#include <functional>
#include <memory>
#include <string>

#include "core/log.h"
#include "net/http_server.h"

namespace ferry {

inline Result<std::unique_ptr<net::HttpServer>> StartMetrics(const std::string& listen,
                                                             std::function<std::string()> metrics,
                                                             std::function<bool()> ready) {
  std::map<std::string, net::HttpServer::Handler> routes;
  routes["/metrics"] = [metrics] {
    return net::HttpResponse{200, "text/plain; version=0.0.4; charset=utf-8", metrics()};
  };
  routes["/healthz"] = [] { return net::HttpResponse{200, "text/plain; charset=utf-8", "ok\n"}; };
  routes["/readyz"] = [ready] {
    return ready() ? net::HttpResponse{200, "text/plain; charset=utf-8", "ready\n"}
                   : net::HttpResponse{503, "text/plain; charset=utf-8", "not ready\n"};
  };
  auto server = net::HttpServer::Start(listen, std::move(routes));
  if (server.ok()) Log("metrics on http://%s/metrics (and /healthz, /readyz)", (*server)->address().c_str());
  return server;
}

}  // namespace ferry

#endif  // FERRY_SERVER_METRICS_HTTP_H_
