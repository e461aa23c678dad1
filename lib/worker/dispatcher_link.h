// A worker's side of the control plane: registration, heartbeats, and the splits the
// dispatcher leases to it, kept in one SplitFeed per (job, consumer) for the streams
// that serve them.
//
// One thread runs the loop: register (again after a dispatcher restart or after being
// presumed dead), then heartbeat every interval. Each reply restates every split the
// worker holds; the link restates it to the feeds. New jobs are opened (listing and
// fingerprint check) on this thread before their splits are handed out, so streams
// never wait on a listing.
#ifndef FERRY_WORKER_DISPATCHER_LINK_H_
#define FERRY_WORKER_DISPATCHER_LINK_H_

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <utility>

#include "core/mutex.h"
#include "data/dataset.h"
#include "ferry/job.h"
#include "net/control_channel.h"
#include "pipeline/split_plan.h"
#include "text/tokenizer.h"
#include "net/tls.h"
#include "wire/control.h"
#include "worker/job_source.h"

namespace ferry {

struct LinkOptions {
  std::string dispatcher;  // HOST:PORT
  std::string token;
  std::shared_ptr<net::TlsContext> tls;  // a client TLS context towards the dispatcher, or null
  std::string worker_id;
  std::string advertise;   // where clients reach this worker's data plane
  // Hybrid: a trainer's own worker, leasing only this consumer's splits of this job.
  std::string serves_job, serves_consumer;
  // Where jobs' data is opened (a synthetic job needs data.allow_synthetic; a user-code
  // job, data.user_code or data.check_user_code: unset, it is refused).
  DataOpeners data;
  // The job's tokenizer (null: it asks for none). Unset: a job with a tokenizer is
  // refused.
  std::function<Result<std::shared_ptr<const Tokenizer>>(const JobSpec&)> open_tokenizer;
  // The worker's production figures, sent with each heartbeat (the dispatcher's
  // advice); may be empty.
  std::function<wire::WorkerLoad()> load;
  // A job this worker can serve is forgotten (its facts, its feeds) once no reply has
  // named it for this long, no split of it is held here and no stream uses it. A job it
  // cannot serve is forgotten when the dispatcher says it has gone.
  std::chrono::milliseconds forget_after{std::chrono::seconds(60)};
  // The control plane's round trip: a request frame, the dispatcher's reply. Unset: a
  // net::ControlChannel to `dispatcher` (tests set a fake dispatcher here).
  std::function<Result<wire::InFrame>(const wire::OutFrame&)> call = {};
};

class DispatcherLink : public JobSource {
 public:
  explicit DispatcherLink(LinkOptions o);
  ~DispatcherLink() override;  // stops the loop (no leaving message: see Leave)

  void Start();

  // The job's facts once a lease of it (or a wanted job) has arrived; null before.
  std::shared_ptr<const WorkerJob> Job(const std::string& name) const override LOCKS_EXCLUDED(mu_);
  // The feed of (job, consumer), created empty when new.
  std::shared_ptr<SplitFeed> Feed(const std::string& job, const std::string& consumer) override LOCKS_EXCLUDED(mu_);

  // Heartbeats say "draining" from now on: no new leases.
  void SetDraining() LOCKS_EXCLUDED(mu_);
  // Heartbeat now rather than at the next interval: a consumer just opened a stream
  // (it wants splits), so the first leases come within a round trip.
  void Poke() override LOCKS_EXCLUDED(mu_);
  // A client opened a stream for this job: fetch its config at the next heartbeat
  // even if no split of it is leased here (parallel_epochs jobs never lease).
  void Want(const std::string& job) override LOCKS_EXCLUDED(mu_);
  // The facts held of `job` are of another job of that name: forget them and fetch the
  // job again (Want).
  void Refresh(const std::string& job) override LOCKS_EXCLUDED(mu_);
  // Blocks until draining and the dispatcher says this worker holds nothing (every
  // split acknowledged), or until the timeout. True when drained.
  bool WaitDrained(double timeout_s) LOCKS_EXCLUDED(mu_);
  // Tells the dispatcher this worker is gone (its splits return to pending at once
  // rather than after the heartbeat timeout), then stops the loop.
  void Leave() LOCKS_EXCLUDED(mu_);
  // Blocks until a heartbeat reply says every job has finished (kIdle, when
  // `idle_ends` is set), or that an operator drained this worker (kDrain: ferry-ctl
  // drain), or until StopWaitingIdle() (kStopped).
  enum class Wake { kStopped, kIdle, kDrain };
  Wake WaitIdleOrDrain(bool idle_ends) LOCKS_EXCLUDED(mu_);
  bool WaitIdle() LOCKS_EXCLUDED(mu_) { return WaitIdleOrDrain(true) == Wake::kIdle; }
  void StopWaitingIdle() LOCKS_EXCLUDED(mu_);

  int64_t heartbeats() const LOCKS_EXCLUDED(mu_);
  // For /metrics: the jobs whose facts this worker holds, and the bytes of its last
  // heartbeat (they follow the live work, not every job ever seen).
  size_t jobs_known() const LOCKS_EXCLUDED(mu_);
  size_t heartbeat_bytes() const LOCKS_EXCLUDED(mu_);
  // Registered with the dispatcher (its last heartbeat went through), and the splits
  // it holds by the last reply: for /readyz and /metrics.
  bool registered() const LOCKS_EXCLUDED(mu_);
  size_t held() const LOCKS_EXCLUDED(mu_);
  const std::string& worker_id() const override { return o_.worker_id; }

 private:
  void Run();
  using Call = std::function<Result<wire::InFrame>(const wire::OutFrame&)>;
  bool Heartbeat(const Call& call);
  // A job's facts, opened on this worker (listing and fingerprint check).
  std::shared_ptr<WorkerJob> OpenJob(const wire::NamedJob& j) const;
  std::shared_ptr<SplitFeed> FeedLocked(const std::string& job, const std::string& consumer)
      EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Sleep(std::chrono::milliseconds d) LOCKS_EXCLUDED(mu_);
  bool stopping() const LOCKS_EXCLUDED(mu_);

  // What feeds call when they starve. Feeds may outlive the link (a stream's producer
  // holds its feed), so they hold this, and the link detaches itself on destruction.
  struct PokeTarget {
    Mutex mu;
    DispatcherLink* link GUARDED_BY(mu) = nullptr;
  };

  const LinkOptions o_;
  const std::shared_ptr<PokeTarget> poke_target_ = std::make_shared<PokeTarget>();
  std::thread thread_;
  mutable Mutex mu_;
  CondVar cv_;
  bool stop_ GUARDED_BY(mu_) = false;
  bool draining_ GUARDED_BY(mu_) = false;
  bool idle_ GUARDED_BY(mu_) = false;
  bool stop_waiting_idle_ GUARDED_BY(mu_) = false;
  bool registered_ GUARDED_BY(mu_) = false;
  size_t held_ GUARDED_BY(mu_) = 0;
  bool drain_seen_ GUARDED_BY(mu_) = false;
  bool drain_asked_ GUARDED_BY(mu_) = false;  // a reply said "drain" (ferry-ctl drain)  // a reply came after draining was set
  bool poked_ GUARDED_BY(mu_) = false;
  int interval_ms_ GUARDED_BY(mu_) = 200;
  int64_t heartbeats_ GUARDED_BY(mu_) = 0;
  std::map<std::string, std::shared_ptr<const WorkerJob>> jobs_ GUARDED_BY(mu_);
  // When a reply last named each job of jobs_ (Forget()).
  std::map<std::string, std::chrono::steady_clock::time_point> named_ GUARDED_BY(mu_);
  // Unfit jobs whose reason the dispatcher has had since this worker registered: later
  // heartbeats send their names only.
  std::set<std::string> reported_ GUARDED_BY(mu_);
  // The dispatcher's digest of each job of jobs_ opened from its spec (NamedJob::digest):
  // named in every heartbeat, so that the reply names the job without restating it.
  std::map<std::string, uint64_t> digests_ GUARDED_BY(mu_);
  size_t heartbeat_bytes_ GUARDED_BY(mu_) = 0;
  // Drops what Forget's rules (LinkOptions::forget_after) and the reply's gone jobs allow.
  void ForgetLocked(const std::vector<std::string>& gone) EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Jobs a stream asked for that no reply has named yet, with when first asked:
  // forgotten after kWantFor, at most kMaxWanted (unknown names must not grow the
  // heartbeat without bound).
  static constexpr auto kWantFor = std::chrono::seconds(60);
  static constexpr size_t kMaxWanted = 256;
  std::map<std::string, std::chrono::steady_clock::time_point> wanted_ GUARDED_BY(mu_);
  std::map<std::pair<std::string, std::string>, std::shared_ptr<SplitFeed>> feeds_ GUARDED_BY(mu_);
};

}  // namespace ferry

#endif  // FERRY_WORKER_DISPATCHER_LINK_H_
