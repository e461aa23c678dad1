// SampleProcessor: encoded bytes in, one augmented output image out, written straight
// into caller-provided memory (the batch's tensor row). This is the per-sample unit of
// work that the pipeline runs in parallel.
//
// Determinism: every random choice comes from Philox keyed by (seed, epoch, index)
// with a separate stream per op (crop, flip, jitter), so a sample's pixels depend on
// nothing else: not the thread, the worker, nor how many times it was retried.
//
// Fused decode (JPEG): the crop window is chosen from the header; only that window is
// decoded, at the largest DCT scale that keeps at least the output size; then resize.
#ifndef FERRY_IMAGE_AUGMENT_H_
#define FERRY_IMAGE_AUGMENT_H_

#include <array>
#include <cstdint>
#include <string_view>

#include "ferry/pipeline_spec.h"
#include "ferry/status.h"

namespace ferry {

// Random-stream purposes (the 4th Philox counter word); 1 is the epoch permutation.
enum RngPurpose : uint32_t { kRngCrop = 0, kRngPermutation = 1, kRngFlip = 2, kRngJitter = 3 };

class SampleProcessor {
 public:
  // REQUIRES: spec.Validate().ok()
  explicit SampleProcessor(const PipelineSpec& spec);

  const PipelineSpec& spec() const { return spec_; }

  // Decodes and augments one image into `out` (spec().sample_bytes() bytes, in the
  // spec's output layout). Thread-safe: per-thread scratch memory is reused.
  // On error nothing useful is in `out` and the Status says why (the reason that is
  // reported with the file's path): DataLoss for corrupt/truncated/empty data,
  // InvalidArgument for non-images, Unimplemented for unsupported formats,
  // ResourceExhausted for images over spec().max_pixels.
  //
  // With `decoded_ns`, the steady-clock time (core/histogram.h MonoNs) at which the
  // decode ended and augmentation began is written there (for the stage metrics).
  Status Process(std::string_view encoded, uint64_t seed, uint64_t epoch, int64_t index, void* out,
                 int64_t* decoded_ns = nullptr) const;

 private:
  PipelineSpec spec_;
};

}  // namespace ferry

#endif  // FERRY_IMAGE_AUGMENT_H_
