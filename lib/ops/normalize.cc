// normalize: torchvision's ToTensor (or PILToTensor + ConvertImageDtype(float32))
// followed by Normalize(mean, std): the float32 image (x / 255 - mean) / std. It is
// the first tensor op: the pipeline fuses it with the uint8 -> float32 write
// (pipeline.cc), computed as x * (1 / (255 std)) + (-mean / std) in float32, the
// arithmetic the trainer uses too when uint8 travels. Only after another tensor op
// (RandomErasing before Normalize) does it run as a pass of its own.
#include "ops/op.h"

namespace ferry {
namespace {

class Normalize final : public Op {
 public:
  Normalize(const float mean[3], const float std[3]) {
    for (int c = 0; c < 3; ++c) mean_[c] = mean[c], std_[c] = std[c];
  }
  Stage stage() const override { return Stage::kTensor; }
  bool Normalizes(float mean[3], float std[3]) const override {
    for (int c = 0; c < 3; ++c) mean[c] = mean_[c], std[c] = std_[c];
    return true;
  }
  // The unfused pass: `chw` holds ToTensor's x / 255.
  void ApplyTensor(float* chw, const Shape& s, SampleRng&) const override {
    const size_t plane = size_t(s.height) * s.width;
    for (int c = 0; c < s.channels; ++c) {
      const float m = mean_[c], d = std_[c];
      float* p = chw + c * plane;
      for (size_t i = 0; i < plane; ++i) p[i] = (p[i] - m) / d;
    }
  }

 private:
  float mean_[3], std_[3];
};

}  // namespace

void RegisterNormalize() {
  RegisterOp("normalize", [](OpArgs& a) -> Result<std::unique_ptr<Op>> {
    std::vector<double> mean = a.Numbers("mean", {0.0, 0.0, 0.0});
    std::vector<double> std = a.Numbers("std", {1.0, 1.0, 1.0});
    a.Require(mean.size() == 1 || mean.size() == 3, "mean", "must have 1 or 3 values");
    a.Require(std.size() == 1 || std.size() == 3, "std", "must have 1 or 3 values");
    float m[3], s[3];
    for (size_t c = 0; c < 3; ++c) {
      m[c] = float(mean.size() == 3 ? mean[c] : mean.empty() ? 0.0 : mean[0]);
      s[c] = float(std.size() == 3 ? std[c] : std.empty() ? 1.0 : std[0]);
      a.Require(s[c] > 0, "std", "must be > 0");
    }
    return std::unique_ptr<Op>(new Normalize(m, s));
  });
}

}  // namespace ferry
