#include "ops/kernels/pixels.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define FERRY_STREAM_STORES 1
#endif

#include <opencv2/imgproc.hpp>

#include "core/simd.h"

namespace ferry::kernels {

void ResizeInto(const cv::Mat& src, cv::Mat& dst) {
  if (src.cols == dst.cols && src.rows == dst.rows) {
    src.copyTo(dst);
    return;
  }
  // Bilinear is exact enough up to a 2x reduction (each output pixel still sees every
  // input pixel's neighbourhood) and it is OpenCV's fastest SIMD path; the fused JPEG
  // decode hands us windows already DCT-scaled to within 2x of the output. Beyond 2x
  // (other formats, or roi_decode off) area averaging avoids aliasing, like PIL's
  // antialiased resize does.
  const bool big_shrink = src.cols > 2 * dst.cols || src.rows > 2 * dst.rows;
  cv::resize(src, dst, dst.size(), 0, 0, big_shrink ? cv::INTER_AREA : cv::INTER_LINEAR);
}

void ResizeToUint8HWC(const cv::Mat& src, int out_w, int out_h, bool flip, uint8_t* out) {
  // For uint8 output OpenCV's fixed-point bilinear is the fastest we measured
  // (ferry-micro-bench: BM_ResizeOpenCV/240 78 us against 193 us for a float
  // version of the fused path); a mirror, when drawn, goes through scratch.
  cv::Mat dst(out_h, out_w, src.type(), out);
  if (!flip) {
    cv::resize(src, dst, dst.size(), 0, 0, cv::INTER_LINEAR);
    return;
  }
  thread_local cv::Mat tmp;
  cv::resize(src, tmp, dst.size(), 0, 0, cv::INTER_LINEAR);
  cv::flip(tmp, dst, 1);
}

void HFlip(cv::Mat& img) {
  cv::Mat out;
  cv::flip(img, out, 1);
  img = out;
}

void HFlipInPlace(cv::Mat& img) {
  thread_local cv::Mat tmp;
  cv::flip(img, tmp, 1);
  tmp.copyTo(img);
}

namespace {

// The jitter kernels are plain loops over contiguous bytes, written so the compiler
// vectorizes them; built for AVX2 and for the baseline, picked at load time.

// p[i] = clamp(p[i] * k + b), rounded.
FERRY_TARGET_CLONES_AVX2 void AffineBytes(uint8_t* __restrict p, int n, float k, float b) {
  for (int i = 0; i < n; ++i) {
    float v = float(p[i]) * k + b + 0.5f;
    v = v < 0.f ? 0.f : (v > 255.f ? 255.f : v);
    p[i] = uint8_t(int(v));
  }
}

FERRY_TARGET_CLONES_AVX2 float LumaMean(const uint8_t* __restrict p, int n) {
  float sum = 0.f;
  for (int i = 0; i < n; ++i) sum += 0.299f * p[3 * i] + 0.587f * p[3 * i + 1] + 0.114f * p[3 * i + 2];
  return sum / float(n);
}

// Blend each RGB pixel with its own luma: q = k*q + (1-k)*luma.
FERRY_TARGET_CLONES_AVX2 void SaturateRgb(uint8_t* __restrict p, int n, float k) {
  const float g = 1.f - k;
  for (int i = 0; i < n; ++i) {
    const float r = p[3 * i], gg = p[3 * i + 1], b = p[3 * i + 2];
    const float l = g * (0.299f * r + 0.587f * gg + 0.114f * b) + 0.5f;
    float v0 = r * k + l, v1 = gg * k + l, v2 = b * k + l;
    v0 = v0 < 0.f ? 0.f : (v0 > 255.f ? 255.f : v0);
    v1 = v1 < 0.f ? 0.f : (v1 > 255.f ? 255.f : v1);
    v2 = v2 < 0.f ? 0.f : (v2 > 255.f ? 255.f : v2);
    p[3 * i] = uint8_t(int(v0));
    p[3 * i + 1] = uint8_t(int(v1));
    p[3 * i + 2] = uint8_t(int(v2));
  }
}

}  // namespace

void ApplyJitter(uint8_t* p, int n, int c, const JitterFactors& f) {
  for (int op : f.order) {
    if (op == 0 && f.brightness != 1.f) {
      AffineBytes(p, n * c, f.brightness, 0.f);  // blend with black
    } else if (op == 1 && f.contrast != 1.f) {
      // Blend with the mean grey level, rounded as PIL's ImageEnhance.Contrast does.
      double mean = 0;
      if (c == 3) {
        mean = LumaMean(p, n);
      } else {
        for (int i = 0; i < n; ++i) mean += p[i];
        mean /= n;
      }
      AffineBytes(p, n * c, f.contrast, (1.f - f.contrast) * float(std::floor(mean + 0.5)));
    } else if (op == 2 && f.saturation != 1.f && c == 3) {
      SaturateRgb(p, n, f.saturation);
    }
  }
}

namespace {

// The hot loop of the float output: v * scale + bias per value, de-interleaving HWC
// uint8 into CHW float. Built twice (AVX2 and baseline) and picked at load time,
// since the gain of 8-wide float lanes here is large and CI machines vary.
// Copies n floats to dst with non-temporal stores where dst is 16-byte aligned. A
// float batch (38 MB for 64 images at 224x224x3) is written once and read by someone
// else later (the trainer, the wire): streaming stores skip reading each destination
// line into the cache first, half the memory traffic of plain stores.
// (Plain stores when `stream` is false: the caller reads the rows back at once, as a
// pipeline's tensor and batch ops do, and wants them in the cache.)
inline void StreamFloats(float* __restrict dst, const float* __restrict src, int n, bool stream) {
#ifdef FERRY_STREAM_STORES
  if (stream) {
    int i = 0;
    while (i < n && (reinterpret_cast<uintptr_t>(dst + i) & 15) != 0) {
      dst[i] = src[i];
      ++i;
    }
    for (; i + 4 <= n; i += 4) _mm_stream_ps(dst + i, _mm_loadu_ps(src + i));
    for (; i < n; ++i) dst[i] = src[i];
    return;
  }
#endif
  (void)stream;
  std::memcpy(dst, src, size_t(n) * sizeof(float));
}

// One chunk of a row: (x * scale + bias) per channel into three small buffers, which
// stay in L1 (vectorized by the compiler; AVX2 where the CPU has it).
FERRY_TARGET_CLONES_AVX2 void NormalizeChunk3(const uint8_t* __restrict px, int n, bool flip, const float* scale,
                                              const float* bias, float* __restrict t0, float* __restrict t1,
                                              float* __restrict t2) {
  const float s0 = scale[0], s1 = scale[1], s2 = scale[2];
  const float b0 = bias[0], b1 = bias[1], b2 = bias[2];
  if (!flip) {
    for (int x = 0; x < n; ++x) {
      t0[x] = float(px[3 * x]) * s0 + b0;
      t1[x] = float(px[3 * x + 1]) * s1 + b1;
      t2[x] = float(px[3 * x + 2]) * s2 + b2;
    }
  } else {  // px is the chunk's last pixel; it walks left
    for (int x = 0; x < n; ++x) {
      t0[x] = float(px[-3 * x]) * s0 + b0;
      t1[x] = float(px[-3 * x + 1]) * s1 + b1;
      t2[x] = float(px[-3 * x + 2]) * s2 + b2;
    }
  }
}

void NormalizeRows3(const uint8_t* __restrict hwc, size_t stride, int h, int w, bool flip, const float* scale,
                    const float* bias, float* __restrict o0, float* __restrict o1, float* __restrict o2, bool stream) {
  constexpr int kChunk = 256;
  alignas(64) float t0[kChunk], t1[kChunk], t2[kChunk];
  for (int y = 0; y < h; ++y) {
    const uint8_t* __restrict row = hwc + size_t(y) * stride;
    float* __restrict r0 = o0 + size_t(y) * w;
    float* __restrict r1 = o1 + size_t(y) * w;
    float* __restrict r2 = o2 + size_t(y) * w;
    for (int x0 = 0; x0 < w; x0 += kChunk) {
      const int n = std::min(kChunk, w - x0);
      const uint8_t* px = flip ? row + 3 * (w - 1 - x0) : row + 3 * x0;
      NormalizeChunk3(px, n, flip, scale, bias, t0, t1, t2);
      StreamFloats(r0 + x0, t0, n, stream);
      StreamFloats(r1 + x0, t1, n, stream);
      StreamFloats(r2 + x0, t2, n, stream);
    }
  }
#ifdef FERRY_STREAM_STORES
  if (stream) _mm_sfence();  // the streamed stores are ordered before whoever reads the batch next
#endif
}

}  // namespace

void WriteFloatCHW(const uint8_t* hwc, size_t stride, int h, int w, int c, bool flip, const float* scale,
                   const float* bias, float* out, bool stream) {
  const size_t plane = size_t(h) * w;
  if (c == 3) {
    NormalizeRows3(hwc, stride, h, w, flip, scale, bias, out, out + plane, out + 2 * plane, stream);
    return;
  }
  for (int y = 0; y < h; ++y) {
    const uint8_t* row = hwc + size_t(y) * stride;
    for (int x = 0; x < w; ++x) out[size_t(y) * w + x] = float(row[flip ? w - 1 - x : x]) * scale[0] + bias[0];
  }
}

}  // namespace ferry::kernels
