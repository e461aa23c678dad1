// Op: one step of a pipeline (include/ferry/pipeline_spec.h), made from its JSON
// parameters by a factory registered under its name.
//
// Glossary
//   image op     transforms one decoded sample: interleaved uint8 H x W x C (a
//                cv::Mat of CV_8UC1 or CV_8UC3, RGB), in place or into a new Mat. It
//                may change the size (geometry) or the channels (grayscale).
//   tensor op    transforms one sample's float32 C x H x W after `normalize`
//                (torchvision's ops that follow ToTensor: RandomErasing).
//   batch op     transforms a whole float32 batch and writes soft targets (MixUp,
//                CutMix).
//   stream       every random parameter an op draws comes from its own Philox stream,
//                keyed by (seed, epoch, sample index, the op's stream id); a batch op's
//                by (seed, epoch, batch key). A sample's pixels depend on nothing
//                else: not the worker, the thread, the retry or the other ops.
//   shape        what the pipeline knows before any image is decoded: height and width
//                (-1 while they vary with the image, e.g. after Resize(int)) and
//                channels. The last image op must leave them fixed.
//   crop plan    a geometry op that can be described, for a W x H input, as "read this
//                window and resample it to that size" (RandomResizedCrop, Resize,
//                CenterCrop, RandomCrop without padding). When such ops lead the
//                pipeline the window is chosen from the image's header and the decoder
//                reads only that window, at the largest DCT scale that keeps the
//                output's resolution (lib/ops/pipeline.cc).
//   motion       what an image op does to the image's points, so that boxes and masks
//                follow it (ops/targets.h): kNone (colour and per-pixel ops), kWarp
//                (geometry: ApplyWarp says where the points went), kUnknown (an op that
//                cannot say yet: a pipeline with targets refuses it, by name).
//
// Adding an op: one file under lib/ops/ that defines the Op and a factory, and one
// line in lib/ops/all_ops.inc (ops live in static libraries, where a registration
// that nothing references would be dropped by the linker). Ops are immutable after
// construction and thread-safe: one instance serves every sample on every thread.
#ifndef FERRY_OPS_OP_H_
#define FERRY_OPS_OP_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <array>
#include <vector>

#include <opencv2/core.hpp>

#include "core/philox.h"
#include "ferry/status.h"
#include "ops/args.h"
#include "ops/record.h"
#include "ops/targets.h"

namespace ferry {

struct Shape {
  int height = -1;  // -1: varies with the image
  int width = -1;
  int channels = 3;
  bool fixed() const { return height > 0 && width > 0; }
};

// The window of a W x H input a crop-like op reads, and the size it resamples it to.
// `interp` is how (nearest/bilinear/bicubic, antialiased as the op says).
struct CropPlan {
  cv::Rect window;  // within the input
  int out_w = 0, out_h = 0;
  int interp = 1;   // kernels::Interp as an int (op.h does not pull in the kernels)
  bool antialias = true;
  // Where the resampled window lands, when the op pads after it (FixedSizeCrop,
  // letterbox): a canvas_w x canvas_h image of `fill` with the out_w x out_h window at
  // (canvas_x, canvas_y). canvas_w 0: no padding, the output is the window.
  int canvas_w = 0, canvas_h = 0, canvas_x = 0, canvas_y = 0;
  std::array<uint8_t, 3> fill{};
  bool resamples() const { return window.width != out_w || window.height != out_h; }
  bool pads() const { return canvas_w > 0 && (canvas_w != out_w || canvas_h != out_h); }
  int final_w() const { return pads() ? canvas_w : out_w; }
  int final_h() const { return pads() ? canvas_h : out_h; }
};

// A float32 batch as a batch op sees it: `rows` rows of C x H x W, the first `valid`
// real samples (the rest padding: zeros, label -1).
struct BatchView {
  float* images = nullptr;
  int64_t rows = 0, valid = 0;
  Shape shape;
  const int64_t* labels = nullptr;
  float* targets = nullptr;  // rows x num_classes, written by the batch op
  int num_classes = 0;
};

// For a trainer that finishes batches on its GPU (Pipeline::PlanOnTrainer): what a
// tensor op does to one sample, a box of its C x H x W tensor set to a fill
// (RandomErasing), and what the batch op does (MixUp/CutMix), each drawn exactly as
// ApplyTensor / ApplyBatch draw it.
struct ErasePlan {
  int top = 0, left = 0, height = 0, width = 0;
  std::vector<float> fill;  // C values (one per channel), or C x height x width
};
struct MixPlan {
  bool mixed = false;         // the batch is mixed (else lam is 1 and it is left as it is)
  bool cutmix = false;        // CutMix (a box pasted), else MixUp
  bool flip_partner = false;  // row i mixes with row valid-1-i, else with row i-1 (row 0 with the last)
  double lam = 1.0;           // MixUp's weight of the row itself; CutMix's share left of it
  int x1 = 0, y1 = 0, x2 = 0, y2 = 0;  // CutMix's box (empty: nothing pasted)
};

class Op {
 public:
  enum class Stage : uint8_t { kImage, kTensor, kBatch };
  virtual ~Op() = default;

  virtual Stage stage() const { return Stage::kImage; }

  // The output shape given the input's (image ops), or an error naming what cannot
  // run on such an input (e.g. a crop larger than a fixed input without padding).
  virtual Result<Shape> OutputShape(const Shape& in) const { return in; }

  // Image ops: transforms `img` (may replace it with a new Mat). `rng` is this op's
  // stream for this sample. An error (e.g. an image smaller than a crop that may not
  // pad) skips the sample, reported with the message, as a bad file is.
  virtual Status Apply(cv::Mat& img, SampleRng& rng) const { return Status::OK(); }

  // See "motion" above. The default: ops that commute with a flip move no point (a
  // flip itself, and vflip, say kWarp); any other op must say.
  enum class Motion : uint8_t { kNone, kWarp, kUnknown };
  virtual Motion motion() const { return CommutesWithHFlip() ? Motion::kNone : Motion::kUnknown; }
  // Apply, also setting `*warp` (when not null) to where the input's points went
  // (ops/targets.h); the output's size is the image's. Draws exactly what Apply draws.
  // kWarp ops override it (and make Apply call it with nullptr); others move nothing.
  virtual Status ApplyWarp(cv::Mat& img, SampleRng& rng, Warp* warp) const {
    if (warp != nullptr) *warp = IdentityWarp();
    return Apply(img, rng);
  }
  // Ops whose draws depend on the sample's boxes (SSD's RandomIoUCrop): true, and the
  // pipeline calls ApplyWithBoxes instead, with the boxes alive so far in the input's
  // points; the op clears keep[i] for each box it drops, besides the warp.
  virtual bool ReadsBoxes() const { return false; }
  virtual Status ApplyWithBoxes(cv::Mat& img, SampleRng& rng, Warp* warp,
                                const std::vector<std::array<double, 4>>& boxes, std::vector<uint8_t>* keep) const {
    return ApplyWarp(img, rng, warp);
  }

  // True when the op gives the same pixels whether the image is mirrored left-right
  // before or after it (per-pixel and whole-image colour ops): a pending flip is then
  // carried past it and fused into the final write.
  virtual bool CommutesWithHFlip() const { return false; }
  // hflip: draws whether this sample is mirrored (the flip is carried, see above).
  virtual bool IsHFlip() const { return false; }
  virtual std::optional<bool> DrawsHFlip(SampleRng& rng) const { return std::nullopt; }

  // Crop-like geometry: the plan for a W x H input, drawing from `rng` exactly what
  // Apply would draw. nullopt when this op cannot be a plan on such an input (then
  // the image is decoded whole and Apply runs).
  virtual std::optional<CropPlan> PlanCrop(int width, int height, SampleRng& rng) const { return std::nullopt; }

  // Tensor ops: one sample, float32 planar C x H x W.
  virtual void ApplyTensor(float* chw, const Shape& shape, SampleRng& rng) const {}

  // The trainer's GPU: the boxes ApplyTensor would erase, drawing exactly what it
  // draws, touching no pixel. False: this op cannot say (the host finishes the batch).
  virtual bool PlanTensor(const Shape& shape, SampleRng& rng, std::vector<ErasePlan>* erases) const { return false; }

  // Batch ops: the batch (see BatchView). num_classes() > 0 for ops that write targets.
  virtual void ApplyBatch(const BatchView& batch, SampleRng& rng) const {}
  // The trainer's GPU: the plan ApplyBatch would carry out, and batch.targets written
  // as it writes them (batch.images unused). False: this op cannot say.
  virtual bool PlanBatch(const BatchView& batch, SampleRng& rng, MixPlan* plan) const { return false; }
  virtual int num_classes() const { return 0; }

  // The normalize op: per-channel mean and std in [0, 1] units.
  virtual bool Normalizes(float mean[3], float std[3]) const { return false; }
  // The sanitize_boxes op: its rules (ops/targets.h).
  virtual const TargetRules* Sanitizes() const { return nullptr; }
};

// Makes an op from its parameters. `args` reports unknown or ill-typed parameters;
// the factory adds its own range checks (Status::InvalidArgument naming the op and
// the parameter).
using OpFactory = std::function<Result<std::unique_ptr<Op>>(OpArgs& args)>;

// Ops registered by name: the built-in ones (all_ops.inc) and any a plugin adds.
// Thread-safe.
void RegisterOp(std::string name, OpFactory factory);
// Every registered name, sorted.
std::vector<std::string> RegisteredOps();

// Builds the op `name` from `params` (a JSON object). On success `canonical` (when
// given) receives the parameters with every default spelled out.
Result<std::unique_ptr<Op>> MakeOp(std::string_view name, std::string_view params,
                                   std::string* canonical = nullptr);

// Builds a list of nested ops (random_apply, random_choice, random_order): each
// element {"op": NAME, ...}. The nested ops draw from the parent's stream.
Result<std::vector<std::unique_ptr<Op>>> MakeNestedOps(OpArgs& args, const char* key);

}  // namespace ferry

#endif  // FERRY_OPS_OP_H_
