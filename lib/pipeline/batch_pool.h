// BatchPool: a bounded pool of 64-byte-aligned buffers for batches.
//
// Bounded memory: at most `capacity` buffers are in the pipeline (being filled, or
// finished and not yet handed to the consumer); Acquire() blocks while that many are.
// A buffer handed to the consumer is Detach()ed: it no longer counts, because the
// consumer may keep it as long as it likes (a trainer that collects its labels, a
// Python tensor kept in a list) and the pipeline must not wait for it. A buffer
// returns when the last shared_ptr to it dies; at most `capacity` free buffers are
// kept for reuse. Thread-safe.
#ifndef FERRY_PIPELINE_BATCH_POOL_H_
#define FERRY_PIPELINE_BATCH_POOL_H_

#include <cstdlib>
#include <memory>
#include <new>
#include <set>
#include <vector>

#include "core/mutex.h"

namespace ferry {

class BatchPool : public std::enable_shared_from_this<BatchPool> {
 public:
  static std::shared_ptr<BatchPool> Create(size_t buffer_bytes, int capacity) {
    return std::shared_ptr<BatchPool>(new BatchPool(buffer_bytes, capacity));
  }
  ~BatchPool() {
    MutexLock lock(&mu_);
    for (void* p : free_) std::free(p);
  }

  // Blocks until a buffer is free or Cancel() was called (then returns nullptr).
  // wait = false: does not wait, and may go past the capacity (a few exceptional
  // buffers, see BatchProducer's refill); they count until released or detached.
  std::shared_ptr<void> Acquire(bool wait = true) {
    MutexLock lock(&mu_);
    while (wait && !cancelled_ && in_pipeline_ >= capacity_) cv_.Wait(&mu_);
    if (cancelled_) return nullptr;
    void* p;
    if (!free_.empty()) {
      p = free_.back();
      free_.pop_back();
    } else {
      p = std::aligned_alloc(64, (bytes_ + 63) / 64 * 64);
      if (p == nullptr) throw std::bad_alloc();
    }
    ++in_pipeline_;
    std::weak_ptr<BatchPool> weak = weak_from_this();
    return std::shared_ptr<void>(p, [weak](void* q) {
      if (auto pool = weak.lock()) pool->Release(q);
      else std::free(q);
    });
  }

  // The buffer starting at `p` has been handed to the consumer.
  void Detach(const void* p) {
    MutexLock lock(&mu_);
    if (detached_.insert(p).second) {
      --in_pipeline_;
      cv_.Signal();
    }
  }

  void Cancel() {
    MutexLock lock(&mu_);
    cancelled_ = true;
    cv_.SignalAll();
  }

  size_t buffer_bytes() const { return bytes_; }

 private:
  BatchPool(size_t bytes, int capacity) : bytes_(bytes), capacity_(capacity) {}
  void Release(void* p) {
    MutexLock lock(&mu_);
    if (detached_.erase(p) == 0) --in_pipeline_;
    if (int(free_.size()) < capacity_) {
      free_.push_back(p);
    } else {
      std::free(p);
    }
    cv_.Signal();
  }

  const size_t bytes_;
  const int capacity_;
  Mutex mu_;
  CondVar cv_;
  std::vector<void*> free_ GUARDED_BY(mu_);
  std::set<const void*> detached_ GUARDED_BY(mu_);  // out with the consumer
  int in_pipeline_ GUARDED_BY(mu_) = 0;
  bool cancelled_ GUARDED_BY(mu_) = false;
};

}  // namespace ferry

#endif  // FERRY_PIPELINE_BATCH_POOL_H_
