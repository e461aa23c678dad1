#include "worker/synthetic_source.h"

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace ferry {

Result<std::unique_ptr<SyntheticSource>> SyntheticSource::Create(const wire::OpenStreamMsg& m) {
  const JobSpec& j = m.job;
  unsigned long long bytes = 0, batches = 0;
  if (std::sscanf(j.dataset.c_str(), "synthetic:%llu:%llu", &bytes, &batches) != 2 || bytes == 0 || batches == 0 ||
      batches > (1ull << 40) || j.batch_size <= 0 || bytes % uint64_t(j.batch_size) != 0 || bytes > uint64_t(JobSpec::kMaxBatchBytes))
    return Status::InvalidArgument("synthetic dataset must be synthetic:BYTES:BATCHES, BYTES a multiple of batch_size");
  std::unique_ptr<SyntheticSource> s(new SyntheticSource());
  s->first_epoch_ = m.first_epoch;
  s->bytes_ = bytes;
  s->rows_ = j.batch_size;
  s->per_epoch_ = int64_t(batches);
  s->left_ = j.epochs > 0 && s->per_epoch_ <= INT64_MAX / j.epochs ? s->per_epoch_ * j.epochs : INT64_MAX;
  s->last_epoch_ = j.epochs > 0 ? int64_t(m.first_epoch) + j.epochs - 1 : -1;
  const size_t rows = size_t(j.batch_size);
  // [images | labels | indices], each part 64-byte aligned: EncodeBatch needs each
  // tensor word-aligned (Cap'n Proto refuses, with an exception, to reference
  // unaligned external data) and readable up to its last whole word.
  s->labels_offset_ = (bytes + 63) / 64 * 64;
  const size_t total = s->labels_offset_ + 2 * rows * sizeof(int64_t);
  void* p = std::aligned_alloc(64, (total + 63) / 64 * 64);
  if (p == nullptr) return Status::ResourceExhausted("cannot allocate the synthetic batch");
  std::memset(p, 0x5a, bytes);
  std::memset(static_cast<uint8_t*>(p) + bytes, 0, s->labels_offset_ - bytes);
  auto* ints = reinterpret_cast<int64_t*>(static_cast<uint8_t*>(p) + s->labels_offset_);
  for (size_t i = 0; i < rows; ++i) ints[i] = ints[rows + i] = int64_t(i);
  s->buffer_ = std::shared_ptr<void>(p, [](void* q) { std::free(q); });
  return s;
}

std::optional<SyntheticSource::Frame> SyntheticSource::Next() {
  if (eoe_pending_) {
    eoe_pending_ = false;
    return Frame{wire::EncodeEndOfEpoch(eoe_), false, eoe_.last};
  }
  if (left_ == 0) return std::nullopt;
  wire::BatchFrameInput in;
  in.provenance.epoch = first_epoch_ + uint64_t(sent_ / per_epoch_);
  in.provenance.batch_in_epoch = sent_ % per_epoch_;
  in.provenance.last_in_epoch = in.provenance.batch_in_epoch + 1 == per_epoch_;
  in.provenance.batches_in_epoch = per_epoch_;
  in.rows = in.valid = rows_;
  in.image_dtype = DType::kUint8;
  in.image_dims = {1, 1, int64_t(bytes_) / rows_};
  auto* base = static_cast<uint8_t*>(buffer_.get());
  in.images = base;
  in.labels = reinterpret_cast<const int64_t*>(base + labels_offset_);
  in.indices = in.labels + rows_;
  in.owner = buffer_;
  epoch_samples_ += rows_;
  if (in.provenance.last_in_epoch) {
    eoe_ = {in.provenance.epoch, per_epoch_, epoch_samples_, int64_t(in.provenance.epoch) == last_epoch_};
    eoe_pending_ = true;
    epoch_samples_ = 0;
  }
  ++sent_;
  --left_;
  return Frame{wire::EncodeBatch(in), true, false};
}

}  // namespace ferry
