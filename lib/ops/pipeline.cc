#include "ops/pipeline.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <string>

#include <nlohmann/json.hpp>
#include <opencv2/imgproc.hpp>

#include "core/check.h"
#include "core/histogram.h"
#include "image/image_decoder.h"
#include "image/jpeg_decoder.h"
#include "image/orientation.h"
#include "ops/geometry.h"
#include "ops/kernels/pixels.h"

namespace ferry {

namespace {

// Memory each thread reuses across samples, so the steady state allocates little.
struct Scratch {
  JpegDecoder jpeg;
  cv::Mat resized;  // the fused resample's output when it is not the batch row itself
};

Scratch& ThreadScratch() {
  thread_local Scratch scratch;
  return scratch;
}

std::string OpLabel(size_t i, const std::string& name) { return "op " + std::to_string(i) + " (" + name + ")"; }

}  // namespace

// ---------------------------------------------------------------------------------
// Compile

Result<std::shared_ptr<const Pipeline>> Pipeline::Compile(const PipelineSpec& spec) {
  FERRY_RETURN_IF_ERROR(spec.Validate());
  auto p = std::make_shared<Pipeline>();
  p->spec_ = spec;
  p->canonical_ = spec;
  p->canonical_.ops.clear();
  Shape shape{-1, -1, spec.color == PipelineSpec::Color::kGray ? 1 : 3};
  bool first_rrc = true, first_flip = true, first_jitter = true;
  int phase = 0;  // 0: image ops, 1: tensor ops, 2: the batch op
  std::string last_non_image;
  p->first_tensor_op_ = int(spec.ops.size());
  p->step_names_.push_back("decode");
  for (size_t i = 0; i < spec.ops.size(); ++i) {
    const PipelineSpec::Op& o = spec.ops[i];
    std::string canonical;
    FERRY_ASSIGN_OR_RETURN(std::unique_ptr<Op> op, MakeOp(o.name, o.params, &canonical));
    uint32_t stream = kRngFirstOp + uint32_t(i);
    if (o.name == "random_resized_crop" && first_rrc) stream = kRngCrop, first_rrc = false;
    else if ((o.name == "hflip" || o.name == "random_horizontal_flip") && first_flip) stream = kRngFlip, first_flip = false;
    else if (o.name == "color_jitter" && first_jitter) stream = kRngJitter, first_jitter = false;
    const Op::Stage stage = op->stage();
    if (const TargetRules* rules = op->Sanitizes()) p->rules_ = *rules;
    if (stage == Op::Stage::kImage) {
      if (phase > 0)
        return Status::InvalidArgument("pipeline spec: " + OpLabel(i, o.name) + " works on images, but it comes after " +
                                       last_non_image + ", which works on tensors: put image ops first");
      Result<Shape> next = op->OutputShape(shape);
      if (!next.ok()) return Status::InvalidArgument("pipeline spec: " + OpLabel(i, o.name) + ": " + next.status().message());
      shape = *next;
    } else {
      if (p->first_tensor_op_ == int(spec.ops.size())) p->first_tensor_op_ = int(i);
      if (phase == 2)
        return Status::InvalidArgument("pipeline spec: " + OpLabel(i, o.name) + " comes after the batch op " +
                                       last_non_image + ", which must be last");
      float mean[3], std[3];
      if (op->Normalizes(mean, std)) {
        if (p->normalize_op_ >= 0 || (p->first_tensor_op_ != int(i) && phase == 1 && p->normalize_op_ == -2))
          return Status::InvalidArgument("pipeline spec: normalize appears twice");
        if (p->first_tensor_op_ == int(i)) {
          // Fused with the uint8 -> float32 write: x * (1 / (255 std)) + (-mean / std).
          p->normalize_op_ = int(i);
          for (int c = 0; c < 3; ++c) {
            p->scale_[c] = 1.f / (255.f * std[c]);
            p->bias_[c] = -mean[c] / std[c];
          }
        } else {
          p->normalize_op_ = -2;  // a pass of its own, after an earlier tensor op
        }
      }
      if (stage == Op::Stage::kBatch) {
        p->batch_op_ = int(i);
        p->num_classes_ = op->num_classes();
        phase = 2;
      } else {
        phase = std::max(phase, 1);
      }
      last_non_image = o.name;
    }
    p->step_names_.push_back(o.name);
    p->ops_.push_back(std::move(op));
    p->streams_.push_back(stream);
    p->canonical_.ops.push_back({o.name, canonical});
  }
  p->step_names_.push_back("output");
  if (p->normalize_op_ == -2) p->normalize_op_ = -1;
  if (!shape.fixed())
    return Status::InvalidArgument(
        "pipeline spec: the output size varies with the image; a batch holds images of one size, so end the "
        "image ops with a crop or a fixed-size resize (e.g. center_crop, random_resized_crop, resize [h, w])");
  if (int64_t(shape.height) * shape.width > 64 * 1024 * 1024)
    return Status::InvalidArgument("pipeline spec: the output image is larger than 64 megapixels");
  if (phase > 0 && spec.output == PipelineSpec::Output::kUint8NHWC)
    return Status::InvalidArgument("pipeline spec: " + last_non_image +
                                   " works on float32 tensors: the output must be float32 NCHW (it is uint8 NHWC)");
  p->out_ = shape;
  return std::shared_ptr<const Pipeline>(std::move(p));
}

size_t Pipeline::sample_bytes() const {
  return size_t(out_.height) * out_.width * out_.channels * DTypeSize(dtype());
}

SampleRng Pipeline::Rng(size_t op, uint64_t seed, uint64_t epoch, int64_t index) const {
  return SampleRng(seed, epoch, uint64_t(index), streams_[op]);
}

uint64_t Pipeline::BatchKey(int64_t batch_in_epoch, const int64_t* indices, int64_t valid) {
  uint64_t z = uint64_t(batch_in_epoch) * 0x9E3779B97F4A7C15ull ^ uint64_t(valid > 0 ? indices[0] : -1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

PipelineSpec Pipeline::ImageSpec() const {
  PipelineSpec s = canonical_;
  s.ops.resize(size_t(first_tensor_op_));
  s.output = PipelineSpec::Output::kUint8NHWC;
  return s;
}

// ---------------------------------------------------------------------------------
// Process

Status Pipeline::CheckTargets() const {
  for (int i = 0; i < first_tensor_op_; ++i) {
    if (ops_[size_t(i)]->motion() == Op::Motion::kUnknown)
      return Status::InvalidArgument("pipeline spec: " + OpLabel(size_t(i), spec_.ops[size_t(i)].name) +
                                     " cannot move boxes and masks with the image; a job with targets can use the "
                                     "crops, resizes, flips, pads, rotations, affine and perspective ops and any "
                                     "colour op");
  }
  if (batch_op_ >= 0)
    return Status::InvalidArgument("pipeline spec: " + OpLabel(size_t(batch_op_), spec_.ops[size_t(batch_op_)].name) +
                                   " mixes samples, which has no meaning for boxes and masks");
  return Status::OK();
}

Status Pipeline::Process(std::string_view encoded, uint64_t seed, uint64_t epoch, int64_t index, void* out,
                         int64_t* decoded_ns, StepTimes* times, SampleTargets* targets) const {
  if (encoded.empty()) return Status::DataLoss("zero-byte file");
  if (targets != nullptr) FERRY_RETURN_IF_ERROR(CheckTargets());
  const bool gray = spec_.color == PipelineSpec::Color::kGray;
  Scratch& scratch = ThreadScratch();
  const int64_t t0 = times != nullptr ? MonoNs() : 0;
  try {
    // 1. Decode: the crop plan's window when the leading ops make one, else the whole
    // image. Planning draws from the ops' own streams, so it is what Apply would draw.
    const ImageFormat format = SniffFormat(encoded);
    if (format == ImageFormat::kUnknown) return Status::InvalidArgument("not an image: unrecognized file signature");
    if (format == ImageFormat::kGif) return Status::Unimplemented("unsupported image format: GIF");
    auto plan_prefix = [&](int w, int h, size_t* consumed) -> std::optional<CropPlan> {
      *consumed = 0;
      if (first_tensor_op_ == 0) return std::nullopt;
      SampleRng r0 = Rng(0, seed, epoch, index);
      std::optional<CropPlan> plan = ops_[0]->PlanCrop(w, h, r0);
      if (!plan) return std::nullopt;
      *consumed = 1;
      // A crop of the resampled window (Resize then CenterCrop / RandomCrop, ScaleJitter
      // then FixedSizeCrop): the two compose into one window of the source, mapped back
      // through the resample, and the second's padding.
      if (first_tensor_op_ >= 2 && !plan->pads()) {
        SampleRng r1 = Rng(1, seed, epoch, index);
        std::optional<CropPlan> second = ops_[1]->PlanCrop(plan->out_w, plan->out_h, r1);
        if (second && !second->resamples()) {
          plan = ComposeCropPlans(*plan, *second, w, h);
          *consumed = 2;
        }
      }
      return plan;
    };
    cv::Mat region;  // the plan's window (or the whole image), oriented, RGB or gray
    std::optional<CropPlan> plan;
    size_t consumed = 0;
    int full_w = 0, full_h = 0;  // the decoded image's size, oriented
    if (format == ImageFormat::kJpeg) {
      FERRY_ASSIGN_OR_RETURN(JpegInfo info, scratch.jpeg.ReadHeader(encoded, spec_.max_pixels));
      const bool swap = info.orientation >= 5;
      const int ow = swap ? info.height : info.width, oh = swap ? info.width : info.height;
      full_w = ow, full_h = oh;
      plan = plan_prefix(ow, oh, &consumed);
      const cv::Rect box = plan ? plan->window : cv::Rect(0, 0, ow, oh);
      const cv::Rect stored = OrientedToStored(box, info.orientation, info.width, info.height);
      cv::Mat raw;
      if (spec_.roi_decode && plan) {
        // Nearest neighbour must see the original pixels: no DCT scaling for it.
        int min_w = plan->interp == kNearest ? box.width : plan->out_w;
        int min_h = plan->interp == kNearest ? box.height : plan->out_h;
        if (swap) std::swap(min_w, min_h);
        FERRY_ASSIGN_OR_RETURN(raw, scratch.jpeg.DecodeRegion(stored, min_w, min_h, gray, nullptr));
      } else {
        FERRY_ASSIGN_OR_RETURN(cv::Mat full, scratch.jpeg.DecodeFull(gray));
        raw = full(stored);
      }
      region = ApplyOrientation(raw, info.orientation);
    } else {
      FERRY_ASSIGN_OR_RETURN(cv::Mat img, DecodeImage(format, encoded, gray, spec_.max_pixels));
      plan = plan_prefix(img.cols, img.rows, &consumed);
      region = plan ? img(plan->window) : img;
      full_w = img.cols, full_h = img.rows;
    }
    const int64_t t1 = MonoNs();
    if (decoded_ns != nullptr) *decoded_ns = t1;
    if (times != nullptr) times->ns[0] += t1 - t0;
    std::optional<TargetTracker> tracker;
    if (targets != nullptr) {
      FERRY_RETURN_IF_ERROR(ValidateTargets(*targets, full_w, full_h));
      tracker.emplace(targets, full_w, full_h);
    }
    TargetTracker* const track = tracker ? &*tracker : nullptr;
    if (!plan) {
      FERRY_RETURN_IF_ERROR(RunImageOps(region, 0, false, seed, epoch, index, out, times, track));
      if (track != nullptr) track->Finish(rules_);
      return Status::OK();
    }
    if (track != nullptr) {
      const cv::Rect& w = plan->window;
      const Warp m = CropResizeWarp(w.x, w.y, w.width, w.height, plan->out_w, plan->out_h);
      const Warp at = CropResizeWarp(-plan->canvas_x, -plan->canvas_y, 1, 1, 1, 1);  // onto the canvas
      track->Move(plan->pads() ? at * m : m, plan->final_w(), plan->final_h());
    }
    // The padding a plan puts around its resampled window.
    auto canvas = [&plan](const cv::Mat& resampled) {
      if (!plan->pads()) return resampled;
      return Pad(resampled,
                 {plan->canvas_x, plan->canvas_y, plan->canvas_w - plan->out_w - plan->canvas_x,
                  plan->canvas_h - plan->out_h - plan->canvas_y},
                 plan->fill, PadMode::kConstant);
    };

    // 2. The plan's resample, then the other image ops. When every later image op is a
    // flip or commutes with one (colour ops), the flips are drawn first and fused into
    // the resample (uint8) or the float write, and the ops run in place on the result.
    const int64_t t2 = times != nullptr ? MonoNs() : 0;
    bool simple = true;
    for (int i = int(consumed); i < first_tensor_op_; ++i) {
      simple = simple && (ops_[size_t(i)]->CommutesWithHFlip());
    }
    const int type = region.channels() == 1 ? CV_8UC1 : CV_8UC3;
    const bool to_uint8 = spec_.output == PipelineSpec::Output::kUint8NHWC;
    const bool near = region.cols <= 3 * plan->out_w && region.rows <= 3 * plan->out_h;
    if (simple) {
      bool flip = false;
      for (int i = int(consumed); i < first_tensor_op_; ++i) {
        SampleRng r = Rng(size_t(i), seed, epoch, index);
        if (std::optional<bool> f = ops_[size_t(i)]->DrawsHFlip(r)) flip ^= *f;
      }
      const bool flipped = flip;  // the net flip, wherever it is done (it moves the targets last)
      bool others = false;  // image ops other than flips follow the plan
      for (int i = int(consumed); i < first_tensor_op_; ++i) others = others || !ops_[size_t(i)]->IsHFlip();
      cv::Mat img;
      if (to_uint8 && out_.channels == region.channels() && plan->out_w == out_.width && plan->out_h == out_.height &&
          !plan->pads()) {
        // Straight into the batch row; a flip is fused into the resample when nothing
        // follows, else done in place last (colour ops before it see the unflipped
        // image, so a whole-image statistic sums in the same order).
        img = cv::Mat(plan->out_h, plan->out_w, type, out);
        if (plan->interp == kBilinear && near) {
          kernels::ResizeToUint8HWC(region, plan->out_w, plan->out_h, flip && !others, img.data);
        } else {
          ResampleFused(region, img, plan->interp);
          if (flip && !others) kernels::HFlipInPlace(img);
        }
        if (!others) flip = false;
      } else {
        scratch.resized.create(plan->out_h, plan->out_w, type);
        img = scratch.resized;
        if (plan->interp == kBilinear && near) kernels::ResizeToUint8HWC(region, plan->out_w, plan->out_h, false, img.data);
        else ResampleFused(region, img, plan->interp);
        img = canvas(img);
      }
      if (times != nullptr) times->ns[consumed] += MonoNs() - t2;  // the plan's last op
      for (int i = int(consumed); i < first_tensor_op_; ++i) {
        const Op& op = *ops_[size_t(i)];
        SampleRng r = Rng(size_t(i), seed, epoch, index);
        if (op.IsHFlip()) continue;  // drawn above
        const int64_t s = times != nullptr ? MonoNs() : 0;
        if (track != nullptr && op.motion() == Op::Motion::kWarp) {
          // A vflip, or a composition of flips: in place on the row, its points moved.
          Warp m;
          FERRY_RETURN_IF_ERROR(op.ApplyWarp(img, r, &m));
          track->Move(m, img.cols, img.rows);
        } else {
          FERRY_RETURN_IF_ERROR(op.Apply(img, r));
        }
        if (times != nullptr) times->ns[size_t(i) + 1] += MonoNs() - s;
      }
      const int64_t s = times != nullptr ? MonoNs() : 0;
      if (img.data != out || !to_uint8) WriteOutput(img, flip, seed, epoch, index, out);
      else if (flip) kernels::HFlipInPlace(img);
      if (times != nullptr) times->ns.back() += MonoNs() - s;
      if (track != nullptr) {
        if (flipped) track->Move(HFlipWarp(img.cols), img.cols, img.rows);
        track->Finish(rules_);
      }
      return Status::OK();
    }
    scratch.resized.create(plan->out_h, plan->out_w, type);
    cv::Mat img = scratch.resized;
    if (plan->interp == kBilinear && near) kernels::ResizeToUint8HWC(region, plan->out_w, plan->out_h, false, img.data);
    else ResampleFused(region, img, plan->interp);
    img = canvas(img);
    if (times != nullptr) times->ns[consumed] += MonoNs() - t2;
    FERRY_RETURN_IF_ERROR(RunImageOps(img, consumed, false, seed, epoch, index, out, times, track));
    if (track != nullptr) track->Finish(rules_);
    return Status::OK();
  } catch (const cv::Exception& e) {
    return Status::DataLoss(std::string("image processing failed: ") + e.what());
  } catch (const std::bad_alloc&) {
    return Status::ResourceExhausted("out of memory while decoding");
  }
}

Status Pipeline::RunImageOps(cv::Mat& img, size_t first, bool flip, uint64_t seed, uint64_t epoch, int64_t index,
                             void* out, StepTimes* times, TargetTracker* tracker) const {
  for (size_t i = first; i < size_t(first_tensor_op_); ++i) {
    const Op& op = *ops_[i];
    SampleRng r = Rng(i, seed, epoch, index);
    const int64_t s = times != nullptr ? MonoNs() : 0;
    if (std::optional<bool> f = op.DrawsHFlip(r)) {
      flip ^= *f;
      continue;
    }
    if (flip && !op.CommutesWithHFlip()) {
      kernels::HFlip(img);
      if (tracker != nullptr) tracker->Move(HFlipWarp(img.cols), img.cols, img.rows);
      flip = false;
    }
    if (tracker != nullptr && op.ReadsBoxes()) {
      std::vector<size_t> ids;
      const std::vector<std::array<double, 4>> boxes = tracker->LiveBoxes(&ids);
      std::vector<uint8_t> keep(boxes.size(), 1);
      Warp m;
      FERRY_RETURN_IF_ERROR(op.ApplyWithBoxes(img, r, &m, boxes, &keep));
      for (size_t k = 0; k < ids.size(); ++k)
        if (!keep[k]) tracker->Drop(ids[k]);
      tracker->Move(m, img.cols, img.rows);
    } else if (tracker != nullptr && op.motion() == Op::Motion::kWarp) {
      Warp m;
      FERRY_RETURN_IF_ERROR(op.ApplyWarp(img, r, &m));
      tracker->Move(m, img.cols, img.rows);
    } else {
      FERRY_RETURN_IF_ERROR(op.Apply(img, r));
    }
    if (times != nullptr) times->ns[i + 1] += MonoNs() - s;
  }
  if (img.cols != out_.width || img.rows != out_.height || img.channels() != out_.channels)
    return Status::Internal("the image ops made a " + std::to_string(img.cols) + "x" + std::to_string(img.rows) +
                            "x" + std::to_string(img.channels()) + " image, not the spec's " +
                            std::to_string(out_.width) + "x" + std::to_string(out_.height) + "x" +
                            std::to_string(out_.channels));
  const int64_t s = times != nullptr ? MonoNs() : 0;
  if (flip && tracker != nullptr) tracker->Move(HFlipWarp(img.cols), img.cols, img.rows);
  WriteOutput(img, flip, seed, epoch, index, out);
  if (times != nullptr) times->ns.back() += MonoNs() - s;
  return Status::OK();
}

void Pipeline::WriteOutput(const cv::Mat& img, bool flip, uint64_t seed, uint64_t epoch, int64_t index,
                           void* out) const {
  if (spec_.output == PipelineSpec::Output::kUint8NHWC) {
    cv::Mat dst(out_.height, out_.width, img.type(), out);
    if (flip) cv::flip(img, dst, 1);
    else if (img.data != dst.data) img.copyTo(dst);
    return;
  }
  kernels::WriteFloatCHW(img.data, img.step, img.rows, img.cols, img.channels(), flip, scale_, bias_,
                         static_cast<float*>(out), !ReadsRowsBack());
  RunTensorOps(static_cast<float*>(out), seed, epoch, index);
}

bool Pipeline::ReadsRowsBack() const {
  const size_t end = batch_op_ >= 0 ? size_t(batch_op_) : ops_.size();
  for (size_t i = size_t(first_tensor_op_); i < end; ++i)
    if (int(i) != normalize_op_) return true;  // a tensor op reads the row just written
  return batch_op_ >= 0;                        // MixUp/CutMix read the batch's rows
}

void Pipeline::RunTensorOps(float* chw, uint64_t seed, uint64_t epoch, int64_t index) const {
  const size_t end = batch_op_ >= 0 ? size_t(batch_op_) : ops_.size();
  for (size_t i = size_t(first_tensor_op_); i < end; ++i) {
    if (int(i) == normalize_op_) continue;  // fused with the write
    SampleRng r = Rng(i, seed, epoch, index);
    ops_[i]->ApplyTensor(chw, out_, r);
  }
}

void Pipeline::ApplyBatchOps(const BatchView& batch, uint64_t seed, uint64_t epoch, uint64_t batch_key) const {
  if (batch_op_ < 0) return;
  SampleRng r(seed, epoch, batch_key, kRngBatch);
  BatchView b = batch;
  b.shape = out_;
  b.num_classes = num_classes_;
  ops_[size_t(batch_op_)]->ApplyBatch(b, r);
}

void Pipeline::FinishOnTrainer(const uint8_t* images, int64_t rows, int64_t valid, const int64_t* indices,
                               const int64_t* labels, uint64_t seed, uint64_t epoch, uint64_t batch_key, float* out,
                               float* targets) const {
  const size_t in_row = size_t(out_.height) * out_.width * out_.channels;
  for (int64_t r = 0; r < rows; ++r) {
    float* o = out + size_t(r) * in_row;
    if (r >= valid) {  // padding rows are zeros, as a worker's float32 batch has them
      std::memset(o, 0, in_row * sizeof(float));
      continue;
    }
    kernels::WriteFloatCHW(images + size_t(r) * in_row, size_t(out_.width) * out_.channels, out_.height, out_.width,
                           out_.channels, false, scale_, bias_, o, !ReadsRowsBack());
    RunTensorOps(o, seed, epoch, indices[r]);
  }
  BatchView b;
  b.images = out;
  b.rows = rows;
  b.valid = valid;
  b.labels = labels;
  b.targets = targets;
  ApplyBatchOps(b, seed, epoch, batch_key);
}

bool Pipeline::PlanOnTrainer(int64_t rows, int64_t valid, const int64_t* indices, const int64_t* labels,
                             uint64_t seed, uint64_t epoch, uint64_t batch_key,
                             std::vector<std::pair<int64_t, ErasePlan>>* erases, MixPlan* batch,
                             float* targets) const {
  erases->clear();
  const size_t end = batch_op_ >= 0 ? size_t(batch_op_) : ops_.size();
  for (size_t i = size_t(first_tensor_op_); i < end; ++i) {
    float mean[3], std[3];
    if (int(i) != normalize_op_ && ops_[i]->Normalizes(mean, std)) return false;  // a normalize pass of its own
  }
  std::vector<ErasePlan> boxes;
  for (int64_t r = 0; r < valid; ++r) {
    for (size_t i = size_t(first_tensor_op_); i < end; ++i) {
      if (int(i) == normalize_op_) continue;  // fused with the write
      SampleRng rng = Rng(i, seed, epoch, indices[r]);
      if (!ops_[i]->PlanTensor(out_, rng, &boxes)) return false;
      for (ErasePlan& e : boxes) erases->emplace_back(r, std::move(e));
    }
  }
  if (batch_op_ < 0) return true;
  BatchView b;
  b.rows = rows;
  b.valid = valid;
  b.shape = out_;
  b.labels = labels;
  b.targets = targets;
  b.num_classes = num_classes_;
  SampleRng r(seed, epoch, batch_key, kRngBatch);
  return ops_[size_t(batch_op_)]->PlanBatch(b, r, batch);
}

// ---------------------------------------------------------------------------------
// CheckJob

Status CheckJob(const JobSpec& job) {
  FERRY_ASSIGN_OR_RETURN(std::shared_ptr<const Pipeline> p, CompileJob(job));
  return CompileSourcePipelines(job, p).status();
}

Result<std::vector<std::shared_ptr<const Pipeline>>> CompileSourcePipelines(const JobSpec& job,
                                                                            const std::shared_ptr<const Pipeline>& main) {
  std::vector<std::shared_ptr<const Pipeline>> out;
  for (size_t k = 0; k < job.mixture.size(); ++k) {
    const MixtureSource& m = job.mixture[k];
    if (m.pipeline.empty()) {
      out.push_back(main);
      continue;
    }
    const std::string which = "mixture source " + std::to_string(k) + " (" + m.dataset.substr(0, 256) + "): ";
    // A name or JSON, never a file: a job names no file on a worker but its data.
    if (m.pipeline.front() != '{' && m.pipeline != "imagenet-train" && m.pipeline != "imagenet-eval")
      return Status::InvalidArgument(which + "its pipeline is a JSON object or imagenet-train/imagenet-eval");
    Result<PipelineSpec> spec = PipelineSpec::Parse(m.pipeline);
    if (!spec.ok()) return Status::InvalidArgument(which + "pipeline: " + spec.status().message());
    Result<std::shared_ptr<const Pipeline>> p = Pipeline::Compile(*spec);
    if (!p.ok()) return Status(p.status().code(), which + "pipeline: " + p.status().message());
    const Pipeline& q = **p;
    if (q.has_batch_ops())
      return Status::InvalidArgument(which + "its pipeline has a batch op: give batch ops in the job's pipeline, "
                                             "which runs them on whole batches");
    const Shape a = q.output_shape(), b = main->output_shape();
    if (a.height != b.height || a.width != b.width || a.channels != b.channels || q.dtype() != main->dtype() ||
        q.sample_bytes() != main->sample_bytes())
      return Status::InvalidArgument(
          which + "its pipeline makes " + std::to_string(a.height) + "x" + std::to_string(a.width) + "x" +
          std::to_string(a.channels) + " " + std::string(DTypeName(q.dtype())) + " rows, the job's " +
          std::to_string(b.height) + "x" + std::to_string(b.width) + "x" + std::to_string(b.channels) + " " +
          std::string(DTypeName(main->dtype())) + ": a batch's rows must all be alike");
    if (job.geometric_targets()) {
      if (Status st = q.CheckTargets(); !st.ok()) return Status(st.code(), which + st.message());
    }
    out.push_back(std::move(*p));
  }
  return out;
}

Result<std::shared_ptr<const Pipeline>> CompileJob(const JobSpec& job) {
  FERRY_RETURN_IF_ERROR(job.Validate());
  FERRY_ASSIGN_OR_RETURN(std::shared_ptr<const Pipeline> p, Pipeline::Compile(job.pipeline));
  if (job.geometric_targets()) FERRY_RETURN_IF_ERROR(p->CheckTargets());
  if (job.synthetic()) return p;  // synthetic datasets name their own batch bytes
  const int64_t row = int64_t(p->sample_bytes()) + 2 * int64_t(sizeof(int64_t)) + 4 * int64_t(p->num_classes());
  const int64_t bytes = int64_t(job.batch_size) * row;  // batch_size < 2^31, row < 2^40: no overflow
  if (bytes > JobSpec::kMaxBatchBytes)
    return Status::InvalidArgument("a batch of " + std::to_string(job.batch_size) + " samples of " +
                                   std::to_string(row) + " bytes is " + std::to_string(bytes >> 20) +
                                   " MiB; the most is " + std::to_string(JobSpec::kMaxBatchBytes >> 20) +
                                   " MiB: use a smaller batch_size or image size");
  return p;
}

}  // namespace ferry
