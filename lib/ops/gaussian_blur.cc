// gaussian_blur: torchvision.transforms.GaussianBlur(kernel_size, sigma): sigma drawn
// uniformly from [min, max] (a single number: fixed), then F.gaussian_blur as
// torchvision runs it on a PIL image (float32 convolution, reflect padding, rounded).
#include "ops/kernels/color.h"
#include "ops/op.h"

namespace ferry {
namespace {

class GaussianBlur final : public Op {
 public:
  GaussianBlur(int kx, int ky, std::pair<double, double> sigma) : kx_(kx), ky_(ky), sigma_(sigma) {}
  bool CommutesWithHFlip() const override { return true; }
  Status Apply(cv::Mat& img, SampleRng& rng) const override {
    const double s = rng.Uniform(sigma_.first, sigma_.second);
    RecordDraw("sigma", s);
    if (!img.isContinuous()) img = img.clone();
    kernels::GaussianBlur(img, kx_, ky_, s, s);
    return Status::OK();
  }

 private:
  const int kx_, ky_;
  const std::pair<double, double> sigma_;
};

}  // namespace

void RegisterGaussianBlur() {
  RegisterOp("gaussian_blur", [](OpArgs& a) -> Result<std::unique_ptr<Op>> {
    a.Require(a.Has("kernel_size"), "kernel_size", "is required");
    // torchvision's kernel_size is (kx, ky): width first.
    const auto k = a.Size("kernel_size", {3, 3});
    const nlohmann::json* raw = a.Raw("sigma");
    std::pair<double, double> sigma{0.1, 2.0};
    if (raw != nullptr && raw->is_number()) {
      sigma = {raw->get<double>(), raw->get<double>()};
      a.Record("sigma", {sigma.first, sigma.second});
    } else {
      sigma = a.Range("sigma", sigma);
    }
    a.Require(k.first % 2 == 1 && k.second % 2 == 1, "kernel_size", "must be odd");
    a.Require(sigma.first > 0, "sigma", "must be > 0");
    return std::unique_ptr<Op>(new GaussianBlur(k.first, k.second, sigma));
  });
}

}  // namespace ferry
