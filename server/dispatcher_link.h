// A worker's side of the control plane: registration, heartbeats, and the splits the
// dispatcher leases to it, kept in one SplitFeed per (job, consumer) for the streams
// that serve them.
//
// One thread runs the loop: register (again after a dispatcher restart or after being
// presumed dead), then heartbeat every interval. Each reply restates every split the
// worker holds; the link restates it to the feeds. New jobs are opened (listing and
// fingerprint check) on this thread before their splits are handed out, so streams
// never wait on a listing.
#ifndef FERRY_SERVER_DISPATCHER_LINK_H_
#define FERRY_SERVER_DISPATCHER_LINK_H_

#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>

#include "data/dataset.h"
#include "ferry/internal/control.h"
#include "ferry/internal/control_channel.h"
#include "ferry/pipeline_spec.h"
#include "pipeline/split_plan.h"

namespace ferry {

// What a worker knows of a dispatcher job.
struct WorkerJob {
  internal::JobConfigMsg config;
  std::shared_ptr<const Dataset> dataset;
  PipelineSpec spec;
  Status status;  // not OK: this worker cannot serve the job (and says why)
  SplitGeometry geometry() const;
};

struct LinkOptions {
  std::string dispatcher;  // HOST:PORT
  std::string token;
  std::string worker_id;
  std::string advertise;   // where clients reach this worker's data plane
  std::function<Result<std::shared_ptr<const Dataset>>(const std::string&)> open_dataset;
};

class DispatcherLink {
 public:
  explicit DispatcherLink(LinkOptions o);
  ~DispatcherLink();  // stops the loop (no leaving message: see Leave)

  void Start();

  // The job's facts once a lease of it has arrived; null before.
  std::shared_ptr<const WorkerJob> Job(const std::string& name) const;
  // The feed of (job, consumer), created empty when new.
  std::shared_ptr<SplitFeed> Feed(const std::string& job, const std::string& consumer);

  // Heartbeats say "draining" from now on: no new leases.
  void SetDraining();
  // Heartbeat now rather than at the next interval: a consumer just opened a stream
  // (it wants splits), so the first leases come within a round trip.
  void Poke();
  // A client opened a stream for this job: fetch its config at the next heartbeat
  // even if no split of it is leased here (parallel_epochs jobs never lease).
  void Want(const std::string& job);
  // Blocks until draining and the dispatcher says this worker holds nothing (every
  // split acknowledged), or until the timeout. True when drained.
  bool WaitDrained(double timeout_s);
  // Tells the dispatcher this worker is gone (its splits return to pending at once
  // rather than after the heartbeat timeout), then stops the loop.
  void Leave();
  // Blocks until a heartbeat reply says every job has finished.
  void WaitIdle();

  int64_t heartbeats() const;
  const std::string& worker_id() const { return o_.worker_id; }

 private:
  void Run();
  bool Heartbeat(internal::ControlChannel& ch);
  std::shared_ptr<SplitFeed> FeedLocked(const std::string& job, const std::string& consumer);
  void Sleep(int ms);

  // What feeds call when they starve. Feeds may outlive the link (a stream's producer
  // holds its feed), so they hold this, and the link detaches itself on destruction.
  struct PokeTarget {
    std::mutex mu;
    DispatcherLink* link = nullptr;  // GUARDED_BY(mu)
  };

  const LinkOptions o_;
  const std::shared_ptr<PokeTarget> poke_target_ = std::make_shared<PokeTarget>();
  std::thread thread_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false, draining_ = false, idle_ = false, registered_ = false;  // GUARDED_BY(mu_)
  size_t held_ = 0;                                                         // GUARDED_BY(mu_)
  bool drain_seen_ = false;  // a reply came after draining was set  // GUARDED_BY(mu_)
  bool poked_ = false;                                                      // GUARDED_BY(mu_)
  int interval_ms_ = 200;                                                   // GUARDED_BY(mu_)
  int64_t heartbeats_ = 0;                                                  // GUARDED_BY(mu_)
  std::map<std::string, std::shared_ptr<const WorkerJob>> jobs_;            // GUARDED_BY(mu_)
  std::set<std::string> wanted_;                                            // GUARDED_BY(mu_)
  std::map<std::pair<std::string, std::string>, std::shared_ptr<SplitFeed>> feeds_;  // GUARDED_BY(mu_)
};

}  // namespace ferry

#endif  // FERRY_SERVER_DISPATCHER_LINK_H_
