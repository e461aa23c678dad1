// Interpolation modes shared by the kernels that resample images (warp.h, resample.h).
// Each kernel documents which Pillow filter a mode stands for in its own arithmetic.
#ifndef FERRY_OPS_KERNELS_INTERP_H_
#define FERRY_OPS_KERNELS_INTERP_H_

namespace ferry::kernels {

enum class Interp { kNearest, kBilinear, kBicubic };

}  // namespace ferry::kernels

#endif  // FERRY_OPS_KERNELS_INTERP_H_
