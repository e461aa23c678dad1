// Tests of lib/pipeline/fair_scheduler.cc: threads shared by weight, a higher priority
// first, no credit for idle time, on a real one-thread arena.
#include "pipeline/fair_scheduler.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/mutex.h"
#include "pipeline/producer.h"

namespace ferry {
namespace {

void Spin(std::chrono::microseconds d) {
  const auto end = std::chrono::steady_clock::now() + d;
  while (std::chrono::steady_clock::now() < end) {
  }
}

// Submits tasks of `cost` for `flow` so that it always has one waiting, until `n` of
// them ran (each records its flow's name in `order`).
struct Feeder {
  std::shared_ptr<FairScheduler::Flow> flow;
  std::chrono::microseconds cost;
  Mutex* mu;
  std::vector<std::string>* order;
  std::atomic<int>* left;
  void Next() {
    if (left->fetch_sub(1) <= 0) return;
    flow->Submit([this] {
      Spin(cost);
      {
        MutexLock lock(mu);
        order->push_back(flow->name());
      }
      Next();
    });
  }
};

bool WaitFor(const std::function<bool()>& f);

// A clock under which every task takes exactly one microsecond (one slot: the scheduler
// reads it once before a task and once after, never two tasks at once), so that the
// shares are counts of tasks, whatever the machine's load.
std::shared_ptr<FairScheduler> Scheduler() {
  auto ticks = std::make_shared<std::atomic<int64_t>>(0);
  return FairScheduler::Make(MakeDecodeArena(1), 1, [ticks] { return ticks->fetch_add(1000) + 1000; });
}

// Nothing waits or runs: the feeders (on the test's stack) may go.
bool Quiet(const FairScheduler& s) {
  return WaitFor([&] {
    for (const auto& [name, f] : s.Stats())
      if (f.queued > 0 || f.running > 0) return false;
    return true;
  });
}

bool WaitFor(const std::function<bool()>& f) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!f()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

TEST(FairSchedulerTest, SaturatingFlowsShareTheThreadsByWeight) {
  auto scheduler = Scheduler();
  Mutex mu;
  std::vector<std::string> order;
  std::atomic<int> left{200};
  Feeder a{scheduler->Join("a", 3, 0), std::chrono::microseconds(500), &mu, &order, &left};
  Feeder b{scheduler->Join("b", 1, 0), std::chrono::microseconds(500), &mu, &order, &left};
  a.Next();
  b.Next();
  a.Next();  // two waiting each: never idle while the other runs
  b.Next();
  ASSERT_TRUE(WaitFor([&] { return left.load() <= 0 && scheduler->Stats()["a"].queued == 0; }));
  ASSERT_TRUE(WaitFor([&] {
    MutexLock lock(&mu);
    return order.size() >= 196;
  }));
  const auto stats = scheduler->Stats();
  const double ratio = double(stats.at("a").tasks) / double(stats.at("b").tasks);
  EXPECT_GT(ratio, 2.8) << "tasks of equal time a : b, against weights 3 : 1";
  EXPECT_LT(ratio, 3.2);
  EXPECT_NEAR(double(stats.at("a").busy_ns) / double(stats.at("b").busy_ns), ratio, 1e-9);
  EXPECT_TRUE(Quiet(*scheduler));
}

TEST(FairSchedulerTest, AHigherPriorityTakesTheNextFreeThread) {
  auto scheduler = Scheduler();
  Mutex mu;
  std::vector<std::string> order;
  std::atomic<int> left{1000};
  Feeder low{scheduler->Join("low", 10, 0), std::chrono::microseconds(300), &mu, &order, &left};
  low.Next();
  low.Next();
  ASSERT_TRUE(WaitFor([&] {
    MutexLock lock(&mu);
    return order.size() >= 20;
  }));
  auto high = scheduler->Join("high", 1, 5);
  std::atomic<int> ran{0};
  size_t submitted_at;
  {
    MutexLock lock(&mu);
    submitted_at = order.size();
  }
  for (int i = 0; i < 3; ++i) high->Submit([&] {
      MutexLock lock(&mu);
      order.push_back("high");
      ++ran;
    });
  ASSERT_TRUE(WaitFor([&] { return ran.load() == 3; }));
  left = 0;
  ASSERT_TRUE(Quiet(*scheduler));
  MutexLock lock(&mu);
  size_t first = 0;
  while (first < order.size() && order[first] != "high") ++first;
  ASSERT_LT(first, order.size());
  EXPECT_LE(first, submitted_at + 2) << "at most the task running when it came (and one the feeder queued) first";
  EXPECT_EQ(order[first + 1], "high");
  EXPECT_EQ(order[first + 2], "high") << "its three before any more of the lower priority";
}

TEST(FairSchedulerTest, AFlowBackFromIdleHasNoCreditForItsIdleTime) {
  auto scheduler = Scheduler();
  Mutex mu;
  std::vector<std::string> order;
  std::atomic<int> left_a{1000};
  Feeder a{scheduler->Join("a", 1, 0), std::chrono::microseconds(300), &mu, &order, &left_a};
  auto b_flow = scheduler->Join("b", 1, 0);  // joined, but idle while a runs alone
  a.Next();
  a.Next();
  ASSERT_TRUE(WaitFor([&] {
    MutexLock lock(&mu);
    return order.size() >= 60;
  }));
  std::atomic<int> left_b{20};
  Feeder b{b_flow, std::chrono::microseconds(300), &mu, &order, &left_b};
  size_t from;
  {
    MutexLock lock(&mu);
    from = order.size();
  }
  b.Next();
  b.Next();
  ASSERT_TRUE(WaitFor([&] { return left_b.load() <= 0; }));
  left_a = 0;
  ASSERT_TRUE(Quiet(*scheduler));
  MutexLock lock(&mu);
  // From b's return, equal weights alternate: no run of b's tasks pays back a's 60.
  int run = 0, longest = 0;
  for (size_t i = from; i < order.size(); ++i) {
    run = order[i] == "b" ? run + 1 : 0;
    longest = std::max(longest, run);
  }
  EXPECT_LE(longest, 2) << "b interleaves with a";
}

}  // namespace
}  // namespace ferry
