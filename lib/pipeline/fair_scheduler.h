// FairScheduler: a worker's decode threads shared among its jobs by weight and
// priority (JobSpec::weight, JobSpec::priority).
//
// Producers submit their batches here instead of straight into the decode arena; the
// scheduler keeps at most `slots` of them in the arena (its threads) and, whenever one
// finishes, starts the next from the flow (a job) of the highest priority with work
// waiting and, among those, the least virtual time: a flow's virtual time grows by
// the thread time its batches took divided by its weight. Two saturating jobs of
// weights 3 and 1 thus get three and one parts of the threads; a job of a higher
// priority takes the next free thread (within one batch's time); a flow that was idle
// starts at the current virtual time, with no credit for its idle time (start-time
// fair queueing). Thread-safe.
#ifndef FERRY_PIPELINE_FAIR_SCHEDULER_H_
#define FERRY_PIPELINE_FAIR_SCHEDULER_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <oneapi/tbb/task_arena.h>

#include "core/mutex.h"
#include "core/thread_annotations.h"

namespace ferry {

class FairScheduler : public std::enable_shared_from_this<FairScheduler> {
 public:
  // A job's share of the threads. Streams of one job share one flow (Join by name).
  class Flow {
   public:
    ~Flow();
    Flow(const Flow&) = delete;
    Flow& operator=(const Flow&) = delete;
    // Runs `task` on the arena when the flow's turn comes. Never blocks.
    void Submit(std::function<void()> task);
    const std::string& name() const { return name_; }

   private:
    friend class FairScheduler;
    Flow(std::shared_ptr<FairScheduler> s, std::string name) : scheduler_(std::move(s)), name_(std::move(name)) {}
    const std::shared_ptr<FairScheduler> scheduler_;
    const std::string name_;
  };

  struct FlowStats {
    double weight = 1;
    int priority = 0;
    int64_t busy_ns = 0;   // thread time its tasks took
    int64_t tasks = 0;
    int64_t queued = 0;    // waiting now
    int64_t running = 0;   // in the arena now
  };

  // `clock` (nanoseconds) times the tasks; null: the steady clock. (Tests give one
  // that makes every task take the same time.)
  static std::shared_ptr<FairScheduler> Make(std::shared_ptr<tbb::task_arena> arena, int slots,
                                             std::function<int64_t()> clock = nullptr);

  // The flow `name` (created, or the one that exists: its weight and priority are set
  // to these). It is forgotten once no handle is held and nothing of it waits.
  std::shared_ptr<Flow> Join(const std::string& name, double weight, int priority) LOCKS_EXCLUDED(mu_);

  // Every known flow's figures, by name.
  std::map<std::string, FlowStats> Stats() const LOCKS_EXCLUDED(mu_);

 private:
  struct State {
    double weight = 1;
    int priority = 0;
    double vtime = 0;
    std::deque<std::function<void()>> queue;
    int running = 0;
    int64_t busy_ns = 0, tasks = 0;
    int handles = 0;
  };

  FairScheduler(std::shared_ptr<tbb::task_arena> arena, int slots, std::function<int64_t()> clock)
      : arena_(std::move(arena)), slots_(slots), clock_(std::move(clock)) {}
  void Submit(const std::string& flow, std::function<void()> task) LOCKS_EXCLUDED(mu_);
  void Leave(const std::string& flow) LOCKS_EXCLUDED(mu_);
  // Starts waiting tasks while slots are free.
  void Pump() EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Done(const std::string& flow, int64_t ns) LOCKS_EXCLUDED(mu_);

  const std::shared_ptr<tbb::task_arena> arena_;
  const int slots_;
  const std::function<int64_t()> clock_;
  mutable Mutex mu_;
  std::map<std::string, State> flows_ GUARDED_BY(mu_);
  int running_ GUARDED_BY(mu_) = 0;
  double vtime_ GUARDED_BY(mu_) = 0;  // the virtual time of the last task started
};

}  // namespace ferry

#endif  // FERRY_PIPELINE_FAIR_SCHEDULER_H_
