// The primitive ops of the augmentation policies (RandAugment, TrivialAugmentWide,
// AutoAugment, AugMix, and timm's), with the arithmetic of the library each policy
// comes from. Thread-safe pure functions.
#ifndef FERRY_OPS_POLICY_H_
#define FERRY_OPS_POLICY_H_

#include <array>
#include <cstdint>
#include <string_view>

#include <opencv2/core.hpp>

#include "core/philox.h"

namespace ferry {

// torchvision.transforms.autoaugment's op names, in its augmentation spaces' order.
enum class PolicyOp {
  kIdentity, kShearX, kShearY, kTranslateX, kTranslateY, kRotate, kBrightness, kColor, kContrast, kSharpness,
  kPosterize, kSolarize, kAutoContrast, kEqualize, kInvert,
};
std::string_view PolicyOpName(PolicyOp op);

// torchvision's _apply_op(img, op, magnitude, interpolation, fill) on a PIL image (or,
// with `tensor` true, the colour ops of the tensor backend, as AugMix runs them on the
// tensor it converts a PIL image to; its geometry stays Pillow's).
void ApplyTorchvisionOp(cv::Mat& img, PolicyOp op, double magnitude, int interp, const std::array<uint8_t, 3>& fill,
                        bool tensor = false);

// torch.linspace(start, end, steps)[i] in float32, as torch computes it (the first half
// from start, the second from end).
float TorchLinspace(float start, float end, int steps, int i);

}  // namespace ferry

#endif  // FERRY_OPS_POLICY_H_
