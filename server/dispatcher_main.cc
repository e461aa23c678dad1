// ferry-dispatcher: the control plane. Tracks workers (register, heartbeat), named
// jobs and their splits, and journals every change so that a restart on the same
// --work-dir picks up where it stopped.
//   ferry-dispatcher --listen HOST:PORT --work-dir DIR [--token-file F]
//       [--heartbeat-interval-ms N] [--heartbeat-timeout-ms N] [--exit-when-idle]
// Prints "listening on HOST:PORT" once ready. SIGTERM exits 0 (the state is on disk).
#ifndef FERRY_MALLOC  // server/CMakeLists.txt: jemalloc when built with it
#define FERRY_MALLOC "glibc"
#endif

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <string>
#include <thread>

#include "core/log.h"
#include "net/auth.h"
#include "ops/plugin.h"
#include "server/cli.h"
#include "server/metrics_http.h"
#include "server/dispatcher_service.h"

int main(int argc, char** argv) {
  ferry::LogProgramName() = "ferry-dispatcher";
  ferry::DispatcherOptions o;
  std::string token_file;
  CLI::App app{"ferry-dispatcher: Ferry's control plane (workers, jobs, splits, journal)", "ferry-dispatcher"};
  app.add_option("--listen", o.listen, "HOST:PORT to listen on; port 0 picks a free port")->required();
  app.add_option("--work-dir", o.core.work_dir, "directory of the journal (created if missing)")->required();
  app.add_option("--token-file", token_file, "file holding the shared token (else $FERRY_TOKEN; none = no auth)");
  std::string worker_token_file;
  app.add_option("--worker-token-file", worker_token_file,
                 "file holding the token workers prove instead of --token-file's, which trainers and tools then hold "
                 "alone: a trainer cannot register as a worker (needs --token-file)");
  ferry::AddTlsFlags(app, o.tls);
  ferry::AddLogFlag(app);
  app.add_option("--heartbeat-interval-ms", o.core.heartbeat_interval_ms, "heartbeat interval asked of workers")
      ->check(CLI::Range(10, 60000));
  app.add_option("--heartbeat-timeout-ms", o.core.heartbeat_timeout_ms, "a worker silent this long is declared dead")
      ->check(CLI::Range(50, 600000));
  app.add_option("--consumer-timeout-ms", o.core.consumer_timeout_ms,
                 "a consumer of a shared job silent this long is gone: its unfinished splits go to the others")
      ->check(CLI::Range(100, 86400000));
  app.add_option("--leases-ahead", o.core.lease.max_outstanding, "splits a worker may hold un-acked per job")
      ->check(CLI::Range(1, 1024));
  app.add_option("--workers-per-job", o.core.workers_per_job,
                 "place each job on about this many workers (times its weight), for fleets of many jobs; 0: every "
                 "worker serves every job")
      ->check(CLI::Range(0, 100000));
  app.add_flag("--exit-when-idle", o.core.exit_when_idle, "exit once every job has finished");
  ferry::AddDataRootFlag(
      app, &o.data_roots,
      "a folder, bucket or URL prefix new jobs' datasets may be listed in (repeatable), as the workers' "
      "--data-root; without any folder, every path this process can read, and without a URL root no URL");
  app.add_option("--handshake-timeout", o.handshake_timeout_s, "seconds a new connection has to authenticate")
      ->check(CLI::PositiveNumber);
  app.add_option("--max-connections", o.max_connections, "open connections at most; more are closed at once")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--max-handshaking", o.max_handshaking,
                 "connections not yet authenticated at most; past it the oldest is closed")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--io-threads", o.io_threads,
                 "threads reading and writing the connections, besides the one that decides (-1: one per core past "
                 "the first, at most 4; 0: that one does everything)")
      ->check(CLI::Range(-1, 64));
  std::string metrics_listen;
  app.add_option("--metrics", metrics_listen,
                 "HOST:PORT to serve GET /metrics (Prometheus), /healthz and /readyz on; none by default");
  std::vector<std::string> plugins;
  ferry::AddPluginFlag(app, &plugins);
  ferry::store::StoreOptions store_options;
  ferry::AddObjectStoreFlags(app, &store_options);
  if (int rc = ferry::ParseOrUsage(app, argc, argv); rc >= 0) return rc;
  if (!ferry::ConfigureObjectStore(store_options, "ferry-dispatcher")) return 2;
  if (ferry::Status s = ferry::LoadPlugins(plugins); !s.ok()) {
    std::fprintf(stderr, "ferry-dispatcher: --plugin: %s\n", s.ToString().c_str());
    return 2;
  }
  auto token = ferry::net::LoadToken(token_file);
  if (!token.ok()) {
    std::fprintf(stderr, "ferry-dispatcher: %s\n", token.status().ToString().c_str());
    return 2;
  }
  o.token = *token;
  if (!worker_token_file.empty()) {
    auto w = ferry::net::LoadToken(worker_token_file);
    if (!w.ok() || w->empty() || o.token.empty() || *w == o.token) {
      std::fprintf(stderr, "ferry-dispatcher: --worker-token-file: %s\n",
                   !w.ok() ? w.status().ToString().c_str()
                   : w->empty() ? "the file is empty"
                   : o.token.empty() ? "needs --token-file (or FERRY_TOKEN) for trainers and tools"
                                     : "the workers' token must differ from the trainers'");
      return 2;
    }
    o.worker_token = *w;
  }
  ferry::RaiseFileLimit();
  ferry::BlockTerminationSignals();
  // A journal that can no longer be made durable: stop (exit 1 below), so that a
  // restart (the supervisor's) recovers from what is on disk.
  std::atomic<bool> fatal{false};
  o.on_fatal = [&fatal](const ferry::Status&) {
    fatal = true;
    ::kill(::getpid(), SIGTERM);
  };
  auto service = ferry::DispatcherService::Start(o);
  if (!service.ok()) {
    std::fprintf(stderr, "ferry-dispatcher: %s\n", service.status().ToString().c_str());
    return 1;
  }
  std::unique_ptr<ferry::net::HttpServer> metrics;  // destroyed before the service
  if (!metrics_listen.empty()) {
    ferry::DispatcherService* svc = service->get();
    auto m = ferry::StartMetrics(
        metrics_listen, [svc] { return svc->MetricsText(); }, [svc] { return svc->Ready(); });
    if (!m.ok()) {
      std::fprintf(stderr, "ferry-dispatcher: --metrics: %s\n", m.status().ToString().c_str());
      return 1;
    }
    metrics = std::move(*m);
  }
  std::printf("listening on %s\n", (*service)->address().c_str());
  std::fflush(stdout);
  ferry::Log("serving on %s, journal in %s (%s, %s, malloc: %s)", (*service)->address().c_str(),
             o.core.work_dir.c_str(), o.token.empty() ? "no token" : "token required",
             !o.tls.enabled() ? "no TLS" : o.tls.ca.empty() ? "TLS" : "mutual TLS", FERRY_MALLOC);
  // Every job finished: stop as if told to (the signal is blocked in every thread, so
  // WaitForTermination takes it). The service is then destroyed in order, its threads
  // joined, before main returns: nothing runs while the process's statics go.
  std::thread idle;
  if (o.core.exit_when_idle) {
    idle = std::thread([&service] {
      if (!(*service)->WaitIdle()) return;
      ferry::Log("every job has finished: exiting (--exit-when-idle)");
      ::kill(::getpid(), SIGTERM);
    });
  }
  const int sig = ferry::WaitForTermination();
  (*service)->StopWaiting();
  if (idle.joinable()) idle.join();
  const auto st = (*service)->stats();
  ferry::Log("signal %d: exiting after %lld requests, %lld leases, %lld acks", sig, (long long)st.requests,
             (long long)st.core.leases, (long long)st.core.acks);
  metrics.reset();
  service->reset();
  if (fatal) {
    std::fprintf(stderr, "ferry-dispatcher: exiting 1: the journal could not be made durable (see above)\n");
    return 1;
  }
  return 0;
}
