// The one retry policy (lib/net/backoff.h): delays double up to the maximum, progress
// starts over, and the policy gives up after its failures or its time.
#include "net/backoff.h"

#include <gtest/gtest.h>

#include <chrono>

namespace ferry::net {
namespace {

using std::chrono::milliseconds;

TEST(BackoffTest, DelaysDoubleUpToTheMaximum) {
  Backoff b({0.1, 0.5, -1, 0});
  EXPECT_EQ(*b.Failed(), milliseconds(100));
  EXPECT_EQ(*b.Failed(), milliseconds(200));
  EXPECT_EQ(*b.Failed(), milliseconds(400));
  EXPECT_EQ(*b.Failed(), milliseconds(500));
  EXPECT_EQ(*b.Failed(), milliseconds(500));
  EXPECT_EQ(b.failures(), 5);
  b.Succeeded();
  EXPECT_EQ(*b.Failed(), milliseconds(100)) << "progress: the back-off starts over";
}

TEST(BackoffTest, GivesUpAfterTooManyFailures) {
  Backoff b({0.1, 2.0, 3, 0});
  EXPECT_TRUE(b.Failed());
  EXPECT_TRUE(b.Failed());
  EXPECT_TRUE(b.Failed());
  EXPECT_FALSE(b.Failed()) << "the fourth consecutive failure";
  b.Succeeded();
  EXPECT_TRUE(b.Failed());
}

TEST(BackoffTest, GivesUpAfterFailingForTooLong) {
  Backoff b({0.1, 2.0, -1, 10});
  const auto t0 = Backoff::Clock::now();
  EXPECT_TRUE(b.Failed(t0));
  EXPECT_TRUE(b.Failed(t0 + std::chrono::seconds(9)));
  EXPECT_FALSE(b.Failed(t0 + std::chrono::seconds(11)));
  b.Succeeded();
  EXPECT_TRUE(b.Failed(t0 + std::chrono::seconds(12))) << "the clock starts at the first failure";
}

TEST(BackoffTest, ZeroFailuresToleratedMeansNoRetry) {
  Backoff b({0.1, 2.0, 0, 0});
  EXPECT_FALSE(b.Failed());
}

TEST(BackoffTest, NeverGivesUpWithoutLimits) {
  Backoff b({0.01, 0.02, -1, 0});
  for (int i = 0; i < 1000; ++i) ASSERT_TRUE(b.Failed());
}

}  // namespace
}  // namespace ferry::net
