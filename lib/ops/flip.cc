// hflip / random_horizontal_flip: torchvision.transforms.RandomHorizontalFlip(p);
// vflip / random_vertical_flip: RandomVerticalFlip(p). A sample is flipped when a
// uniform draw is below p. Horizontal flips cost no pass of their own: the pipeline
// carries them to the final write (pipeline.h).
#include <opencv2/core.hpp>

#include "ops/kernels/pixels.h"
#include "ops/op.h"

namespace ferry {
namespace {

class HFlip final : public Op {
 public:
  explicit HFlip(double p) : p_(p) {}
  bool IsHFlip() const override { return true; }
  std::optional<bool> DrawsHFlip(SampleRng& rng) const override { return Draw(rng); }
  bool CommutesWithHFlip() const override { return true; }
  Motion motion() const override { return Motion::kWarp; }
  Status Apply(cv::Mat& img, SampleRng& rng) const override { return ApplyWarp(img, rng, nullptr); }
  Status ApplyWarp(cv::Mat& img, SampleRng& rng, Warp* warp) const override {
    const bool flip = Draw(rng);
    if (warp != nullptr) *warp = flip ? HFlipWarp(img.cols) : IdentityWarp();
    if (flip) kernels::HFlip(img);
    return Status::OK();
  }

 private:
  bool Draw(SampleRng& rng) const {
    const bool flip = rng.Bernoulli(p_);
    RecordDraw("flipped", flip);
    return flip;
  }
  const double p_;
};

class VFlip final : public Op {
 public:
  explicit VFlip(double p) : p_(p) {}
  bool CommutesWithHFlip() const override { return true; }
  Motion motion() const override { return Motion::kWarp; }
  Status Apply(cv::Mat& img, SampleRng& rng) const override { return ApplyWarp(img, rng, nullptr); }
  Status ApplyWarp(cv::Mat& img, SampleRng& rng, Warp* warp) const override {
    const bool flip = rng.Bernoulli(p_);
    RecordDraw("flipped", flip);
    if (warp != nullptr) *warp = flip ? VFlipWarp(img.rows) : IdentityWarp();
    if (flip) {
      cv::Mat out;
      cv::flip(img, out, 0);
      img = out;
    }
    return Status::OK();
  }

 private:
  const double p_;
};

template <typename T>
Result<std::unique_ptr<Op>> MakeFlip(OpArgs& a) {
  const double p = a.Number("p", 0.5);
  a.Require(p >= 0 && p <= 1, "p", "must be in [0, 1]");
  return std::unique_ptr<Op>(new T(p));
}

}  // namespace

void RegisterFlips() {
  RegisterOp("hflip", MakeFlip<HFlip>);
  RegisterOp("random_horizontal_flip", MakeFlip<HFlip>);
  RegisterOp("vflip", MakeFlip<VFlip>);
  RegisterOp("random_vertical_flip", MakeFlip<VFlip>);
}

}  // namespace ferry
