#include "ferry/job.h"

#include <algorithm>
#include <cmath>
#include <cstring>

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

std::string_view BadSamplesName(BadSamples b) { return b == BadSamples::kRefill ? "refill" : "skip"; }

Result<BadSamples> ParseBadSamples(std::string_view name) {
  for (BadSamples b : {BadSamples::kSkip, BadSamples::kRefill}) {
    if (name == BadSamplesName(b)) return b;
  }
  return Status::InvalidArgument("bad-sample policy must be 'skip' or 'refill', not '" + std::string(name) + "'");
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

namespace {

Status ValidateMixture(const JobSpec& job) {
  if (job.mixed() != (job.dataset == "mixture"))
    return Status::InvalidArgument(job.mixed() ? "a mixture's dataset is \"mixture\""
                                               : "dataset \"mixture\" needs its sources (a list of datasets and weights)");
  if (!job.mixed()) {
    if (job.mixture_epoch != 0) return Status::InvalidArgument("mixture_epoch is a mixture's");
    return Status::OK();
  }
  if (job.mixture.size() > JobSpec::kMaxMixtureSources)
    return Status::InvalidArgument("a mixture of " + std::to_string(job.mixture.size()) + " sources: at most " +
                                   std::to_string(JobSpec::kMaxMixtureSources));
  if (job.mixture_epoch < 1 || job.mixture_epoch > JobSpec::kMaxMixtureEpoch)
    return Status::InvalidArgument("a mixture's epoch (mixture_epoch, samples drawn an epoch) must be in [1, 2^26]");
  for (size_t k = 0; k < job.mixture.size(); ++k) {
    const MixtureSource& m = job.mixture[k];
    const std::string which = "mixture source " + std::to_string(k);
    if (m.dataset.empty() || m.dataset == "mixture") return Status::InvalidArgument(which + ": needs a dataset");
    if (m.dataset.size() > 65536) return Status::InvalidArgument(which + ": dataset is too long");
    if (m.dataset.rfind("python:", 0) == 0 || m.dataset.rfind("synthetic:", 0) == 0)
      return Status::InvalidArgument(which + ": a mixture draws from datasets the workers read (not " +
                                     m.dataset.substr(0, m.dataset.find(':') + 1) + ")");
    if (!(m.weight > 0) || !std::isfinite(m.weight)) return Status::InvalidArgument(which + ": weight must be > 0");
    if (m.pipeline.size() > 65536) return Status::InvalidArgument(which + ": pipeline is too long");
    if (m.num_samples < 0) return Status::InvalidArgument(which + ": num_samples must be >= 0");
  }
  if (job.has_user_code()) return Status::InvalidArgument("a mixture runs no user code");
  return Status::OK();
}

}  // namespace

Status JobSpec::Validate() const {
  if (dataset.empty()) return Status::InvalidArgument("the job needs a dataset");
  FERRY_RETURN_IF_ERROR(ValidateMixture(*this));
  if (batch_size <= 0) return Status::InvalidArgument("batch_size must be > 0");
  FERRY_RETURN_IF_ERROR(pipeline.Validate());
  if (batches_per_split <= 0) return Status::InvalidArgument("batches_per_split must be > 0");
  if (bad_samples != BadSamples::kSkip && bad_samples != BadSamples::kRefill)
    return Status::InvalidArgument("unknown bad-sample policy");
  if (num_samples < 0) return Status::InvalidArgument("num_samples must be >= 0");
  for (size_t i = 0; i < targets.size(); ++i) {
    bool known = false;
    for (const char* n : kTargetNames) known = known || targets[i] == n;
    if (!known) {
      std::string names;
      for (const char* n : kTargetNames) names += std::string(names.empty() ? "" : ", ") + n;
      return Status::InvalidArgument("targets: unknown field (known: " + names + ")");
    }
    for (size_t j = 0; j < i; ++j)
      if (targets[j] == targets[i]) return Status::InvalidArgument("targets: \"" + targets[i] + "\" named twice");
  }
  const bool tokens = std::find(targets.begin(), targets.end(), "tokens") != targets.end();
  if (tokens != !tokenizer.model.empty())
    return Status::InvalidArgument(tokens ? "targets: \"tokens\" needs a tokenizer model (a SentencePiece .model file)"
                                          : "a tokenizer model is given but targets do not name \"tokens\"");
  if (tokens) {
    if (tokenizer.length < 1 || tokenizer.length > TokenizerSpec::kMaxLength)
      return Status::InvalidArgument("tokenizer length must be in [1, " + std::to_string(TokenizerSpec::kMaxLength) +
                                     "]");
    if (tokenizer.pad_id < -1) return Status::InvalidArgument("tokenizer pad_id must be >= 0, or -1 (the model's)");
    if (tokenizer.model.size() > 4096) return Status::InvalidArgument("tokenizer model path is too long");
  }
  if (user_code_job() && user_code.payload.empty())
    return Status::InvalidArgument("a python: dataset needs its user code (a pickled Dataset)");
  if (!user_code.payload.empty() && user_code_job() != user_code.input.empty())
    return Status::InvalidArgument(user_code_job() ? "user code of a python: dataset takes no input kind"
                                                   : "user code after the native pipeline needs its input kind");
  if (!user_code.input.empty() && user_code.input != "pil" && user_code.input != "uint8" && user_code.input != "float")
    return Status::InvalidArgument("user code input must be pil, uint8 or float, not " + user_code.input.substr(0, 16));
  if (!user_code.payload.empty()) {
    if (user_code.payload.size() > UserCodeSpec::kMaxPayloadBytes)
      return Status::InvalidArgument("user code: the pickled dataset is " + std::to_string(user_code.payload.size()) +
                                     " bytes, past the " + std::to_string(UserCodeSpec::kMaxPayloadBytes) +
                                     " a job carries: keep large state in files the workers read");
    if (user_code.versions.size() > 65536) return Status::InvalidArgument("user code: versions is too long");
    if (!targets.empty()) return Status::InvalidArgument("user code makes its own fields: a job with it names no targets");
    if (bad_samples != BadSamples::kSkip)
      return Status::InvalidArgument("user code: bad_samples must be skip (a sample whose code raises is left out)");
  }
  if (num_consumers < 0 || num_consumers > 65536) return Status::InvalidArgument("num_consumers must be in [0, 65536]");
  if (epochs > 0 && uint64_t(epochs) > kMaxEpoch + 1)
    return Status::InvalidArgument("epochs " + std::to_string(epochs) + " is past the most a job may have, " +
                                   std::to_string(kMaxEpoch + 1) + " (<= 0: no end)");
  if (first_epoch > kMaxEpoch)
    return Status::InvalidArgument("first_epoch " + std::to_string(first_epoch) +
                                   " is past the largest epoch number, " + std::to_string(kMaxEpoch));
  if (epochs > 0 && uint64_t(epochs) - 1 > kMaxEpoch - first_epoch)
    return Status::InvalidArgument("first_epoch + epochs runs past the largest epoch number, " +
                                   std::to_string(kMaxEpoch));
  if (remainder()) {
    if (!ranked()) return Status::InvalidArgument("a remainder job is a job of ranks");
    if (epochs != 1) return Status::InvalidArgument("a remainder job has one epoch");
    int64_t prev = 0;
    for (const auto& [lo, hi] : taken) {
      if (lo < prev || hi <= lo) return Status::InvalidArgument("taken: ranges must be sorted, disjoint, non-empty");
      prev = hi;
    }
  }
  if (sharing != Sharing::kSplits && sharing != Sharing::kEvery) return Status::InvalidArgument("unknown sharing");
  if (!(weight > 0 && weight <= 1000)) return Status::InvalidArgument("weight must be in (0, 1000]");
  if (priority < -100 || priority > 100) return Status::InvalidArgument("priority must be in [-100, 100]");
  if (sharing == Sharing::kEvery && mode != ProcessingMode::kDistributedEpoch)
    return Status::InvalidArgument("sharing every batch is a distributed_epoch job's (parallel_epochs: every worker "
                                   "already makes its own epochs)");
  if (num_consumers > 1 && last_batch == LastBatch::kKeep)
    return Status::InvalidArgument(
        "a job of several ranks needs last_batch drop or pad: a short last batch would differ between ranks");
  return Status::OK();
}



int64_t JobSpec::epoch_samples() const {
  int64_t n = order_samples();
  for (const auto& [lo, hi] : taken) n -= hi - lo;
  return n;
}

Status JobSpec::CheckListed() const {
  if (remainder() && taken.back().second > order_samples())
    return Status::InvalidArgument("taken: positions past the epoch's " + std::to_string(order_samples()) + " samples");
  if (remainder() && epoch_samples() <= 0) return Status::InvalidArgument("a remainder job with no sample left");
  if (ranked() && RankBatches() == 0)
    return Status::InvalidArgument(std::to_string(epoch_samples()) + " samples make no batch for each of " +
                                   std::to_string(num_consumers) + " ranks of " + std::to_string(batch_size) +
                                   " (drop_last): use fewer ranks, a smaller batch_size, or pad");
  return Status::OK();
}

Result<std::vector<std::pair<int64_t, int64_t>>> TakenPositions(const JobSpec& job,
                                                                 const std::vector<std::vector<int64_t>>& yielded) {
  if (!job.ranked() || int64_t(yielded.size()) != job.num_consumers)
    return Status::InvalidArgument("taken positions: one list of batches per rank of the job");
  // Positions of this job's order yielded, then mapped through its own taken ranges.
  std::vector<std::pair<int64_t, int64_t>> mine;
  const int64_t per_rank = job.RankBatches();
  for (size_t r = 0; r < yielded.size(); ++r) {
    for (int64_t j : yielded[r]) {
      if (j < 0 || j >= per_rank)
        return Status::InvalidArgument("taken positions: rank " + std::to_string(r) + " has no batch " +
                                       std::to_string(j));
      const auto [lo, hi] = job.BatchPositions(job.GlobalBatch(int64_t(r), j));
      if (lo < hi) mine.emplace_back(lo, hi);
    }
  }
  // A remainder job's order is the full order's segments between its taken ranges,
  // one after the other: segment i covers full positions [begin, end) and starts at
  // position `at` of the job's order.
  struct Segment {
    int64_t at, begin, end;
  };
  std::vector<Segment> segments;
  int64_t at = 0, prev = 0;
  for (const auto& [lo, hi] : job.taken) {
    if (lo > prev) segments.push_back({at, prev, lo});
    at += lo - prev;
    prev = hi;
  }
  if (job.order_samples() > prev) segments.push_back({at, prev, job.order_samples()});
  std::vector<std::pair<int64_t, int64_t>> out = job.taken;
  for (const auto& [lo, hi] : mine) {
    // The first segment holding `lo`, then on through the segments `hi` reaches.
    auto s = std::upper_bound(segments.begin(), segments.end(), lo,
                              [](int64_t p, const Segment& x) { return p < x.at; });
    if (s == segments.begin()) return Status::Internal("taken positions: no segment");
    --s;
    for (int64_t p = lo; p < hi && s != segments.end(); ++s) {
      const int64_t len = std::min(hi, s->at + (s->end - s->begin)) - p;
      out.emplace_back(s->begin + (p - s->at), s->begin + (p - s->at) + len);
      p += len;
    }
  }
  std::sort(out.begin(), out.end());
  std::vector<std::pair<int64_t, int64_t>> merged;
  for (const auto& r : out) {
    if (!merged.empty() && r.first <= merged.back().second) {
      if (r.first < merged.back().second) return Status::InvalidArgument("taken positions: a batch twice");
      merged.back().second = std::max(merged.back().second, r.second);
    } else {
      merged.push_back(r);
    }
  }
  return merged;
}

bool JobSpec::SameJobAs(const JobSpec& other) const {
  JobSpec a = *this;
  a.num_samples = other.num_samples;
  a.fingerprint = other.fingerprint;
  for (size_t k = 0; k < a.mixture.size() && k < other.mixture.size(); ++k)
    a.mixture[k].num_samples = other.mixture[k].num_samples;
  return a == other;
}

uint64_t JobSpec::ConfigFingerprint() const {
  Fingerprinter f;
  f.Add(dataset);
  f.AddU64(pipeline.Fingerprint());
  f.AddU64(seed);
  f.AddU64(shuffle ? 1 : 0);
  f.AddU64(uint64_t(batch_size));
  f.AddU64(uint64_t(last_batch));
  // Only when not the default, so that states saved before the field existed restore.
  if (bad_samples != BadSamples::kSkip) f.AddU64(0x7265'6669'6c6c'0000ull | uint64_t(bad_samples));
  f.AddU64(uint64_t(mode));
  f.AddU64(uint64_t(ordering));
  // Only when not the default, so that states saved before the field existed restore.
  if (sharing != Sharing::kSplits) f.AddU64(0x7368'6172'6500'0000ull | uint64_t(sharing));
  f.AddU64(uint64_t(batches_per_split));
  f.AddU64(uint64_t(num_consumers));
  for (const auto& [lo, hi] : taken) {
    f.AddU64(uint64_t(lo));
    f.AddU64(uint64_t(hi));
  }
  // Only when asked for, so that states saved before the field existed restore.
  for (const std::string& t : targets) f.Add(t);
  if (!tokenizer.model.empty()) {
    f.Add(tokenizer.model);
    f.AddU64(uint64_t(uint32_t(tokenizer.length)) | uint64_t(tokenizer.add_bos) << 32 | uint64_t(tokenizer.add_eos) << 33);
    f.AddU64(uint64_t(int64_t(tokenizer.pad_id)));
  }
  if (!user_code.payload.empty()) {  // the code decides the samples
    f.Add(user_code.payload);
    f.Add(user_code.input);
  }
  if (mixed()) {  // the sources, their weights and pipelines, and the epoch decide the draws
    f.AddU64(uint64_t(mixture_epoch));
    for (const MixtureSource& m : mixture) {
      f.Add(m.dataset);
      uint64_t w;
      std::memcpy(&w, &m.weight, sizeof w);
      f.AddU64(w);
      f.Add(m.pipeline);
    }
  }
  return f.Finish();
}

uint64_t JobSpec::ContentKey() const {
  JobSpec content = *this;
  content.ordering = Ordering::kArrival;  // the order a client yields in, not what it yields
  content.sharing = Sharing::kSplits;
  Fingerprinter f;
  f.AddU64(content.ConfigFingerprint());
  f.AddU64(fingerprint);
  f.AddU64(uint64_t(num_samples));
  return f.Finish();
}

int64_t JobSpec::RankBatches() const {
  const int64_t n = epoch_samples();
  if (!ranked() || batch_size <= 0 || n <= 0) return 0;
  const int64_t per_round = int64_t(num_consumers) * batch_size;  // one batch for every rank
  if (num_consumers == 1) return BatchesIn(n, batch_size, last_batch);
  return last_batch == LastBatch::kDrop ? n / per_round : (n + per_round - 1) / per_round;
}

int64_t JobSpec::BatchesPerEpoch() const {
  if (ranked()) return RankBatches() * num_consumers;
  return BatchesIn(epoch_samples(), batch_size, last_batch);
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
  const int64_t n = epoch_samples();
  const int64_t begin = std::min(g * int64_t(batch_size), n);
  return {begin, std::min(begin + int64_t(batch_size), n)};
}

}  // namespace ferry
