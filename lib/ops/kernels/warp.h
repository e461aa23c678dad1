// Pillow 9.4's geometric transforms on 8-bit images, sample for sample: Image.transform with
// AFFINE and PERSPECTIVE data, and Image.rotate, as torchvision 0.14's F.affine, F.rotate and
// F.perspective call them on PIL images (RandomAffine, RandomRotation, RandomPerspective and the
// geometric ops of AutoAugment / RandAugment / TrivialAugmentWide).
//
// What "the same as Pillow" means here (libImaging/Geometry.c):
//   - Every output pixel (x, y) is mapped from its centre (x + 0.5, y + 0.5) to a source point
//     (u, v) in Pillow's convention, where source pixel (i, j) covers [i, i+1) x [j, j+1).
//   - A source point outside [0, w) x [0, h) gives `fill`, whatever the interpolation; no
//     interpolation ever blends with the fill colour.
//   - kNearest takes pixel (floor(u), floor(v)). For AFFINE, Pillow walks the output with
//     incremental sums, in 16.16 fixed point when every corner maps inside +-32768 and in double
//     otherwise; both are reproduced, rounding drift included.
//   - kBilinear / kBicubic read the 2x2 / 4x4 neighbourhood around (u - 0.5, v - 0.5) with
//     indices clamped to the image, in double precision. Bicubic is Geometry.c's cubic with
//     a = -1 (not the a = -0.5 kernel of Image.resize). Results are truncated to 8 bits (bicubic
//     first clipped to [0, 255]): no rounding.
// The outputs are bit-identical to Pillow 9.4 (tested on photographs with torchvision's own
// parameter helpers); see tests/ops/warp_test.cc.
//
// Images are interleaved 8-bit CV_8UC1 or CV_8UC3 (any channel order: channels are independent),
// possibly non-contiguous views. All functions are pure and thread-safe; src and dst must not
// overlap. Scratch memory is on the stack (about 20 KB for bilinear/bicubic; per-row/column tables
// go to the heap only past 1024 pixels).
// Bilinear/bicubic run their arithmetic as vector loops, with an AVX2 variant chosen at run time;
// both round every operation exactly as Pillow's scalar code does.
#ifndef FERRY_OPS_KERNELS_WARP_H_
#define FERRY_OPS_KERNELS_WARP_H_

#include <array>
#include <cstdint>
#include <opencv2/core.hpp>

#include "ops/kernels/interp.h"

namespace ferry::kernels {

// Image.transform(dst.size, AFFINE, coeffs, resample, fillcolor=fill). coeffs map an output pixel
// (x, y) to the source point (a*x + b*y + c, d*x + e*y + f) (PIL's AFFINE data: the inverse of
// the geometric transform). `fill` holds one value per channel (nullptr: zeros).
// REQUIRES: src is CV_8UC1 or CV_8UC3 and non-empty; dst is allocated by the caller with the
// output size and src's type.
void PilAffine(const cv::Mat& src, cv::Mat& dst, const double coeffs[6], Interp interp, const uint8_t* fill);

// Image.transform(dst.size, PERSPECTIVE, coeffs, resample, fillcolor=fill): the source point of
// output (x, y) is ((a*x + b*y + c) / (g*x + h*y + 1), (d*x + e*y + f) / (g*x + h*y + 1)).
// Same contract as PilAffine. A point whose coordinates are NaN (0/0) samples as 0 with
// kBilinear/kBicubic and as `fill` with kNearest, as Pillow does on x86-64.
void PilPerspective(const cv::Mat& src, cv::Mat& dst, const double coeffs[8], Interp interp,
                    const uint8_t* fill);

// Image.rotate(angle, resample, expand, center, fillcolor=fill) (F.rotate on a PIL image; note
// that F.rotate passes `center` through unchanged). angle in degrees, counter-clockwise. center:
// nullptr = Pillow's default (w / 2, h / 2); Pillow takes angle % 360 of 0, 180 (and 90 / 270
// when expand or the image is square) as exact transposes, but only when no center is given.
// Returns a new image: src's size, or with expand the size of the rotated bounding box.
// `inverse` (when not null) receives the map it sampled by, as PilAffine's coefficients
// (an output point -> its source point), the transposes' included.
// REQUIRES: as PilAffine.
cv::Mat PilRotate(const cv::Mat& src, double angle, Interp interp, bool expand, const double* center,
                  const uint8_t* fill, double inverse[6] = nullptr);

// torchvision's _get_inverse_affine_matrix(center, angle, translate, scale, shear): F.affine's
// coefficients for PilAffine (PIL's convention). F.affine on a PIL image uses
// center = (w * 0.5, h * 0.5) unless given one; RandAugment's ShearX/ShearY give (0, 0).
// Angles in degrees (clockwise, as F.affine); scale > 0.
std::array<double, 6> InverseAffineMatrix(double cx, double cy, double angle_deg, double tx, double ty,
                                          double scale, double shear_x_deg, double shear_y_deg);

// torchvision's _get_perspective_coeffs(startpoints, endpoints): the PilPerspective coefficients
// that map each end point to its start point. torchvision builds the 8x8 system in float32 and
// solves it with torch.linalg.lstsq(driver="gels"), i.e. LAPACK's sgels (Householder QR) from the
// reference BLAS/LAPACK 3.11 that Debian's torch links; this reproduces that float32 computation
// step by step, so the coefficients (floats, widened) are torchvision's bit for bit. (A float64
// solve differs by ~1e-5 relative and changes ~10-150 pixels of a F.perspective output.)
// Points are ordered top-left, top-right, bottom-right, bottom-left (any order works, as long
// as both arrays use the same). A degenerate quadrilateral (singular system, where torchvision
// raises) gives all-NaN coefficients.
std::array<double, 8> PerspectiveCoeffs(const std::array<cv::Point2d, 4>& start,
                                        const std::array<cv::Point2d, 4>& end);

}  // namespace ferry::kernels

#endif  // FERRY_OPS_KERNELS_WARP_H_
