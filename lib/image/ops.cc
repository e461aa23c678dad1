#include "image/ops.h"

#include <algorithm>
#include <cmath>

#include <opencv2/imgproc.hpp>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace ferry {

namespace {
// Python's round(): half to even (std::nearbyint in the default rounding mode).
int PyRound(double v) { return int(std::nearbyint(v)); }
}  // namespace

cv::Rect RandomResizedCropBox(int width, int height, const PipelineSpec& spec, SampleRng& rng) {
  const double area = double(width) * height;
  const double log_lo = std::log(spec.ratio_min), log_hi = std::log(spec.ratio_max);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target_area = area * rng.Uniform(spec.scale_min, spec.scale_max);
    const double aspect = std::exp(rng.Uniform(log_lo, log_hi));
    const int w = PyRound(std::sqrt(target_area * aspect));
    const int h = PyRound(std::sqrt(target_area / aspect));
    if (w > 0 && w <= width && h > 0 && h <= height) {
      const int i = int(rng.Below(uint64_t(height - h + 1)));
      const int j = int(rng.Below(uint64_t(width - w + 1)));
      return {j, i, w, h};
    }
  }
  const double in_ratio = double(width) / height;
  int w, h;
  if (in_ratio < spec.ratio_min) {
    w = width;
    h = PyRound(w / spec.ratio_min);
  } else if (in_ratio > spec.ratio_max) {
    h = height;
    w = PyRound(h * spec.ratio_max);
  } else {
    w = width;
    h = height;
  }
  w = std::clamp(w, 1, width);
  h = std::clamp(h, 1, height);
  return {(width - w) / 2, (height - h) / 2, w, h};
}

cv::Rect CenterCropBox(int width, int height, const PipelineSpec& spec) {
  // torchvision Resize(int): the shorter side becomes `resize_shorter`, the longer
  // int(resize_shorter * long / short) (truncation, as in torchvision).
  const int r = spec.resize_shorter;
  int new_w, new_h;
  if (width <= height) {
    new_w = r;
    new_h = int(int64_t(r) * height / width);
  } else {
    new_h = r;
    new_w = int(int64_t(r) * width / height);
  }
  new_w = std::max(new_w, 1);
  new_h = std::max(new_h, 1);
  const int s = spec.size;
  const int top = PyRound((new_h - s) / 2.0), left = PyRound((new_w - s) / 2.0);
  const double sx = double(width) / new_w, sy = double(height) / new_h;
  int x0 = PyRound(left * sx), x1 = PyRound((left + s) * sx);
  int y0 = PyRound(top * sy), y1 = PyRound((top + s) * sy);
  x0 = std::clamp(x0, 0, width - 1);
  y0 = std::clamp(y0, 0, height - 1);
  x1 = std::clamp(x1, x0 + 1, width);
  y1 = std::clamp(y1, y0 + 1, height);
  return {x0, y0, x1 - x0, y1 - y0};
}

cv::Rect OrientedToStored(cv::Rect r, int o, int W, int H) {
  switch (o) {
    case 2: return {W - r.x - r.width, r.y, r.width, r.height};
    case 3: return {W - r.x - r.width, H - r.y - r.height, r.width, r.height};
    case 4: return {r.x, H - r.y - r.height, r.width, r.height};
    case 5: return {r.y, r.x, r.height, r.width};
    case 6: return {r.y, H - r.x - r.width, r.height, r.width};
    case 7: return {W - r.y - r.height, H - r.x - r.width, r.height, r.width};
    case 8: return {W - r.y - r.height, r.x, r.height, r.width};
    default: return r;
  }
}

cv::Mat ApplyOrientation(const cv::Mat& m, int o) {
  cv::Mat out;
  switch (o) {
    case 2: cv::flip(m, out, 1); break;
    case 3: cv::rotate(m, out, cv::ROTATE_180); break;
    case 4: cv::flip(m, out, 0); break;
    case 5: cv::transpose(m, out); break;
    case 6: cv::rotate(m, out, cv::ROTATE_90_CLOCKWISE); break;
    case 7: cv::transpose(m, out); cv::rotate(out, out, cv::ROTATE_180); break;
    case 8: cv::rotate(m, out, cv::ROTATE_90_COUNTERCLOCKWISE); break;
    default: return m;
  }
  return out;
}

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

// Runtime dispatch between an AVX2 and a default build of a hot loop (GCC/Clang
// target_clones: an ifunc picks one when the program loads). Not under ThreadSanitizer:
// the ifunc resolver would run, instrumented, before the TSan runtime is up, and crash
// the program at load; the default build alone is as correct, only slower.
#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define FERRY_NO_IFUNC 1
#endif
#endif
#if defined(__SANITIZE_THREAD__)
#define FERRY_NO_IFUNC 1
#endif
#if defined(FERRY_NO_IFUNC)
#define FERRY_TARGET_CLONES_AVX2
#else
#define FERRY_TARGET_CLONES_AVX2 __attribute__((target_clones("avx2", "default")))
#endif

void ResizeToUint8HWC(const cv::Mat& src, int size, bool flip, uint8_t* out) {
  // For uint8 output OpenCV's fixed-point bilinear is the fastest we measured
  // (ferry-micro-bench: BM_ResizeOpenCV/240 78 us against 193 us for a float
  // version of the fused path); a mirror, when drawn, goes through scratch.
  cv::Mat dst(size, size, src.type(), out);
  if (!flip) {
    cv::resize(src, dst, dst.size(), 0, 0, cv::INTER_LINEAR);
    return;
  }
  thread_local cv::Mat tmp;
  cv::resize(src, tmp, dst.size(), 0, 0, cv::INTER_LINEAR);
  cv::flip(tmp, dst, 1);
}

void HFlipInPlace(uint8_t* p, int width, int height, int c) {
  thread_local cv::Mat tmp;
  cv::Mat img(height, width, c == 1 ? CV_8UC1 : CV_8UC3, p);
  cv::flip(img, tmp, 1);
  tmp.copyTo(img);
}

JitterFactors DrawJitter(const PipelineSpec& spec, SampleRng& rng) {
  JitterFactors f;
  // torchvision: fn_idx = randperm(4), then one uniform factor per enabled op.
  int perm[3] = {0, 1, 2};
  for (int i = 2; i > 0; --i) std::swap(perm[i], perm[rng.Below(uint64_t(i) + 1)]);
  std::copy(perm, perm + 3, f.order);
  auto draw = [&rng](double v) {
    return v > 0 ? float(rng.Uniform(std::max(0.0, 1.0 - v), 1.0 + v)) : 1.f;
  };
  f.brightness = draw(spec.brightness);
  f.contrast = draw(spec.contrast);
  f.saturation = draw(spec.saturation);
  return f;
}

namespace {

// The jitter kernels are plain loops over contiguous bytes, written so the compiler
// vectorizes them; built for AVX2 and for the baseline, picked at load time.

// p[i] = clamp(p[i] * k + b), rounded.
FERRY_TARGET_CLONES_AVX2 void AffineBytes(uint8_t* __restrict p, int n, float k,
                                                                    float b) {
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

// The hot loop of the float output: (v/255 - mean)/std per value, de-interleaving
// HWC uint8 into CHW float. Built twice (AVX2 and baseline) and picked at load
// time, since the gain of 8-wide float lanes here is large and CI machines vary.
FERRY_TARGET_CLONES_AVX2 void NormalizeRows3(
    const uint8_t* __restrict hwc, int h, int w, bool flip, const float* scale, const float* bias,
    float* __restrict o0, float* __restrict o1, float* __restrict o2) {
  const float s0 = scale[0], s1 = scale[1], s2 = scale[2];
  const float b0 = bias[0], b1 = bias[1], b2 = bias[2];
  for (int y = 0; y < h; ++y) {
    const uint8_t* __restrict row = hwc + size_t(y) * w * 3;
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

void WriteFloatCHW(const uint8_t* hwc, int h, int w, int c, bool flip, const PipelineSpec& spec, float* out) {
  float scale[3], bias[3];
  for (int k = 0; k < c; ++k) {
    const float mean = spec.normalize ? spec.mean[k] : 0.f;
    const float sd = spec.normalize ? spec.std[k] : 1.f;
    scale[k] = 1.f / (255.f * sd);
    bias[k] = -mean / sd;
  }
  const size_t plane = size_t(h) * w;
  if (c == 3) {
    NormalizeRows3(hwc, h, w, flip, scale, bias, out, out + plane, out + 2 * plane);
    return;
  }
  for (int y = 0; y < h; ++y) {
    const uint8_t* row = hwc + size_t(y) * w;
    for (int x = 0; x < w; ++x) out[size_t(y) * w + x] = float(row[flip ? w - 1 - x : x]) * scale[0] + bias[0];
  }
}

}  // namespace ferry
