#include "ferry/job.h"

#include <algorithm>

#include "core/hash.h"

namespace ferry {

std::string_view LastBatchName(LastBatch l) {
  switch (l) {
    case LastBatch::kDrop: return "drop";
    case LastBatch::kPad: return "pad";
    case LastBatch::kKeep: return "keep";
  }
  return "?";
}

Result<LastBatch> ParseLastBatch(std::string_view name) {
  for (LastBatch l : {LastBatch::kDrop, LastBatch::kPad, LastBatch::kKeep}) {
    if (name == LastBatchName(l)) return l;
  }
  return Status::InvalidArgument("last batch policy must be 'drop', 'pad' or 'keep', not '" + std::string(name) + "'");
}

int64_t BatchesIn(int64_t samples, int64_t batch_size, LastBatch last_batch) {
  if (batch_size <= 0 || samples <= 0) return 0;
  return samples / batch_size + ((samples % batch_size) != 0 && last_batch != LastBatch::kDrop ? 1 : 0);
}

uint64_t JobFingerprint(uint64_t listing_fingerprint, const PipelineSpec& pipeline) {
  Fingerprinter f;
  f.AddU64(listing_fingerprint);
  f.AddU64(pipeline.Fingerprint());
  return f.Finish();
}

Status JobSpec::Validate() const {
  if (dataset.empty()) return Status::InvalidArgument("the job needs a dataset");
  if (batch_size <= 0) return Status::InvalidArgument("batch_size must be > 0");
  if (batches_per_split <= 0) return Status::InvalidArgument("batches_per_split must be > 0");
  if (num_samples < 0) return Status::InvalidArgument("num_samples must be >= 0");
  return pipeline.Validate();
}

bool JobSpec::SameJobAs(const JobSpec& other) const {
  JobSpec a = *this;
  a.num_samples = other.num_samples;
  a.fingerprint = other.fingerprint;
  return a == other;
}

int64_t JobSpec::SplitsPerEpoch() const {
  const int64_t k = std::max<int64_t>(1, batches_per_split);
  return (BatchesPerEpoch() + k - 1) / k;
}

std::pair<int64_t, int64_t> JobSpec::SplitBatches(int64_t s) const {
  const int64_t k = std::max<int64_t>(1, batches_per_split);
  return {s * k, std::min((s + 1) * k, BatchesPerEpoch())};
}

int64_t JobSpec::BatchBytes() const {
  return int64_t(batch_size) * (int64_t(pipeline.sample_bytes()) + 2 * int64_t(sizeof(int64_t)));
}

}  // namespace ferry
