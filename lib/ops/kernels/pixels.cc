#include "ops/kernels/pixels.h"

#include <algorithm>
#include <cmath>

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
FERRY_TARGET_CLONES_AVX2 void NormalizeRows3(const uint8_t* __restrict hwc, size_t stride, int h, int w, bool flip,
                                             const float* scale, const float* bias, float* __restrict o0,
                                             float* __restrict o1, float* __restrict o2) {
  const float s0 = scale[0], s1 = scale[1], s2 = scale[2];
  const float b0 = bias[0], b1 = bias[1], b2 = bias[2];
  for (int y = 0; y < h; ++y) {
    const uint8_t* __restrict row = hwc + size_t(y) * stride;
    float* __restrict r0 = o0 + size_t(y) * w;
    float* __restrict r1 = o1 + size_t(y) * w;
    float* __restrict r2 = o2 + size_t(y) * w;
    if (!flip) {
      for (int x = 0; x < w; ++x) {
        r0[x] = float(row[3 * x]) * s0 + b0;
        r1[x] = float(row[3 * x + 1]) * s1 + b1;
        r2[x] = float(row[3 * x + 2]) * s2 + b2;
      }
    } else {
      const uint8_t* __restrict end = row + 3 * (w - 1);
      for (int x = 0; x < w; ++x) {
        r0[x] = float(end[-3 * x]) * s0 + b0;
        r1[x] = float(end[-3 * x + 1]) * s1 + b1;
        r2[x] = float(end[-3 * x + 2]) * s2 + b2;
      }
    }
  }
}

}  // namespace

void WriteFloatCHW(const uint8_t* hwc, size_t stride, int h, int w, int c, bool flip, const float* scale,
                   const float* bias, float* out) {
  const size_t plane = size_t(h) * w;
  if (c == 3) {
    NormalizeRows3(hwc, stride, h, w, flip, scale, bias, out, out + plane, out + 2 * plane);
    return;
  }
  for (int y = 0; y < h; ++y) {
    const uint8_t* row = hwc + size_t(y) * stride;
    for (int x = 0; x < w; ++x) out[size_t(y) * w + x] = float(row[flip ? w - 1 - x : x]) * scale[0] + bias[0];
  }
}

}  // namespace ferry::kernels
