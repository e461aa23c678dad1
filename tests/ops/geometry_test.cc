// Tests of the geometry helpers (lib/ops/geometry.h) and Ferry's fast kernels
// (lib/ops/kernels/pixels.h): crop boxes against torchvision's formulas, the composed
// Resize + CenterCrop window, EXIF orientation, the fused resizes against OpenCV's
// bilinear resize, the float conversion and colour jitter.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include <opencv2/core.hpp>
#include <opencv2/imgproc.hpp>

#include "core/philox.h"
#include "ferry/pipeline_spec.h"
#include "image/image_test_util.h"
#include "image/orientation.h"
#include "ops/geometry.h"
#include "ops/kernels/pixels.h"
#include "ops/pipeline.h"
#include "testutil.h"

namespace ferry {
namespace {

using testing::MaxAbsDiff;
using testing::ReferenceOrient;
using testing::SameBytes;
using namespace kernels;

// torchvision's RandomResizedCrop defaults.
struct RrcParams {
  double scale_min = 0.08, scale_max = 1.0, ratio_min = 3.0 / 4.0, ratio_max = 4.0 / 3.0;
};
cv::Rect RandomResizedCropBox(int w, int h, const RrcParams& p, SampleRng& rng) {
  return ferry::RandomResizedCropBox(w, h, {p.scale_min, p.scale_max}, {p.ratio_min, p.ratio_max}, rng);
}

// The window of the source that Resize(resize) then CenterCrop(size) reads, as the
// pipeline composes it from the two ops' crop plans.
cv::Rect CenterCropBox(int w, int h, int resize = 256, int size = 224) {
  auto r = MakeOp("resize", "{\"size\":" + std::to_string(resize) + "}");
  auto c = MakeOp("center_crop", "{\"size\":" + std::to_string(size) + "}");
  SampleRng rng(0, 0, 0);
  const CropPlan first = *(*r)->PlanCrop(w, h, rng);
  const std::optional<CropPlan> crop = (*c)->PlanCrop(first.out_w, first.out_h, rng);
  EXPECT_TRUE(crop.has_value());
  return ComposeCropPlans(first, *crop, w, h).window;
}

TEST(OpsTest, RandomResizedCropBoxBoundsAreaAndRatio) {
  RrcParams spec;
  const cv::Size sizes[] = {{1, 1}, {3, 500}, {500, 3}, {2, 2},     {64, 48},   {500, 375},
                            {1000, 800}, {4000, 10}, {10, 4000}, {17, 23}, {224, 224}};
  for (const cv::Size& sz : sizes) {
    const int W = sz.width, H = sz.height;
    const double area = double(W) * H;
    int fallbacks = 0;
    double sum_cx = 0;
    const int draws = 1500;
    for (int k = 0; k < draws; ++k) {
      SampleRng rng(uint64_t(W) * 7919 + H, 0, uint64_t(k), kRngCrop);
      const cv::Rect r = RandomResizedCropBox(W, H, spec, rng);
      ASSERT_GE(r.x, 0) << sz;
      ASSERT_GE(r.y, 0) << sz;
      ASSERT_GE(r.width, 1) << sz;
      ASSERT_GE(r.height, 1) << sz;
      ASSERT_LE(r.x + r.width, W) << sz;
      ASSERT_LE(r.y + r.height, H) << sz;
      sum_cx += r.x + r.width / 2.0;
      // torchvision's central fallback (when 10 draws did not fit).
      const double in_ratio = double(W) / H;
      int fw = W, fh = H;
      if (in_ratio < spec.ratio_min) fh = int(std::nearbyint(W / spec.ratio_min));
      if (in_ratio > spec.ratio_max) fw = int(std::nearbyint(H * spec.ratio_max));
      const cv::Rect fallback((W - fw) / 2, (H - fh) / 2, fw, fh);
      if (r == fallback) {
        ++fallbacks;
        continue;
      }
      // A drawn box: w = round(sqrt(A*s*r)), h = round(sqrt(A*s/r)) for s in the
      // scale range and r in the ratio range, so (w +- 0.5) and (h +- 0.5) bracket them.
      const double w = r.width, h = r.height;
      EXPECT_LE((w - 0.5) * (h - 0.5), spec.scale_max * area + 1e-9) << sz << " " << r;
      EXPECT_GE((w + 0.5) * (h + 0.5), spec.scale_min * area - 1e-9) << sz << " " << r;
      EXPECT_LE((w - 0.5) / (h + 0.5), spec.ratio_max + 1e-9) << sz << " " << r;
      if (h > 0.5) {
        EXPECT_GE((w + 0.5) / (h - 0.5), spec.ratio_min - 1e-9) << sz << " " << r;
      }
    }
    if (W * 2 < H || H * 2 < W) {
      // Far outside the ratio range: no draw can fit, always the fallback.
      EXPECT_EQ(fallbacks, draws) << sz;
    }
    if (W >= 64 && H >= 48 && W <= 2 * H && H <= 2 * W) {
      EXPECT_LT(fallbacks, draws / 100) << sz;
      // Offsets are uniform: the crops' centres average near the image centre.
      EXPECT_NEAR(sum_cx / draws, W / 2.0, W * 0.05) << sz;
    }
  }
}

TEST(OpsTest, RandomResizedCropFallbackMatchesTorchvision) {
  RrcParams spec;
  SampleRng rng(1, 0, 0);
  // in_ratio < 3/4: w = width, h = round(width / (3/4)); i = (H - h) // 2.
  EXPECT_EQ(RandomResizedCropBox(3, 500, spec, rng), cv::Rect(0, 248, 3, 4));
  // in_ratio > 4/3: h = height, w = round(height * 4/3); j = (W - w) // 2.
  EXPECT_EQ(RandomResizedCropBox(500, 3, spec, rng), cv::Rect(248, 0, 4, 3));
  EXPECT_EQ(RandomResizedCropBox(4000, 10, spec, rng), cv::Rect(1993, 0, 13, 10));
  EXPECT_EQ(RandomResizedCropBox(10, 4000, spec, rng), cv::Rect(0, 1993, 10, 13));  // round(10 / 0.75)
  // Python's round() is half to even: round(2.5) == 2, round(3.5) == 4.
  spec.ratio_min = 0.8;
  spec.ratio_max = 2.5;
  EXPECT_EQ(RandomResizedCropBox(2, 500, spec, rng), cv::Rect(0, 249, 2, 2));    // 2 / 0.8 = 2.5 -> 2
  EXPECT_EQ(RandomResizedCropBox(1000, 1, spec, rng), cv::Rect(499, 0, 2, 1));   // 1 * 2.5 = 2.5 -> 2
  spec.ratio_max = 3.5;
  EXPECT_EQ(RandomResizedCropBox(1000, 1, spec, rng), cv::Rect(498, 0, 4, 1));   // 1 * 3.5 = 3.5 -> 4
  // 1x1 always yields the whole pixel.
  spec = RrcParams();
  for (int k = 0; k < 100; ++k) {
    SampleRng r(k, 0, 0);
    EXPECT_EQ(RandomResizedCropBox(1, 1, spec, r), cv::Rect(0, 0, 1, 1));
  }
}

TEST(OpsTest, CenterCropBoxFollowsTorchvision) {
  // Resize(256), CenterCrop(224)
  // 500x375: Resize gives 341x256 (341 = int(256 * 500 / 375)); CenterCrop's
  // top = round((256 - 224) / 2) = 16, left = round((341 - 224) / 2) = round(58.5) = 58.
  // Back in the source, per axis (x by 500/341, y by 375/256):
  //   x: [58, 282) * 500/341 = [85.04, 413.49) -> [85, 413)
  //   y: [16, 240) * 375/256 = [23.44, 351.56) -> [23, 352)
  EXPECT_EQ(CenterCropBox(500, 375), cv::Rect(85, 23, 328, 329));
  EXPECT_EQ(CenterCropBox(375, 500), cv::Rect(23, 85, 329, 328));
  // Square: 256x256, crop [16, 240) * 2 = [32, 480).
  EXPECT_EQ(CenterCropBox(512, 512), cv::Rect(32, 32, 448, 448));
  // Already the resize size: no scaling.
  EXPECT_EQ(CenterCropBox(256, 256), cv::Rect(16, 16, 224, 224));
  // Upscaling a small image: 100x50 -> 512x256; left = 144, top = 16;
  //   x: [144, 368) * 100/512 = [28.1, 71.9) -> [28, 72); y: [16, 240) * 50/256 -> [3, 47).
  EXPECT_EQ(CenterCropBox(100, 50), cv::Rect(28, 3, 44, 44));
  // Degenerate sizes stay inside the image.
  for (const cv::Size& sz : {cv::Size(1, 1), cv::Size(1, 1000), cv::Size(1000, 1), cv::Size(2, 3)}) {
    const cv::Rect r = CenterCropBox(sz.width, sz.height);
    EXPECT_GE(r.x, 0);
    EXPECT_GE(r.y, 0);
    EXPECT_GE(r.width, 1);
    EXPECT_GE(r.height, 1);
    EXPECT_LE(r.x + r.width, sz.width) << sz;
    EXPECT_LE(r.y + r.height, sz.height) << sz;
  }
}

TEST(OpsTest, OrientedToStoredRoundTripsWithApplyOrientation) {
  const int W = 37, H = 23;
  auto px = testing::SyntheticPixels(W, H, 19);
  const cv::Mat stored = cv::Mat(H, W, CV_8UC3, px.data()).clone();
  SampleRng rng(19, 0, 0);
  for (int o = 1; o <= 8; ++o) {
    const cv::Mat oriented = ReferenceOrient(stored, o);
    ASSERT_TRUE(SameBytes(ApplyOrientation(stored, o), oriented)) << o;
    for (int k = 0; k < 200; ++k) {
      const int w = 1 + int(rng.Below(uint64_t(oriented.cols)));
      const int h = 1 + int(rng.Below(uint64_t(oriented.rows)));
      const int x = int(rng.Below(uint64_t(oriented.cols - w + 1)));
      const int y = int(rng.Below(uint64_t(oriented.rows - h + 1)));
      const cv::Rect r(x, y, w, h);
      const cv::Rect s = OrientedToStored(r, o, W, H);
      ASSERT_EQ(s & cv::Rect(0, 0, W, H), s) << "orientation " << o << " " << r << " -> " << s;
      ASSERT_TRUE(SameBytes(ApplyOrientation(stored(s), o), oriented(r)))
          << "orientation " << o << " " << r << " -> " << s;
    }
  }
}

TEST(OpsTest, ResizeToUint8HWCMatchesOpenCVBilinear) {
  const int size = 32;
  for (const cv::Size& sz : {cv::Size(50, 40), cv::Size(64, 64), cv::Size(20, 30), cv::Size(37, 91),
                             cv::Size(32, 32), cv::Size(3, 2)}) {
    for (int channels : {3, 1}) {
      auto px = testing::SyntheticPixels(sz.width, sz.height, uint64_t(sz.area()) + 1, channels);
      const int type = channels == 3 ? CV_8UC3 : CV_8UC1;
      const cv::Mat src(sz.height, sz.width, type, px.data());
      cv::Mat out(size, size, type), flipped(size, size, type), ref, mirrored;
      ResizeToUint8HWC(src, size, size, false, out.data);
      ResizeToUint8HWC(src, size, size, true, flipped.data);
      cv::resize(src, ref, {size, size}, 0, 0, cv::INTER_LINEAR);
      EXPECT_LE(MaxAbsDiff(out, ref), 1.0) << sz << " channels " << channels;
      cv::flip(out, mirrored, 1);
      EXPECT_TRUE(SameBytes(flipped, mirrored)) << sz;
      if (sz == cv::Size(32, 32)) {
        EXPECT_TRUE(SameBytes(out, src)) << "identity resize";
      }
    }
  }
  // HFlipInPlace mirrors.
  auto px = testing::SyntheticPixels(9, 4, 3);
  cv::Mat img = cv::Mat(4, 9, CV_8UC3, px.data()).clone(), expected;
  cv::flip(img, expected, 1);
  HFlipInPlace(img);
  EXPECT_TRUE(SameBytes(img, expected));
}

TEST(OpsTest, WriteFloatCHWMatchesScalarReference) {
  const float mean[3] = {0.485f, 0.456f, 0.406f}, sd[3] = {0.229f, 0.224f, 0.225f};
  for (bool normalize : {true, false}) {
    float scale[3], bias[3];
    for (int c = 0; c < 3; ++c) {
      scale[c] = normalize ? 1.f / (255.f * sd[c]) : 1.f / 255.f;
      bias[c] = normalize ? -mean[c] / sd[c] : 0.f;
    }
    for (int channels : {3, 1}) {
      for (bool flip : {false, true}) {
        const int h = 13, w = 29;
        auto hwc = testing::SyntheticPixels(w, h, 20, channels);
        std::vector<float> out(hwc.size());
        WriteFloatCHW(hwc.data(), size_t(w) * channels, h, w, channels, flip, scale, bias, out.data());
        for (int c = 0; c < channels; ++c) {
          for (int y = 0; y < h; ++y) {
            for (int x = 0; x < w; ++x) {
              const int sx = flip ? w - 1 - x : x;
              const double v = hwc[(size_t(y) * w + sx) * channels + c] / 255.0;
              const double expected = normalize ? (v - mean[c]) / sd[c] : v;
              ASSERT_NEAR(out[(size_t(c) * h + y) * w + x], expected, 1e-5)
                  << "c " << c << " y " << y << " x " << x << " flip " << flip;
            }
          }
        }
      }
    }
  }
}

TEST(OpsTest, JitterIdentityAndExtremes) {
  auto px = testing::SyntheticPixels(31, 17, 21);
  const int n = 31 * 17;
  for (int perm = 0; perm < 6; ++perm) {
    JitterFactors identity;
    const int orders[6][3] = {{0, 1, 2}, {0, 2, 1}, {1, 0, 2}, {1, 2, 0}, {2, 0, 1}, {2, 1, 0}};
    std::copy(orders[perm], orders[perm] + 3, identity.order);
    std::vector<uint8_t> img = px;
    ApplyJitter(img.data(), n, 3, identity);
    EXPECT_EQ(img, px);
  }
  JitterFactors dark;
  dark.brightness = 0.f;
  std::vector<uint8_t> img = px;
  ApplyJitter(img.data(), n, 3, dark);
  EXPECT_TRUE(std::all_of(img.begin(), img.end(), [](uint8_t v) { return v == 0; }));

  // Contrast 0: every value becomes the mean luma (torchvision blends with it).
  JitterFactors flat;
  flat.contrast = 0.f;
  img = px;
  ApplyJitter(img.data(), n, 3, flat);
  EXPECT_TRUE(std::all_of(img.begin(), img.end(), [&](uint8_t v) { return v == img[0]; }));
  double luma = 0;
  for (int i = 0; i < n; ++i) luma += 0.299 * px[3 * i] + 0.587 * px[3 * i + 1] + 0.114 * px[3 * i + 2];
  EXPECT_NEAR(img[0], luma / n, 1.0);

  // Saturation 0: gray, R == G == B.
  JitterFactors gray;
  gray.saturation = 0.f;
  img = px;
  ApplyJitter(img.data(), n, 3, gray);
  for (int i = 0; i < n; ++i) {
    ASSERT_EQ(img[3 * i], img[3 * i + 1]);
    ASSERT_EQ(img[3 * i], img[3 * i + 2]);
  }

}

}  // namespace
}  // namespace ferry
