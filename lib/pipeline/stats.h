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
#ifndef FERRY_PIPELINE_STATS_H_
#define FERRY_PIPELINE_STATS_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <string_view>

#include "core/histogram.h"
#include "ferry/status.h"

namespace ferry {

struct PipelineStats {
  Histogram read, decode, augment, assemble;
  std::atomic<int64_t> samples{0};  // decoded into a batch

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
};

}  // namespace ferry

#endif  // FERRY_PIPELINE_STATS_H_
