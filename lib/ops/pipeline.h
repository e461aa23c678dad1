// Pipeline: a PipelineSpec compiled into ops, and the per-sample engine that runs
// them: encoded bytes in, one output image (and, for batch ops, targets) out, written
// straight into the caller's memory (the batch's tensor row).
//
// Steps for one sample (Process):
//   1. decode. When the spec starts with crop-like geometry (op.h: crop plan) the
//      window is chosen from the image header: RandomResizedCrop's box, Resize's
//      whole image, Resize then CenterCrop's (or RandomCrop's) window mapped back to
//      the source. A JPEG decodes only that window, at the largest DCT scale that keeps
//      the output's resolution, and it is resampled to the output size at once.
//      Otherwise the image is decoded whole and every op runs.
//   2. image ops on uint8, in order. Horizontal flips are carried past the ops that
//      commute with them and fused into the final write (a flip costs no pass).
//   3. output: uint8 rows are the last image (often resampled straight into the row);
//      float32 rows are ToTensor + Normalize fused in one pass, then the tensor ops.
// Batch ops run on the finished batch (ApplyBatchOps): on the worker for float32
// batches; on the trainer when uint8 travels (FinishOnTrainer).
//
// Determinism: every op draws from its own Philox stream keyed by (seed, epoch,
// index, stream id): the first random_resized_crop, hflip and color_jitter keep the
// stream ids of the original fixed pipeline (so its specs give the same pixels), the
// others 16 + their position. Batch ops draw from (seed, epoch, batch key, 4).
// Pipelines are immutable and thread-safe; per-thread scratch memory is reused.
#ifndef FERRY_OPS_PIPELINE_H_
#define FERRY_OPS_PIPELINE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "ferry/job.h"
#include "ferry/pipeline_spec.h"
#include "ferry/status.h"
#include "ops/op.h"
#include "ops/targets.h"

namespace ferry {

// Random-stream purposes (the 4th Philox counter word) outside the ops' own.
enum RngPurpose : uint32_t {
  kRngCrop = 0,         // the first random_resized_crop
  kRngPermutation = 1,  // the epoch order
  kRngFlip = 2,         // the first hflip
  kRngJitter = 3,       // the first color_jitter
  kRngBatch = 4,        // batch ops, keyed by the batch key instead of a sample index
  kRngFirstOp = 16,     // other ops: 16 + their position
};

// Per-op cost, sampled: Process adds each step's nanoseconds to `ns[k]` for the
// steps Pipeline::step_names() names (decode first, then each op in order, then the
// output write), when the caller passes it.
struct StepTimes {
  std::vector<int64_t> ns;
};

class Pipeline {
 public:
  // Every op made from its parameters, every check done: parameters, op order (image
  // ops, then tensor ops, then one batch op last), a fixed output size, normalize
  // and the tensor and batch ops only with float32 output.
  static Result<std::shared_ptr<const Pipeline>> Compile(const PipelineSpec& spec);

  const PipelineSpec& spec() const { return spec_; }
  // The spec with every op's parameters spelled out (PipelineSpec::ToJson form).
  const PipelineSpec& canonical() const { return canonical_; }

  // One sample's output: height, width, channels.
  Shape output_shape() const { return out_; }
  DType dtype() const { return spec_.dtype(); }
  // Bytes of one output row.
  size_t sample_bytes() const;
  // > 0: batches carry soft targets float32 [rows, num_classes()] (a batch op).
  int num_classes() const { return num_classes_; }
  bool has_batch_ops() const { return batch_op_ >= 0; }
  bool has_tensor_ops() const { return first_tensor_op_ < int(ops_.size()) && first_tensor_op_ != batch_op_; }

  // The steps whose cost StepTimes records: "decode", each op's name, "output".
  const std::vector<std::string>& step_names() const { return step_names_; }

  // Decodes and augments one image into `out` (sample_bytes() bytes, in the spec's
  // output layout). Thread-safe. On error nothing useful is in `out` and the Status
  // says why (the reason reported with the file's path): DataLoss for
  // corrupt/truncated/empty data, InvalidArgument for non-images, Unimplemented for
  // unsupported formats, ResourceExhausted for images over spec().max_pixels or an
  // image op that cannot run on this image (e.g. a RandomCrop larger than it).
  // `decoded_ns`: the steady-clock time (core/histogram.h MonoNs) at which the decode
  // ended. `times`: per-step cost (see StepTimes), when given.
  // `targets` (when given): the sample's boxes and masks in the decoded image's points,
  // moved with it and sanitized (ops/targets.h); requires CheckTargets().
  Status Process(std::string_view encoded, uint64_t seed, uint64_t epoch, int64_t index, void* out,
                 int64_t* decoded_ns = nullptr, StepTimes* times = nullptr, SampleTargets* targets = nullptr) const;

  // OK when every image op can move boxes and masks (op.h: motion) and no batch op
  // mixes samples; else InvalidArgument naming the first op that cannot.
  Status CheckTargets() const;
  // The sanitize rules: the last sanitize_boxes op's, else its defaults.
  const TargetRules& target_rules() const { return rules_; }

  // The batch ops on a finished float32 batch (in place), writing batch.targets.
  // batch_key: BatchKey() of the batch. No-op without batch ops.
  void ApplyBatchOps(const BatchView& batch, uint64_t seed, uint64_t epoch, uint64_t batch_key) const;

  // The key a batch op's stream is drawn from: a function of the batch's position in
  // its epoch and its first sample, the same on every worker and on the trainer.
  static uint64_t BatchKey(int64_t batch_in_epoch, const int64_t* indices, int64_t valid);

  // When uint8 travels and the trainer makes float32: the spec the workers run (the
  // image ops, uint8 NHWC output), and what the trainer does with its rows.
  PipelineSpec ImageSpec() const;
  // uint8 NHWC rows (of ImageSpec()) -> float32 NCHW `out` (sample_bytes() a row): the
  // normalize, the tensor ops of each valid row, the batch ops. `targets`: rows x
  // num_classes() floats when num_classes() > 0.
  void FinishOnTrainer(const uint8_t* images, int64_t rows, int64_t valid, const int64_t* indices,
                       const int64_t* labels, uint64_t seed, uint64_t epoch, uint64_t batch_key, float* out,
                       float* targets) const;

  // For a trainer that finishes batches on its GPU (client/python/ferry/device_finish.py):
  // what FinishOnTrainer does after the normalize, drawn from the same streams but
  // touching no pixel: each valid row's erase boxes (row, box) in the order they are
  // applied, the batch op's plan (*batch untouched without one), and `targets` (rows x
  // num_classes() floats) as FinishOnTrainer writes them. The normalize is
  // float_scale() / float_bias(). False when an op cannot plan (a plugin's tensor op,
  // a normalize that is not the first tensor op): the host finishes such batches.
  bool PlanOnTrainer(int64_t rows, int64_t valid, const int64_t* indices, const int64_t* labels, uint64_t seed,
                     uint64_t epoch, uint64_t batch_key, std::vector<std::pair<int64_t, ErasePlan>>* erases,
                     MixPlan* batch, float* targets) const;
  // x * scale + bias, per channel: the float32 write of a uint8 sample (the fused normalize).
  const float* float_scale() const { return scale_; }
  const float* float_bias() const { return bias_; }

  // REQUIRES: created by Compile.
  Pipeline() = default;

 private:
  struct Step;
  Status RunImageOps(cv::Mat& img, size_t first, bool flip, uint64_t seed, uint64_t epoch, int64_t index,
                     void* out, StepTimes* times, TargetTracker* tracker) const;
  void WriteOutput(const cv::Mat& img, bool flip, uint64_t seed, uint64_t epoch, int64_t index, void* out) const;
  void RunTensorOps(float* chw, uint64_t seed, uint64_t epoch, int64_t index) const;
  // Whether a tensor op (other than the fused normalize) or a batch op reads a row
  // right after it is written: then it is written with plain stores, else streamed.
  bool ReadsRowsBack() const;
  SampleRng Rng(size_t op, uint64_t seed, uint64_t epoch, int64_t index) const;

  PipelineSpec spec_, canonical_;
  std::vector<std::unique_ptr<Op>> ops_;
  std::vector<uint32_t> streams_;
  std::vector<std::string> step_names_;
  int first_tensor_op_ = 0;  // index of the first op that is not an image op
  int normalize_op_ = -1;    // index of normalize, when fused with the float write
  int batch_op_ = -1;
  Shape out_;
  int num_classes_ = 0;
  TargetRules rules_;
  float scale_[3] = {1 / 255.f, 1 / 255.f, 1 / 255.f}, bias_[3] = {0, 0, 0};
};

// A job's full check where the ops are known: JobSpec::Validate, the pipeline's
// Compile (and its targets), and the batch's bytes (at most JobSpec::kMaxBatchBytes).
// CompileJob returns the compiled pipeline (a process that runs the job keeps it:
// pipeline/prepared_job.h); CheckJob is for those that only check (the dispatcher).
Result<std::shared_ptr<const Pipeline>> CompileJob(const JobSpec& job);
Status CheckJob(const JobSpec& job);
// A mixture's pipeline for each source (JobSpec::mixture), given the job's compiled
// one: `main` for a source with none of its own, else its own, checked to make rows of
// main's shape and type, with no batch op (main's batch op runs on the whole batch),
// and to move the job's targets. Empty for a job that is no mixture.
Result<std::vector<std::shared_ptr<const Pipeline>>> CompileSourcePipelines(const JobSpec& job,
                                                                            const std::shared_ptr<const Pipeline>& main);

}  // namespace ferry

#endif  // FERRY_OPS_PIPELINE_H_
