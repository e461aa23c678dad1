// TestCluster: a ferry-dispatcher and N ferry-workers in the test's own process, on
// loopback port 0 (tf.data service's TestCluster). They are the real services
// (server/dispatcher_service.h, server/worker_service.h) over real sockets; tests
// stream from them with real ferry::Clients, and add, stop or drain workers and
// restart the dispatcher between batches, so "mid-epoch" is exact rather than timed.
// Real-process tests (tests/process) remain for what only processes show (SIGKILL,
// signals, command lines).
#ifndef FERRY_TESTS_INTEGRATION_TEST_CLUSTER_H_
#define FERRY_TESTS_INTEGRATION_TEST_CLUSTER_H_

#include <memory>
#include <string>
#include <vector>

#include "ferry/client.h"
#include "ferry/status.h"
#include "server/dispatcher_service.h"
#include "server/worker_service.h"
#include "testutil.h"

namespace ferry::testing {

// A batch as tests compare sequences of them: "epoch/batch_in_epoch <digest of its
// images, indices and labels>".
std::string BatchDigest(const Batch& b);

struct TestClusterOptions {
  int workers = 2;
  int threads_per_worker = 1;
  std::string token = {};
  // Fast liveness: a stopped worker's splits move on within about half a second.
  int heartbeat_interval_ms = 50;
  int heartbeat_timeout_ms = 500;
  int leases_ahead = 4;
  bool exit_when_idle = false;
  uint64_t compact_every = 50000;  // journal records between snapshots
  int workers_per_job = 0;         // DispatcherConfig::workers_per_job (placement)
};

class TestCluster {
 public:
  static Result<std::unique_ptr<TestCluster>> Start(const TestClusterOptions& options = {});
  ~TestCluster();

  const std::string& dispatcher_address() const { return dispatcher_address_; }
  DispatcherService& dispatcher() { return *dispatcher_; }
  size_t num_workers() const { return workers_.size(); }
  // REQUIRES: worker i is running.
  WorkerService& worker(size_t i) { return *workers_[i]; }
  const std::string& worker_address(size_t i) const { return worker_addresses_[i]; }
  bool running(size_t i) const { return workers_[i] != nullptr; }

  // Starts one more worker; returns its index.
  Result<size_t> AddWorker();
  // Stops worker i at once, as a kill would: its connections drop, it tells the
  // dispatcher nothing, and its splits move on once it has missed its heartbeats.
  void StopWorker(size_t i);
  // Drains worker i, as SIGTERM does: no new leases, the splits it holds delivered,
  // then it leaves. Blocks until it has.
  void DrainWorker(size_t i);
  // Stops the dispatcher and starts a new one on the same address and work dir (its
  // journal replays); workers and clients reconnect by themselves.
  Status RestartDispatcher();
  // Stops the dispatcher as its process does on SIGTERM (the journal closed, and
  // sealed); RestartDispatcher() starts it again.
  void StopDispatcher() { dispatcher_.reset(); }
  // The options; a change to the dispatcher's takes effect at RestartDispatcher().
  TestClusterOptions& options() { return o_; }
  // The dispatcher's work dir (its journal, snapshots and identity).
  std::string dispatcher_work_dir() const { return work_dir_ / "journal"; }

  // Client options for `job` through this cluster's dispatcher.
  ClientOptions ClientFor(const std::string& job_name, const JobSpec& job) const;

 private:
  TestCluster() = default;
  WorkerOptions WorkerOpts() const;

  TestClusterOptions o_;
  TempDir work_dir_;
  std::string dispatcher_address_;
  std::unique_ptr<DispatcherService> dispatcher_;
  std::vector<std::unique_ptr<WorkerService>> workers_;  // null once stopped
  std::vector<std::string> worker_addresses_;
};

}  // namespace ferry::testing

#endif  // FERRY_TESTS_INTEGRATION_TEST_CLUSTER_H_
