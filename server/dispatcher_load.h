// ferry-dispatcher-load (and `ferry-bench dispatcher-load`): a real ferry-dispatcher
// process under N simulated workers, each on its own connection, heartbeating and
// leasing, and a simulated consumer per job acknowledging. For BENCHMARKS.md's fleet
// tables and for sizing a dispatcher's machine (README, "How big a dispatcher").
#ifndef FERRY_SERVER_DISPATCHER_LOAD_H_
#define FERRY_SERVER_DISPATCHER_LOAD_H_

#include <cstdint>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace ferry::bench {

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
  int load_threads = 1;       // threads of simulated peers (workers spread over them)
};
// The flags of `ferry-bench dispatcher-load` and of ferry-dispatcher-load.
void AddDispatcherLoadOptions(CLI::App* cmd, DispatcherLoadArgs* a);
int RunDispatcherLoad(const DispatcherLoadArgs& a);

}  // namespace ferry::bench

#endif  // FERRY_SERVER_DISPATCHER_LOAD_H_
