// ferry-bench's remote subcommands: transport (raw TCP vs a worker's batches);
// dispatcher-load (simulated workers against a real dispatcher) is
// server/dispatcher_load.h's. `consume` is the
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



}  // namespace ferry::bench

#endif  // FERRY_BENCH_REMOTE_BENCH_H_
