// Shared by the ops that warp with Pillow's kernels (rotation, affine, perspective and
// the policies' shear, translate and rotate).
#ifndef FERRY_OPS_WARP_OPS_H_
#define FERRY_OPS_WARP_OPS_H_

#include <array>
#include <cstdint>

#include <opencv2/core.hpp>

#include "ops/kernels/interp.h"

namespace ferry {

inline kernels::Interp ToKernelInterp(int interp) {
  return interp == 0 ? kernels::Interp::kNearest
                     : interp == 2 ? kernels::Interp::kBicubic : kernels::Interp::kBilinear;
}

// F.affine on a PIL image: the inverse matrix about `center` (nullptr: the image's
// centre (w/2, h/2)), then Image.transform(AFFINE) into a new image of the same size.
// `inverse` (when not null) receives the coefficients.
cv::Mat AffinePil(const cv::Mat& img, double angle, double tx, double ty, double scale, double shear_x,
                  double shear_y, int interp, const std::array<uint8_t, 3>& fill, const double* center,
                  double inverse[6] = nullptr);

}  // namespace ferry

#endif  // FERRY_OPS_WARP_OPS_H_
