// WorkerService: ferry-worker's transport adapter over lib/worker. It accepts client
// connections, runs TLS and the token handshake (net/handshake.h), and hands each
// connection's stream (worker/stream.h) its OpenStream, its credits, a drain and its
// end; the stream takes its decisions from the worker's core (worker/worker_core.h:
// admission, --max-memory, the dataset cache, the drain policy) and sends through the
// session. Its producers run on the worker's shared TBB arena. In dispatcher mode its
// DispatcherLink (lib/worker) leases the splits. What the service keeps: the io
// thread, the listener and connection limits, timers, the thread that retires
// producers, the drain thread, and /metrics (worker/worker_metrics.h renders it).
//
// Per connection (all on the io thread, see net/connection.h):
//   accept -> Challenge -> Hello -> HelloOk
//   -> OpenStream (inline job, or a dispatcher job by name) -> Batch... with
//      EndOfEpoch after each epoch of an inline job
//   -> (client closes) or Error + close.
// Memory per stream is bounded: at most `buffered_batches` batch buffers exist for it
// (being filled, queued or being written); with no credits the stream's producer
// blocks on its own thread, stalling that stream only.
#ifndef FERRY_SERVER_WORKER_SERVICE_H_
#define FERRY_SERVER_WORKER_SERVICE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "net/tls.h"
#include "pyrt/python_pool.h"
#include "worker/dispatcher_link.h"
#include "wire/frame.h"
#include "ferry/status.h"

namespace ferry {

struct WorkerOptions {
  std::string listen = "127.0.0.1:0";
  int threads = 0;                 // decode threads shared by all streams (0 = all cores)
  std::string token;               // shared secret; empty = no authentication
  // TLS (net/tls.h): the certificate and key this worker serves with (and presents to
  // its dispatcher), and the CA that clients' certificates (mutual TLS) and the
  // dispatcher's are checked against. All empty: plain TCP.
  net::TlsFiles tls;
  wire::FrameLimits limits;
  double handshake_timeout_s = 10; // time allowed for Hello and OpenStream
  int max_connections = 4096;      // open connections at most; more are closed at accept
  int max_handshaking = 128;       // connections before OpenStream; past it the oldest is closed
  int buffered_batches = 4;        // per stream: batches being filled, queued or sent
  // The batch memory of all streams together (each stream takes buffered_batches x
  // its batch bytes when it opens). A stream past it is refused with
  // ResourceExhausted, rather than the worker dying of bad_alloc or the OOM killer.
  // 0: 3/4 of the memory the worker may use (the container's limit, or the machine's).
  uint64_t max_memory_bytes = 0;
  // The batches a sweep's lanes (JobSpec::sharing every) share: made once, copied to
  // each lane that asks while they are here. 0: none shared.
  uint64_t share_window_bytes = uint64_t{1} << 30;
  double drain_timeout_s = 60;     // Drain(): how long to wait for clients to read
  std::string id = "ferry-worker";
  // Dispatcher mode: register with this dispatcher (HOST:PORT) and serve the splits it
  // leases, to clients that open streams by job name. Empty: inline jobs only.
  std::string dispatcher;
  std::string advertise;           // the address clients are told; default: the bound one
  std::string worker_id;           // default: advertise + a random suffix
  // Hybrid (dispatcher mode): a trainer's own worker, which leases only the splits of
  // job `serves_job` for consumer `serves_consumer`, and which only that consumer is
  // told of. Both or neither.
  std::string serves_job, serves_consumer;
  int64_t synthetic_cost_us = 0;   // per batch of a "synthetic:" job (benchmarks)
  bool allow_synthetic = false;    // serve "synthetic:" jobs (benchmarks); else refused
  // Run jobs' user code (a trainer's pickled Dataset) in Python processes; else refused.
  bool allow_user_code = false;
  PythonPoolOptions python;        // --python, --python-processes, --sample-timeout, --user-code-user
  // Folders whose contents jobs may read (data/data_roots.h); empty: any readable path.
  std::vector<std::string> data_roots = {};
  // A job it serves is forgotten this long after the dispatcher last named it (once no
  // split of it is held and no stream uses it): see DispatcherLink.
  double forget_jobs_after_s = 60;
  // Clients (trainers) prove this token to the worker, and the worker proves it to
  // them; `token` is then the worker's own, towards the dispatcher (its
  // --worker-token-file). Empty: `token` for both.
  std::string client_token = {};
};

class WorkerService {
 public:
  static Result<std::unique_ptr<WorkerService>> Start(const WorkerOptions& options);
  ~WorkerService();  // hard stop: closes every connection

  // The address actually bound, "host:port".
  std::string address() const;
  // Starts draining: no new connections or streams; each stream plans no new batch,
  // delivers what it has in flight, then ends with Error(Unavailable). Returns at once.
  void Drain();
  // Blocks until Drain() has finished (every connection closed, or the timeout). In
  // dispatcher mode, Drain() first stops taking leases and serves the splits it holds
  // until the consumers acknowledge them (or drain_timeout_s), and WaitDrained()
  // then tells the dispatcher the worker is leaving.
  void WaitDrained();
  // Dispatcher mode: blocks until the dispatcher says every job has finished and
  // returns true, or until StopWaiting() and returns false (at once without a
  // dispatcher). Join a thread that waits here before destroying the service.
  bool WaitIdle();
  // Dispatcher mode: as WaitIdle (idle only when `idle_ends`), and also returns
  // kDrain once the dispatcher asks this worker to drain (ferry-ctl drain).
  DispatcherLink::Wake WaitIdleOrDrain(bool idle_ends);
  void StopWaiting();
  // Dispatcher mode, before a hard stop (destruction) with splits still leased: tells
  // the dispatcher this worker is gone, so that they return to pending now rather than
  // at its heartbeat timeout. No new leases come after. (A trainer's own worker, closed
  // with its trainer mid-epoch, cannot drain: the consumer it waits for is leaving.)
  void Leave();

  struct Stats {
    int64_t connections = 0, streams = 0, batches_sent = 0, bad_frames = 0, auth_failures = 0;
    int64_t open_connections = 0;  // now, including their streams' batch memory
  };
  Stats stats() const;

  // For --metrics (thread-safe): the metrics in Prometheus text, and whether the worker
  // is ready (serving, and registered when it has a dispatcher; not draining).
  std::string MetricsText() const;
  bool Ready() const;

  class Impl;

 private:
  explicit WorkerService(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ferry

#endif  // FERRY_SERVER_WORKER_SERVICE_H_
