// PipelineStats: what a BatchProducer's stages cost, for the worker's /metrics.
// Shared by every producer of a worker (one object, thread-safe, lock-free).
//
//   read      a sample's bytes from storage (Dataset::ReadSample)
//   decode    a sample's decode, up to the oriented crop window (the fused JPEG
//             decode reads only that window)
//   augment   the rest of SampleProcessor::Process: resize, jitter, flip, layout
//   assemble  a batch's wait for memory (the bound on batches in flight: a slow
//             consumer shows here) and its compaction around skipped files
// The worker adds the send stage (a batch's wait for credits and the socket).
//
// Op costs: one sample in kOpSampling is timed step by step (read, decode, each op of
// the pipeline by name, output), so that the metrics and the dispatcher's advice can
// name the costliest op without timing every op of every sample.
#ifndef FERRY_PIPELINE_STATS_H_
#define FERRY_PIPELINE_STATS_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/histogram.h"
#include "core/mutex.h"
#include "ferry/status.h"

namespace ferry {

// Each step's sampled cost, by name, summed over every producer of a worker.
// Thread-safe (a mutex: only sampled samples take it).
class OpCosts {
 public:
  struct Cost {
    int64_t ns = 0, samples = 0;
  };
  void Add(const std::vector<std::string>& names, const std::vector<int64_t>& ns) LOCKS_EXCLUDED(mu_) {
    MutexLock lock(&mu_);
    for (size_t i = 0; i < names.size() && i < ns.size(); ++i) {
      Cost& c = costs_[names[i]];
      c.ns += ns[i];
      c.samples += 1;
    }
  }
  void Add(const std::string& name, int64_t ns) LOCKS_EXCLUDED(mu_) {
    MutexLock lock(&mu_);
    Cost& c = costs_[name];
    c.ns += ns;
    c.samples += 1;
  }
  std::map<std::string, Cost> Read() const LOCKS_EXCLUDED(mu_) {
    MutexLock lock(&mu_);
    return costs_;
  }

 private:
  mutable Mutex mu_;
  std::map<std::string, Cost> costs_ GUARDED_BY(mu_);
};

struct PipelineStats {
  // One sample in this many is timed step by step (OpCosts).
  static constexpr int kOpSampling = 8;
  Histogram read, decode, augment, assemble;
  OpCosts ops;
  std::atomic<int64_t> samples{0};  // decoded into a batch

  // Busy time: while at least one batch is being made (decoded, augmented,
  // assembled) by any producer; not while they wait for batch memory (a consumer that
  // has not taken the batches before) or for splits. samples / busy time is what the
  // worker could produce (its capacity, for the dispatcher's advice), whatever its
  // consumers take. Each batch task calls Busy(true) as it starts, Busy(false) as it
  // ends.
  void Busy(bool busy) LOCKS_EXCLUDED(mu_) {
    MutexLock lock(&mu_);
    const int64_t now = MonoNs();
    if (busy && busy_producers_++ == 0) busy_since_ = now;
    if (!busy && --busy_producers_ == 0) busy_ns_ += now - busy_since_;
  }
  int64_t BusyNs() const LOCKS_EXCLUDED(mu_) {
    MutexLock lock(&mu_);
    return busy_ns_ + (busy_producers_ > 0 ? MonoNs() - busy_since_ : 0);
  }

  // Why a sample was skipped: its file could not be read, or, once read, what the
  // decoder said (augment.h lists the codes).
  enum Reason { kReadFailed, kCorrupt, kNotAnImage, kUnsupportedFormat, kTooLarge, kOther, kNumReasons };
  static constexpr std::array<std::string_view, kNumReasons> kReasonNames = {
      "read_failed", "corrupt", "not_an_image", "unsupported_format", "too_large", "other"};
  static Reason DecodeReason(StatusCode c) {
    switch (c) {
      case StatusCode::kDataLoss: return kCorrupt;
      case StatusCode::kInvalidArgument: return kNotAnImage;
      case StatusCode::kUnimplemented: return kUnsupportedFormat;
      case StatusCode::kResourceExhausted: return kTooLarge;
      default: return kOther;
    }
  }
  std::array<std::atomic<int64_t>, kNumReasons> skipped{};

 private:
  mutable Mutex mu_;
  int busy_producers_ GUARDED_BY(mu_) = 0;
  int64_t busy_since_ GUARDED_BY(mu_) = 0, busy_ns_ GUARDED_BY(mu_) = 0;
};

}  // namespace ferry

#endif  // FERRY_PIPELINE_STATS_H_
