#include "ops/kernels/warp.h"

#include <algorithm>
#include <cfloat>
#include <charconv>
#include <cmath>
#include <cstring>

// Pillow evaluates coordinates and kernels as separate double multiplies and adds (its x86-64
// build targets the baseline ISA, which has no FMA), and so does sgels in float for
// PerspectiveCoeffs. A fused multiply-add rounds once instead of twice, which moves values by an
// ulp and flips truncations: keep the compiler from contracting when the target has FMA.
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__) && defined(__FMA__)
#pragma GCC optimize("fp-contract=off")
#endif

namespace ferry::kernels {
namespace {

constexpr double kDegToRad = M_PI / 180.0;  // math.radians' factor (CPython: Py_MATH_PI / 180.0)
constexpr int kChunk = 64;                  // output pixels processed together (source points, interpolation)

// floor() for values known to fit an int (Pillow's FLOOR macro).
inline int FloorToInt(double v) {
  const int i = static_cast<int>(v);
  return i - (v < static_cast<double>(i));
}

struct Src {
  const uint8_t* data;
  size_t step;
  int w, h;
  const uint8_t* Row(int y) const { return data + static_cast<size_t>(y) * step; }
};

template <int C>
inline void Put(uint8_t* __restrict out, const uint8_t* __restrict px) {
  if constexpr (C == 1) {
    out[0] = px[0];
  } else {
    // Fixed-size moves: GCC turns a 3-byte loop into a memmove call per pixel.
    uint16_t lo;
    std::memcpy(&lo, px, 2);
    const uint8_t hi = px[2];
    std::memcpy(out, &lo, 2);
    out[2] = hi;
  }
}

// ---------------------------------------------------------------------------------------------
// Coordinate maps of Pillow's generic transform engine: output pixel centre to source point,
// evaluated in the same operation order as affine_transform / perspective_transform.

struct AffineMap {
  const double* a;
  void operator()(int y, int x0, double* __restrict us, double* __restrict vs) const {
    const double yin = y + 0.5;
    const double a0 = a[0], a2 = a[2], a3 = a[3], a5 = a[5];
    const double t1 = a[1] * yin, t4 = a[4] * yin;
    for (int i = 0; i < kChunk; ++i) {
      const double xin = (x0 + i) + 0.5;
      us[i] = a0 * xin + t1 + a2;
      vs[i] = a3 * xin + t4 + a5;
    }
  }
};

struct PerspectiveMap {
  const double* a;
  void operator()(int y, int x0, double* __restrict us, double* __restrict vs) const {
    const double yin = y + 0.5;
    const double a0 = a[0], a2 = a[2], a3 = a[3], a5 = a[5], a6 = a[6];
    const double t1 = a[1] * yin, t4 = a[4] * yin, t7 = a[7] * yin;
    for (int i = 0; i < kChunk; ++i) {
      const double xin = (x0 + i) + 0.5;
      const double den = a6 * xin + t7 + 1;
      us[i] = (a0 * xin + t1 + a2) / den;
      vs[i] = (a3 * xin + t4 + a5) / den;
    }
  }
};

// What an output pixel gets, from Pillow's range test `u < 0 || u >= w || v < 0 || v >= h`.
enum : uint8_t { kSampled = 0, kFilled = 1, kZero = 2 };

// FERRY_WARP_NO_AVX2 builds the baseline path only (to test it on AVX2 machines).
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(FERRY_WARP_NO_AVX2)
#define FERRY_WARP_AVX2 1
template <class T>
[[gnu::target("avx2")]] void ComputeAvx2(T& interpolator) {
  interpolator.ComputeLanes();
}
#endif

// ---------------------------------------------------------------------------------------------
// Bilinear and bicubic (Pillow's bilinear_filter* / bicubic_filter*), a chunk of output pixels at
// a time: a scalar pass gathers each pixel's taps into lane arrays (lane i * C + c: channel c of
// output pixel i), then Pillow's arithmetic runs as plain loops over the lanes, which the compiler
// vectorizes. Every lane goes through exactly Pillow's operations in Pillow's order, so the
// results are Pillow's bit for bit.
//
// Index clamping: Pillow clips column indices and, for a row past the bottom, reuses the row
// above's result; both equal clamping the indices, since interpolating equal values returns that
// value exactly.
template <int C, Interp kInterp>
class Interpolator {
 public:
  static constexpr int kTaps = kInterp == Interp::kBicubic ? 4 : 2;
  static constexpr int kBack = kTaps / 2 - 1;  // bicubic taps start 1 pixel before floor()
  static constexpr int kLanes = kChunk * C;
  static constexpr int kPadded = kLanes + 16;  // 4-byte tap stores spill 1 byte past a pixel

  // Lanes past the pixels of a chunk are computed and dropped: they start finite (zero) and only
  // ever receive finite values, so no conversion sees a NaN.
  Interpolator() {
    std::memset(taps_, 0, sizeof(taps_));
    std::fill(std::begin(dx_), std::end(dx_), 0.0);
    std::fill(std::begin(dy_), std::end(dy_), 0.0);
  }

  // Writes out[0, n * C) for the source points us/vs[0, kChunk) (entries past n are ignored).
  void Run(Src s, const double* us, const double* vs, int n, const uint8_t* fill, uint8_t* __restrict out) {
    Locate(s, us, vs);
    Gather(s, n);
    Compute();
    std::memcpy(out, res_, static_cast<size_t>(n) * C);
    const uint8_t zeros[C] = {};
    for (int i = 0; i < n; ++i) {
      if (state_[i] != kSampled) [[unlikely]] {
        Put<C>(out + i * C, state_[i] == kFilled ? fill : zeros);
      }
    }
  }

 private:
  // Pillow's *_HEAD: range test, the -0.5 to pixel-index space, floor and fractions.
  void Locate(Src s, const double* __restrict us, const double* __restrict vs) {
    const double w = s.w, h = s.h;
    for (int i = 0; i < kChunk; ++i) {
      double u = us[i], v = vs[i];
      const bool inside = u >= 0.0 && u < w && v >= 0.0 && v < h;
      const bool outside = u < 0.0 || u >= w || v < 0.0 || v >= h;
      // NaN passes Pillow's test, and its filters turn NaN into 0 (the x86 (UINT8) cast).
      state_[i] = inside ? kSampled : outside ? kFilled : kZero;
      u = inside ? u - 0.5 : 0.0;  // a harmless in-range point for the others
      v = inside ? v - 0.5 : 0.0;
      const int x = FloorToInt(u), y = FloorToInt(v);
      fx_[i] = u - x;
      fy_[i] = v - y;
      ix_[i] = x - kBack;
      iy_[i] = y - kBack;
    }
  }

  // Copies pixel px into lanes [0, C). RGB moves 4 bytes: the 4th lands on the next pixel's first
  // lane (written after it) or in the padding, and is read from the next source byte (the caller
  // keeps that inside the image).
  static void Load(const uint8_t* px, uint8_t* lanes) {
    if constexpr (C == 1) {
      lanes[0] = px[0];
    } else {
      uint32_t v;
      std::memcpy(&v, px, 4);
      std::memcpy(lanes, &v, 4);
    }
  }

  void Gather(Src s, int n) {
    for (int i = 0; i < n; ++i) {
      for (int c = 0; c < C; ++c) {
        dx_[i * C + c] = fx_[i];
        dy_[i * C + c] = fy_[i];
      }
      // Filled pixels need no taps: their lanes keep earlier (finite) values, computed and dropped.
      if (state_[i] != kSampled) continue;
      const int x0 = ix_[i], y0 = iy_[i];
      uint8_t* lanes = &taps_[0][0][i * C];
      constexpr int kTapStride = kPadded, kRowStride = kTaps * kPadded;
      // Interior: no clamping, and for RGB a 4-byte load stays inside the image unless its pixel
      // is the very last one.
      const bool interior = x0 >= 0 && y0 >= 0 && x0 + kTaps <= s.w && y0 + kTaps <= s.h &&
                            (C == 1 || x0 + kTaps < s.w || y0 + kTaps < s.h);
      if (interior) [[likely]] {
        const uint8_t* row = s.Row(y0) + static_cast<size_t>(x0) * C;
        for (int r = 0; r < kTaps; ++r, row += s.step) {
          for (int t = 0; t < kTaps; ++t) Load(row + t * C, lanes + r * kRowStride + t * kTapStride);
        }
      } else {
        for (int r = 0; r < kTaps; ++r) {
          const uint8_t* row = s.Row(std::clamp(y0 + r, 0, s.h - 1));
          for (int t = 0; t < kTaps; ++t) {
            const uint8_t* px = row + static_cast<size_t>(std::clamp(x0 + t, 0, s.w - 1)) * C;
            for (int c = 0; c < C; ++c) lanes[r * kRowStride + t * kTapStride + c] = px[c];
          }
        }
      }
    }
  }

  // The lane loops, compiled twice: for the baseline ISA and for AVX2 (4 doubles a vector; the
  // "avx2" target has no FMA, so every operation still rounds as Pillow's).
  void Compute() {
#if FERRY_WARP_AVX2
    if (__builtin_cpu_supports("avx2")) return ComputeAvx2(*this);
#endif
    ComputeLanes();
  }

  // (Public for ComputeAvx2 only.)
 public:
  [[gnu::always_inline]] inline void ComputeLanes() {
    if constexpr (kInterp == Interp::kBilinear) {
      for (int r = 0; r < 2; ++r) LerpPixels(taps_[r][0], taps_[r][1], dx_, ia_[0], ib_[0], rows_[r]);
      LerpRows(rows_[0], rows_[1], dy_, res_);
    } else {
      for (int r = 0; r < 4; ++r) {
        CubicCoefficients(taps_[r][0], taps_[r][1], taps_[r][2], taps_[r][3], ia_[0], ia_[1], ib_[0], ib_[1]);
        CubicPixels(ia_[0], ia_[1], ib_[0], ib_[1], dx_, rows_[r]);
      }
      CubicRows(rows_[0], rows_[1], rows_[2], rows_[3], dy_, res_);
    }
  }

 private:
  // The lane loops, as functions with __restrict parameters so that the compiler needs no alias
  // checks to vectorize them.

  // BILINEAR(v, a, b, d) on the pixels: a + (b - a) * d, with b - a in int.
  [[gnu::always_inline]] static void LerpPixels(const uint8_t* __restrict a, const uint8_t* __restrict b,
                                                const double* __restrict d, int32_t* __restrict ai,
                                                int32_t* __restrict di, double* __restrict out) {
    for (int l = 0; l < kLanes; ++l) {
      ai[l] = a[l];
      di[l] = b[l] - a[l];
    }
    for (int l = 0; l < kLanes; ++l) out[l] = ai[l] + di[l] * d[l];
  }

  // BILINEAR on the two row results, then Pillow's (UINT8) truncation.
  [[gnu::always_inline]] static void LerpRows(const double* __restrict top, const double* __restrict bottom,
                                              const double* __restrict d, uint8_t* __restrict out) {
    for (int l = 0; l < kLanes; ++l)
      out[l] = static_cast<uint8_t>(static_cast<int>(top[l] + (bottom[l] - top[l]) * d[l]));
  }

  // BICUBIC(v, v1, v2, v3, v4, d) is the a = -1 cubic through v1..v4 at v2 + d, in Horner form
  // p1 + d * (p2 + d * (p3 + d * p4)). On the pixels p1..p4 are formed in int (exact).
  [[gnu::always_inline]] static void CubicCoefficients(const uint8_t* __restrict t0,
                                                       const uint8_t* __restrict t1,
                                                       const uint8_t* __restrict t2,
                                                       const uint8_t* __restrict t3, int32_t* __restrict q1,
                                                       int32_t* __restrict q2, int32_t* __restrict q3,
                                                       int32_t* __restrict q4) {
    for (int l = 0; l < kLanes; ++l) {
      const int v1 = t0[l], v2 = t1[l], v3 = t2[l], v4 = t3[l];
      q1[l] = v2;
      q2[l] = -v1 + v3;
      q3[l] = 2 * (v1 - v2) + v3 - v4;
      q4[l] = -v1 + v2 - v3 + v4;
    }
  }

  [[gnu::always_inline]] static void CubicPixels(const int32_t* __restrict q1, const int32_t* __restrict q2,
                                                 const int32_t* __restrict q3, const int32_t* __restrict q4,
                                                 const double* __restrict d, double* __restrict out) {
    for (int l = 0; l < kLanes; ++l) {
      const double p1 = q1[l], p2 = q2[l], p3 = q3[l], p4 = q4[l];
      out[l] = p1 + d[l] * (p2 + d[l] * (p3 + d[l] * p4));
    }
  }

  // BICUBIC on the four row results (p2..p4 in double, in Pillow's order), then Pillow's clip:
  // <= 0 -> 0, >= 255 -> 255, else truncation (clamping first is the same).
  [[gnu::always_inline]] static void CubicRows(const double* __restrict r1, const double* __restrict r2,
                                               const double* __restrict r3, const double* __restrict r4,
                                               const double* __restrict d, uint8_t* __restrict out) {
    for (int l = 0; l < kLanes; ++l) {
      const double v1 = r1[l], v2 = r2[l], v3 = r3[l], v4 = r4[l];
      const double p1 = v2;
      const double p2 = -v1 + v3;
      const double p3 = 2 * (v1 - v2) + v3 - v4;
      const double p4 = -v1 + v2 - v3 + v4;
      const double val = p1 + d[l] * (p2 + d[l] * (p3 + d[l] * p4));
      out[l] = static_cast<uint8_t>(static_cast<int>(std::min(std::max(val, 0.0), 255.0)));
    }
  }

  alignas(64) double fx_[kChunk], fy_[kChunk];
  alignas(64) double dx_[kLanes], dy_[kLanes];
  alignas(64) uint8_t taps_[kTaps][kTaps][kPadded];    // [row][column][lane]
  alignas(64) int32_t ia_[2][kLanes], ib_[2][kLanes];  // integer stage
  alignas(64) double rows_[kTaps][kLanes];             // each tap row interpolated along x
  alignas(64) uint8_t res_[kLanes];
  alignas(64) int32_t ix_[kChunk], iy_[kChunk];  // first tap column / row
  uint8_t state_[kChunk];
};

// ImagingGenericTransform: every output pixel is sampled at its own source point.
template <int C, Interp kInterp, class Map>
void GenericTransform(Src s, cv::Mat& dst, const Map& map, const uint8_t* fill) {
  alignas(64) double us[kChunk], vs[kChunk];
  const int width = dst.cols, height = dst.rows;
  if constexpr (kInterp == Interp::kNearest) {
    // nearest_filter*: COORD() truncation, so u in [0, w) picks column int(u); NaN fails the test.
    const double w = s.w, h = s.h;
    for (int y = 0; y < height; ++y) {
      uint8_t* out = dst.ptr<uint8_t>(y);
      for (int x0 = 0; x0 < width; x0 += kChunk) {
        map(y, x0, us, vs);
        const int n = std::min(kChunk, width - x0);
        for (int i = 0; i < n; ++i, out += C) {
          const double u = us[i], v = vs[i];
          const bool inside = u >= 0.0 && u < w && v >= 0.0 && v < h;
          Put<C>(out,
                 inside ? s.Row(static_cast<int>(v)) + static_cast<size_t>(static_cast<int>(u)) * C : fill);
        }
      }
    }
  } else {
    Interpolator<C, kInterp> interpolator;
    for (int y = 0; y < height; ++y) {
      uint8_t* out = dst.ptr<uint8_t>(y);
      for (int x0 = 0; x0 < width; x0 += kChunk) {
        map(y, x0, us, vs);
        const int n = std::min(kChunk, width - x0);
        interpolator.Run(s, us, vs, n, fill, out + static_cast<size_t>(x0) * C);
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// ImagingTransformAffine with NEAREST: three engines chosen by the coefficients. Each walks the
// output with running sums, whose rounding drift decides some boundary pixels, so each is
// reproduced as is.

// Nearest-neighbour sources of a chunk of output pixels: the source row and the byte offset in
// it, or one of these "rows":
enum : int32_t {
  kOutside = -1,    // the fill
  kLastPixel = -2,  // the image's last pixel (RGB only), whose 4-byte load would read past it
};

// Writes n nearest-neighbour pixels from their sources. RGB pixels move as 4-byte words, as
// Pillow's 32-bit pixels do: each store spills a byte into the next pixel, written after it (the
// chunk's last pixel moves 3 bytes), and each load reads the byte after its pixel.
template <int C>
inline void CopyPixels(const uint8_t* const* __restrict rows, const int32_t* __restrict yr,
                       const int32_t* __restrict xo, int n, const uint8_t* last, const uint8_t* fill4,
                       uint8_t* __restrict out) {
  const auto source = [&](int i) {
    return yr[i] >= 0 ? rows[yr[i]] + xo[i] : yr[i] == kOutside ? fill4 : last;
  };
  if constexpr (C == 1) {
    for (int i = 0; i < n; ++i) out[i] = *source(i);
  } else {
    for (int i = 0; i + 1 < n; ++i, out += 3) {
      const int32_t r = yr[i];
      const uint8_t* px = r >= 0 ? rows[r] + xo[i] : fill4;
      if (r >= kOutside) [[likely]] {
        uint32_t v;
        std::memcpy(&v, px, 4);
        std::memcpy(out, &v, 4);
      } else {
        Put<3>(out, last);
      }
    }
    if (n > 0) Put<3>(out, source(n - 1));
  }
}

// Source row pointers (Pillow's image[y]): a load per pixel instead of a multiply.
class RowTable {
 public:
  explicit RowTable(Src s) : rows_(s.h) {
    for (int y = 0; y < s.h; ++y) rows_[y] = s.Row(y);
  }
  const uint8_t* const* data() const { return rows_.data(); }

 private:
  cv::AutoBuffer<const uint8_t*, 1024> rows_;
};

// COORD(v) in range: 0 <= v < size (also false for NaN, whose int conversion is INT_MIN on x86).
inline bool InRange(double v, int size) { return v >= 0.0 && v < size; }

// ImagingScaleAffine (no rotation or shear: a[1] == a[3] == 0).
template <int C>
void AffineScale(Src s, cv::Mat& dst, const double a[6], const uint8_t* fill) {
  // Sizes in locals: stores through uint8_t* could alias dst's members.
  const int width = dst.cols, height = dst.rows;
  cv::AutoBuffer<int, 1024> cols(width);
  double xo = a[2] + a[0] * 0.5;
  for (int x = 0; x < width; ++x) {
    cols[x] = InRange(xo, s.w) ? static_cast<int>(xo) * C : -1;
    xo += a[0];
  }
  double yo = a[5] + a[4] * 0.5;
  for (int y = 0; y < height; ++y) {
    uint8_t* __restrict out = dst.ptr<uint8_t>(y);
    if (InRange(yo, s.h)) {
      const uint8_t* in = s.Row(static_cast<int>(yo));
      for (int x = 0; x < width; ++x) Put<C>(out + x * C, cols[x] >= 0 ? in + cols[x] : fill);
    } else {
      for (int x = 0; x < width; ++x) Put<C>(out + x * C, fill);
    }
    yo += a[4];
  }
}

inline bool FitsFixed(const double a[6], int x, int y) {
  return std::fabs(x * a[0] + y * a[1] + a[2]) < 32768.0 && std::fabs(x * a[3] + y * a[4] + a[5]) < 32768.0;
}

// The sources of kChunk consecutive outputs of affine_fixed (see CopyPixels). Pillow's running sums xx += a0
// are exact integer sums, so xx = xx0 + i * a0.
template <int C>
void FixedSources(uint32_t xx, uint32_t yy, uint32_t a0, uint32_t a3, int w, int h, int32_t* __restrict yr,
                  int32_t* __restrict xo) {
  for (int i = 0; i < kChunk; ++i, xx += a0, yy += a3) {
    const int32_t xi = static_cast<int32_t>(xx) >> 16, yi = static_cast<int32_t>(yy) >> 16;
    const bool inside = static_cast<uint32_t>(xi) < static_cast<uint32_t>(w) &&
                        static_cast<uint32_t>(yi) < static_cast<uint32_t>(h);
    yr[i] = !inside ? kOutside : (C == 3 && yi == h - 1 && xi == w - 1) ? kLastPixel : yi;
    xo[i] = xi * C;
  }
}

// affine_fixed: 16.16 fixed point. Sums wrap as Pillow's int arithmetic does in practice. Per
// chunk of a row, a vectorizable pass finds the source pixels, then CopyPixels moves them.
template <int C>
void AffineFixed(Src s, cv::Mat& dst, const double a[6], const uint8_t* fill) {
  const auto fix = [](double v) -> uint32_t { return static_cast<uint32_t>(FloorToInt(v * 65536.0 + 0.5)); };
  const uint32_t a0 = fix(a[0]), a1 = fix(a[1]), a3 = fix(a[3]), a4 = fix(a[4]);
  uint32_t a2 = fix(a[2] + a[0] * 0.5 + a[1] * 0.5);
  uint32_t a5 = fix(a[5] + a[3] * 0.5 + a[4] * 0.5);
  const int width = dst.cols, height = dst.rows;
  const RowTable rows(s);
  const uint8_t* last = s.Row(s.h - 1) + static_cast<size_t>(s.w - 1) * C;
  uint8_t fill4[4] = {};
  std::memcpy(fill4, fill, C);
  alignas(64) int32_t yr[kChunk], xo[kChunk];
  for (int y = 0; y < height; ++y, a2 += a1, a5 += a4) {
    uint8_t* out = dst.ptr<uint8_t>(y);
    for (int x0 = 0; x0 < width; x0 += kChunk) {
      const int n = std::min(kChunk, width - x0);
      FixedSources<C>(a2 + static_cast<uint32_t>(x0) * a0, a5 + static_cast<uint32_t>(x0) * a3, a0, a3, s.w,
                      s.h, yr, xo);
      CopyPixels<C>(rows.data(), yr, xo, n, last, fill4, out + static_cast<size_t>(x0) * C);
    }
  }
}

// The double-precision fallback of ImagingTransformAffine (source points beyond +-32768).
template <int C>
void AffineFloat(Src s, cv::Mat& dst, const double a[6], const uint8_t* fill) {
  double xo = a[2] + a[1] * 0.5 + a[0] * 0.5;
  double yo = a[5] + a[4] * 0.5 + a[3] * 0.5;
  const int width = dst.cols, height = dst.rows;
  for (int y = 0; y < height; ++y) {
    uint8_t* __restrict out = dst.ptr<uint8_t>(y);
    double xx = xo, yy = yo;
    for (int x = 0; x < width; ++x, out += C) {
      const bool inside = InRange(xx, s.w) && InRange(yy, s.h);
      Put<C>(out,
             inside ? s.Row(static_cast<int>(yy)) + static_cast<size_t>(static_cast<int>(xx)) * C : fill);
      xx += a[0];
      yy += a[3];
    }
    xo += a[1];
    yo += a[4];
  }
}

template <int C>
void AffineNearest(Src s, cv::Mat& dst, const double a[6], const uint8_t* fill) {
  const int w = dst.cols, h = dst.rows;
  if (a[1] == 0 && a[3] == 0) {
    AffineScale<C>(s, dst, a, fill);
  } else if (FitsFixed(a, 0, 0) && FitsFixed(a, w, h) && FitsFixed(a, 0, h) && FitsFixed(a, w, 0)) {
    AffineFixed<C>(s, dst, a, fill);
  } else {
    AffineFloat<C>(s, dst, a, fill);
  }
}

template <int C, class Map>
void Generic(Src s, cv::Mat& dst, const Map& map, Interp interp, const uint8_t* fill) {
  switch (interp) {
    case Interp::kNearest:
      GenericTransform<C, Interp::kNearest>(s, dst, map, fill);
      break;
    case Interp::kBilinear:
      GenericTransform<C, Interp::kBilinear>(s, dst, map, fill);
      break;
    case Interp::kBicubic:
      GenericTransform<C, Interp::kBicubic>(s, dst, map, fill);
      break;
  }
}

Src View(const cv::Mat& src) { return {src.ptr<uint8_t>(), src.step[0], src.cols, src.rows}; }

void Affine(const cv::Mat& src, cv::Mat& dst, const double a[6], Interp interp, const uint8_t* fill) {
  CV_Assert((src.type() == CV_8UC1 || src.type() == CV_8UC3) && !src.empty() && dst.type() == src.type());
  static const uint8_t kZeros[3] = {};
  if (fill == nullptr) fill = kZeros;
  const Src s = View(src);
  const bool rgb = src.channels() == 3;
  if (interp == Interp::kNearest) {
    rgb ? AffineNearest<3>(s, dst, a, fill) : AffineNearest<1>(s, dst, a, fill);
  } else {
    rgb ? Generic<3>(s, dst, AffineMap{a}, interp, fill) : Generic<1>(s, dst, AffineMap{a}, interp, fill);
  }
}

// Python's round(v, 15): the value correctly rounded to 15 decimals, read back correctly rounded.
double Round15(double v) {
  if (!std::isfinite(v)) return v;
  char buf[64];
  const auto printed = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::fixed, 15);
  double r = v;
  std::from_chars(buf, printed.ptr, r);
  return r;
}

// Python's float `a % b` for b > 0: the result takes the divisor's sign.
double PyMod(double a, double b) {
  double m = std::fmod(a, b);
  if (m != 0.0) {
    if ((m < 0) != (b < 0)) m += b;
  } else {
    m = std::copysign(0.0, b);
  }
  return m;
}

// ---------------------------------------------------------------------------------------------
// LAPACK sgels for the square 8x8 system of PerspectiveCoeffs, as Debian's reference BLAS and
// LAPACK 3.11 compute it (the torch that torchvision runs on links them): sgeqr2 (unblocked
// Householder QR: the block size 32 exceeds n), sorm2r (Q^T b), strsm (back substitution). All in
// float, each operation in the Fortran order. The scaling branches of sgels (matrix entries
// below 2^-103 or above 2^103) and of slarfg (|beta| < 2^-102) cannot occur for pixel
// coordinates and are left out.

constexpr int kN = 8;
using ColMajor = float[kN * kN];  // A(i, j) = a[i + kN * j]

// snrm2 of BLAS 3.10+ (Anderson's three accumulators; the "medium" one for ordinary values).
float Snrm2(int n, const float* x) {
  const float tsml = 0x1p-63f, tbig = 0x1p52f, ssml = 0x1p75f, sbig = 0x1p-76f;
  bool notbig = true;
  float asml = 0, amed = 0, abig = 0;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > tbig) {
      abig = abig + (ax * sbig) * (ax * sbig);
      notbig = false;
    } else if (ax < tsml) {
      if (notbig) asml = asml + (ax * ssml) * (ax * ssml);
    } else {
      amed = amed + ax * ax;
    }
  }
  float scl = 1, sumsq;
  if (abig > 0) {
    if (amed > 0 || amed > FLT_MAX || amed != amed) abig = abig + (amed * sbig) * sbig;
    scl = 1 / sbig;
    sumsq = abig;
  } else if (asml > 0) {
    if (amed > 0 || amed > FLT_MAX || amed != amed) {
      amed = std::sqrt(amed);
      asml = std::sqrt(asml) / ssml;
      const float ymin = asml > amed ? amed : asml, ymax = asml > amed ? asml : amed;
      scl = 1;
      sumsq = ymax * ymax * (1 + (ymin / ymax) * (ymin / ymax));
    } else {
      scl = 1 / ssml;
      sumsq = asml;
    }
  } else {
    sumsq = amed;
  }
  return scl * std::sqrt(sumsq);
}

float Slapy2(float x, float y) {
  if (std::isnan(y)) return y;
  if (std::isnan(x)) return x;
  const float xa = std::fabs(x), ya = std::fabs(y);
  const float w = std::max(xa, ya), z = std::min(xa, ya);
  if (z == 0 || w > FLT_MAX) return w;
  return w * std::sqrt(1 + (z / w) * (z / w));
}

// slarfg: Householder reflector for (alpha, x[0..n-2]); overwrites alpha with beta, x with v.
float Slarfg(int n, float& alpha, float* x) {
  if (n <= 1) return 0;
  const float xnorm = Snrm2(n - 1, x);
  if (xnorm == 0) return 0;
  const float beta = -std::copysign(Slapy2(alpha, xnorm), alpha);
  const float tau = (beta - alpha) / beta;
  const float scale = 1 / (alpha - beta);
  for (int i = 0; i < n - 1; ++i) x[i] = scale * x[i];
  alpha = beta;
  return tau;
}

// slarf('Left'): C = (I - tau v v^T) C for the m x n block at c (leading dimension kN), v[0] = 1.
// sgemv('T') then sger, trimming trailing zeros of v and zero columns of C as slarf does.
void SlarfLeft(int m, int n, const float* v, float tau, float* c) {
  if (tau == 0) return;
  int lastv = m;
  while (lastv > 0 && v[lastv - 1] == 0) --lastv;
  if (lastv == 0) return;
  int lastc = n;  // ilaslc
  if (!(c[kN * (n - 1)] != 0 || c[lastv - 1 + kN * (n - 1)] != 0)) {
    for (lastc = n; lastc > 0; --lastc) {
      bool nonzero = false;
      for (int i = 0; i < lastv; ++i) nonzero |= c[i + kN * (lastc - 1)] != 0;
      if (nonzero) break;
    }
  }
  float work[kN];
  for (int j = 0; j < lastc; ++j) {
    float temp = 0;
    for (int i = 0; i < lastv; ++i) temp = temp + c[i + kN * j] * v[i];
    work[j] = temp;
  }
  for (int j = 0; j < lastc; ++j) {
    if (work[j] == 0) continue;
    const float temp = -tau * work[j];
    for (int i = 0; i < lastv; ++i) c[i + kN * j] = c[i + kN * j] + v[i] * temp;
  }
}

// Returns false where torch reports a rank-deficient matrix (a zero on R's diagonal).
bool Sgels8(ColMajor a, float b[kN]) {
  float anrm = 0;
  for (int i = 0; i < kN * kN; ++i) anrm = std::max(anrm, std::fabs(a[i]));
  if (anrm == 0) {
    std::fill(b, b + kN, 0.0f);
    return true;
  }
  float tau[kN];
  for (int i = 0; i < kN; ++i) {  // sgeqr2
    float* col = a + i + kN * i;
    tau[i] = Slarfg(kN - i, col[0], col + 1);
    if (i < kN - 1) {
      const float aii = col[0];
      col[0] = 1;
      SlarfLeft(kN - i, kN - 1 - i, col, tau[i], col + kN);
      col[0] = aii;
    }
  }
  for (int i = 0; i < kN; ++i) {  // sorm2r('Left', 'Transpose')
    float* col = a + i + kN * i;
    const float aii = col[0];
    col[0] = 1;
    SlarfLeft(kN - i, 1, col, tau[i], b + i);
    col[0] = aii;
  }
  for (int i = 0; i < kN; ++i) {  // strtrs
    if (a[i + kN * i] == 0) return false;
  }
  for (int k = kN - 1; k >= 0; --k) {  // strsm('Left', 'Upper', 'No transpose', 'Non-unit')
    if (b[k] == 0) continue;
    b[k] = b[k] / a[k + kN * k];
    for (int i = 0; i < k; ++i) b[i] = b[i] - b[k] * a[i + kN * k];
  }
  return true;
}

}  // namespace

void PilAffine(const cv::Mat& src, cv::Mat& dst, const double coeffs[6], Interp interp, const uint8_t* fill) {
  Affine(src, dst, coeffs, interp, fill);
}

void PilPerspective(const cv::Mat& src, cv::Mat& dst, const double coeffs[8], Interp interp,
                    const uint8_t* fill) {
  CV_Assert((src.type() == CV_8UC1 || src.type() == CV_8UC3) && !src.empty() && dst.type() == src.type());
  static const uint8_t kZeros[3] = {};
  if (fill == nullptr) fill = kZeros;
  const Src s = View(src);
  const PerspectiveMap map{coeffs};
  src.channels() == 3 ? Generic<3>(s, dst, map, interp, fill) : Generic<1>(s, dst, map, interp, fill);
}

cv::Mat PilRotate(const cv::Mat& src, double angle, Interp interp, bool expand, const double* center,
                  const uint8_t* fill, double inverse[6]) {
  CV_Assert((src.type() == CV_8UC1 || src.type() == CV_8UC3) && !src.empty());
  angle = PyMod(angle, 360.0);
  cv::Mat out;
  auto set_inverse = [inverse](double a, double b, double c, double d, double e, double f) {
    if (inverse == nullptr) return;
    inverse[0] = a, inverse[1] = b, inverse[2] = c, inverse[3] = d, inverse[4] = e, inverse[5] = f;
  };
  if (center == nullptr) {  // Pillow's fast paths, "as long as we're not changing the center"
    const double w0 = src.cols, h0 = src.rows;
    if (angle == 0) {
      set_inverse(1, 0, 0, 0, 1, 0);
      return src.clone();
    }
    if (angle == 180) {
      set_inverse(-1, 0, w0, 0, -1, h0);
      cv::flip(src, out, -1);
      return out;
    }
    if ((angle == 90 || angle == 270) && (expand || src.cols == src.rows)) {
      // 90 (counter-clockwise): output (x, y) shows source (w - y, x); 270: (y, h - x).
      if (angle == 90) set_inverse(0, -1, w0, 1, 0, 0);
      else set_inverse(0, 1, 0, -1, 0, h0);
      cv::rotate(src, out, angle == 90 ? cv::ROTATE_90_COUNTERCLOCKWISE : cv::ROTATE_90_CLOCKWISE);
      return out;
    }
  }
  int w = src.cols, h = src.rows;
  const double cx = center ? center[0] : w / 2.0, cy = center ? center[1] : h / 2.0;
  const double rad = -(angle * kDegToRad);
  double m[6] = {Round15(std::cos(rad)),  Round15(std::sin(rad)), 0.0,
                 Round15(-std::sin(rad)), Round15(std::cos(rad)), 0.0};
  const auto apply = [&m](double x, double y, double* tx, double* ty) {
    *tx = m[0] * x + m[1] * y + m[2];
    *ty = m[3] * x + m[4] * y + m[5];
  };
  double t2, t5;
  apply(-cx - 0.0, -cy - 0.0, &t2, &t5);  // translate = (0, 0)
  m[2] = t2 + cx;
  m[5] = t5 + cy;
  if (expand) {
    double lo_x = INFINITY, hi_x = -INFINITY, lo_y = INFINITY, hi_y = -INFINITY;
    const int corners[4][2] = {{0, 0}, {w, 0}, {w, h}, {0, h}};
    for (const auto& p : corners) {
      double x, y;
      apply(p[0], p[1], &x, &y);
      lo_x = std::min(lo_x, x), hi_x = std::max(hi_x, x);
      lo_y = std::min(lo_y, y), hi_y = std::max(hi_y, y);
    }
    const int nw = static_cast<int>(std::ceil(hi_x) - std::floor(lo_x));
    const int nh = static_cast<int>(std::ceil(hi_y) - std::floor(lo_y));
    apply(-(nw - w) / 2.0, -(nh - h) / 2.0, &t2, &t5);
    m[2] = t2;
    m[5] = t5;
    w = nw;
    h = nh;
  }
  out.create(h, w, src.type());
  Affine(src, out, m, interp, fill);
  set_inverse(m[0], m[1], m[2], m[3], m[4], m[5]);
  return out;
}

std::array<double, 6> InverseAffineMatrix(double cx, double cy, double angle_deg, double tx, double ty,
                                          double scale, double shear_x_deg, double shear_y_deg) {
  const double rot = angle_deg * kDegToRad;
  const double sx = shear_x_deg * kDegToRad;
  const double sy = shear_y_deg * kDegToRad;
  // Rotation-scale-shear without the scale; its determinant is 1.
  const double a = std::cos(rot - sy) / std::cos(sy);
  const double b = -std::cos(rot - sy) * std::tan(sx) / std::cos(sy) - std::sin(rot);
  const double c = std::sin(rot - sy) / std::cos(sy);
  const double d = -std::sin(rot - sy) * std::tan(sx) / std::cos(sy) + std::cos(rot);
  std::array<double, 6> m = {d / scale, -b / scale, 0.0 / scale, -c / scale, a / scale, 0.0 / scale};
  m[2] += m[0] * (-cx - tx) + m[1] * (-cy - ty);
  m[5] += m[3] * (-cx - tx) + m[4] * (-cy - ty);
  m[2] += cx;
  m[5] += cy;
  return m;
}

std::array<double, 8> PerspectiveCoeffs(const std::array<cv::Point2d, 4>& start,
                                        const std::array<cv::Point2d, 4>& end) {
  // torchvision's rows, built from Python numbers (products in double) and stored as float32.
  ColMajor a;
  float b[kN];
  for (int i = 0; i < 4; ++i) {
    const cv::Point2d p1 = end[i], p2 = start[i];
    const double r0[kN] = {p1.x, p1.y, 1, 0, 0, 0, -p2.x * p1.x, -p2.x * p1.y};
    const double r1[kN] = {0, 0, 0, p1.x, p1.y, 1, -p2.y * p1.x, -p2.y * p1.y};
    for (int j = 0; j < kN; ++j) {
      a[2 * i + kN * j] = static_cast<float>(r0[j]);
      a[2 * i + 1 + kN * j] = static_cast<float>(r1[j]);
    }
    b[2 * i] = static_cast<float>(p2.x);
    b[2 * i + 1] = static_cast<float>(p2.y);
  }
  std::array<double, 8> out;
  if (!Sgels8(a, b)) {
    out.fill(NAN);
    return out;
  }
  for (int i = 0; i < kN; ++i) out[i] = b[i];
  return out;
}

}  // namespace ferry::kernels
