// ferry-dispatcher-load: how many workers one dispatcher holds on this machine. Starts a
// ferry-dispatcher (the one beside this program, or --dispatcher-bin) on loopback and
// runs N simulated workers against it, each heartbeating every --interval-ms and
// leasing, with a consumer per job acknowledging; prints, per round, the heartbeats
// answered of those offered, the round trip's p50 and p99, the dispatcher's CPU per
// heartbeat and its deciding thread's, and its memory per worker and per job.
//   ferry-dispatcher-load --workers 1000,4000,10000 [--jobs 1000 --workers-per-job 8
//       --splits 1000 --split-ms 1000] [--load-threads 4] [--seconds 10]
// Give the load threads cores of their own (one answers about 45,000 heartbeats a
// second): on a machine whose cores they share, the figures are the machine's.
// The same as `ferry-bench dispatcher-load` (BENCHMARKS.md), for an installation
// without the benchmarks (a wheel carries it).
#include <CLI/CLI.hpp>
#include <iostream>

#include "server/cli.h"
#include "server/dispatcher_load.h"

int main(int argc, char** argv) {
  CLI::App app{"ferry-dispatcher-load: simulated workers against a real ferry-dispatcher on this machine",
               "ferry-dispatcher-load"};
  ferry::bench::DispatcherLoadArgs a;
  ferry::bench::AddDispatcherLoadOptions(&app, &a);
  app.set_version_flag("--version", std::string("ferry-dispatcher-load ") + FERRY_VERSION_STRING);
  // Not cli.h's ParseOrUsage: its FERRY_<FLAG> environment variables would let the
  // build's FERRY_JOBS (bench/setup.sh's parallelism) set --jobs here.
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::cout << app.help();
    return 0;
  } catch (const CLI::CallForVersion& v) {
    std::cout << v.what() << "\n";
    return 0;
  } catch (const CLI::ParseError& e) {  // a wrong flag: the error and the usage
    std::cerr << "ferry-dispatcher-load: " << e.what() << "\n\n" << app.help();
    return 2;
  }
  return ferry::bench::RunDispatcherLoad(a);
}
