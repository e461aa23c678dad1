// ferry-bench's remote subcommands: transport (raw TCP vs a worker's batches) and
// dispatcher-load (simulated workers against a real dispatcher). `consume` is the
// consume tool (client/tools/consume.h).
#ifndef FERRY_BENCH_REMOTE_BENCH_H_
#define FERRY_BENCH_REMOTE_BENCH_H_

#include <cstdint>
#include <string>
#include <vector>

namespace ferry::bench {

struct TransportArgs {
  double seconds = 5;
  uint64_t batch_bytes = 16ull << 20;
  int credits = 4;
  int workers = 1;         // ferry-worker processes (and raw TCP streams) into one client
  bool pin = false;        // receiver on one CPU, senders on another (see remote_bench.cc)
  std::string worker_bin;  // ferry-worker; default: next to ferry-bench
  // Mutual TLS on every stream: a folder as tests/tls/make_certs.sh makes it (ca.pem,
  // server.pem/.key for the workers, client.pem/.key for the client). The raw TCP
  // baseline stays plain, so the ratio shows what TLS costs.
  std::string tls_dir;
};
int RunTransport(const TransportArgs& a, const char* argv0);

struct DispatcherLoadArgs {
  std::vector<int> workers = {1000};  // one round per count, each against a fresh dispatcher
  int jobs = 1;               // jobs, each with a consumer acknowledging what is leased
  int workers_per_job = 0;    // the dispatcher's --workers-per-job (0: every worker serves every job)
  int split_ms = 0;           // a split is acknowledged this long after its lease (0: at once)
  std::vector<int> io_threads = {-1};  // the dispatcher's --io-threads; a list runs each worker count with each
  double seconds = 5;
  int interval_ms = 100;      // heartbeat period of each simulated worker
  int64_t splits = 10000;     // splits an epoch of each job
  std::string dispatcher_bin; // default: next to ferry-bench
};
int RunDispatcherLoad(const DispatcherLoadArgs& a);

}  // namespace ferry::bench

#endif  // FERRY_BENCH_REMOTE_BENCH_H_
