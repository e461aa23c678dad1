// DispatcherService: ferry-dispatcher's transport adapter. It accepts connections,
// runs the handshake (net/handshake.h), decodes each request, calls the dispatcher's
// logic (lib/dispatch/dispatcher.h), and encodes the reply, as tf.data's
// grpc_dispatcher_impl does. It decides nothing itself. No sample bytes pass
// through it.
//
// Replies that depend on a journaled change wait for the journal's sync (group
// commit: the requests of one burst share one fdatasync).
//
// Threading: one io thread owns the dispatcher (its state, decisions and journal), the
// listening socket and the ticks; the connections (reads, writes, TLS, handshakes) are
// spread over `io_threads` more, which hand each request to the io thread and write
// its reply. Listing a new job's dataset runs on a helper thread and comes back to the
// io thread.
#ifndef FERRY_SERVER_DISPATCHER_SERVICE_H_
#define FERRY_SERVER_DISPATCHER_SERVICE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "dispatch/dispatcher.h"
#include "ferry/status.h"
#include "net/tls.h"
#include "wire/frame.h"

namespace ferry {

struct DispatcherOptions {
  std::string listen = "127.0.0.1:0";
  std::string token;                 // shared secret; empty = no authentication
  // TLS (net/tls.h): the certificate and key served, and the CA that peers'
  // certificates must be signed by (mutual TLS). All empty: plain TCP.
  net::TlsFiles tls;
  wire::FrameLimits limits;          // after the handshake (before it: wire::PreAuthLimits)
  double handshake_timeout_s = 10;   // time allowed for Hello
  int max_connections = 4096;        // open connections at most; more are closed at accept
  int max_handshaking = 128;         // connections before Hello; past it the oldest is closed
  std::string id = "ferry-dispatcher";
  dispatch::DispatcherConfig core;   // work dir, heartbeats, leases, idle exit, journal
  // Called once, on the io thread, when the journal can no longer be made durable (a
  // failed fdatasync: dispatch::Journal): the service has closed every connection and
  // stopped listening; the process should exit so that a restart recovers from the
  // disk. ferry-dispatcher exits 1.
  std::function<void(const Status&)> on_fatal;
  // Folders the dispatcher may list a new job's dataset in (data/data_roots.h), as
  // the workers' --data-root; empty: any readable path.
  std::vector<std::string> data_roots = {};
  // Workers prove this token instead of `token` (empty: the same): a trainer's token
  // then cannot register a worker and serve batches of its choosing.
  std::string worker_token = {};
  // Threads for the connections besides the io thread (-1: one per core past the
  // first, 1 to 4; 0: the io thread serves the connections too, as before 2026-11).
  int io_threads = -1;
};

class DispatcherService {
 public:
  static Result<std::unique_ptr<DispatcherService>> Start(const DispatcherOptions& options);
  ~DispatcherService();

  std::string address() const;
  // With core.exit_when_idle: blocks until the dispatcher may exit (every job
  // finished) and returns true, or until StopWaiting() and returns false. Join a thread
  // that waits here before destroying the service.
  bool WaitIdle();
  void StopWaiting();

  struct Stats {
    int64_t requests = 0;
    dispatch::Dispatcher::Stats core;
  };
  Stats stats() const;

  // For --metrics (thread-safe; each asks the io thread, within 2 s): the metrics in
  // Prometheus text, and whether the dispatcher is ready (its journal can be written).
  std::string MetricsText() const;
  bool Ready() const;

  class Impl;

 private:
  explicit DispatcherService(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ferry

#endif  // FERRY_SERVER_DISPATCHER_SERVICE_H_
