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

// Calls fn(row, values) over the image's rows, once over all of it when it is contiguous.
template <typename Fn>
void ForEachRow(cv::Mat& img, Fn&& fn) {
  const size_t row_values = size_t(img.cols) * img.channels();
  if (img.isContinuous()) {
    fn(img.ptr<uint8_t>(0), row_values * img.rows);
    return;
  }
  for (int y = 0; y < img.rows; ++y) fn(img.ptr<uint8_t>(y), row_values);
}

// Table lookups, 8 values per load and store (a plain byte loop is bound by its stores).
void LutRow(uint8_t* __restrict p, size_t n, const uint8_t* __restrict lut) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t v;
    std::memcpy(&v, p + i, 8);
    uint64_t o = 0;
    for (int k = 0; k < 8; ++k) o |= uint64_t(lut[(v >> (8 * k)) & 255]) << (8 * k);
    std::memcpy(p + i, &o, 8);
  }
  for (; i < n; ++i) p[i] = lut[p[i]];
}

// Three interleaved channels, one table each (lut[c * 256 + v]).
void Lut3Row(uint8_t* __restrict p, size_t n, const uint8_t* __restrict lut) {
  const uint8_t* __restrict l0 = lut;
  const uint8_t* __restrict l1 = lut + 256;
  const uint8_t* __restrict l2 = lut + 512;
  for (size_t i = 0; i + 3 <= n; i += 3) {
    const uint8_t a = l0[p[i]], b = l1[p[i + 1]], c = l2[p[i + 2]];
    p[i] = a;
    p[i + 1] = b;
    p[i + 2] = c;
  }
}

void ApplyLut(cv::Mat& img, const uint8_t* lut) {
  ForEachRow(img, [lut](uint8_t* p, size_t n) { LutRow(p, n, lut); });
}

// One table per channel (lut[c * 256 + v]).
void ApplyChannelLuts(cv::Mat& img, const uint8_t* lut) {
  if (img.channels() == 1) return ApplyLut(img, lut);
  ForEachRow(img, [lut](uint8_t* p, size_t n) { Lut3Row(p, n, lut); });
}

// hist[c * 256 + v]: the count of value v in channel c.
void ChannelHistograms(const cv::Mat& img, uint32_t* hist) {
  const int ch = img.channels();
  std::fill(hist, hist + 256 * ch, 0u);
  for (int y = 0; y < img.rows; ++y) {
    const uint8_t* p = img.ptr<uint8_t>(y);
    if (ch == 1) {
      for (int x = 0; x < img.cols; ++x) ++hist[p[x]];
    } else {
      for (int x = 0; x < img.cols; ++x, p += 3) {
        ++hist[p[0]];
        ++hist[256 + p[1]];
        ++hist[512 + p[2]];
      }
    }
  }
}

// Per-channel minimum and maximum. Interleaved RGB goes through 48-value blocks (16 pixels), whose
// value j belongs to channel j % 3, so the running minima and maxima are plain element-wise ones.
FERRY_TARGET_CLONES_AVX2 void MinMaxBlocks(const uint8_t* __restrict p, size_t blocks, uint8_t* __restrict lo,
                                           uint8_t* __restrict hi) {
  for (size_t b = 0; b < blocks; ++b, p += 48) {
    for (int j = 0; j < 48; ++j) {
      lo[j] = std::min(lo[j], p[j]);
      hi[j] = std::max(hi[j], p[j]);
    }
  }
}

void ChannelMinMax(const cv::Mat& img, uint8_t* lo, uint8_t* hi) {
  const int ch = img.channels();
  const size_t n = size_t(img.cols) * ch;
  uint8_t blo[48], bhi[48];
  std::fill(blo, blo + 48, uint8_t(255));
  std::fill(bhi, bhi + 48, uint8_t(0));
  for (int y = 0; y < img.rows; ++y) {
    const uint8_t* p = img.ptr<uint8_t>(y);
    MinMaxBlocks(p, n / 48, blo, bhi);
    for (size_t i = n / 48 * 48; i < n; ++i) {  // i % 48 has channel i % ch too
      blo[i % 48] = std::min(blo[i % 48], p[i]);
      bhi[i % 48] = std::max(bhi[i % 48], p[i]);
    }
  }
  std::fill(lo, lo + ch, uint8_t(255));
  std::fill(hi, hi + ch, uint8_t(0));
  for (int j = 0; j < 48; ++j) {
    lo[j % ch] = std::min(lo[j % ch], blo[j]);
    hi[j % ch] = std::max(hi[j % ch], bhi[j]);
  }
}

// ---------------------------------------------------------------------------------------------------
// Blend arithmetic.

// The vectorised blends convert the float result to int before clamping it to [0, 255] (integer
// min/max vectorise cleanly, float selects do not): the same result, since trunc and the clamp
// commute, and defined while |value| < 2^31, which holds for blend weights up to kMaxFastWeight.
// Heavier weights take the scalar float clamp.
constexpr float kMaxFastWeight = 1048576.f;  // 2^20: |value| <= 255 * (1 + 2^20) < 2^31

inline uint8_t ClampInt8(int v) { return uint8_t(v < 0 ? 0 : (v > 255 ? 255 : v)); }

// Pillow's ImagingBlend for one pair (degenerate d, image i): d + alpha * (i - d) in float, truncated;
// clipped to [0, 255] (which only matters outside alpha's [0, 1], where Pillow clips explicitly).
inline uint8_t PilBlendValue(int d, int i, float alpha) {
  float t = float(d) + alpha * float(i - d);
  t = std::min(std::max(t, 0.f), 255.f);
  return uint8_t(int(t));
}

// REQUIRES: |alpha| <= kMaxFastWeight.
FERRY_TARGET_CLONES_AVX2 void PilBlendRowFast(const uint8_t* __restrict deg, uint8_t* __restrict img,
                                              size_t n, float alpha) {
  for (size_t i = 0; i < n; ++i) {
    img[i] = ClampInt8(int(float(deg[i]) + alpha * float(int(img[i]) - int(deg[i]))));
  }
}

// Against a constant degenerate value d (brightness: 0, contrast: the mean grey).
// REQUIRES: |alpha| <= kMaxFastWeight.
FERRY_TARGET_CLONES_AVX2 void PilBlendConstRowFast(uint8_t* __restrict img, size_t n, float d, float alpha) {
  for (size_t i = 0; i < n; ++i) img[i] = ClampInt8(int(d + alpha * (float(img[i]) - d)));
}

void PilBlendRow(const uint8_t* deg, uint8_t* img, size_t n, float alpha) {
  if (std::fabs(alpha) <= kMaxFastWeight) return PilBlendRowFast(deg, img, n, alpha);
  for (size_t i = 0; i < n; ++i) img[i] = PilBlendValue(deg[i], img[i], alpha);
}

void PilBlendConst(cv::Mat& img, int d, float alpha) {
  if (std::fabs(alpha) <= kMaxFastWeight) {
    ForEachRow(img, [d, alpha](uint8_t* p, size_t n) { PilBlendConstRowFast(p, n, float(d), alpha); });
    return;
  }
  uint8_t lut[256];
  for (int v = 0; v < 256; ++v) lut[v] = PilBlendValue(d, v, alpha);
  ApplyLut(img, lut);
}

// torchvision's _blend for one pair: float(ratio) * a + float(1 - ratio) * b in float32, clamped,
// truncated (Tensor.to(uint8)).
struct TensorRatio {
  float r;  // float(ratio)
  float s;  // float(1.0 - ratio), rounded from the double difference as Python computes it
  explicit TensorRatio(double ratio) : r(float(ratio)), s(float(1.0 - ratio)) {}
  bool fast() const { return std::fabs(r) <= kMaxFastWeight && std::fabs(s) <= kMaxFastWeight; }
};

inline uint8_t TensorBlendValue(float a, float b, TensorRatio k) {
  float t = k.r * a + k.s * b;
  t = std::min(std::max(t, 0.f), 255.f);
  return uint8_t(int(t));
}

// REQUIRES: k.fast().
FERRY_TARGET_CLONES_AVX2 void TensorBlendRowFast(const uint8_t* __restrict other, uint8_t* __restrict img,
                                                 size_t n, float r, float s) {
  for (size_t i = 0; i < n; ++i) img[i] = ClampInt8(int(r * float(img[i]) + s * float(other[i])));
}

// Against a constant b (brightness: 0, contrast: the float mean). REQUIRES: k.fast().
FERRY_TARGET_CLONES_AVX2 void TensorBlendConstRowFast(uint8_t* __restrict img, size_t n, float r, float sb) {
  for (size_t i = 0; i < n; ++i) img[i] = ClampInt8(int(r * float(img[i]) + sb));
}

// Blends each value with itself (the border of the tensor sharpness). REQUIRES: k.fast().
FERRY_TARGET_CLONES_AVX2 void TensorBlendSelfRowFast(uint8_t* __restrict img, size_t n, float r, float s) {
  for (size_t i = 0; i < n; ++i) {
    const float v = float(img[i]);
    img[i] = ClampInt8(int(r * v + s * v));
  }
}

void TensorBlendRow(const uint8_t* other, uint8_t* img, size_t n, TensorRatio k) {
  if (k.fast()) return TensorBlendRowFast(other, img, n, k.r, k.s);
  for (size_t i = 0; i < n; ++i) img[i] = TensorBlendValue(img[i], other[i], k);
}

void TensorBlendSelfRow(uint8_t* img, size_t n, TensorRatio k) {
  if (k.fast()) return TensorBlendSelfRowFast(img, n, k.r, k.s);
  for (size_t i = 0; i < n; ++i) img[i] = TensorBlendValue(img[i], img[i], k);
}

void TensorBlendConst(cv::Mat& img, float b, TensorRatio k) {
  if (k.fast()) {
    const float sb = k.s * b;  // float(1 - ratio) * b, rounded once as PyTorch does
    ForEachRow(img, [&k, sb](uint8_t* p, size_t n) { TensorBlendConstRowFast(p, n, k.r, sb); });
    return;
  }
  uint8_t lut[256];
  for (int v = 0; v < 256; ++v) lut[v] = TensorBlendValue(float(v), b, k);
  ApplyLut(img, lut);
}

// ---------------------------------------------------------------------------------------------------
// Greyscale rows.

inline uint8_t PilLuma(int r, int g, int b) {
  return uint8_t((r * 19595 + g * 38470 + b * 7471 + 0x8000) >> 16);
}

// torchvision: (0.2989 * r + 0.587 * g + 0.114 * b).to(uint8), each product and sum in float32.
inline uint8_t TensorLuma(int r, int g, int b) {
  const float t = (0.2989f * float(r) + 0.587f * float(g)) + 0.114f * float(b);
  return uint8_t(int(t));
}

FERRY_TARGET_CLONES_AVX2 void PilLumaRow(const uint8_t* __restrict rgb, uint8_t* __restrict out, int n) {
  for (int x = 0; x < n; ++x) out[x] = PilLuma(rgb[3 * x], rgb[3 * x + 1], rgb[3 * x + 2]);
}

FERRY_TARGET_CLONES_AVX2 void TensorLumaRow(const uint8_t* __restrict rgb, uint8_t* __restrict out, int n) {
  for (int x = 0; x < n; ++x) out[x] = TensorLuma(rgb[3 * x], rgb[3 * x + 1], rgb[3 * x + 2]);
}

// Repeats each grey value over three channels.
FERRY_TARGET_CLONES_AVX2 void ExpandRow3(const uint8_t* __restrict g, uint8_t* __restrict out, int n) {
  for (int x = 0; x < n; ++x) out[3 * x] = out[3 * x + 1] = out[3 * x + 2] = g[x];
}

// ---------------------------------------------------------------------------------------------------
// The 3x3 smoothing of ImageEnhance.Sharpness and of torchvision's _blurred_degenerate_image.
//
// Pillow sums the nine float products (weights float(1/13) and float(5/13)) plus 0.5 and truncates;
// PyTorch convolves in float32 and rounds half to even. Both equal round(S / 13) for the integer
// S = 5 * centre + the 8 neighbours: S / 13 is never within 1/26 of a half-integer (13 is odd), far
// beyond the float error (< 1e-4 for sums below 3315). And round(S / 13) = (S + 6) / 13 =
// ((S + 6) * 5042) >> 16 for S + 6 <= 3321: 5042 / 65536 exceeds 1 / 13 by less than 1.2e-5, so the
// product overshoots (S + 6) / 13 by less than 0.04, short of the 1/13 that any fraction k/13
// (k <= 12) leaves below the next integer.
FERRY_TARGET_CLONES_AVX2 void SmoothRow(const uint8_t* __restrict up, const uint8_t* __restrict mid,
                                        const uint8_t* __restrict down, uint8_t* __restrict out, int begin,
                                        int end, int c) {
  // 16-bit lanes: S + 6 <= 3321, and the high half of a 16 x 16-bit product is one instruction.
  for (int i = begin; i < end; ++i) {
    const uint16_t s = uint16_t(up[i - c] + up[i] + up[i + c] + mid[i - c] + 5 * mid[i] + mid[i + c] +
                                down[i - c] + down[i] + down[i + c] + 6);
    out[i] = uint8_t((uint32_t(s) * 5042u) >> 16);
  }
}

// Sharpness, both flavours: row by row in place, keeping the unmodified previous and current rows.
// `tensor` selects torchvision's blend (and its blending of the border rows and columns).
void Sharpen(cv::Mat& img, double factor, bool tensor) {
  const int c = img.channels();
  const int n = img.cols * c;
  std::vector<uint8_t> buf(size_t(n) * 3);
  uint8_t* prev = buf.data();
  uint8_t* cur = prev + n;
  uint8_t* deg = cur + n;
  const float alpha = float(factor);
  const TensorRatio k(factor);
  auto blend_whole_row = [&](uint8_t* row) {
    if (tensor) TensorBlendSelfRow(row, n, k);
  };
  std::memcpy(prev, img.ptr<uint8_t>(0), n);
  std::memcpy(cur, img.ptr<uint8_t>(1), n);
  blend_whole_row(img.ptr<uint8_t>(0));
  for (int y = 1; y < img.rows - 1; ++y) {
    uint8_t* row = img.ptr<uint8_t>(y);
    const uint8_t* down = img.ptr<uint8_t>(y + 1);  // not yet modified
    SmoothRow(prev, cur, down, deg, c, n - c, c);
    if (tensor) {
      std::memcpy(deg, cur, c);
      std::memcpy(deg + n - c, cur + n - c, c);
      TensorBlendRow(deg, row, n, k);
    } else {
      // Pillow's border pixels blend with themselves: d + alpha * 0 = d, unchanged.
      PilBlendRow(deg + c, row + c, n - 2 * c, alpha);
    }
    std::swap(prev, cur);
    std::memcpy(cur, down, n);
  }
  blend_whole_row(img.ptr<uint8_t>(img.rows - 1));
}

// ---------------------------------------------------------------------------------------------------
// Pillow's RGB -> HSV -> RGB (libImaging/Convert.c: rgb2hsv_row, hsv2rgb) with the hue shifted in
// between, in Pillow's own mix of float and double arithmetic (its literals 2.0, 6.0, 255.0 and 1.0
// are doubles). Pillow branches per pixel; here blocks of pixels go through four branch-free loops
// (the compiler vectorises each), computing every case with harmless divisors where Pillow skips
// one (grey pixels) and selecting the result. Float-to-int conversions are of values >= 0, where
// truncation is floor; C's round() (half away from zero) is then floor plus a comparison. Checked
// against Pillow on all 2^24 colours.
constexpr int kHueBlock = 64;

// REQUIRES: n <= kHueBlock.
FERRY_TARGET_CLONES_AVX2 void HueShiftBlock(uint8_t* __restrict p, int n, int shift) {
  int maxc[kHueBlock], hue[kHueBlock], sat[kHueBlock];
  float rc[kHueBlock], gc[kHueBlock], bc[kHueBlock], sf[kHueBlock];
  int sel[kHueBlock];  // which of r, g, b is the maximum (0, 1, 2); 3 for grey
  // 1. rgb2hsv_row's integers and float quotients.
  for (int x = 0; x < n; ++x) {
    const int r = p[3 * x], g = p[3 * x + 1], b = p[3 * x + 2];
    const int mx = std::max(r, std::max(g, b));
    const int mn = std::min(r, std::min(g, b));
    const int diff = mx - mn;
    const float cr = float(diff == 0 ? 1 : diff);
    sf[x] = float(diff) / float(mx == 0 ? 1 : mx);
    rc[x] = float(mx - r) / cr;
    gc[x] = float(mx - g) / cr;
    bc[x] = float(mx - b) / cr;
    sel[x] = diff == 0 ? 3 : (r == mx ? 0 : (g == mx ? 1 : 2));
    maxc[x] = mx;
  }
  // 2. Its hue and saturation bytes: fmod(h / 6 + 1, 1) has its argument in [5/6, 11/6), where fmod
  // is one exact subtraction.
  for (int x = 0; x < n; ++x) {
    const float h_r = bc[x] - gc[x];
    const float h_g = float(2.0 + double(rc[x]) - double(bc[x]));
    const float h_b = float(4.0 + double(gc[x]) - double(rc[x]));
    const int k = sel[x];
    float h6 = k == 1 ? h_g : h_b;
    h6 = k == 0 ? h_r : h6;
    const double w = double(h6) / 6.0 + 1.0;
    const double wm = w - 1.0;
    const float h01 = float(w >= 1.0 ? wm : w);
    const int hh = int(double(h01) * 255.0);
    const int ss = int(double(sf[x]) * 255.0);
    hue[x] = k == 3 ? 0 : hh;
    sat[x] = k == 3 ? 0 : ss;
  }
  // 3. np_h += shift (uint8, wrapping), then hsv2rgb's p, q, t (in [0, v]: no clipping) and sector.
  int pr[kHueBlock], qr[kHueBlock], tr[kHueBlock], sector[kHueBlock];
  for (int x = 0; x < n; ++x) {
    const int h = (hue[x] + shift) & 255;
    const double hx = double(h) * 6.0 / 255.0;
    const int i = int(hx);
    const float f = float(hx - double(i));
    const float fs = float(double(sat[x]) / 255.0);
    const double v = double(maxc[x]);
    const double pd = v * (1.0 - double(fs));
    const double qd = v * (1.0 - double(fs * f));
    const double td = v * (1.0 - double(fs) * (1.0 - double(f)));
    const int pi = int(pd), qi = int(qd), ti = int(td);
    pr[x] = pi + (pd - double(pi) >= 0.5 ? 1 : 0);
    qr[x] = qi + (qd - double(qi) >= 0.5 ? 1 : 0);
    tr[x] = ti + (td - double(ti) >= 0.5 ? 1 : 0);
    // i % 6 (h = 255 gives i = 6), with 6 standing for grey (s == 0: v, v, v).
    const int sec = i == 6 ? 0 : i;
    sector[x] = sat[x] == 0 ? 6 : sec;
  }
  // 4. Sectors 0..5 give (v,t,p) (q,v,p) (p,v,t) (p,q,v) (t,p,v) (v,p,q). Selected into planes,
  // then interleaved.
  uint8_t ro[kHueBlock], go[kHueBlock], bo[kHueBlock];
  for (int x = 0; x < n; ++x) {
    const int k = sector[x], mx = maxc[x], pv = pr[x], qv = qr[x], tv = tr[x];
    // All-ones masks per sector, combined with and/or (chained selects do not vectorise here).
    const int s0 = -int(k == 0), s1 = -int(k == 1), s2 = -int(k == 2), s3 = -int(k == 3);
    const int s4 = -int(k == 4), s5 = -int(k == 5), s6 = -int(k == 6);
    ro[x] = uint8_t((mx & (s0 | s5 | s6)) | (qv & s1) | (pv & (s2 | s3)) | (tv & s4));
    go[x] = uint8_t((mx & (s1 | s2 | s6)) | (tv & s0) | (qv & s3) | (pv & (s4 | s5)));
    bo[x] = uint8_t((mx & (s3 | s4 | s6)) | (pv & (s0 | s1)) | (tv & s2) | (qv & s5));
  }
  for (int x = 0; x < n; ++x) {
    p[3 * x] = ro[x];
    p[3 * x + 1] = go[x];
    p[3 * x + 2] = bo[x];
  }
}

void HueShiftRow(uint8_t* p, int n, int shift) {
  for (int x = 0; x < n; x += kHueBlock) HueShiftBlock(p + 3 * x, std::min(kHueBlock, n - x), shift);
}

}  // namespace

// ---------------------------------------------------------------------------------------------------
// Greyscale.

bool ToGray(const cv::Mat& src, cv::Mat& dst) {
  if (!IsImage(src)) return false;
  if (src.channels() == 1) {
    if (&src != &dst) src.copyTo(dst);
    return true;
  }
  cv::Mat out(src.rows, src.cols, CV_8UC1);
  for (int y = 0; y < src.rows; ++y) PilLumaRow(src.ptr<uint8_t>(y), out.ptr<uint8_t>(y), src.cols);
  dst = out;
  return true;
}

bool ToGrayTensor(const cv::Mat& src, cv::Mat& dst) {
  if (!IsImage(src)) return false;
  if (src.channels() == 1) {
    if (&src != &dst) src.copyTo(dst);
    return true;
  }
  cv::Mat out(src.rows, src.cols, CV_8UC1);
  for (int y = 0; y < src.rows; ++y) TensorLumaRow(src.ptr<uint8_t>(y), out.ptr<uint8_t>(y), src.cols);
  dst = out;
  return true;
}

bool Grayscale(cv::Mat& img, int out_channels) {
  if (!IsImage(img) || (out_channels != 1 && out_channels != 3)) return false;
  const int c = img.channels();
  if (c == out_channels && c == 1) return true;
  if (c == 3 && out_channels == 1) return ToGray(img, img);
  if (c == 1) {  // L -> three equal channels (np.dstack of the L image)
    cv::Mat out(img.rows, img.cols, CV_8UC3);
    for (int y = 0; y < img.rows; ++y) ExpandRow3(img.ptr<uint8_t>(y), out.ptr<uint8_t>(y), img.cols);
    img = out;
    return true;
  }
  std::vector<uint8_t> g(img.cols);
  for (int y = 0; y < img.rows; ++y) {
    uint8_t* row = img.ptr<uint8_t>(y);
    PilLumaRow(row, g.data(), img.cols);
    ExpandRow3(g.data(), row, img.cols);
  }
  return true;
}

// ---------------------------------------------------------------------------------------------------
// Blends.

bool Blend(const cv::Mat& degenerate, cv::Mat& img, double alpha) {
  if (!IsImage(img) || degenerate.type() != img.type() || degenerate.size() != img.size() ||
      !std::isfinite(alpha)) {
    return false;
  }
  const float a = float(alpha);
  const size_t n = size_t(img.cols) * img.channels();
  for (int y = 0; y < img.rows; ++y) PilBlendRow(degenerate.ptr<uint8_t>(y), img.ptr<uint8_t>(y), n, a);
  return true;
}

bool AdjustBrightness(cv::Mat& img, double factor) {
  if (!IsImage(img) || !std::isfinite(factor)) return false;
  const float alpha = float(factor);
  if (alpha == 1.f) return true;
  PilBlendConst(img, 0, alpha);
  return true;
}

bool AdjustContrast(cv::Mat& img, double factor) {
  if (!IsImage(img) || !std::isfinite(factor)) return false;
  const float alpha = float(factor);
  if (alpha == 1.f) return true;
  // ImageStat's mean of the L image: an exact integer sum over the pixel count, in double.
  int64_t sum = 0;
  std::vector<uint8_t> g(img.channels() == 3 ? img.cols : 0);
  for (int y = 0; y < img.rows; ++y) {
    const uint8_t* row = img.ptr<uint8_t>(y);
    if (img.channels() == 3) {
      PilLumaRow(row, g.data(), img.cols);
      row = g.data();
    }
    uint32_t row_sum = 0;
    for (int x = 0; x < img.cols; ++x) row_sum += row[x];
    sum += row_sum;
  }
  const double mean = double(sum) / double(int64_t(img.rows) * img.cols);
  const int grey = int(mean + 0.5);
  PilBlendConst(img, grey, alpha);
  return true;
}

bool AdjustSaturation(cv::Mat& img, double factor) {
  if (!IsImage(img) || !std::isfinite(factor)) return false;
  const float alpha = float(factor);
  if (img.channels() == 1 || alpha == 1.f) return true;
  const int n = img.cols * 3;
  std::vector<uint8_t> buf(size_t(img.cols) + n);
  uint8_t* g = buf.data();
  uint8_t* deg = g + img.cols;
  for (int y = 0; y < img.rows; ++y) {
    uint8_t* row = img.ptr<uint8_t>(y);
    PilLumaRow(row, g, img.cols);
    ExpandRow3(g, deg, img.cols);
    PilBlendRow(deg, row, n, alpha);
  }
  return true;
}

bool AdjustSharpness(cv::Mat& img, double factor) {
  if (!IsImage(img) || !std::isfinite(factor)) return false;
  // Pillow's filter leaves images under 3x3 as they are, and a blend with oneself is the identity.
  if (img.rows < 3 || img.cols < 3 || float(factor) == 1.f) return true;
  Sharpen(img, factor, /*tensor=*/false);
  return true;
}

bool AdjustHue(cv::Mat& img, double hue_factor) {
  if (!IsImage(img) || !(hue_factor >= -0.5 && hue_factor <= 0.5)) return false;
  if (img.channels() == 1) return true;
  // np.uint8(hue_factor * 255): truncation toward zero, then modulo 256.
  const int shift = int(hue_factor * 255.0) & 255;
  for (int y = 0; y < img.rows; ++y) HueShiftRow(img.ptr<uint8_t>(y), img.cols, shift);
  return true;
}

// ---------------------------------------------------------------------------------------------------
// ImageOps.

bool Posterize(cv::Mat& img, int bits) {
  if (!IsImage(img) || bits < 0 || bits > 8) return false;
  const uint8_t mask = uint8_t(~((1u << (8 - bits)) - 1u));
  ForEachRow(img, [mask](uint8_t* __restrict p, size_t n) {
    for (size_t i = 0; i < n; ++i) p[i] &= mask;
  });
  return true;
}

bool Solarize(cv::Mat& img, double threshold) {
  if (!IsImage(img) || std::isnan(threshold)) return false;
  // The first integer v with v >= threshold, within [0, 256].
  const double first = std::ceil(std::min(std::max(threshold, 0.0), 256.0));
  if (first >= 256.0) return true;
  const uint8_t t = uint8_t(first);
  ForEachRow(img, [t](uint8_t* __restrict p, size_t n) {
    for (size_t i = 0; i < n; ++i) p[i] = p[i] >= t ? uint8_t(255 - p[i]) : p[i];
  });
  return true;
}

bool Invert(cv::Mat& img) {
  if (!IsImage(img)) return false;
  ForEachRow(img, [](uint8_t* __restrict p, size_t n) {
    for (size_t i = 0; i < n; ++i) p[i] = uint8_t(255 - p[i]);
  });
  return true;
}

bool Equalize(cv::Mat& img) {
  if (!IsImage(img)) return false;
  const int ch = img.channels();
  uint32_t hist[768];
  ChannelHistograms(img, hist);
  uint8_t lut[768];
  for (int c = 0; c < ch; ++c) {
    const uint32_t* h = hist + 256 * c;
    uint8_t* l = lut + 256 * c;
    int64_t total = 0, last = 0;
    for (int v = 0; v < 256; ++v) {
      total += h[v];
      if (h[v] != 0) last = h[v];
    }
    const int64_t step = (total - last) / 255;
    if (step == 0) {  // also when at most one bin is used: then total == last
      for (int v = 0; v < 256; ++v) l[v] = uint8_t(v);
      continue;
    }
    int64_t n = step / 2;
    for (int v = 0; v < 256; ++v) {
      l[v] = uint8_t(std::min<int64_t>(n / step, 255));
      n += h[v];
    }
  }
  ApplyChannelLuts(img, lut);
  return true;
}

bool Autocontrast(cv::Mat& img) {
  if (!IsImage(img)) return false;
  const int ch = img.channels();
  // ImageOps.autocontrast's lo and hi, the first and last used histogram bins, are the extremes.
  uint8_t los[3], his[3];
  ChannelMinMax(img, los, his);
  uint8_t lut[768];
  for (int c = 0; c < ch; ++c) {
    uint8_t* l = lut + 256 * c;
    const int lo = los[c], hi = his[c];
    if (hi <= lo) {
      for (int v = 0; v < 256; ++v) l[v] = uint8_t(v);
      continue;
    }
    const double scale = 255.0 / double(hi - lo);
    const double offset = -double(lo) * scale;
    for (int v = 0; v < 256; ++v) {
      const double t = double(v) * scale + offset;
      // int() truncates toward zero, then the clamp.
      const int64_t i = t <= -1.0 ? -1 : (t >= 256.0 ? 256 : int64_t(t));
      l[v] = uint8_t(std::min<int64_t>(std::max<int64_t>(i, 0), 255));
    }
  }
  ApplyChannelLuts(img, lut);
  return true;
}

// ---------------------------------------------------------------------------------------------------
// Tensor-backend variants.

bool AdjustBrightnessTensor(cv::Mat& img, double factor) {
  if (!IsImage(img) || !std::isfinite(factor)) return false;
  TensorBlendConst(img, 0.f, TensorRatio(factor));
  return true;
}

bool AdjustContrastTensor(cv::Mat& img, double factor) {
  if (!IsImage(img) || !std::isfinite(factor)) return false;
  // torch.mean: the float32 sum over the count. The integer sum is exact; PyTorch's float32 sum is
  // too while it stays below 2^24, and past that rounds in its own order (this rounds once).
  int64_t sum = 0;
  std::vector<uint8_t> g(img.channels() == 3 ? img.cols : 0);
  for (int y = 0; y < img.rows; ++y) {
    const uint8_t* row = img.ptr<uint8_t>(y);
    if (img.channels() == 3) {
      TensorLumaRow(row, g.data(), img.cols);
      row = g.data();
    }
    uint32_t row_sum = 0;
    for (int x = 0; x < img.cols; ++x) row_sum += row[x];
    sum += row_sum;
  }
  const float mean = float(sum) / float(int64_t(img.rows) * img.cols);
  TensorBlendConst(img, mean, TensorRatio(factor));
  return true;
}

bool AdjustSaturationTensor(cv::Mat& img, double factor) {
  if (!IsImage(img) || !std::isfinite(factor)) return false;
  if (img.channels() == 1) return true;
  const TensorRatio k(factor);
  const int n = img.cols * 3;
  std::vector<uint8_t> buf(size_t(img.cols) + n);
  uint8_t* g = buf.data();
  uint8_t* deg = g + img.cols;
  for (int y = 0; y < img.rows; ++y) {
    uint8_t* row = img.ptr<uint8_t>(y);
    TensorLumaRow(row, g, img.cols);
    ExpandRow3(g, deg, img.cols);
    TensorBlendRow(deg, row, n, k);
  }
  return true;
}

bool AdjustSharpnessTensor(cv::Mat& img, double factor) {
  if (!IsImage(img) || !std::isfinite(factor)) return false;
  if (img.rows <= 2 || img.cols <= 2) return true;
  Sharpen(img, factor, /*tensor=*/true);
  return true;
}

bool AutocontrastTensor(cv::Mat& img) {
  if (!IsImage(img)) return false;
  const int ch = img.channels();
  uint8_t lo[3], hi[3];
  ChannelMinMax(img, lo, hi);
  uint8_t lut[768];
  for (int c = 0; c < ch; ++c) {
    uint8_t* l = lut + 256 * c;
    if (hi[c] == lo[c]) {  // scale = inf: torchvision uses minimum 0, scale 1
      for (int v = 0; v < 256; ++v) l[v] = uint8_t(v);
      continue;
    }
    const float minimum = float(lo[c]);
    // `255.0 / tensor` is Tensor.__rtruediv__: reciprocal(tensor) * 255, two roundings.
    const float scale = (1.f / (float(hi[c]) - minimum)) * 255.f;
    for (int v = 0; v < 256; ++v) {
      const float t = std::min(std::max((float(v) - minimum) * scale, 0.f), 255.f);
      l[v] = uint8_t(int(t));
    }
  }
  ApplyChannelLuts(img, lut);
  return true;
}

}  // namespace ferry::kernels

#include "ops/kernels/exact_float_end.h"
