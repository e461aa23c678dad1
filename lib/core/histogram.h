// Histogram: a lock-free latency histogram for the daemons' /metrics, with fixed
// bucket bounds (Prometheus' cumulative `le` buckets are derived when read).
//
// Observe() is two relaxed atomic adds and a search of 20 bounds: cheap enough for
// once per sample on every decode thread (~1 us of a ~600 us decode). Readers take a
// Snapshot, which is consistent per bucket, not across buckets (a scrape racing an
// observation may see the count and the sum disagree by one sample: Prometheus'
// rate() does not care).
#ifndef FERRY_CORE_HISTOGRAM_H_
#define FERRY_CORE_HISTOGRAM_H_

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>

namespace ferry {

class Histogram {
 public:
  // Upper bounds in seconds: 25 us to ~13 s, doubling. Wide enough for a sample's
  // read or decode (tens of microseconds to milliseconds) and a batch's wait for
  // memory or credits (milliseconds to seconds) with one set of buckets.
  static constexpr int kBuckets = 20;
  static constexpr std::array<double, kBuckets> Bounds() {
    std::array<double, kBuckets> b{};
    double v = 25e-6;
    for (double& x : b) {
      x = v;
      v *= 2;
    }
    return b;
  }

  void Observe(double seconds) {
    static constexpr std::array<double, kBuckets> kBounds = Bounds();
    const size_t i = size_t(std::lower_bound(kBounds.begin(), kBounds.end(), seconds) - kBounds.begin());
    counts_[i].fetch_add(1, std::memory_order_relaxed);
    sum_ns_.fetch_add(uint64_t(std::max(0.0, seconds) * 1e9), std::memory_order_relaxed);
  }
  void ObserveNs(int64_t ns) { Observe(double(ns) * 1e-9); }

  struct Snapshot {
    std::array<double, kBuckets> bounds = Bounds();
    std::array<uint64_t, kBuckets + 1> counts{};  // per bucket (not cumulative); the last is +Inf
    double sum = 0;                               // seconds
    uint64_t count = 0;
  };
  Snapshot Read() const {
    Snapshot s;
    for (size_t i = 0; i < counts_.size(); ++i) {
      s.counts[i] = counts_[i].load(std::memory_order_relaxed);
      s.count += s.counts[i];
    }
    s.sum = double(sum_ns_.load(std::memory_order_relaxed)) * 1e-9;
    return s;
  }

 private:
  std::array<std::atomic<uint64_t>, kBuckets + 1> counts_{};
  std::atomic<uint64_t> sum_ns_{0};
};

// Nanoseconds since an arbitrary epoch, for stage timings.
inline int64_t MonoNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace ferry

#endif  // FERRY_CORE_HISTOGRAM_H_
