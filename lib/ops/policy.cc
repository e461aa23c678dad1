#include "ops/policy.h"

#include <cmath>
#include <numbers>

#include "ops/kernels/color.h"
#include "ops/warp_ops.h"
#include "ops/kernels/warp.h"

namespace ferry {

std::string_view PolicyOpName(PolicyOp op) {
  switch (op) {
    case PolicyOp::kIdentity: return "Identity";
    case PolicyOp::kShearX: return "ShearX";
    case PolicyOp::kShearY: return "ShearY";
    case PolicyOp::kTranslateX: return "TranslateX";
    case PolicyOp::kTranslateY: return "TranslateY";
    case PolicyOp::kRotate: return "Rotate";
    case PolicyOp::kBrightness: return "Brightness";
    case PolicyOp::kColor: return "Color";
    case PolicyOp::kContrast: return "Contrast";
    case PolicyOp::kSharpness: return "Sharpness";
    case PolicyOp::kPosterize: return "Posterize";
    case PolicyOp::kSolarize: return "Solarize";
    case PolicyOp::kAutoContrast: return "AutoContrast";
    case PolicyOp::kEqualize: return "Equalize";
    case PolicyOp::kInvert: return "Invert";
  }
  return "?";
}

float TorchLinspace(float start, float end, int steps, int i) {
  if (steps <= 1) return start;
  const float step = (end - start) / float(steps - 1);
  const int halfway = steps / 2;
  return i < halfway ? start + step * float(i) : end - step * float(steps - i - 1);
}

void ApplyTorchvisionOp(cv::Mat& img, PolicyOp op, double m, int interp, const std::array<uint8_t, 3>& fill,
                        bool tensor) {
  const double kDeg = 180.0 / std::numbers::pi;
  const double origin[2] = {0, 0};
  switch (op) {
    case PolicyOp::kIdentity: return;
    case PolicyOp::kShearX:
      img = AffinePil(img, 0, 0, 0, 1, std::atan(m) * kDeg, 0, interp, fill, origin);
      return;
    case PolicyOp::kShearY:
      img = AffinePil(img, 0, 0, 0, 1, 0, std::atan(m) * kDeg, interp, fill, origin);
      return;
    case PolicyOp::kTranslateX:
      img = AffinePil(img, 0, double(int(m)), 0, 1, 0, 0, interp, fill, nullptr);
      return;
    case PolicyOp::kTranslateY:
      img = AffinePil(img, 0, 0, double(int(m)), 1, 0, 0, interp, fill, nullptr);
      return;
    case PolicyOp::kRotate:
      img = kernels::PilRotate(img, m, ToKernelInterp(interp), false, nullptr, fill.data());
      return;
    default: break;
  }
  if (!img.isContinuous()) img = img.clone();
  switch (op) {
    case PolicyOp::kBrightness:
      tensor ? kernels::AdjustBrightnessTensor(img, 1.0 + m) : kernels::AdjustBrightness(img, 1.0 + m);
      return;
    case PolicyOp::kColor:
      tensor ? kernels::AdjustSaturationTensor(img, 1.0 + m) : kernels::AdjustSaturation(img, 1.0 + m);
      return;
    case PolicyOp::kContrast:
      tensor ? kernels::AdjustContrastTensor(img, 1.0 + m) : kernels::AdjustContrast(img, 1.0 + m);
      return;
    case PolicyOp::kSharpness:
      tensor ? kernels::AdjustSharpnessTensor(img, 1.0 + m) : kernels::AdjustSharpness(img, 1.0 + m);
      return;
    case PolicyOp::kPosterize: kernels::Posterize(img, int(m)); return;
    case PolicyOp::kSolarize: kernels::Solarize(img, m); return;
    case PolicyOp::kAutoContrast: tensor ? kernels::AutocontrastTensor(img) : kernels::Autocontrast(img); return;
    case PolicyOp::kEqualize: tensor ? kernels::EqualizeTensor(img) : kernels::Equalize(img); return;
    case PolicyOp::kInvert: kernels::Invert(img); return;
    default: return;
  }
}

}  // namespace ferry
