// Mutex, MutexLock and CondVar: std::mutex and std::condition_variable with Clang's
// thread-safety annotations (core/thread_annotations.h), so that -Wthread-safety
// checks every GUARDED_BY member. The house rule for condition waits: write the loop
// out (`while (!ready_) cv_.Wait(&mu_);`) rather than pass a predicate lambda, which
// the analysis would check as a function of its own that holds no lock.
#ifndef FERRY_CORE_MUTEX_H_
#define FERRY_CORE_MUTEX_H_

#include <chrono>
#include <condition_variable>
#include <mutex>

#include "core/thread_annotations.h"

namespace ferry {

class CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() EXCLUSIVE_LOCK_FUNCTION() { mu_.lock(); }
  void Unlock() UNLOCK_FUNCTION() { mu_.unlock(); }
  // Tells the analysis the caller holds the lock (where it cannot see it).
  void AssertHeld() const ASSERT_EXCLUSIVE_LOCK() {}

 private:
  friend class CondVar;
  std::mutex mu_;
};

class SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex* mu) EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) { mu_->Lock(); }
  ~MutexLock() UNLOCK_FUNCTION() { mu_->Unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex* const mu_;
};

class CondVar {
 public:
  // Atomically releases *mu, waits for a signal (or a spurious wake-up), and takes
  // *mu again.
  void Wait(Mutex* mu) EXCLUSIVE_LOCKS_REQUIRED(mu) {
    std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
    cv_.wait(lock);
    lock.release();
  }
  // As Wait, but returns false once `deadline` has passed.
  bool WaitUntil(Mutex* mu, std::chrono::steady_clock::time_point deadline) EXCLUSIVE_LOCKS_REQUIRED(mu) {
    std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
    const bool signalled = cv_.wait_until(lock, deadline) == std::cv_status::no_timeout;
    lock.release();
    return signalled;
  }
  bool WaitFor(Mutex* mu, double seconds) EXCLUSIVE_LOCKS_REQUIRED(mu) {
    return WaitUntil(mu, std::chrono::steady_clock::now() + std::chrono::microseconds(int64_t(seconds * 1e6)));
  }
  void Signal() { cv_.notify_one(); }
  void SignalAll() { cv_.notify_all(); }

 private:
  std::condition_variable cv_;
};

// A deadline `seconds` from now.
inline std::chrono::steady_clock::time_point DeadlineIn(double seconds) {
  return std::chrono::steady_clock::now() + std::chrono::microseconds(int64_t(seconds * 1e6));
}

}  // namespace ferry

#endif  // FERRY_CORE_MUTEX_H_
