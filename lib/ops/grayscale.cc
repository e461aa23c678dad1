// grayscale: torchvision.transforms.Grayscale(num_output_channels) and
// random_grayscale: RandomGrayscale(p) (the output keeps the input's channels), with
// Pillow's luma (kernels/color.h).
#include "ops/kernels/color.h"
#include "ops/op.h"

namespace ferry {
namespace {

class Grayscale final : public Op {
 public:
  Grayscale(int channels, double p, bool random) : channels_(channels), p_(p), random_(random) {}

  Result<Shape> OutputShape(const Shape& in) const override {
    return Shape{in.height, in.width, random_ ? in.channels : channels_};
  }
  bool CommutesWithHFlip() const override { return true; }

  Status Apply(cv::Mat& img, SampleRng& rng) const override {
    if (random_) {
      const bool applied = rng.Bernoulli(p_);
      RecordDraw("applied", applied);
      if (!applied) return Status::OK();
    }
    kernels::Grayscale(img, random_ ? img.channels() : channels_);
    return Status::OK();
  }

 private:
  const int channels_;
  const double p_;
  const bool random_;
};

}  // namespace

void RegisterGrayscale() {
  RegisterOp("grayscale", [](OpArgs& a) -> Result<std::unique_ptr<Op>> {
    const int n = a.Int("num_output_channels", 1);
    a.Require(n == 1 || n == 3, "num_output_channels", "must be 1 or 3");
    return std::unique_ptr<Op>(new Grayscale(n, 1.0, false));
  });
  RegisterOp("random_grayscale", [](OpArgs& a) -> Result<std::unique_ptr<Op>> {
    const double p = a.Number("p", 0.1);
    a.Require(p >= 0 && p <= 1, "p", "must be in [0, 1]");
    return std::unique_ptr<Op>(new Grayscale(0, p, true));
  });
}

}  // namespace ferry
