// GaussianBlur of color.h, as torchvision's gaussian_blur computes it (split from color.cc).
#include "ops/kernels/color.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/simd.h"

#include "ops/kernels/exact_float_begin.h"  // after every other include

namespace ferry::kernels {
namespace {

// ---------------------------------------------------------------------------------------------------
// Gaussian blur.
//
// Separable, in float32. PyTorch convolves with the 2-D kernel (the float32 outer product of the 1-D
// ones); Debian's torch 1.13 CPU build sums it row-major with fused multiply-adds, so an exact copy
// would cost kernel_w * kernel_h operations per value instead of kernel_w + kernel_h, for the ~1e-5
// of values whose sum falls within float error of a half.

// torchvision's _get_gaussian_kernel1d in float32 (x / sigma, squared, times -0.5, exp, over the sum).
std::vector<float> GaussianKernel1d(int size, double sigma) {
  std::vector<float> k(size);
  const float sf = float(sigma);
  const int half = size / 2;
  float sum = 0.f;
  for (int i = 0; i < size; ++i) {
    const float x = float(i - half) / sf;
    k[i] = std::exp(-0.5f * (x * x));
    sum += k[i];
  }
  for (float& v : k) v /= sum;
  return k;
}

// 'reflect' (torch.nn.functional.pad): -1 -> 1, n -> n - 2. REQUIRES -n < i < 2n - 1.
inline int Reflect(int i, int n) {
  if (i < 0) return -i;
  if (i >= n) return 2 * (n - 1) - i;
  return i;
}

FERRY_TARGET_CLONES_AVX2 void ToFloatRow(const uint8_t* __restrict src, float* __restrict out, int n) {
  for (int i = 0; i < n; ++i) out[i] = float(src[i]);
}

// out[i] = sum_j k[j] * padded[i + j * c]: the taps walk the interleaved row one pixel at a time.
FERRY_TARGET_CLONES_AVX2 void HorizontalPass(const float* __restrict padded, float* __restrict out, int n,
                                             const float* __restrict k, int taps, int c) {
  const float k0 = k[0];
  for (int i = 0; i < n; ++i) out[i] = k0 * padded[i];
  for (int j = 1; j < taps; ++j) {
    const float w = k[j];
    const float* __restrict src = padded + size_t(j) * c;
    for (int i = 0; i < n; ++i) out[i] += w * src[i];
  }
}

FERRY_TARGET_CLONES_AVX2 void ScaleRow(const float* __restrict src, float* __restrict acc, int n, float w) {
  for (int i = 0; i < n; ++i) acc[i] = w * src[i];
}

FERRY_TARGET_CLONES_AVX2 void AccumulateRow(const float* __restrict src, float* __restrict acc, int n,
                                            float w) {
  for (int i = 0; i < n; ++i) acc[i] += w * src[i];
}

// Round half to even (torch.round), then the uint8 cast. The sums are >= 0 (positive weights) and
// below 2^22, where adding 1.5 * 2^23 leaves no fraction bits and the default rounding mode breaks
// ties to even.
FERRY_TARGET_CLONES_AVX2 void RoundRow(const float* __restrict acc, uint8_t* __restrict out, int n) {
  constexpr float kMagic = 12582912.f;
  for (int i = 0; i < n; ++i) {
    const int v = int((acc[i] + kMagic) - kMagic);
    out[i] = uint8_t(v > 255 ? 255 : v);
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------------------
// Blur.

bool GaussianBlur(cv::Mat& img, int kernel_w, int kernel_h, double sigma_x, double sigma_y) {
  if (!IsImage(img) || kernel_w < 1 || kernel_h < 1 || kernel_w % 2 == 0 || kernel_h % 2 == 0 ||
      !(sigma_x > 0) || !(sigma_y > 0) || kernel_w / 2 >= img.cols || kernel_h / 2 >= img.rows) {
    return false;
  }
  const std::vector<float> kx = GaussianKernel1d(kernel_w, sigma_x);
  const std::vector<float> ky = GaussianKernel1d(kernel_h, sigma_y);
  const int c = img.channels();
  const int w = img.cols, h = img.rows;
  const int n = w * c;
  const int px = kernel_w / 2, py = kernel_h / 2;
  // Horizontally filtered rows in a ring of kernel_h slots (source row r in slot r % kernel_h): the
  // output row y reads source rows y - py .. y + py (reflected ones fall inside that window), and
  // source row y + py is filtered before row y is overwritten.
  std::vector<float> ring(size_t(kernel_h) * n);
  std::vector<float> padded(size_t(w + 2 * px) * c);
  std::vector<float> acc(n);
  int filtered = 0;  // source rows [0, filtered) have been through the horizontal pass
  auto filter_row = [&](int r) {
    const uint8_t* src = img.ptr<uint8_t>(r);
    float* centre = padded.data() + size_t(px) * c;
    ToFloatRow(src, centre, n);
    for (int x = 1; x <= px; ++x) {  // reflected margins: -x -> x, w - 1 + x -> w - 1 - x
      std::memcpy(centre - size_t(x) * c, centre + size_t(x) * c, c * sizeof(float));
      std::memcpy(centre + size_t(w - 1 + x) * c, centre + size_t(w - 1 - x) * c, c * sizeof(float));
    }
    HorizontalPass(padded.data(), ring.data() + size_t(r % kernel_h) * n, n, kx.data(), kernel_w, c);
  };
  auto ring_row = [&](int r) { return ring.data() + size_t(r % kernel_h) * n; };
  for (int y = 0; y < h; ++y) {
    for (; filtered <= std::min(h - 1, y + py); ++filtered) filter_row(filtered);
    ScaleRow(ring_row(Reflect(y - py, h)), acc.data(), n, ky[0]);
    for (int j = 1; j < kernel_h; ++j) AccumulateRow(ring_row(Reflect(y + j - py, h)), acc.data(), n, ky[j]);
    RoundRow(acc.data(), img.ptr<uint8_t>(y), n);
  }
  return true;
}

}  // namespace ferry::kernels

#include "ops/kernels/exact_float_end.h"
