// Pillow-exact resizing of 8-bit images: what torchvision 0.14's F.resize and F.resized_crop do to a PIL
// image (Image.resize(size, resample), after an integer crop for resized_crop), reproduced bit for bit
// against Pillow 9.4 for NEAREST, BILINEAR and BICUBIC.
//
// Pillow's arithmetic, which this reproduces:
//   * BILINEAR / BICUBIC (a = -0.5) are a separable convolution. For each output column (then row) the
//     filter's support is widened by the reduction factor when shrinking (antialiasing), the weights are
//     evaluated in double at the output pixel's centre, normalised to sum to one, and quantised to 22-bit
//     fixed point. The horizontal pass runs first, over only the input rows the vertical pass will read,
//     and its result is rounded and clamped to 8 bits before the vertical pass; a pass whose size does not
//     change is skipped (so a same-width resize is a pure vertical filter, and a same-size one a copy).
//   * NEAREST picks, for output column x, input column int(w_in / w_out * 0.5 + x * w_in / w_out) where the
//     product is accumulated by repeated double addition, as Pillow's affine scaling does (same for rows).
//
// Speed: an 8-lane AVX2 build of the integer loops is chosen at run time where the CPU has AVX2 (about 8x
// faster than Pillow for a bicubic 500x500 -> 224x224 RGB resize); elsewhere a 4-lane build (SSE2 on x86,
// NEON on aarch64) runs, on x86 about as fast as Pillow.
//
// Thread safety: PilResize is safe to call concurrently. Each thread keeps its own scratch (rows,
// coefficient tables) in thread_local buffers that grow to the largest size seen and are then reused, so
// a steady stream of calls does not allocate.
#ifndef FERRY_OPS_KERNELS_RESAMPLE_H_
#define FERRY_OPS_KERNELS_RESAMPLE_H_

#include <opencv2/core.hpp>

#include "ops/kernels/interp.h"

namespace ferry::kernels {

// Resizes `src` into `dst` with Pillow's Image.resize(dst.size(), filter) arithmetic, filter being
// NEAREST, BILINEAR or BICUBIC for interp = kNearest, kBilinear, kBicubic.
// REQUIRES: src and dst are non-empty, of the same type, CV_8UC1 or CV_8UC3 (any channel order: channels
// are filtered independently), any row step; dst is allocated by the caller with the target size (it may
// be a view into a larger buffer, e.g. a batch row: only its own pixels are written) and does not overlap
// src. Violations abort (FERRY_CHECK).
void PilResize(const cv::Mat& src, cv::Mat& dst, Interp interp);

namespace internal {
// PilResize with the choice of kernels exposed: allow_avx2 = false runs the baseline (SSE2 / NEON)
// kernels even where the CPU has AVX2, so that tests cover both. Same contract as PilResize.
void PilResizeForTesting(const cv::Mat& src, cv::Mat& dst, Interp interp, bool allow_avx2);
}  // namespace internal

}  // namespace ferry::kernels

#endif  // FERRY_OPS_KERNELS_RESAMPLE_H_
