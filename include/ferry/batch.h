// Batch: what every Ferry iterator yields (in-process Loader and remote Client alike).
//
// A Batch owns a reference to the memory its tensors view (a pooled, 64-byte-aligned
// buffer); the views stay valid while the Batch, or a copy of `keepalive`, lives, and the
// buffer returns to its pool afterwards. Batches are move-only.
//
// Rows: `images`, `labels` and `indices` all have `rows()` rows (possibly 0: the last
// batch of an epoch whose every file was bad is still delivered, for last_in_epoch). The first
// `valid_rows()` are real samples; any rows after them are padding (last-batch policy
// `pad`, or skipped bad files under `pad`), with label -1, index -1 and zero pixels.
#ifndef FERRY_BATCH_H_
#define FERRY_BATCH_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ferry/tensor.h"

namespace ferry {

// A named per-sample field (JobSpec::targets: boxes, masks, image ids, ...). Ragged
// (offsets.rank == 1): row r's values are values[offsets[r] .. offsets[r + 1]) along
// dimension 0, offsets int64 [rows + 1]. Dense (offsets.rank == 0): values[r].
// Padding rows have no values (an empty range; zeros in a dense field).
struct BatchField {
  std::string name;
  TensorView values;
  TensorView offsets;
  bool ragged() const { return offsets.rank == 1; }
  // Row r's range along values' dimension 0.
  std::pair<int64_t, int64_t> range(int64_t r) const {
    if (!ragged()) return {r, r + 1};
    return {offsets.as<int64_t>()[r], offsets.as<int64_t>()[r + 1]};
  }
};

struct BatchProvenance {
  uint64_t epoch = 0;
  int64_t batch_in_epoch = 0;  // position of this batch in the epoch's batch order (of its rank)
  int64_t batches_in_epoch = 0;  // batches of the epoch (of its rank, in a ranked job); 0: unknown
  int64_t split = 0;           // reserved for the dispatcher's splits (0 in-process)
  int64_t batch_in_split = 0;
  int64_t batches_in_split = 0;
  bool last_in_epoch = false;  // this is the epoch's final batch
};

class Batch {
 public:
  Batch() = default;
  Batch(Batch&&) = default;
  Batch& operator=(Batch&&) = default;
  Batch(const Batch&) = delete;
  Batch& operator=(const Batch&) = delete;

  TensorView images;   // [B,H,W,C] uint8 or [B,C,H,W] float32
  TensorView labels;   // [B] int64
  TensorView indices;  // [B] int64 global sample indices (-1 for padding)
  // [B, num_classes] float32 soft targets, when the pipeline has a batch op (MixUp /
  // CutMix); rank 0 otherwise. Padding rows' targets are zeros.
  TensorView targets;
  // The job's per-sample fields, in JobSpec::targets' order; views like the tensors.
  std::vector<BatchField> fields;
  const BatchField* field(std::string_view name) const {
    for (const BatchField& f : fields)
      if (f.name == name) return &f;
    return nullptr;
  }
  // A user-code job's batch (JobSpec::user_code): what its collate function made, as
  // bytes (uint8 [n]) and the JSON that says how to rebuild it (the Python client
  // does: ferry/_user_worker.py); "" and rank 0 otherwise. `images` then has no pixels
  // (shape [B, 0, 0, 0]).
  std::string structure;
  TensorView user_data;
  BatchProvenance provenance;
  int64_t valid = 0;   // rows that are real samples (they come first)
  int64_t skipped = 0; // samples of this batch that were bad files and left out

  int64_t rows() const { return labels.rank ? labels.shape[0] : 0; }
  int64_t valid_rows() const { return valid; }
  // Holds the memory the views point into. Copy it to keep the memory alive beyond
  // the Batch (e.g. a Python tensor that outlives the iteration step).
  std::shared_ptr<void> keepalive;
  // The whole buffer `keepalive` holds, which every view lies inside (for checks of
  // zero copy, and for registering it with a device, e.g. cudaHostRegister).
  const void* buffer = nullptr;
  size_t buffer_size = 0;
};

}  // namespace ferry

#endif  // FERRY_BATCH_H_
