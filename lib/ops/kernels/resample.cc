#include "ops/kernels/resample.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/check.h"

namespace ferry::kernels {
namespace {

// The hot loops are written once with GCC/Clang vector extensions, templated on the vector type, and
// compiled twice on x86-64: with 8 int32 lanes for AVX2 (target attribute, chosen at run time) and with 4
// lanes for the baseline (SSE2), which is also what other architectures get (NEON on aarch64). A single
// target_clones body would not do: GCC 12 lowers 32-byte vectors for a 16-byte target through the stack,
// slower than Pillow. The integer arithmetic is exact in every build, so all give the same bytes.
using I32x8 = int32_t __attribute__((vector_size(32)));
using I32x4 = int32_t __attribute__((vector_size(16)));
using U8x4 = uint8_t __attribute__((vector_size(4)));
using U8x8 = uint8_t __attribute__((vector_size(8)));
using U8x16 = uint8_t __attribute__((vector_size(16)));
using U8x32 = uint8_t __attribute__((vector_size(32)));
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "StoreClip8 takes each lane's low byte");

// FERRY_RESAMPLE_NO_AVX2 builds the baseline kernels only (to benchmark them on an AVX2 machine).
#if defined(__x86_64__) && !defined(FERRY_RESAMPLE_NO_AVX2)
#define FERRY_RESAMPLE_AVX2 1
#endif

// Pillow's fixed point: 8-bit pixels times 22-bit weights, with two bits of headroom for the negative and
// overshooting lobes of the bicubic kernel, sum without overflow in int32.
constexpr int kPrecisionBits = 32 - 8 - 2;
constexpr int32_t kRoundHalf = 1 << (kPrecisionBits - 1);

// ------------------------------------------------------------------------------------------------ weights
// The weights must be computed exactly as Pillow computes them (in double, same operations in the same
// order): a weight that lands on the other side of a rounding boundary when quantised changes output
// bytes. A fused multiply-add would do that, so contraction is off here (GCC fuses only where FMA is
// enabled, i.e. in builds for a newer -march than the default).
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC push_options
#pragma GCC optimize("fp-contract=off")
#endif

double BilinearFilter(double x) {
  if (x < 0.0) x = -x;
  return x < 1.0 ? 1.0 - x : 0.0;
}

// Keys' cubic convolution with a = -0.5, in Pillow's association order. Both pieces are evaluated and one
// selected: the same values as Pillow's branches, without a mispredicted branch per tap.
double BicubicFilter(double x) {
  constexpr double a = -0.5;
  if (x < 0.0) x = -x;
  const double inner = ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
  const double outer = (((x - 5) * x + 8) * x - 4) * a;
  return x < 1.0 ? inner : (x < 2.0 ? outer : 0.0);
}

// The quantised weights of one axis: output i reads inputs [first[i], first[i] + count[i]) with weights
// weights[i * stride + t], t < count[i]; weights past count[i] are zero.
struct AxisWeights {
  std::vector<int32_t> first;
  std::vector<int32_t> count;
  std::vector<int32_t> weights;
  int stride = 0;
  int max_count = 0;
};

template <typename T>
void GrowTo(std::vector<T>& v, size_t n) {
  if (v.size() < n) v.resize(n);
}

// Pillow's precompute_coeffs + normalize_coeffs_8bpc for a full-image box (box = 0..in_size).
template <double (*Filter)(double)>
void ComputeAxis(int in_size, int out_size, double filter_support, std::vector<double>& f64,
                 AxisWeights& axis) {
  // Pillow: scale = (double)(box1 - box0) / out with float box ends; exact for sizes below 2^24.
  const double scale = double(float(in_size)) / out_size;
  const double filter_scale = scale < 1.0 ? 1.0 : scale;
  const double support = filter_support * filter_scale;
  const int ksize = int(std::ceil(support)) * 2 + 1;
  const double inv_filter_scale = 1.0 / filter_scale;
  GrowTo(axis.first, size_t(out_size));
  GrowTo(axis.count, size_t(out_size));
  GrowTo(axis.weights, size_t(out_size) * ksize);
  GrowTo(f64, size_t(ksize));
  axis.stride = ksize;
  axis.max_count = 0;
  constexpr double kOne = double(1 << kPrecisionBits);
  for (int i = 0; i < out_size; ++i) {
    const double center = (i + 0.5) * scale;
    int lo = int(center - support + 0.5);  // truncation toward zero, as Pillow's (int) cast
    if (lo < 0) lo = 0;
    int hi = int(center + support + 0.5);
    if (hi > in_size) hi = in_size;
    const int n = hi - lo;
    double sum = 0.0;
    for (int t = 0; t < n; ++t) {
      const double w = Filter((t + lo - center + 0.5) * inv_filter_scale);
      f64[t] = w;
      sum += w;
    }
    if (sum != 0.0) {
      for (int t = 0; t < n; ++t) f64[t] /= sum;
    }
    int32_t* q = &axis.weights[size_t(i) * ksize];
    for (int t = 0; t < n; ++t) {
      q[t] = f64[t] < 0 ? int32_t(-0.5 + f64[t] * kOne) : int32_t(0.5 + f64[t] * kOne);
    }
    for (int t = n; t < ksize; ++t) q[t] = 0;
    axis.first[i] = lo;
    axis.count[i] = n;
    if (n > axis.max_count) axis.max_count = n;
  }
}

#if defined(__clang__)
#pragma clang fp contract(on)
#elif defined(__GNUC__)
#pragma GCC pop_options
#endif

// The last few weight tables a thread computed, keyed by (in size, out size, filter). A pipeline with fixed
// sizes (a validation resize, a benchmark) then skips the ~10 us a table costs (one double division per
// tap); random crop sizes mostly miss, and a miss costs a scan of kCachedAxes keys.
class AxisCache {
 public:
  // The returned table stays valid until kCachedAxes - 1 further calls have missed.
  const AxisWeights& Get(int in_size, int out_size, Interp interp) {
    ++clock_;
    Entry* victim = &entries_[0];
    for (Entry& e : entries_) {
      if (e.in_size == in_size && e.out_size == out_size && e.interp == interp) {
        e.last_use = clock_;
        return e.axis;
      }
      if (e.last_use < victim->last_use) victim = &e;
    }
    if (interp == Interp::kBilinear) {
      ComputeAxis<BilinearFilter>(in_size, out_size, 1.0, f64_, victim->axis);
    } else {
      ComputeAxis<BicubicFilter>(in_size, out_size, 2.0, f64_, victim->axis);
    }
    victim->in_size = in_size;
    victim->out_size = out_size;
    victim->interp = interp;
    victim->last_use = clock_;
    return victim->axis;
  }

 private:
  static constexpr int kCachedAxes = 8;
  struct Entry {
    int in_size = -1, out_size = -1;
    Interp interp = Interp::kNearest;
    uint64_t last_use = 0;
    AxisWeights axis;
  };
  Entry entries_[kCachedAxes];
  uint64_t clock_ = 0;
  std::vector<double> f64_;
};

// ------------------------------------------------------------------------------------------- scratch
// Per-thread buffers, grown to the largest call seen and reused (never shrunk).
struct Scratch {
  AxisCache axes;
  // kBlockRows input rows transposed (see TransposeBlock).
  std::vector<uint8_t> block;
  // The horizontal pass's output (the rows the vertical pass reads), plus one junk row.
  std::vector<uint8_t> tmp;
  std::vector<const uint8_t*> row_ptrs;
  std::vector<int32_t> nearest_x;
};

Scratch& ThreadScratch() {
  thread_local Scratch scratch;
  return scratch;
}

// ------------------------------------------------------------------------------------------ hot loops
// Bodies, always inlined into the per-target entry points below so that each gets its instruction set.
// V is I32x8 or I32x4; vectors travel by reference (no vector-ABI concerns).
#define FERRY_INLINE inline __attribute__((always_inline))

template <typename V>
constexpr int kLanes = int(sizeof(V) / sizeof(int32_t));

// acc += widen(p[0 .. lanes - 1]) * k. Spelled as a vector of the bytes, which GCC 12 and Clang turn into
// one vpmovzxbd / pmovzx / ushll chain (GCC expands __builtin_convertvector of a byte vector lane by lane).
template <typename V>
FERRY_INLINE void MulAcc(V& acc, const uint8_t* p, int32_t k) {
  if constexpr (kLanes<V> == 8) {
    const V v = {p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7]};
    acc += v * k;
  } else {
    const V v = {p[0], p[1], p[2], p[3]};
    acc += v * k;
  }
}

// Pillow's clip8 on each lane: the fixed-point sum shifted down and clamped to 0..255.
template <typename V>
FERRY_INLINE void ClipInPlace(V& v) {
  v >>= kPrecisionBits;
  v = v < 0 ? 0 : v;
  v = v > 255 ? 255 : v;
}

// ClipInPlace, then each lane's byte stored to out[0 .. lanes - 1].
template <typename V>
FERRY_INLINE void StoreClip8(const V& sum, uint8_t* out) {
  V v = sum;
  ClipInPlace(v);
  // The low byte of each lane (little-endian); __builtin_convertvector to bytes is lane by lane in GCC 12.
  if constexpr (kLanes<V> == 8) {
    const U8x32 bytes = reinterpret_cast<const U8x32&>(v);
    const U8x8 b = __builtin_shufflevector(bytes, bytes, 0, 4, 8, 12, 16, 20, 24, 28);
    std::memcpy(out, &b, sizeof(b));
  } else {
    const U8x16 bytes = reinterpret_cast<const U8x16&>(v);
    const U8x4 b = __builtin_shufflevector(bytes, bytes, 0, 4, 8, 12);
    std::memcpy(out, &b, sizeof(b));
  }
}

FERRY_INLINE uint8_t Clip8(int32_t v) {
  v >>= kPrecisionBits;
  return uint8_t(v < 0 ? 0 : (v > 255 ? 255 : v));
}

// The horizontal pass works on blocks of kBlockRows rows transposed to column-major bytes, t[j * 8 + r] =
// rows[r][j] (j counts bytes, so RGB channels stay interleaved: channel c of pixel x is column 3 x + c).
// A tap then reads one 8-byte column, the same channel of one input pixel in all 8 rows, and multiplies
// it by one broadcast weight: every vector lane does useful work, whatever the number of taps.
constexpr int kBlockRows = 8;

// Helpers of TransposeBlock: interleave the low or high halves of two vectors, by bytes, pairs or quads.
using U16x8 = uint16_t __attribute__((vector_size(16)));
using U32x4 = uint32_t __attribute__((vector_size(16)));
FERRY_INLINE U16x8 ZipLo8(const U8x16& a, const U8x16& b) {
  return (U16x8)__builtin_shufflevector(a, b, 0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
}
FERRY_INLINE U16x8 ZipHi8(const U8x16& a, const U8x16& b) {
  return (U16x8)__builtin_shufflevector(a, b, 8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
}
FERRY_INLINE U32x4 ZipLo16(const U16x8& a, const U16x8& b) {
  return (U32x4)__builtin_shufflevector(a, b, 0, 8, 1, 9, 2, 10, 3, 11);
}
FERRY_INLINE U32x4 ZipHi16(const U16x8& a, const U16x8& b) {
  return (U32x4)__builtin_shufflevector(a, b, 4, 12, 5, 13, 6, 14, 7, 15);
}
FERRY_INLINE void StoreZip32(const U32x4& a, const U32x4& b, uint8_t* out) {
  const U32x4 lo = __builtin_shufflevector(a, b, 0, 4, 1, 5);
  const U32x4 hi = __builtin_shufflevector(a, b, 2, 6, 3, 7);
  std::memcpy(out, &lo, 16);
  std::memcpy(out + 16, &hi, 16);
}

// Transposes `bytes` columns of 8 rows, 16 columns at a time by three rounds of interleaving.
FERRY_INLINE void TransposeBlock(const uint8_t* const* rows, int bytes, uint8_t* __restrict t) {
  const uint8_t *p0 = rows[0], *p1 = rows[1], *p2 = rows[2], *p3 = rows[3];
  const uint8_t *p4 = rows[4], *p5 = rows[5], *p6 = rows[6], *p7 = rows[7];
  int j = 0;
  for (; j + 16 <= bytes; j += 16) {
    U8x16 r0, r1, r2, r3, r4, r5, r6, r7;
    std::memcpy(&r0, p0 + j, 16);
    std::memcpy(&r1, p1 + j, 16);
    std::memcpy(&r2, p2 + j, 16);
    std::memcpy(&r3, p3 + j, 16);
    std::memcpy(&r4, p4 + j, 16);
    std::memcpy(&r5, p5 + j, 16);
    std::memcpy(&r6, p6 + j, 16);
    std::memcpy(&r7, p7 + j, 16);
    // Rows 2i and 2i + 1 interleaved: columns 0..7 (lo) and 8..15 (hi).
    const U16x8 a01l = ZipLo8(r0, r1), a01h = ZipHi8(r0, r1), a23l = ZipLo8(r2, r3), a23h = ZipHi8(r2, r3);
    const U16x8 a45l = ZipLo8(r4, r5), a45h = ZipHi8(r4, r5), a67l = ZipLo8(r6, r7), a67h = ZipHi8(r6, r7);
    // Rows 0..3 (b) and 4..7 (c) of columns 4q .. 4q + 3.
    const U32x4 b0 = ZipLo16(a01l, a23l), b1 = ZipHi16(a01l, a23l), b2 = ZipLo16(a01h, a23h),
                b3 = ZipHi16(a01h, a23h);
    const U32x4 c0 = ZipLo16(a45l, a67l), c1 = ZipHi16(a45l, a67l), c2 = ZipLo16(a45h, a67h),
                c3 = ZipHi16(a45h, a67h);
    uint8_t* out = t + size_t(j) * 8;
    StoreZip32(b0, c0, out);
    StoreZip32(b1, c1, out + 32);
    StoreZip32(b2, c2, out + 64);
    StoreZip32(b3, c3, out + 96);
  }
  for (; j < bytes; ++j) {
    for (int i = 0; i < 8; ++i) t[j * 8 + i] = rows[i][j];
  }
}

// One horizontal output row for each row of a transposed block (TransposeBlock), written to out[r]
// (kChannels bytes a pixel). Output pixel x reads the columns of pixels first[x] .. first[x] + count[x] - 1.
template <int kChannels, typename V>
FERRY_INLINE void HorizontalBlock(const uint8_t* __restrict t, uint8_t* const* out, int out_w,
                                  const AxisWeights& axis) {
  constexpr int kVecs = kBlockRows / kLanes<V>;  // vectors per channel
  const int32_t* __restrict first = axis.first.data();
  const int32_t* __restrict count = axis.count.data();
  const int32_t* __restrict weights = axis.weights.data();
  const size_t stride = size_t(axis.stride);
  uint8_t* rows[kBlockRows];
  for (int r = 0; r < kBlockRows; ++r) rows[r] = out[r];
  for (int x = 0; x < out_w; ++x) {
    const int32_t* __restrict w = weights + size_t(x) * stride;
    const uint8_t* col = t + size_t(first[x]) * kChannels * kBlockRows;
    const int n = count[x];
    V acc[kChannels][kVecs];
#pragma GCC unroll 8
    for (int c = 0; c < kChannels; ++c) {
#pragma GCC unroll 8
      for (int q = 0; q < kVecs; ++q) acc[c][q] = V{} + kRoundHalf;
    }
    for (int i = 0; i < n; ++i, col += kChannels * kBlockRows) {
      const int32_t k = w[i];
#pragma GCC unroll 8
      for (int c = 0; c < kChannels; ++c) {
#pragma GCC unroll 8
        for (int q = 0; q < kVecs; ++q) MulAcc(acc[c][q], col + c * kBlockRows + q * kLanes<V>, k);
      }
    }
    if constexpr (kChannels == 3) {
      // Lane r becomes row r's pixel as a little-endian R, G, B, 0 word. All but the last pixel are
      // stored 4 bytes wide, the 4th landing on the next pixel's first byte before that is written.
      const int bytes = x + 1 < out_w ? 4 : 3;
#pragma GCC unroll 8
      for (int q = 0; q < kVecs; ++q) {
        ClipInPlace(acc[0][q]);
        ClipInPlace(acc[1][q]);
        ClipInPlace(acc[2][q]);
        const V px = acc[0][q] | (acc[1][q] << 8) | (acc[2][q] << 16);
#pragma GCC unroll 8
        for (int l = 0; l < kLanes<V>; ++l) {
          const uint32_t v = uint32_t(px[l]);
          uint8_t* dst = rows[q * kLanes<V> + l] + 3 * x;
          if (bytes == 4) {
            std::memcpy(dst, &v, 4);
          } else {
            std::memcpy(dst, &v, 3);
          }
        }
      }
    } else {
      uint8_t b[kBlockRows];
#pragma GCC unroll 8
      for (int q = 0; q < kVecs; ++q) StoreClip8(acc[0][q], b + q * kLanes<V>);
      for (int r = 0; r < kBlockRows; ++r) rows[r][x] = b[r];
    }
  }
}

// One vertical output row: out[j] = clip8(sum_t rows[t][j] * w[t]), j < width (bytes).
template <typename V>
FERRY_INLINE void VerticalRow(const uint8_t* const* rows, const int32_t* __restrict w, int n, int width,
                              uint8_t* __restrict out) {
  constexpr int kL = kLanes<V>;
  constexpr int kVecs = 32 / kL;  // 32 bytes a step
  int j = 0;
  for (; j + 32 <= width; j += 32) {
    V acc[kVecs];
#pragma GCC unroll 8
    for (int q = 0; q < kVecs; ++q) acc[q] = V{} + kRoundHalf;
    for (int t = 0; t < n; ++t) {
      const uint8_t* r = rows[t] + j;
      const int32_t k = w[t];
#pragma GCC unroll 8
      for (int q = 0; q < kVecs; ++q) MulAcc(acc[q], r + q * kL, k);
    }
#pragma GCC unroll 8
    for (int q = 0; q < kVecs; ++q) StoreClip8(acc[q], out + j + q * kL);
  }
  for (; j + kL <= width; j += kL) {
    V a = V{} + kRoundHalf;
    for (int t = 0; t < n; ++t) MulAcc(a, rows[t] + j, w[t]);
    StoreClip8(a, out + j);
  }
  for (; j < width; ++j) {
    int32_t a = kRoundHalf;
    for (int t = 0; t < n; ++t) a += rows[t][j] * w[t];
    out[j] = Clip8(a);
  }
}

// The entry points, one set per instruction set, and the run-time choice between them.
struct Kernels {
  void (*transpose)(const uint8_t* const* rows, int bytes, uint8_t* t);
  void (*horizontal_rgb)(const uint8_t* t, uint8_t* const* out, int out_w, const AxisWeights& axis);
  void (*horizontal_gray)(const uint8_t* t, uint8_t* const* out, int out_w, const AxisWeights& axis);
  void (*vertical_row)(const uint8_t* const* rows, const int32_t* w, int n, int width, uint8_t* out);
};

void BaselineTranspose(const uint8_t* const* rows, int bytes, uint8_t* t) { TransposeBlock(rows, bytes, t); }
void BaselineHorizontalRgb(const uint8_t* t, uint8_t* const* out, int out_w, const AxisWeights& axis) {
  HorizontalBlock<3, I32x4>(t, out, out_w, axis);
}
void BaselineHorizontalGray(const uint8_t* t, uint8_t* const* out, int out_w, const AxisWeights& axis) {
  HorizontalBlock<1, I32x4>(t, out, out_w, axis);
}
void BaselineVerticalRow(const uint8_t* const* rows, const int32_t* w, int n, int width, uint8_t* out) {
  VerticalRow<I32x4>(rows, w, n, width, out);
}
constexpr Kernels kBaselineKernels = {BaselineTranspose, BaselineHorizontalRgb, BaselineHorizontalGray,
                                      BaselineVerticalRow};

#if defined(FERRY_RESAMPLE_AVX2)
#define FERRY_AVX2 __attribute__((target("avx2")))
FERRY_AVX2 void Avx2Transpose(const uint8_t* const* rows, int bytes, uint8_t* t) {
  TransposeBlock(rows, bytes, t);
}
FERRY_AVX2 void Avx2HorizontalRgb(const uint8_t* t, uint8_t* const* out, int out_w, const AxisWeights& axis) {
  HorizontalBlock<3, I32x8>(t, out, out_w, axis);
}
FERRY_AVX2 void Avx2HorizontalGray(const uint8_t* t, uint8_t* const* out, int out_w,
                                   const AxisWeights& axis) {
  HorizontalBlock<1, I32x8>(t, out, out_w, axis);
}
FERRY_AVX2 void Avx2VerticalRow(const uint8_t* const* rows, const int32_t* w, int n, int width,
                                uint8_t* out) {
  VerticalRow<I32x8>(rows, w, n, width, out);
}
#undef FERRY_AVX2
constexpr Kernels kAvx2Kernels = {Avx2Transpose, Avx2HorizontalRgb, Avx2HorizontalGray, Avx2VerticalRow};
#endif
#undef FERRY_INLINE

const Kernels& ChooseKernels() {
#if defined(FERRY_RESAMPLE_AVX2)
  static const bool avx2 = __builtin_cpu_supports("avx2");
  if (avx2) return kAvx2Kernels;
#endif
  return kBaselineKernels;
}

// ------------------------------------------------------------------------------------------- passes
// The vertical pass: dst row y from rows first[y] - first_row .. of `in` (row r at in + r * step), `width`
// bytes a row.
void VerticalPass(const Kernels& kernels, const uint8_t* in, size_t step, int first_row,
                  const AxisWeights& axis, int width, cv::Mat& dst, std::vector<const uint8_t*>& row_ptrs) {
  GrowTo(row_ptrs, size_t(axis.max_count));
  for (int y = 0; y < dst.rows; ++y) {
    const int n = axis.count[y];
    const uint8_t* row = in + size_t(axis.first[y] - first_row) * step;
    for (int t = 0; t < n; ++t) row_ptrs[t] = row + size_t(t) * step;
    kernels.vertical_row(row_ptrs.data(), &axis.weights[size_t(y) * axis.stride], n, width,
                         dst.ptr<uint8_t>(y));
  }
}

// Pillow's ImagingResample (8-bit): horizontal pass over the rows the vertical pass reads, then the
// vertical pass; a pass whose size does not change is skipped.
void Convolve(const cv::Mat& src, cv::Mat& dst, Interp interp, const Kernels& kernels) {
  Scratch& s = ThreadScratch();
  const int channels = src.channels();
  const bool need_h = dst.cols != src.cols;
  const bool need_v = dst.rows != src.rows;

  const AxisWeights& vertical = s.axes.Get(src.rows, dst.rows, interp);
  if (!need_h) {
    VerticalPass(kernels, src.data, src.step[0], 0, vertical, src.cols * channels, dst, s.row_ptrs);
    return;
  }

  // Rows [y_first, y_last) of src feed the vertical pass (all of them when there is none).
  const int y_first = need_v ? vertical.first[0] : 0;
  const int y_last = need_v ? vertical.first[dst.rows - 1] + vertical.count[dst.rows - 1] : src.rows;
  const int rows_h = y_last - y_first;

  const AxisWeights& horizontal = s.axes.Get(src.cols, dst.cols, interp);
  const int in_bytes = src.cols * channels;
  GrowTo(s.block, size_t(in_bytes) * kBlockRows);
  const size_t tmp_step = (size_t(dst.cols) * channels + 63) & ~size_t(63);
  GrowTo(s.tmp, tmp_step * (size_t(need_v ? rows_h : 0) + 1));
  uint8_t* junk_row = s.tmp.data() + tmp_step * size_t(need_v ? rows_h : 0);

  for (int y0 = 0; y0 < rows_h; y0 += kBlockRows) {
    const uint8_t* in[kBlockRows];
    uint8_t* out[kBlockRows];
    for (int r = 0; r < kBlockRows; ++r) {
      const int y = y0 + r;
      if (y < rows_h) {
        in[r] = src.ptr<uint8_t>(y_first + y);
        out[r] = need_v ? s.tmp.data() + tmp_step * size_t(y) : dst.ptr<uint8_t>(y);
      } else {  // past the last row: filter the last row again, keep nothing
        in[r] = in[r - 1];
        out[r] = junk_row;
      }
    }
    kernels.transpose(in, in_bytes, s.block.data());
    if (channels == 3) {
      kernels.horizontal_rgb(s.block.data(), out, dst.cols, horizontal);
    } else {
      kernels.horizontal_gray(s.block.data(), out, dst.cols, horizontal);
    }
  }
  if (need_v) {
    VerticalPass(kernels, s.tmp.data(), tmp_step, y_first, vertical, dst.cols * channels, dst, s.row_ptrs);
  }
}

// Pillow's NEAREST resize (ImagingScaleAffine): source coordinates accumulated in double from
// scale / 2 by steps of scale = in / out, truncated; outputs whose coordinate falls outside the image
// are 0 (Pillow clears the row first).
void Nearest(const cv::Mat& src, cv::Mat& dst) {
  Scratch& s = ThreadScratch();
  const int channels = src.channels();
  GrowTo(s.nearest_x, size_t(dst.cols));
  int32_t* xin = s.nearest_x.data();
  const double ax = double(float(src.cols)) / dst.cols;
  const double ay = double(float(src.rows)) / dst.rows;
  int x_lo = dst.cols, x_hi = 0;
  double xo = ax * 0.5;
  for (int x = 0; x < dst.cols; ++x) {
    const int xi = xo < 0.0 ? -1 : int(xo);
    xin[x] = 0;
    if (xi >= 0 && xi < src.cols) {
      x_hi = x + 1;
      if (x < x_lo) x_lo = x;
      xin[x] = xi * channels;
    }
    xo += ax;
  }
  double yo = ay * 0.5;
  for (int y = 0; y < dst.rows; ++y) {
    const int yi = yo < 0.0 ? -1 : int(yo);
    yo += ay;
    uint8_t* out = dst.ptr<uint8_t>(y);
    const int row_bytes = dst.cols * channels;
    if (yi < 0 || yi >= src.rows || x_lo >= x_hi) {
      std::memset(out, 0, row_bytes);
      continue;
    }
    if (x_lo > 0) std::memset(out, 0, size_t(x_lo) * channels);
    if (x_hi < dst.cols) std::memset(out + x_hi * channels, 0, size_t(dst.cols - x_hi) * channels);
    const uint8_t* in = src.ptr<uint8_t>(yi);
    if (channels == 3) {
      // 4-byte copies, the 4th byte overwritten by the next pixel, while neither the read nor the write
      // can pass the end of its row (xin only grows with x).
      int x = x_lo;
      for (; x < x_hi - 1 && xin[x] + 4 <= 3 * src.cols; ++x) std::memcpy(out + 3 * x, in + xin[x], 4);
      for (; x < x_hi; ++x) std::memcpy(out + 3 * x, in + xin[x], 3);
    } else {
      for (int x = x_lo; x < x_hi; ++x) out[x] = in[xin[x]];
    }
  }
}

void Resize(const cv::Mat& src, cv::Mat& dst, Interp interp, const Kernels& kernels) {
  FERRY_CHECK(!src.empty() && !dst.empty());
  FERRY_CHECK(src.type() == dst.type());
  FERRY_CHECK(src.type() == CV_8UC1 || src.type() == CV_8UC3);
  FERRY_CHECK(src.dims == 2 && dst.dims == 2);
  FERRY_CHECK(src.data != dst.data);
  if (src.size() == dst.size()) {  // Pillow returns a copy, whatever the filter
    src.copyTo(dst);
    return;
  }
  if (interp == Interp::kNearest) {
    Nearest(src, dst);
  } else {
    Convolve(src, dst, interp, kernels);
  }
}

}  // namespace

void PilResize(const cv::Mat& src, cv::Mat& dst, Interp interp) { Resize(src, dst, interp, ChooseKernels()); }

namespace internal {

void PilResizeForTesting(const cv::Mat& src, cv::Mat& dst, Interp interp, bool allow_avx2) {
  Resize(src, dst, interp, allow_avx2 ? ChooseKernels() : kBaselineKernels);
}

}  // namespace internal
}  // namespace ferry::kernels
