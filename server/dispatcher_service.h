// DispatcherService: the control plane of ferry-dispatcher. Workers register and
// heartbeat (and receive split leases in the heartbeat replies); clients get or
// create named jobs, list workers, acknowledge completed splits and ask for status.
// No sample bytes pass through it.
//
// Structure (as in tf.data service): this file is the transport adapter. Decisions
// live in lib/dispatch/decisions.h, the state in lib/dispatch/state.h (changed only
// through Apply(Update)), and durability in lib/dispatch/journal.h. Every update is
// journaled before the reply that depends on it (group commit: the updates of one
// burst of requests share one fdatasync).
//
// Threading: one io thread runs everything here; dataset listing (GetOrCreateJob of a
// new job) runs on a helper thread and comes back to the io thread.
#ifndef FERRY_SERVER_DISPATCHER_SERVICE_H_
#define FERRY_SERVER_DISPATCHER_SERVICE_H_

#include <cstdint>
#include <memory>
#include <string>

#include "dispatch/decisions.h"
#include "ferry/internal/frame.h"
#include "ferry/status.h"

namespace ferry {

struct DispatcherOptions {
  std::string listen = "127.0.0.1:0";
  std::string work_dir;              // the journal; required
  std::string token;                 // shared secret; empty = no authentication
  int heartbeat_interval_ms = 200;   // asked of workers
  int heartbeat_timeout_ms = 2000;   // a worker silent this long is dead
  dispatch::LeasePolicy lease;
  bool exit_when_idle = false;       // WaitIdle() returns once every job is finished
  uint64_t compact_every = 50000;    // journal records between snapshots
  bool sync = true;                  // fdatasync the journal (tests may turn it off)
  internal::FrameLimits limits;
  std::string id = "ferry-dispatcher";
};

class DispatcherService {
 public:
  static Result<std::unique_ptr<DispatcherService>> Start(const DispatcherOptions& options);
  ~DispatcherService();

  std::string address() const;
  // With exit_when_idle: blocks until every job has finished. Otherwise blocks forever
  // (until the service is destroyed).
  void WaitIdle();

  struct Stats {
    int64_t requests = 0, leases = 0, acks = 0, workers_removed = 0, journal_records = 0;
    int64_t replayed = 0;  // updates replayed from the journal at start
  };
  Stats stats() const;

  class Impl;

 private:
  explicit DispatcherService(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ferry

#endif  // FERRY_SERVER_DISPATCHER_SERVICE_H_
