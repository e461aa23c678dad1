// Helpers shared by the image tests (tests/image/*_test.cc): the default pixel limit,
// the spec and pixel comparisons they all use, and EXIF orientation by definition.
#ifndef FERRY_TESTS_IMAGE_IMAGE_TEST_UTIL_H_
#define FERRY_TESTS_IMAGE_IMAGE_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <opencv2/core.hpp>

#include "ferry/pipeline_spec.h"
#include "ops/pipeline.h"

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

// A uint8 image's pixels, row by row, without the row padding.
inline std::vector<uint8_t> MatBytes(const cv::Mat& m) {
  std::vector<uint8_t> out;
  for (int y = 0; y < m.rows; ++y) out.insert(out.end(), m.ptr<uint8_t>(y), m.ptr<uint8_t>(y) + m.cols * m.channels());
  return out;
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

// A uint8 spec of size x size outputs: Resize(size) + CenterCrop(size), or
// RandomResizedCrop(size) (rrc), optionally with a flip.
inline PipelineSpec Uint8Spec(int size, bool rrc = false, double hflip = 0) {
  PipelineSpec s;
  const std::string n = std::to_string(size);
  if (rrc) {
    s.Add("random_resized_crop", "{\"size\":" + n + "}");
  } else {
    s.Add("resize", "{\"size\":" + n + "}");
    s.Add("center_crop", "{\"size\":" + n + "}");
  }
  if (hflip > 0) s.Add("hflip", "{\"p\":" + std::to_string(hflip) + "}");
  s.output = PipelineSpec::Output::kUint8NHWC;
  return s;
}

// Bytes of one output row of `spec` (which must compile).
inline size_t SampleBytes(const PipelineSpec& spec) { return (*Pipeline::Compile(spec))->sample_bytes(); }

// A compiled pipeline with the spec it came from (the tests' SampleProcessor).
class SampleProcessor {
 public:
  explicit SampleProcessor(const PipelineSpec& spec) : spec_(spec), p_(*Pipeline::Compile(spec)) {}
  const PipelineSpec& spec() const { return spec_; }
  size_t sample_bytes() const { return p_->sample_bytes(); }
  Status Process(std::string_view encoded, uint64_t seed, uint64_t epoch, int64_t index, void* out,
                 int64_t* decoded_ns = nullptr) const {
    return p_->Process(encoded, seed, epoch, index, out, decoded_ns);
  }

 private:
  PipelineSpec spec_;
  std::shared_ptr<const Pipeline> p_;
};

}  // namespace ferry::testing

#endif  // FERRY_TESTS_IMAGE_IMAGE_TEST_UTIL_H_
