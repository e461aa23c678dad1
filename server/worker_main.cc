// ferry-worker: runs the decode pipeline for clients and streams them the batches.
//   ferry-worker --listen HOST:PORT [--threads N] [--token-file F] [--max-memory SIZE]
//                [--dispatcher HOST:PORT [--advertise HOST:PORT] [--exit-when-idle]]
// Prints "listening on HOST:PORT" (the real port) once ready. SIGTERM drains: batches
// in flight are delivered (with a dispatcher: every split it holds, until acknowledged),
// then it exits 0.
#include <csignal>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <thread>

#include "core/log.h"
#include "net/auth.h"
#include "ops/plugin.h"
#include "server/cli.h"
#include "server/metrics_http.h"
#include "server/worker_service.h"

int main(int argc, char** argv) {
  ferry::LogProgramName() = "ferry-worker";
  ferry::WorkerOptions o;
  std::string token_file;
  CLI::App app{"ferry-worker: decodes and augments images for Ferry clients, streaming the batches", "ferry-worker"};
  app.add_option("--listen", o.listen, "HOST:PORT to listen on; port 0 picks a free port")->required();
  app.add_option("--threads", o.threads,
                 "decode threads shared by all streams (0 = the CPUs this process may use: its affinity, capped by "
                 "the container's CPU quota)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--token-file", token_file, "file holding the shared token (else $FERRY_TOKEN; none = no auth)");
  std::string client_token_file;
  app.add_option("--client-token-file", client_token_file,
                 "file holding the trainers' token, when the dispatcher has separate tokens (its --worker-token-file): "
                 "--token-file is then this worker's own, towards the dispatcher");
  ferry::AddTlsFlags(app, o.tls);
  ferry::AddLogFlag(app);
  app.add_option("--buffered-batches", o.buffered_batches, "per stream: batches in memory at most")
      ->check(CLI::Range(2, 64));
  app.add_option("--max-memory", o.max_memory_bytes,
                 "batch memory of all streams together, e.g. 8GB or 512MB; a stream past it is refused "
                 "(default: 3/4 of the container's or machine's memory)")
      ->transform(CLI::AsSizeValue(false));
  app.add_option("--share-window", o.share_window_bytes,
                 "batches kept for a sweep's trainers (jobs shared every batch) to take without decoding again, "
                 "e.g. 2GB; 0: none (default 1GB)")
      ->transform(CLI::AsSizeValue(false));
  app.add_option("--handshake-timeout", o.handshake_timeout_s, "seconds allowed for Hello and OpenStream");
  app.add_option("--drain-timeout", o.drain_timeout_s, "seconds SIGTERM waits for clients to take their batches");
  app.add_option("--id", o.id, "name reported to clients");
  app.add_option("--dispatcher", o.dispatcher, "HOST:PORT of ferry-dispatcher: register and serve leased splits");
  app.add_option("--advertise", o.advertise, "HOST:PORT clients should use to reach this worker (default: --listen)");
  app.add_option("--worker-id", o.worker_id, "identity at the dispatcher (default: the address + a random suffix)");
  bool exit_when_idle = false;
  app.add_flag("--exit-when-idle", exit_when_idle, "exit (draining first) once the dispatcher has no unfinished job");
  app.add_flag("--allow-synthetic", o.allow_synthetic,
               "serve synthetic: datasets (benchmarks); without it they are refused");
  app.add_flag("--allow-user-code", o.allow_user_code,
               "run jobs' user code (a trainer's pickled Dataset, transform and collate function) in Python "
               "processes: remote code execution by design, for trusted trainers only (see SECURITY.md)");
  app.add_option("--python", o.python.python, "the Python interpreter user code runs in (default /usr/bin/python3)");
  app.add_option("--python-processes", o.python.processes, "Python processes for user code (default 1)")
      ->check(CLI::Range(1, 1024));
  app.add_option("--sample-timeout", o.python.sample_timeout_s,
                 "seconds one sample's user code may run before it is skipped and reported (default: no limit)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--user-code-user", o.python.user,
                 "run the Python processes as this user (and its group), not as the worker's");
  ferry::AddDataRootFlag(
      app, &o.data_roots,
      "a folder, bucket or URL prefix jobs may read (repeatable: /data, s3://bucket/train/, "
      "https://host/shards/): every path a job names must resolve, after symlinks, inside a folder, every "
      "URL lie under a URL root; without any folder, every path this process can read is served, and "
      "without a URL root no URL is (see SECURITY.md)");
  app.add_option("--forget-jobs-after", o.forget_jobs_after_s,
                 "seconds after the dispatcher last named a job (finished, or idle here) that this worker forgets it")
      ->check(CLI::Range(0.01, 86400.0));
  app.add_option("--synthetic-cost-us", o.synthetic_cost_us,
                 "benchmarks: each batch of a synthetic job takes this long, with no decoding")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--max-connections", o.max_connections, "open connections at most; more are closed at once")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--max-handshaking", o.max_handshaking,
                 "connections not yet authenticated at most; past it the oldest is closed")
      ->check(CLI::Range(1, 1 << 20));
  std::string metrics_listen;
  app.add_option("--metrics", metrics_listen,
                 "HOST:PORT to serve GET /metrics (Prometheus), /healthz and /readyz on; none by default");
  std::vector<std::string> plugins;
  ferry::AddPluginFlag(app, &plugins);
  ferry::store::StoreOptions store_options;
  ferry::AddObjectStoreFlags(app, &store_options);
  if (int rc = ferry::ParseOrUsage(app, argc, argv); rc >= 0) return rc;
  if (!ferry::ConfigureObjectStore(store_options, "ferry-worker")) return 2;
  if (ferry::Status s = ferry::LoadPlugins(plugins); !s.ok()) {
    std::fprintf(stderr, "ferry-worker: --plugin: %s\n", s.ToString().c_str());
    return 2;
  }

  if (exit_when_idle && o.dispatcher.empty()) {
    std::fprintf(stderr, "ferry-worker: --exit-when-idle needs --dispatcher\n\n%s", app.help().c_str());
    return 2;
  }
  auto token = ferry::net::LoadToken(token_file);
  if (!token.ok()) {
    std::fprintf(stderr, "ferry-worker: %s\n", token.status().ToString().c_str());
    return 2;
  }
  o.token = *token;
  if (!client_token_file.empty()) {
    auto c = ferry::net::LoadToken(client_token_file);
    if (!c.ok() || c->empty()) {
      std::fprintf(stderr, "ferry-worker: --client-token-file: %s\n",
                   c.ok() ? "the file is empty" : c.status().ToString().c_str());
      return 2;
    }
    o.client_token = *c;
  }
  ferry::RaiseFileLimit();
  ferry::BlockTerminationSignals();
  // A write to a peer that is gone (a Python process of user code, a socket) is an
  // error to handle, never a reason to die (the Python processes get the default back).
  std::signal(SIGPIPE, SIG_IGN);
  auto service = ferry::WorkerService::Start(o);
  if (!service.ok()) {
    std::fprintf(stderr, "ferry-worker: %s\n", service.status().ToString().c_str());
    return 1;
  }
  std::unique_ptr<ferry::net::HttpServer> metrics;  // destroyed before the service
  if (!metrics_listen.empty()) {
    ferry::WorkerService* svc = service->get();
    auto m = ferry::StartMetrics(
        metrics_listen, [svc] { return svc->MetricsText(); }, [svc] { return svc->Ready(); });
    if (!m.ok()) {
      std::fprintf(stderr, "ferry-worker: --metrics: %s\n", m.status().ToString().c_str());
      return 1;
    }
    metrics = std::move(*m);
  }
  std::printf("listening on %s\n", (*service)->address().c_str());
  std::fflush(stdout);
  if (o.allow_user_code)
    ferry::Log("user code allowed (--allow-user-code): up to %d Python processes of %s%s%s", o.python.processes,
               o.python.python.c_str(), o.python.user.empty() ? "" : " as user ", o.python.user.c_str());
  ferry::Log("serving on %s (%s, %s)", (*service)->address().c_str(), o.token.empty() ? "no token" : "token required",
             !o.tls.enabled() ? "no TLS" : o.tls.ca.empty() ? "TLS" : "mutual TLS");
  // Every job finished: stop as if told to (the signal is blocked in every thread, so
  // WaitForTermination takes it). The waiting thread is joined, and the service
  // destroyed in order, before main returns.
  // An operator's drain (ferry-ctl drain) ends the worker the same way.
  std::thread idle;
  if (!o.dispatcher.empty()) {
    idle = std::thread([&service, exit_when_idle] {
      const ferry::DispatcherLink::Wake w = (*service)->WaitIdleOrDrain(exit_when_idle);
      if (w == ferry::DispatcherLink::Wake::kStopped) return;
      ferry::Log(w == ferry::DispatcherLink::Wake::kIdle ? "every job has finished: exiting"
                                                         : "drained by an operator: finishing the splits held, then exiting");
      ::kill(::getpid(), SIGTERM);
    });
  }
  const int sig = ferry::WaitForTermination();
  (*service)->StopWaiting();
  if (idle.joinable()) idle.join();
  ferry::Log("signal %d: draining", sig);
  (*service)->Drain();
  (*service)->WaitDrained();
  const auto st = (*service)->stats();
  ferry::Log("drained: %lld connections, %lld streams, %lld batches sent; exiting", (long long)st.connections,
             (long long)st.streams, (long long)st.batches_sent);
  metrics.reset();
  service->reset();
  return 0;
}
