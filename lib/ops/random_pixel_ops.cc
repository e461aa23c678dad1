// The random single-kernel ops of torchvision.transforms, each applied when a uniform
// draw is below p, with Pillow's arithmetic (kernels/color.h):
//   random_solarize(threshold, p)          RandomSolarize
//   random_posterize(bits, p)              RandomPosterize
//   random_equalize(p)                     RandomEqualize
//   random_autocontrast(p)                 RandomAutocontrast
//   random_adjust_sharpness(sharpness_factor, p)   RandomAdjustSharpness
//   random_invert(p)                       RandomInvert
#include <functional>

#include "ops/kernels/color.h"
#include "ops/op.h"

namespace ferry {
namespace {

class RandomPixelOp final : public Op {
 public:
  using Kernel = std::function<bool(cv::Mat&)>;
  RandomPixelOp(double p, Kernel k) : p_(p), kernel_(std::move(k)) {}
  bool CommutesWithHFlip() const override { return true; }
  Status Apply(cv::Mat& img, SampleRng& rng) const override {
    const bool applied = rng.Bernoulli(p_);
    RecordDraw("applied", applied);
    if (!applied) return Status::OK();
    kernel_(img);
    return Status::OK();
  }

 private:
  const double p_;
  const Kernel kernel_;
};

double P(OpArgs& a) {
  const double p = a.Number("p", 0.5);
  a.Require(p >= 0 && p <= 1, "p", "must be in [0, 1]");
  return p;
}

Result<std::unique_ptr<Op>> Make(double p, RandomPixelOp::Kernel k) {
  return std::unique_ptr<Op>(new RandomPixelOp(p, std::move(k)));
}

}  // namespace

void RegisterRandomPixelOps() {
  RegisterOp("random_solarize", [](OpArgs& a) {
    a.Require(a.Has("threshold"), "threshold", "is required");
    const double t = a.Number("threshold", 128);
    return Make(P(a), [t](cv::Mat& m) { return kernels::Solarize(m, t); });
  });
  RegisterOp("random_posterize", [](OpArgs& a) {
    a.Require(a.Has("bits"), "bits", "is required");
    const int bits = a.Int("bits", 8);
    a.Require(bits >= 0 && bits <= 8, "bits", "must be in [0, 8]");
    return Make(P(a), [bits](cv::Mat& m) { return kernels::Posterize(m, bits); });
  });
  RegisterOp("random_equalize", [](OpArgs& a) { return Make(P(a), [](cv::Mat& m) { return kernels::Equalize(m); }); });
  RegisterOp("random_autocontrast",
             [](OpArgs& a) { return Make(P(a), [](cv::Mat& m) { return kernels::Autocontrast(m); }); });
  RegisterOp("random_adjust_sharpness", [](OpArgs& a) {
    a.Require(a.Has("sharpness_factor"), "sharpness_factor", "is required");
    const double f = a.Number("sharpness_factor", 1);
    a.Require(f >= 0, "sharpness_factor", "must be >= 0");
    return Make(P(a), [f](cv::Mat& m) { return kernels::AdjustSharpness(m, f); });
  });
  RegisterOp("random_invert", [](OpArgs& a) { return Make(P(a), [](cv::Mat& m) { return kernels::Invert(m); }); });
}

}  // namespace ferry
