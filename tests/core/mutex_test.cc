// Mutex, MutexLock and CondVar (lib/core/mutex.h): exclusion, and condition waits that
// wake on a signal and give up at their deadline.
#include "core/mutex.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <vector>

namespace ferry {
namespace {

TEST(MutexTest, ExcludesAcrossThreads) {
  Mutex mu;
  int64_t n = 0;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 10000; ++i) {
        MutexLock lock(&mu);
        ++n;
      }
    });
  }
  for (auto& t : threads) t.join();
  MutexLock lock(&mu);
  EXPECT_EQ(n, 40000);
}

TEST(CondVarTest, WaitWakesOnSignalAndWaitUntilTimesOut) {
  Mutex mu;
  CondVar cv;
  bool ready = false;
  std::thread signaller([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    MutexLock lock(&mu);
    ready = true;
    cv.SignalAll();
  });
  {
    MutexLock lock(&mu);
    while (!ready) cv.Wait(&mu);
    EXPECT_TRUE(ready);
  }
  signaller.join();
  const auto t0 = std::chrono::steady_clock::now();
  const auto deadline = DeadlineIn(0.05);
  MutexLock lock(&mu);
  int wakeups = 0;
  while (cv.WaitUntil(&mu, deadline)) ++wakeups;  // nobody signals; spurious wake-ups may happen
  EXPECT_LT(wakeups, 100);
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(45)) << "returned before the deadline";
}

}  // namespace
}  // namespace ferry
