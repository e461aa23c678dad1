#include "pipeline/fair_scheduler.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "core/tsan.h"

namespace ferry {

std::shared_ptr<FairScheduler> FairScheduler::Make(std::shared_ptr<tbb::task_arena> arena, int slots,
                                                   std::function<int64_t()> clock) {
  if (!clock) {
    clock = [] {
      return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count();
    };
  }
  return std::shared_ptr<FairScheduler>(new FairScheduler(std::move(arena), std::max(1, slots), std::move(clock)));
}

FairScheduler::Flow::~Flow() { scheduler_->Leave(name_); }

void FairScheduler::Flow::Submit(std::function<void()> task) { scheduler_->Submit(name_, std::move(task)); }

std::shared_ptr<FairScheduler::Flow> FairScheduler::Join(const std::string& name, double weight, int priority) {
  {
    MutexLock lock(&mu_);
    State& s = flows_[name];
    if (s.handles == 0 && s.queue.empty() && s.running == 0) s.vtime = vtime_;  // new, or back from idle
    s.weight = weight > 0 ? weight : 1;
    s.priority = priority;
    ++s.handles;
  }
  return std::shared_ptr<Flow>(new Flow(shared_from_this(), name));
}

void FairScheduler::Leave(const std::string& flow) {
  MutexLock lock(&mu_);
  auto it = flows_.find(flow);
  if (it == flows_.end()) return;
  State& s = it->second;
  if (--s.handles == 0 && s.queue.empty() && s.running == 0) flows_.erase(it);
}

void FairScheduler::Submit(const std::string& flow, std::function<void()> task) {
  MutexLock lock(&mu_);
  State& s = flows_[flow];
  // Back from idle: it starts at the current virtual time (no credit for idle time).
  if (s.queue.empty() && s.running == 0) s.vtime = std::max(s.vtime, vtime_);
  s.queue.push_back(std::move(task));
  Pump();
}

void FairScheduler::Pump() {
  while (running_ < slots_) {
    State* best = nullptr;
    const std::string* best_name = nullptr;
    for (auto& [name, s] : flows_) {
      if (s.queue.empty()) continue;
      if (best == nullptr || s.priority > best->priority ||
          (s.priority == best->priority && s.vtime < best->vtime)) {
        best = &s;
        best_name = &name;
      }
    }
    if (best == nullptr) return;
    std::function<void()> task = std::move(best->queue.front());
    best->queue.pop_front();
    ++best->running;
    ++running_;
    vtime_ = std::max(vtime_, best->vtime);
    auto* raw = new std::function<void()>(std::move(task));
    FERRY_TSAN_RELEASE(raw);
    arena_->enqueue([self = shared_from_this(), name = *best_name, raw] {
      FERRY_TSAN_ACQUIRE(raw);
      std::unique_ptr<std::function<void()>> t(raw);
      const int64_t t0 = self->clock_();
      (*t)();
      const int64_t ns = self->clock_() - t0;
      t.reset();
      self->Done(name, ns);
    });
  }
}

void FairScheduler::Done(const std::string& flow, int64_t ns) {
  MutexLock lock(&mu_);
  --running_;
  auto it = flows_.find(flow);
  if (it != flows_.end()) {
    State& s = it->second;
    --s.running;
    s.busy_ns += ns;
    ++s.tasks;
    s.vtime += double(ns) / s.weight;
    if (s.handles == 0 && s.queue.empty() && s.running == 0) flows_.erase(it);
  }
  Pump();
}

std::map<std::string, FairScheduler::FlowStats> FairScheduler::Stats() const {
  MutexLock lock(&mu_);
  std::map<std::string, FlowStats> out;
  for (const auto& [name, s] : flows_)
    out[name] = {s.weight, s.priority, s.busy_ns, s.tasks, int64_t(s.queue.size()), int64_t(s.running)};
  return out;
}

}  // namespace ferry
