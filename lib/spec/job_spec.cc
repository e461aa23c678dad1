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

std::string RankConsumer(int64_t rank) { return "rank-" + std::to_string(rank); }

int64_t ConsumerRank(const std::string& consumer_id) {
  if (consumer_id.rfind("rank-", 0) != 0 || consumer_id.size() == 5 || consumer_id.size() > 14) return -1;
  int64_t r = 0;
  for (size_t i = 5; i < consumer_id.size(); ++i) {
    const char c = consumer_id[i];
    if (c < '0' || c > '9' || (i == 5 && c == '0' && consumer_id.size() > 6)) return -1;
    r = r * 10 + (c - '0');
  }
  return r;
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
  if (num_consumers < 0 || num_consumers > 65536) return Status::InvalidArgument("num_consumers must be in [0, 65536]");
  if (num_consumers > 1 && last_batch == LastBatch::kKeep)
    return Status::InvalidArgument(
        "a job of several ranks needs last_batch drop or pad: a short last batch would differ between ranks");
  return pipeline.Validate();
}

Status JobSpec::CheckListed() const {
  if (ranked() && RankBatches() == 0)
    return Status::InvalidArgument(std::to_string(num_samples) + " samples make no batch for each of " +
                                   std::to_string(num_consumers) + " ranks of " + std::to_string(batch_size) +
                                   " (drop_last): use fewer ranks, a smaller batch_size, or pad");
  return Status::OK();
}

bool JobSpec::SameJobAs(const JobSpec& other) const {
  JobSpec a = *this;
  a.num_samples = other.num_samples;
  a.fingerprint = other.fingerprint;
  return a == other;
}

int64_t JobSpec::RankBatches() const {
  if (!ranked() || batch_size <= 0 || num_samples <= 0) return 0;
  const int64_t per_round = int64_t(num_consumers) * batch_size;  // one batch for every rank
  if (num_consumers == 1) return BatchesIn(num_samples, batch_size, last_batch);
  return last_batch == LastBatch::kDrop ? num_samples / per_round : (num_samples + per_round - 1) / per_round;
}

int64_t JobSpec::BatchesPerEpoch() const {
  if (ranked()) return RankBatches() * num_consumers;
  return BatchesIn(num_samples, batch_size, last_batch);
}

int64_t JobSpec::SplitsPerEpoch() const {
  const int64_t k = std::max<int64_t>(1, batches_per_split);
  if (ranked()) return (RankBatches() + k - 1) / k * num_consumers;
  return (BatchesPerEpoch() + k - 1) / k;
}

std::pair<int64_t, int64_t> JobSpec::SplitBatches(int64_t s) const {
  const int64_t k = std::max<int64_t>(1, batches_per_split);
  if (ranked()) {
    const int64_t m = s / num_consumers;
    return {m * k, std::min((m + 1) * k, RankBatches())};
  }
  return {s * k, std::min((s + 1) * k, BatchesPerEpoch())};
}

std::pair<int64_t, int64_t> JobSpec::BatchPositions(int64_t g) const {
  const int64_t begin = std::min(g * int64_t(batch_size), num_samples);
  return {begin, std::min(begin + int64_t(batch_size), num_samples)};
}

int64_t JobSpec::BatchBytes() const {
  return int64_t(batch_size) * (int64_t(pipeline.sample_bytes()) + 2 * int64_t(sizeof(int64_t)));
}

}  // namespace ferry
