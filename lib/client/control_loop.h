// ControlLoop: a dispatcher-mode client's side of the control plane, on a thread of
// its own (its calls block; net/control_channel.h).
//
// Each round:
//   1. once: GetOrCreateJob (join the named job), then RestoreConsumer when resuming;
//   2. AckSplits for the splits the ledger has done, and/or GetJobStatus for the
//      epoch deterministic order waits on (progress, finished, my splits);
//   3. ReportWorker for workers a stream found refusing connections;
//   4. every poll interval, GetWorkers (the host opens streams to new ones).
// It sleeps a poll interval between rounds, or less when the host has something to
// say (Notify). Transient failures back off (net/backoff.h) until the dispatcher has
// been unreachable for the policy's give-up time; other errors fail the iterator.
//
// Threading: the host's callbacks run on the loop's thread; Notify() and Stop() may
// be called from any thread.
#ifndef FERRY_CLIENT_CONTROL_LOOP_H_
#define FERRY_CLIENT_CONTROL_LOOP_H_

#include <chrono>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "client/ledger.h"
#include "core/mutex.h"
#include "ferry/client.h"
#include "ferry/job.h"
#include "net/backoff.h"
#include "net/control_channel.h"
#include "wire/control.h"

namespace ferry::client {

class ControlHost {
 public:
  virtual ~ControlHost() = default;
  struct Pending {
    std::vector<SplitId> acks;  // done and not yet acknowledged (left in place until OnAcked)
    uint64_t status_epoch = 0;
    std::vector<std::string> unreachable;  // taken: Requeue() what could not be reported
    wire::ConsumerLoad load;               // for the dispatcher's advice
  };
  virtual Pending TakePending() = 0;
  virtual void Requeue(std::vector<std::string> unreachable) = 0;
  virtual void OnJoined(const JobSpec& job) = 0;
  // The first `n` pending acks were acknowledged; the job's progress in the reply.
  virtual void OnAcked(size_t n, uint64_t first_open, bool finished) = 0;
  virtual void OnStatus(uint64_t epoch, const JobStatus& status) = 0;
  // The dispatcher no longer knows the job: it finished and was garbage-collected.
  virtual void OnJobGone() = 0;
  virtual void OnWorkers(const std::vector<std::string>& addresses) = 0;
  virtual void OnFailed(const Status& s) = 0;
  virtual bool Finished() = 0;
};

struct ControlConfig {
  std::string dispatcher, token, consumer_id;
  std::shared_ptr<net::TlsContext> tls;  // a client TLS context, or null
  wire::NamedJob job;
  std::optional<IteratorState> restore;
  bool deterministic = false;
  double poll_interval_s = 0.1;
  std::vector<int> cpus;  // the control thread's CPUs (ClientOptions::io_cpus); empty: unpinned
  net::RetryPolicy retry;  // give_up_after_s: how long the dispatcher may be unreachable
};

class ControlLoop {
 public:
  ControlLoop(ControlConfig config, ControlHost* host);
  ~ControlLoop();  // Stop(), then Join()

  void Start();
  // Something to tell the dispatcher (an ack, an unreachable worker): a round now.
  // Harmless once stopped.
  void Notify();
  // Ends the loop: a call in flight returns within 50 ms, then the loop acknowledges
  // what is pending (on a fresh connection, for at most 2 s) and exits.
  void Stop();
  // Waits for the loop's thread to exit (after Stop(), or once the job finished or
  // failed). Idempotent.
  void Join();

 private:
  void Run();
  Status Round(bool* joined, std::chrono::steady_clock::time_point* next_workers);
  // Sleeps up to `seconds`, or until Notify() or Stop(). False once stopping.
  bool Sleep(double seconds);
  bool stopping();
  void FinalAcks(const std::vector<SplitId>& acks);
  // FailedPrecondition if the dispatcher's state identity changed since the first
  // reply (it lost its work dir): its "no such job" is then no news of the job's end.
  Status CheckState();

  const ControlConfig config_;
  ControlHost* const host_;
  net::ControlChannel channel_;  // the loop thread's; Interrupt() from Stop()
  std::optional<IteratorState> restore_;  // loop thread: still to tell the dispatcher
  std::string state_;                     // loop thread: the dispatcher's state identity
  std::thread thread_;
  Mutex mu_;
  CondVar cv_;
  bool stop_ GUARDED_BY(mu_) = false;
  bool poked_ GUARDED_BY(mu_) = false;
};

}  // namespace ferry::client

#endif  // FERRY_CLIENT_CONTROL_LOOP_H_
