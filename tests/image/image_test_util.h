// Helpers shared by the image tests (tests/image/*_test.cc): the default pixel limit,
// the spec and pixel comparisons they all use, and EXIF orientation by definition.
#ifndef FERRY_TESTS_IMAGE_IMAGE_TEST_UTIL_H_
#define FERRY_TESTS_IMAGE_IMAGE_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>

#include <opencv2/core.hpp>

#include "ferry/pipeline_spec.h"

namespace ferry::testing {

inline constexpr int64_t kDefaultMaxPixels = 100'000'000;

inline bool Contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

inline double MaxAbsDiff(const cv::Mat& a, const cv::Mat& b) {
  EXPECT_EQ(a.size(), b.size());
  EXPECT_EQ(a.type(), b.type());
  if (a.size() != b.size() || a.type() != b.type()) return 1e9;
  cv::Mat d;
  cv::absdiff(a, b, d);
  double mx = 0;
  cv::minMaxLoc(d.reshape(1), nullptr, &mx);
  return mx;
}

inline bool SameBytes(const cv::Mat& a, const cv::Mat& b) {
  return a.size() == b.size() && a.type() == b.type() && MaxAbsDiff(a, b) == 0;
}

// EXIF orientation applied by definition, pixel by pixel (independent of ops.cc):
// output pixel (x, y) of the displayed image reads stored pixel (sx, sy).
inline cv::Mat ReferenceOrient(const cv::Mat& stored, int o) {
  const int W = stored.cols, H = stored.rows;
  const bool swap = o >= 5;
  cv::Mat out(swap ? W : H, swap ? H : W, stored.type());
  const size_t px = stored.elemSize();
  for (int y = 0; y < out.rows; ++y) {
    for (int x = 0; x < out.cols; ++x) {
      int sx = x, sy = y;
      switch (o) {
        case 2: sx = W - 1 - x; break;                      // mirror left-right
        case 3: sx = W - 1 - x, sy = H - 1 - y; break;      // rotate 180
        case 4: sy = H - 1 - y; break;                      // mirror top-bottom
        case 5: sx = y, sy = x; break;                      // transpose
        case 6: sx = y, sy = H - 1 - x; break;              // rotate 90 clockwise
        case 7: sx = W - 1 - y, sy = H - 1 - x; break;      // transverse
        case 8: sx = W - 1 - y, sy = x; break;              // rotate 90 counter-clockwise
        default: break;
      }
      std::memcpy(out.ptr(y) + x * px, stored.ptr(sy) + sx * px, px);
    }
  }
  return out;
}

inline PipelineSpec Uint8Spec(int size, PipelineSpec::Geometry g = PipelineSpec::Geometry::kResizeCenterCrop) {
  PipelineSpec s;
  s.geometry = g;
  s.size = size;
  s.resize_shorter = size;
  s.output = PipelineSpec::Output::kUint8NHWC;
  return s;
}

}  // namespace ferry::testing

#endif  // FERRY_TESTS_IMAGE_IMAGE_TEST_UTIL_H_
