// SyntheticSource: the frames of an inline job whose dataset is
// "synthetic:BYTES:BATCHES": BATCHES batches per epoch of BYTES image bytes each,
// served from one pre-filled buffer with no decoding at all. `ferry-bench transport`
// measures the data plane with it (a worker's framing, credits and scatter-gather
// writes against raw TCP).
#ifndef FERRY_WORKER_SYNTHETIC_SOURCE_H_
#define FERRY_WORKER_SYNTHETIC_SOURCE_H_

#include <cstdint>
#include <memory>
#include <optional>

#include "ferry/status.h"
#include "pipeline/prepared_job.h"  // SyntheticRefused
#include "wire/codec.h"
#include "wire/message.h"

namespace ferry {

// Why a worker started without --allow-synthetic refuses a "synthetic:" dataset: a
// synthetic job costs a worker memory and io time but reads no file, so any client
// could use one to load it; only benchmarks need them.

class SyntheticSource {
 public:
  // InvalidArgument unless the dataset reads synthetic:BYTES:BATCHES with BYTES a
  // multiple of the batch size and at most JobSpec::kMaxBatchBytes.
  static Result<std::unique_ptr<SyntheticSource>> Create(const wire::OpenStreamMsg& m);

  struct Frame {
    wire::OutFrame frame;
    bool needs_credit = false;  // a Batch (an EndOfEpoch needs none)
    bool last = false;          // the stream's final EndOfEpoch
  };
  // The next frame, or nullopt once every epoch is out.
  std::optional<Frame> Next();
  bool done() const { return left_ == 0 && !eoe_pending_; }
  // No more batches (draining). An EndOfEpoch already due still comes out of Next():
  // the epoch it closes was sent whole.
  void Stop() { left_ = 0; }
  // Bytes of its one batch buffer (every frame references it).
  size_t batch_bytes() const { return labels_offset_ + 2 * sizeof(int64_t) * size_t(rows_); }

 private:
  SyntheticSource() = default;

  uint64_t first_epoch_ = 0;
  int64_t last_epoch_ = -1;  // -1: forever
  int64_t rows_ = 0;
  size_t bytes_ = 0, labels_offset_ = 0;
  int64_t per_epoch_ = 1, left_ = 0, sent_ = 0;
  int64_t epoch_samples_ = 0;
  bool eoe_pending_ = false;
  wire::EndOfEpochMsg eoe_;
  std::shared_ptr<void> buffer_;
};

}  // namespace ferry

#endif  // FERRY_WORKER_SYNTHETIC_SOURCE_H_
