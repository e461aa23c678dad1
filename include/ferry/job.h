// JobSpec: the one description of a job, from the trainer's options to the worker's
// producer. Every hop carries it whole (the Loader, the Client, the wire, the
// dispatcher's state and journal, the worker), so no field is copied by hand and no
// default can disagree between two of them (tf.data's single job definition).
//
// Glossary
//   job        a dataset, a pipeline and a schedule: which samples, in which order,
//              with which pixels, batched how. A dispatcher names jobs; point to
//              point and in-process, the job is given inline.
//   epoch      one pass over the dataset; its order is a permutation of [0, N) drawn
//              from (seed, epoch) (or the identity without shuffle).
//   batch b    positions [b*B, (b+1)*B) of the epoch's order, B = batch_size; the
//              epoch's final short batch follows `last_batch`.
//   split      batches [s*k, min((s+1)*k, batches per epoch)), k =
//              batches_per_split: the unit a dispatcher leases, a client acknowledges
//              and a dead worker's replacement re-sends.
//   ranks      a job of num_consumers = W > 0 ranks (the data-parallel ranks of one
//              trainer): every rank gets RankBatches() = R batches every epoch, so no
//              collective waits on a rank with fewer. Rank r's j-th batch is the
//              epoch's batch g = j*W + r; positions past N are padding rows (label -1,
//              index -1). Drop: R = floor(N / (W*B)), so fewer than W*B samples are
//              left out; pad: R = ceil(N / (W*B)). Split s belongs to rank s % W and
//              holds that rank's batches j in [(s/W)*k, min((s/W+1)*k, R)).
//   remainder  the rest of one epoch of an earlier run, after its ranks stopped mid-
//              epoch (elastic resume with another world size): the epoch's order less
//              the positions that run yielded (`taken`). Its geometry is that of a
//              dataset of epoch_samples() = N - |taken| samples in that order.
//   mixture    a job whose data is several datasets drawn by weight (MixtureSource):
//              an epoch is `mixture_epoch` draws, source k's share of them fixed at its
//              weight's (largest remainders), their interleaving drawn from (seed,
//              epoch). Each source is read without replacement, in an order of its own
//              for each of its passes, and its next pass begins where the last ended,
//              across epochs (data/mixture.h). The epoch's order holds draws, not
//              sample indices (a draw names a sample and its pass); every position
//              rule above holds for it unchanged, so exactly once, ranks, splits and
//              elastic resume are an ordinary job's.
//   listing    what the dataset's source lists (paths and labels); its fingerprint
//              and size are facts whoever lists it fills in (num_samples,
//              fingerprint), so that every process can check it means the same
//              samples.
#ifndef FERRY_JOB_H_
#define FERRY_JOB_H_

#include <cstdint>
#include <iterator>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ferry/pipeline_spec.h"
#include "ferry/status.h"

namespace ferry {

// What happens to an epoch's final short batch. The values are the wire's.
enum class LastBatch : uint8_t {
  kDrop = 0,  // not delivered
  kPad = 1,   // padded to batch_size with padding rows (label -1, index -1, zeros)
  kKeep = 2,  // delivered short
};

// How a dispatcher shares a job among its workers. The values are the wire's.
enum class ProcessingMode : uint8_t {
  kDistributedEpoch = 0,  // each sample once per epoch across all workers (exactly once)
  kParallelEpochs = 1,    // every worker yields every epoch itself (tf.data's parallel_epochs)
};

// In which order a client yields what its workers send. The values are the wire's.
enum class Ordering : uint8_t {
  kArrival = 0,        // whichever batch arrives first
  kDeterministic = 1,  // (epoch, split, batch) order: the same sequence whatever the workers
};

// How a dispatcher job's batches go to its consumers. The values are the wire's.
enum class Sharing : uint8_t {
  kSplits = 0,  // each batch to one consumer: the consumers split every epoch
  // A sweep: every trainer takes every batch, each exactly once. Each trainer reads
  // through a lane of its own, the dispatcher job "<job name>/<trainer>" (its
  // exactly-once, resume and kills are an ordinary job's); the dispatcher places a
  // split of every lane on the worker that holds it for another lane, and a worker
  // keeps a window of the batches it made (--share-window-bytes), so that lanes that
  // keep pace are served one decoding. A lane that falls behind the window has its
  // batches made again: the same bytes, since content is deterministic.
  kEvery = 1,
};

// What happens to a sample that cannot be read or decoded (it is always reported, by
// path and reason). The values are the wire's.
enum class BadSamples : uint8_t {
  // The batch is compacted around it: one row shorter (or one more padding row under
  // LastBatch::kPad).
  kSkip = 0,
  // Its row is taken by the next good sample of the same split's order, and so on
  // down the split: every batch of the split is full of real samples but the split's
  // last, which is short by the split's bad samples (padded under kPad). No sample is
  // repeated or lost, and the batch count does not change. A split here is the refill
  // group BatchPlan::refill_group names: a dispatcher's split, or batches_per_split
  // consecutive batches of a stream (in-process, point to point).
  kRefill = 1,
};

std::string_view LastBatchName(LastBatch l);  // "drop", "pad", "keep"
Result<LastBatch> ParseLastBatch(std::string_view name);
std::string_view BadSamplesName(BadSamples b);  // "skip", "refill"
Result<BadSamples> ParseBadSamples(std::string_view name);

// The largest epoch number a job, a state or a peer may name (2^32 - 1): no training
// run comes near it, and every number above it is refused where it enters (a state
// edited by hand, a hostile peer), so that no loop or table is ever sized by one.
inline constexpr uint64_t kMaxEpoch = (uint64_t{1} << 32) - 1;
// How many finished epochs one consumer's saved state may reopen behind its job (each
// is held whole again until redone).
inline constexpr uint64_t kMaxReopenedEpochs = 1024;

// Batches in an epoch of `samples` samples under the last-batch policy.
int64_t BatchesIn(int64_t samples, int64_t batch_size, LastBatch last_batch);

// The consumer id of rank `rank` of a ranked job: "rank-<rank>".
std::string RankConsumer(int64_t rank);
// The rank of a ranked job's consumer id, or -1 if it is not one.
int64_t ConsumerRank(const std::string& consumer_id);

// The fingerprint of a job's samples and pixels: the listing's fingerprint mixed with
// the pipeline's. The one function every process uses to check that it agrees.
uint64_t JobFingerprint(uint64_t listing_fingerprint, const PipelineSpec& pipeline);

// A job's caption tokenizer (the "tokens" target): a SentencePiece model file on the
// worker, and the fixed length L every row's ids are cut or padded to.
struct TokenizerSpec {
  std::string model;       // the .model file (a worker checks it against --data-root); "": none
  int32_t length = 0;      // L, in [1, kMaxLength]
  bool add_bos = false;    // ids start with the model's bos (as sentencepiece's add_bos=True)
  bool add_eos = false;    // and end with its eos (cut with the rest past L)
  int32_t pad_id = -1;     // what pads a row past its length; -1: the model's pad id, or 0
  static constexpr int32_t kMaxLength = 65536;
  bool operator==(const TokenizerSpec& other) const = default;
};

// A job's user code, pickled on the trainer with cloudpickle, which workers started
// with --allow-user-code run in Python processes of their own (lib/pyrt/python_pool.h):
//   whole: a map-style Dataset (dataset "python:<name>"), with an optional transform
//     and collate function. The pipeline is not run; num_samples is the dataset's
//     len(), given by the trainer (nobody else can list it).
//   after the native pipeline (`input` not ""): a dataset Ferry reads (an ImageFolder)
//     and a pipeline that makes the leading steps of the trainer's transform; each
//     row it makes goes on through the rest of the transform (and the collate
//     function) in Python, as a PIL image (input "pil"), a uint8 CHW tensor ("uint8")
//     or a float32 CHW tensor ("float"), with its label.
struct UserCodeSpec {
  std::string payload;   // cloudpickle bytes of (dataset or None, transform, collate_fn); "": no user code
  std::string versions;  // the trainer's {"python": "3.11.2", "torch": "1.13.0", ...} as JSON
  std::string input;     // "" (whole), or "pil", "uint8", "float" (after the native pipeline)
  // A job is a control message and a journal record: its code must fit in one.
  static constexpr size_t kMaxPayloadBytes = size_t(4) << 20;
  bool operator==(const UserCodeSpec& other) const = default;
};

// One source of a weighted mixture (JobSpec::mixture).
struct MixtureSource {
  std::string dataset;   // any dataset kind the workers open, as JobSpec::dataset
  double weight = 1;     // > 0: its share of an epoch is weight / the sum of the weights
  // "": the job's pipeline; else its own (a PipelineSpec name, or JSON), which must
  // make rows of the job pipeline's shape and type, with no batch op (a grayscale
  // source's pipeline may convert to RGB, another resize differently).
  std::string pipeline;
  int64_t num_samples = 0;  // a listing fact, as JobSpec::num_samples
  bool operator==(const MixtureSource& other) const = default;
};

struct JobSpec {
  std::string dataset;  // an ImageFolder root, a .tsv list or .tar shards, as the workers
                        // see it; or "synthetic:..." for benchmarks
  PipelineSpec pipeline = PipelineSpec::ImagenetTrain();
  uint64_t seed = 0;
  bool shuffle = true;
  // How many epochs, counted from the first one read (<= 0: forever): from first_epoch
  // below for a dispatcher job, from the stream's or the loader's first epoch otherwise.
  // One meaning everywhere (dispatcher jobs read it as an end epoch before journal
  // format 3; lib/dispatch/journal.cc converts their old records).
  int64_t epochs = 1;
  int32_t batch_size = 256;
  // The default is torch.utils.data.DataLoader's (drop_last=False).
  LastBatch last_batch = LastBatch::kKeep;
  BadSamples bad_samples = BadSamples::kSkip;
  // Dispatcher jobs only.
  ProcessingMode mode = ProcessingMode::kDistributedEpoch;
  Ordering ordering = Ordering::kArrival;
  Sharing sharing = Sharing::kSplits;
  // Jobs on the same workers share their decode threads in proportion to `weight`
  // (0 < weight <= 1000); a job of a higher `priority` (-100..100) takes a free thread
  // before any of a lower one (pipeline/fair_scheduler.h). Neither changes a batch.
  double weight = 1;
  int32_t priority = 0;
  int32_t batches_per_split = 4;
  // 0: consumers join freely and each split goes to whichever needs it. W > 0: the job
  // is W ranks with equal steps (see "ranks" above); their consumer ids are
  // RankConsumer(0..W-1). With W > 1 the last-batch policy must be drop or pad (a short
  // batch would differ between ranks).
  int32_t num_consumers = 0;
  // Dispatcher jobs: the job's first epoch (its epochs are [first_epoch, end_epoch()));
  // a job that goes on from an earlier run's epoch starts there.
  uint64_t first_epoch = 0;
  // A remainder job (see "remainder" above; ranked, one epoch): the positions of the
  // epoch's order [first, second) already yielded, sorted and disjoint.
  std::vector<std::pair<int64_t, int64_t>> taken;
  // The per-sample fields each batch carries besides images, labels and indices, for
  // datasets with annotations (COCO): any of kTargetNames, each at most once. Empty: a
  // classification job. The pipeline must then move targets (Pipeline::CheckTargets).
  std::vector<std::string> targets;
  // "boxes" float32 [N, 4] XYXY output pixels, "labels" int64 [N] (a class per box),
  // "iscrowd" uint8 [N], "area" float32 [N], "masks" uint8 [N, H, W], "semantic"
  // uint8 [B, H, W], "image_id" int64 [B], "text" and "meta" (a caption, the sample's
  // JSON) uint8 bytes, "tokens" (the caption's ids by `tokenizer`: the fields "tokens"
  // int32 [B, L] and "tokens_length" int32 [B]), "key" (the sample's key,
  // Dataset::Key: WebDataset's for shards; uint8 bytes): the batch fields
  // (ferry/batch.h). All but image_id, text, meta, tokens and key move with the image
  // (geometric_targets()). "key" alone needs no annotations: any dataset has keys.
  static constexpr const char* kTargetNames[] = {"boxes",    "labels",   "iscrowd", "area", "masks", "semantic",
                                                 "image_id", "text",     "meta",    "tokens", "key"};
  // The most fields a batch carries: every target, "tokens" as two.
  static constexpr size_t kMaxBatchFields = std::size(kTargetNames) + 1;
  static bool GeometricTarget(const std::string& t) {
    return t != "image_id" && t != "text" && t != "meta" && t != "tokens" && t != "key";
  }
  bool geometric_targets() const {
    for (const std::string& t : targets)
      if (GeometricTarget(t)) return true;
    return false;
  }
  // The "tokens" target's tokenizer (its model is "" unless targets name "tokens").
  TokenizerSpec tokenizer;
  // User code (dataset "python:<name>"): the trainer's Dataset, transform and collate
  // function, run by workers started with --allow-user-code (UserCodeSpec).
  UserCodeSpec user_code;

  // A mixture (see "mixture" above): dataset is then "mixture", and an epoch is
  // mixture_epoch draws (1..2^26: workers hold an epoch's order, 8 bytes a draw,
  // as for a synthetic job; a longer run is more epochs) from these sources (1..kMaxMixtureSources).
  std::vector<MixtureSource> mixture;
  int64_t mixture_epoch = 0;
  static constexpr size_t kMaxMixtureSources = 256;
  static constexpr int64_t kMaxMixtureEpoch = int64_t(1) << 26;
  bool mixed() const { return !mixture.empty(); }

  // Facts of the listing, filled in by whoever lists the dataset: the dispatcher for
  // a named job (and for synthetic datasets the client gives num_samples). 0 in a
  // request means "not known yet"; a client may set `fingerprint` to make workers
  // check they list the same samples.
  int64_t num_samples = 0;
  uint64_t fingerprint = 0;

  // The most bytes one batch may take (images, labels and indices): 2 GiB. A frame
  // carries one batch, and a worker holds a few per stream; a request past this would
  // ask a worker for memory no machine gives one stream.
  // Synthetic datasets name their own batch bytes (worker/synthetic_source.h).
  static constexpr int64_t kMaxBatchBytes = int64_t(2) << 30;

  // Checks what the job's owner chose (not the listing facts), the pipeline's form
  // only: the ops' parameters and the batch's bytes are checked where the ops are
  // known (CheckJob in lib/ops/pipeline.h), by every process that runs or accepts a job.
  Status Validate() const;
  // Two requests for the same job agree: everything but the listing facts is equal.
  bool SameJobAs(const JobSpec& other) const;
  // A digest of what decides which samples a position names and how they look: the
  // dataset, pipeline, seed, shuffle, batch and split geometry, ranks, mode, order,
  // taken (not the epoch count or first epoch, which a job may extend or skip). A
  // saved iterator state carries it, so that it is never restored into a job with
  // other settings, where its positions would name other samples.
  uint64_t ConfigFingerprint() const;
  bool operator==(const JobSpec& other) const = default;

  bool synthetic() const { return dataset.rfind("synthetic:", 0) == 0; }
  // Samples made by the trainer's own Python code (UserCodeSpec), not read from files.
  bool user_code_job() const { return dataset.rfind("python:", 0) == 0; }
  // Any user code: a whole Dataset, or Python steps after the native pipeline.
  bool has_user_code() const { return !user_code.payload.empty(); }
  // A dispatcher job's epochs are [first_epoch, end_epoch()); end_epoch() is 0 for a
  // job with no end. PastEnd: `epoch` is not one of them (never, with no end).
  uint64_t end_epoch() const { return epochs > 0 ? first_epoch + uint64_t(epochs) : 0; }
  bool PastEnd(uint64_t epoch) const { return epochs > 0 && epoch >= end_epoch(); }
  bool ranked() const { return num_consumers > 0; }
  // What decides a batch's bytes (ConfigFingerprint, less the ordering and sharing,
  // and the listing's fingerprint): lanes of a sweep with equal keys make equal
  // batches of each (epoch, split, batch).
  uint64_t ContentKey() const;
  bool remainder() const { return !taken.empty(); }
  // The length of an epoch's full order: num_samples, or a mixture's mixture_epoch.
  int64_t order_samples() const { return mixed() ? mixture_epoch : num_samples; }
  // Samples an epoch has: order_samples(), less what a remainder job's `taken` holds.
  int64_t epoch_samples() const;

  // Geometry, from epoch_samples().
  // Batches of an epoch, over all ranks (padding batches included).
  int64_t BatchesPerEpoch() const;
  // Batches every rank gets an epoch. REQUIRES: ranked().
  int64_t RankBatches() const;
  // Once listed (num_samples known): an error if `taken` is not within the dataset, or
  // if the ranks would get no batch at all (fewer samples than ranks x batch_size
  // under drop), which a trainer would take for an empty dataset.
  Status CheckListed() const;
  int64_t SplitsPerEpoch() const;
  // The rank split `s` belongs to; -1 when not ranked().
  int64_t SplitRank(int64_t s) const { return ranked() ? s % num_consumers : -1; }
  // The batches [first, end) of split `s`: batch indices within the epoch, or within
  // its rank's share when ranked().
  std::pair<int64_t, int64_t> SplitBatches(int64_t s) const;
  // The epoch's batch index of rank `rank`'s j-th batch (j itself when not ranked()).
  int64_t GlobalBatch(int64_t rank, int64_t j) const { return ranked() ? j * num_consumers + rank : j; }
  // The positions [begin, end) of the epoch's order that global batch `g` covers
  // (clipped to epoch_samples(): a padding batch may cover none).
  std::pair<int64_t, int64_t> BatchPositions(int64_t g) const;
};

// Elastic resume: the positions of one epoch's order that the ranks of `job` yielded,
// as sorted disjoint ranges of the epoch's full order (through a remainder job's own
// `taken`, whose positions count too), given yielded[r] = the batch indices j of that
// epoch rank r yielded. A remainder job with these as `taken` is the rest of the
// epoch. InvalidArgument if a rank or a batch is out of the job's range.
// REQUIRES: job.ranked(), job.num_samples is the listing's.
Result<std::vector<std::pair<int64_t, int64_t>>> TakenPositions(const JobSpec& job,
                                                                 const std::vector<std::vector<int64_t>>& yielded);

}  // namespace ferry

#endif  // FERRY_JOB_H_
