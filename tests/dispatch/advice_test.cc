// The dispatcher's advice (lib/dispatch/advice.h) from load series, without sockets:
// demand from the consumers' compute time, capacity from the workers' busy time, the
// recommended count, and what limits the job.
#include "dispatch/advice.h"

#include <gtest/gtest.h>

#include <cstdint>

namespace ferry::dispatch {
namespace {

constexpr int64_t kS = 1000000000;  // ns per second

// A consumer at `rate_needed` samples/s of compute that got `rate_got` samples/s over
// `seconds`, reporting every 100 ms; workers each producing `each` samples/s, busy the
// given fraction of the time.
void Feed(LoadTracker& t, double rate_needed, double rate_got, const std::vector<std::pair<double, double>>& workers,
          int seconds = 5) {
  for (int step = 0; step <= seconds * 10; ++step) {
    const double s = step / 10.0;
    const double samples = rate_got * s;
    const double compute = samples / rate_needed;  // seconds the trainer computed
    t.Consumer("job", "c1", {int64_t((s - compute) * kS), int64_t(s * kS), int64_t(samples)}, int64_t(s * 1000));
    for (size_t w = 0; w < workers.size(); ++w) {
      const auto [each, busy] = workers[w];
      // One sample in 8 timed step by step: decode 0.6 ms, rand_augment 0.3 ms, output 0.1 ms.
      const int64_t timed = int64_t(each * s / 8);
      t.Worker("w" + std::to_string(w),
               {int64_t(each * s), int64_t(busy * s * kS), 0, int64_t(0.6 * each * s * 1e6), 0,
                {{"decode", 600000 * timed, timed}, {"output", 100000 * timed, timed},
                 {"rand_augment", 300000 * timed, timed}}},
               int64_t(s * 1000));
    }
  }
}

// The jobs' shares of their workers' threads, from each worker's per-job thread time.
TEST(AdviceTest, EachJobsShareOfItsWorkersThreads) {
  LoadTracker t;
  for (int step = 0; step <= 30; ++step) {
    const double s = step / 10.0;
    // w0: job a 0.75 s a second, job b 0.25; w1: job a alone, at half its time.
    wire::WorkerLoad w0{int64_t(100 * s), int64_t(s * kS), 0, 0, 0, {},
                        {{"a", int64_t(0.75 * s * kS)}, {"b", int64_t(0.25 * s * kS)}}};
    wire::WorkerLoad w1{int64_t(50 * s), int64_t(0.5 * s * kS), 0, 0, 0, {}, {{"a", int64_t(0.5 * s * kS)}}};
    t.Worker("w0", w0, int64_t(s * 1000));
    t.Worker("w1", w1, int64_t(s * 1000));
  }
  // Over both workers: a had 1.25 of 1.5 thread-seconds a second; b 0.25. Only w0: 0.75 and 0.25.
  EXPECT_NEAR(t.AdviceFor("a", {}, {"w0", "w1"}).thread_share, 1.25 / 1.5, 1e-6);
  EXPECT_NEAR(t.AdviceFor("b", {}, {"w0", "w1"}).thread_share, 0.25 / 1.5, 1e-6);
  EXPECT_NEAR(t.AdviceFor("b", {}, {"w0"}).thread_share, 0.25, 1e-6);
  EXPECT_EQ(t.AdviceFor("c", {}, {"w9"}).thread_share, -1) << "no worker reports: not known";
}

TEST(AdviceTest, AnInputBoundJobGetsTheWorkersItsDemandNeeds) {
  LoadTracker t;
  // Needs 1000 samples/s; 2 workers of capacity 400 (busy all the time) give 800.
  Feed(t, 1000, 800, {{400, 1.0}, {400, 1.0}});
  const LoadTracker::Advice a = t.AdviceFor("job", {"c1"}, {"w0", "w1"});
  ASSERT_TRUE(a.known);
  EXPECT_NEAR(a.input_wait, 0.2, 0.01);
  EXPECT_NEAR(a.demand, 1000, 1);
  EXPECT_EQ(a.recommended_workers, 3);  // ceil(1000 / 400)
  EXPECT_NE(a.limited_by.find("workers: decode"), std::string::npos) << a.limited_by;
  // The costliest steps, by name, with their shares of a sample's time.
  ASSERT_EQ(a.op_shares.size(), 3u);
  EXPECT_EQ(a.op_shares[0].first, "decode");
  EXPECT_NEAR(a.op_shares[0].second, 0.6, 0.01);
  EXPECT_EQ(a.op_shares[1].first, "rand_augment");
  EXPECT_NEAR(a.op_shares[1].second, 0.3, 0.01);
  EXPECT_NE(a.limited_by.find("costliest steps: decode 60%, rand_augment 30%, output 10%"), std::string::npos)
      << a.limited_by;
  const LoadTracker::WorkerRate r = t.RateOf("w0");
  EXPECT_NEAR(r.capacity, 400, 1);
  EXPECT_NEAR(r.busy, 1.0, 0.01);
}

TEST(AdviceTest, ATrainerBoundJobIsAdvisedFewerWorkersAndBlamesTheTrainer) {
  LoadTracker t;
  // Needs 300 samples/s, gets it; 4 workers each busy 15% of the time at capacity 500.
  Feed(t, 300, 300, {{75, 0.15}, {75, 0.15}, {75, 0.15}, {75, 0.15}});
  const LoadTracker::Advice a = t.AdviceFor("job", {"c1"}, {"w0", "w1", "w2", "w3"});
  EXPECT_NEAR(a.input_wait, 0, 0.01);
  EXPECT_EQ(a.recommended_workers, 1);
  EXPECT_NE(a.limited_by.find("the trainer"), std::string::npos) << a.limited_by;
}

TEST(AdviceTest, IdleWorkersAndAWaitingTrainerPointAtThePathBetween) {
  LoadTracker t;
  Feed(t, 1000, 500, {{250, 0.3}, {250, 0.3}});
  const LoadTracker::Advice a = t.AdviceFor("job", {"c1"}, {"w0", "w1"});
  EXPECT_NE(a.limited_by.find("the path to the trainer"), std::string::npos) << a.limited_by;
}

TEST(AdviceTest, UnknownUntilAWindowIsReportedAndForgottenWhenGone) {
  LoadTracker t;
  EXPECT_FALSE(t.AdviceFor("job", {"c1"}, {}).known);
  t.Consumer("job", "c1", {0, kS / 2, 10}, 0);
  t.Consumer("job", "c1", {0, kS, 20}, 500);  // half a second: not a window yet
  EXPECT_FALSE(t.AdviceFor("job", {"c1"}, {}).known);
  Feed(t, 100, 100, {{100, 1.0}});
  EXPECT_TRUE(t.AdviceFor("job", {"c1"}, {"w0"}).known);
  EXPECT_EQ(t.AdviceFor("job", {"c1"}, {}).recommended_workers, 0) << "no worker capacity known";
  t.Keep({}, std::set<std::string>{});
  EXPECT_FALSE(t.AdviceFor("job", {"c1"}, {"w0"}).known);
  EXPECT_FALSE(t.RateOf("w0").known);
}

TEST(AdviceTest, ARestartedPeerStartsAFreshSeries) {
  LoadTracker t;
  Feed(t, 1000, 800, {{400, 1.0}});
  // The consumer restarted: its cumulative figures start again from zero.
  t.Consumer("job", "c1", {0, kS / 10, 10}, 6000);
  EXPECT_FALSE(t.AdviceFor("job", {"c1"}, {"w0"}).known);
}

TEST(AdviceTest, TheWindowKeepsTheLastTenSeconds) {
  LoadTracker t;
  Feed(t, 1000, 1000, {{1000, 1.0}}, 30);  // 30 s at no wait...
  for (int step = 1; step <= 100; ++step) {  // ...then 10 s waiting half the time
    const double s = 30 + step / 10.0;
    t.Consumer("job", "c1", {int64_t(step / 10.0 * 0.5 * kS), int64_t(s * kS), int64_t(30000 + 500 * step / 10.0)},
               int64_t(s * 1000));
  }
  EXPECT_NEAR(t.AdviceFor("job", {"c1"}, {}).input_wait, 0.5, 0.02);
}

// A series keeps its points half a second apart (the newest overwritten in between):
// the rates still cover the last ten seconds, whatever the heartbeat's period.
TEST(AdviceTest, ThinnedPointsStillSpanTheWindow) {
  for (int period_ms : {30, 100, 170, 1000}) {
    LoadTracker t;
    double samples = 0;
    for (int64_t ms = 0; ms <= 25000; ms += period_ms) {
      samples = ms <= 15000 ? 0.4 * double(ms) : 6000 + 0.8 * double(ms - 15000);  // 400/s, then 800/s
      t.Worker("w0", {int64_t(samples), ms * 1000000, 0, 0, 0, {}}, ms);
    }
    const LoadTracker::WorkerRate r = t.RateOf("w0");
    ASSERT_TRUE(r.known) << period_ms;
    EXPECT_NEAR(r.rate, 800, 800 * 0.05) << "every " << period_ms << " ms";
    EXPECT_NEAR(r.busy, 1.0, 0.01);
  }
}

TEST(AdviceTest, NonsenseFiguresAreIgnoredAndAdviceStaysBounded) {
  LoadTracker t;
  Feed(t, 1000, 800, {{400, 1.0}});
  const LoadTracker::Advice before = t.AdviceFor("job", {"c1"}, {"w0"});
  // Negative or overflowing figures (a broken or hostile peer) change nothing.
  t.Consumer("job", "c1", {-5, INT64_MAX, INT64_MIN}, 5100);
  t.Worker("w0", {INT64_MAX, -1, 0, 0, 0, {}}, 5100);
  const LoadTracker::Advice after = t.AdviceFor("job", {"c1"}, {"w0"});
  EXPECT_EQ(after.recommended_workers, before.recommended_workers);
  EXPECT_DOUBLE_EQ(after.demand, before.demand);
  // A demand of billions against a capacity of one sample a second: a bounded count.
  LoadTracker big;
  for (int step = 0; step <= 20; ++step) {
    const int64_t ms = step * 100;
    big.Consumer("job", "c1", {0, ms * 1000000, int64_t(1) << 58 >> (20 - step)}, ms);
    big.Worker("w0", {step, int64_t(step) * kS / 10, 0, 0, 0, {}}, ms);
  }
  const LoadTracker::Advice a = big.AdviceFor("job", {"c1"}, {"w0"});
  EXPECT_EQ(a.recommended_workers, LoadTracker::kMaxRecommended);
}

TEST(AdviceTest, ASilentConsumerDoesNotKeepAnOldWindow) {
  LoadTracker t;
  Feed(t, 1000, 800, {{400, 1.0}});  // c1 reports for 5 s
  EXPECT_TRUE(t.AdviceFor("job", {"c1"}, {"w0"}).known);
  // c1 goes silent; the worker goes on reporting for another 11 s.
  for (int step = 51; step <= 160; ++step) t.Worker("w0", {40 * step, int64_t(step) * kS / 10, 0, 0, 0, {}}, step * 100);
  EXPECT_FALSE(t.AdviceFor("job", {"c1"}, {"w0"}).known) << "c1's window is over 10 s old";
  EXPECT_TRUE(t.RateOf("w0").known);
}

}  // namespace
}  // namespace ferry::dispatch

namespace ferry::dispatch {
namespace {

TEST(AdviceTest, ReadsAsTheLimitNameTheStore) {
  LoadTracker t;
  constexpr double kS = 1e9;
  // The trainer needs 1000 samples/s; one worker of capacity 400, 62% of each sample's
  // time waiting on reads from a bucket.
  for (int step = 0; step <= 100; ++step) {
    const double s = step / 10.0;
    const double samples = 400 * s;
    t.Consumer("job", "c1", {int64_t((s - samples / 1000) * kS), int64_t(s * kS), int64_t(samples)},
               int64_t(s * 1000));
    t.Worker("w0", {int64_t(samples), int64_t(s * kS), int64_t(0.62 * s * kS), int64_t(0.30 * s * kS),
                    int64_t(0.08 * s * kS), {}},
             int64_t(s * 1000));
  }
  const LoadTracker::Advice a = t.AdviceFor("job", {"c1"}, {"w0"}, "S3 (s3://photos)");
  ASSERT_TRUE(a.known);
  EXPECT_NE(a.limited_by.find("workers: reads: S3 (s3://photos) (62% of a sample's time)"), std::string::npos)
      << a.limited_by;
  EXPECT_NE(t.AdviceFor("job", {"c1"}, {"w0"}).limited_by.find("reads: files"), std::string::npos);
}

}  // namespace
}  // namespace ferry::dispatch
