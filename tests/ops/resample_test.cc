// Tests of lib/ops/kernels/resample.h, PilResize: outputs recorded from Pillow 9.4, values worked out by
// hand, and invariants of Pillow's arithmetic (constant images, channel independence, row independence of
// a width-only resize, copies at equal size), on contiguous and strided inputs and outputs, and across
// threads. The comparison against Pillow on real photographs is a harness outside the test suite.
#include "ops/kernels/resample.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <iterator>
#include <opencv2/core.hpp>
#include <thread>
#include <vector>

#include "image/image_test_util.h"

namespace ferry::kernels {
namespace {

using ::ferry::testing::MatBytes;

// (x * 29 + y * 71 + c * 113 + x * y * 7) mod 256: busy enough to exercise negative lobes and clamping.
cv::Mat ResamplePattern(int w, int h, int channels) {
  cv::Mat m(h, w, CV_8UC(channels));
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      for (int c = 0; c < channels; ++c)
        m.ptr<uint8_t>(y)[x * channels + c] = uint8_t((x * 29 + y * 71 + c * 113 + x * y * 7) % 256);
    }
  }
  return m;
}

// Deterministic pseudo-random pixels (a 32-bit LCG).
cv::Mat Noise(int w, int h, int channels, uint32_t seed) {
  cv::Mat m(h, w, CV_8UC(channels));
  for (int y = 0; y < h; ++y) {
    uint8_t* p = m.ptr<uint8_t>(y);
    for (int i = 0; i < w * channels; ++i) {
      seed = seed * 1664525u + 1013904223u;
      p[i] = uint8_t(seed >> 24);
    }
  }
  return m;
}


cv::Mat Resize(const cv::Mat& src, int w, int h, Interp interp) {
  cv::Mat dst(h, w, src.type());
  PilResize(src, dst, interp);
  return dst;
}

constexpr Interp kAll[] = {Interp::kNearest, Interp::kBilinear, Interp::kBicubic};

// Recorded with /usr/bin/python3 (Pillow 9.4.0): Image.fromarray(pattern).resize(size, filter), where
// pattern is ResamplePattern() above as a numpy array (mode RGB or L), printed row by row.
TEST(PilResizeTest, MatchesRecordedPillowOutputs) {
  const cv::Mat rgb = ResamplePattern(9, 7, 3);
  const cv::Mat gray = ResamplePattern(4, 3, 1);
  EXPECT_EQ(MatBytes(Resize(rgb, 4, 3, Interp::kBicubic)),
            (std::vector<uint8_t>{85,  147, 135, 127, 114, 122, 151, 98,  120, 148, 115, 118,
                                  115, 141, 152, 111, 132, 129, 106, 114, 124, 127, 124, 116,
                                  146, 113, 136, 122, 149, 102, 110, 118, 136, 141, 115, 108}));
  EXPECT_EQ(MatBytes(Resize(rgb, 4, 3, Interp::kBilinear)),
            (std::vector<uint8_t>{90,  147, 133, 125, 115, 124, 149, 102, 120, 147, 114, 117,
                                  113, 136, 150, 111, 133, 126, 113, 113, 127, 123, 124, 114,
                                  145, 116, 135, 122, 145, 106, 112, 118, 132, 140, 114, 110}));
  // Upscaling: the bicubic overshoot is clamped at 0 in the corners.
  EXPECT_EQ(MatBytes(Resize(gray, 7, 5, Interp::kBicubic)),
            (std::vector<uint8_t>{0,   3,   21,  38, 54,  72,  82,  21,  30,  51,  68,  87,
                                  115, 130, 68,  80, 104, 125, 146, 170, 182, 117, 131, 158,
                                  192, 198, 116, 68, 144, 159, 188, 230, 226, 74,  0}));
  EXPECT_EQ(MatBytes(Resize(gray, 7, 5, Interp::kBilinear)),
            (std::vector<uint8_t>{0,   10,  27,  44, 60,  77,  87,  28,  40,  58,  76,  94,
                                  113, 124, 71,  84, 104, 125, 146, 166, 179, 114, 128, 151,
                                  174, 186, 121, 81, 142, 157, 182, 207, 213, 91,  15}));
  EXPECT_EQ(
      MatBytes(Resize(rgb, 4, 5, Interp::kNearest)),
      (std::vector<uint8_t>{29,  142, 255, 87,  200, 57,  145, 2,   115, 203, 60,  173, 185, 42,  155,
                            15,  128, 241, 101, 214, 71,  187, 44,  157, 7,   120, 233, 107, 220, 77,
                            207, 64,  177, 51,  164, 21,  85,  198, 55,  199, 56,  169, 57,  170, 27,
                            171, 28,  141, 241, 98,  211, 127, 240, 97,  13,  126, 239, 155, 12,  125}));
}

// Halving 2x2 -> 1x1: each pass has two taps at +-0.25 of the centre in input units (+-1/8 of the widened
// kernel), equal weights 1/2 for both filters, so the result is the exact mean (0 + 10 + 20 + 30) / 4.
TEST(PilResizeTest, HalvingAveragesByHand) {
  const cv::Mat src = (cv::Mat_<uint8_t>(2, 2) << 0, 10, 20, 30);
  for (Interp interp : {Interp::kBilinear, Interp::kBicubic}) {
    EXPECT_EQ(Resize(src, 1, 1, interp).at<uint8_t>(0, 0), 15);
  }
  // Nearest: source coordinate in / out * (0.5 + i) truncated, so 2 -> 1 picks index 1 on both axes.
  EXPECT_EQ(Resize(src, 1, 1, Interp::kNearest).at<uint8_t>(0, 0), 30);
}

// Nearest picks floor((i + 0.5) * in / out): 10 -> 4 reads 1, 3, 6, 8; 3 -> 7 reads 0, 0, 1, 1, 1, 2, 2.
TEST(PilResizeTest, NearestPicksPillowsSourcePixels) {
  cv::Mat ramp(1, 10, CV_8UC1);
  for (int x = 0; x < 10; ++x) ramp.at<uint8_t>(0, x) = uint8_t(x);
  EXPECT_EQ(MatBytes(Resize(ramp, 4, 1, Interp::kNearest)), (std::vector<uint8_t>{1, 3, 6, 8}));
  cv::Mat short_ramp = (cv::Mat_<uint8_t>(3, 1) << 0, 1, 2);
  EXPECT_EQ(MatBytes(Resize(short_ramp, 1, 7, Interp::kNearest)), (std::vector<uint8_t>{0, 0, 1, 1, 1, 2, 2}));
}

TEST(PilResizeTest, EqualSizeIsACopy) {
  const cv::Mat big = Noise(40, 30, 3, 7);
  const cv::Mat view = big(cv::Rect(3, 5, 17, 11));
  for (Interp interp : kAll) {
    EXPECT_EQ(MatBytes(Resize(view, 17, 11, interp)), MatBytes(view));
  }
}

// The weights of each output pixel are normalised to sum to one, and their quantisation error stays far
// below half a grey level, so a flat image stays flat.
TEST(PilResizeTest, ConstantImagesStayConstant) {
  const cv::Size sizes[] = {{1, 1}, {2, 3}, {7, 5}, {224, 224}, {640, 17}, {31, 480}};
  for (const uint8_t value : {uint8_t(0), uint8_t(1), uint8_t(128), uint8_t(254), uint8_t(255)}) {
    for (const int channels : {1, 3}) {
      const cv::Mat src(37, 53, CV_8UC(channels), cv::Scalar::all(value));
      for (const cv::Size& size : sizes) {
        for (Interp interp : kAll) {
          const std::vector<uint8_t> out = MatBytes(Resize(src, size.width, size.height, interp));
          ASSERT_EQ(out, std::vector<uint8_t>(out.size(), value))
              << size << " value " << int(value) << " channels " << channels << " interp " << int(interp);
        }
      }
    }
  }
}

// Pillow filters each band on its own with the same weights: an RGB resize is three L resizes.
TEST(PilResizeTest, ChannelsAreIndependent) {
  const cv::Mat rgb = Noise(61, 43, 3, 11);
  std::vector<cv::Mat> planes;
  cv::split(rgb, planes);
  const cv::Size sizes[] = {{24, 17}, {150, 97}, {61, 20}, {13, 43}, {1, 5}};
  for (const cv::Size& size : sizes) {
    for (Interp interp : kAll) {
      const cv::Mat out = Resize(rgb, size.width, size.height, interp);
      std::vector<cv::Mat> out_planes;
      cv::split(out, out_planes);
      for (int c = 0; c < 3; ++c) {
        EXPECT_EQ(MatBytes(out_planes[c]), MatBytes(Resize(planes[c], size.width, size.height, interp)))
            << size << " interp " << int(interp) << " channel " << c;
      }
    }
  }
}

// With the height unchanged Pillow runs only the horizontal pass, so each output row is the resize of the
// matching input row alone (and likewise columns when only the height changes).
TEST(PilResizeTest, OneAxisResizeFiltersRowsAlone) {
  const cv::Mat src = Noise(57, 19, 3, 5);
  for (Interp interp : {Interp::kBilinear, Interp::kBicubic}) {
    const cv::Mat wide = Resize(src, 130, 19, interp);
    const cv::Mat narrow = Resize(src, 20, 19, interp);
    for (int y = 0; y < src.rows; ++y) {
      EXPECT_EQ(MatBytes(wide.row(y)), MatBytes(Resize(src.row(y), 130, 1, interp))) << "row " << y;
      EXPECT_EQ(MatBytes(narrow.row(y)), MatBytes(Resize(src.row(y), 20, 1, interp))) << "row " << y;
    }
    const cv::Mat tall = Resize(src, 57, 40, interp);
    for (int x = 0; x < src.cols; x += 7) {
      EXPECT_EQ(MatBytes(tall.col(x)), MatBytes(Resize(src.col(x), 1, 40, interp))) << "column " << x;
    }
  }
}

// A strided source (a crop view) gives what its contiguous copy gives, and a strided destination (a view
// into a larger buffer) is written inside its own pixels only.
TEST(PilResizeTest, StridedSourceAndDestination) {
  for (const int channels : {1, 3}) {
    const cv::Mat big = Noise(300, 260, channels, 3);
    const cv::Mat view = big(cv::Rect(13, 7, 251, 233));
    const cv::Mat copy = view.clone();
    for (Interp interp : kAll) {
      for (const cv::Size& size : {cv::Size(224, 224), cv::Size(97, 300), cv::Size(251, 100)}) {
        cv::Mat canvas(size.height + 4, size.width + 6, big.type(), cv::Scalar::all(77));
        cv::Mat dst = canvas(cv::Rect(3, 2, size.width, size.height));
        PilResize(view, dst, interp);
        EXPECT_EQ(MatBytes(dst), MatBytes(Resize(copy, size.width, size.height, interp)))
            << size << " interp " << int(interp) << " channels " << channels;
        cv::Mat outside = canvas.clone();
        outside(cv::Rect(3, 2, size.width, size.height)).setTo(cv::Scalar::all(77));
        EXPECT_EQ(cv::countNonZero(outside.reshape(1) != 77), 0) << "wrote outside dst";
      }
    }
  }
}

// Sizes far apart: a long thin image to a single pixel and back, and extreme aspect changes.
TEST(PilResizeTest, ExtremeRatios) {
  const cv::Mat line = Noise(1000, 1, 3, 9);
  const cv::Mat dot = Resize(line, 1, 1, Interp::kBicubic);
  EXPECT_EQ(dot.total(), 1u);
  const cv::Mat back = Resize(dot, 1000, 3, Interp::kBicubic);
  const cv::Vec3b p = dot.at<cv::Vec3b>(0, 0);
  for (int y = 0; y < back.rows; ++y) {
    for (int x = 0; x < back.cols; ++x) ASSERT_EQ(back.at<cv::Vec3b>(y, x), p);
  }
  for (Interp interp : kAll) {
    const cv::Mat tall = Resize(line, 2, 900, interp);
    EXPECT_EQ(tall.rows, 900);
    EXPECT_EQ(MatBytes(tall.row(0)), MatBytes(tall.row(899)));  // one input row: every output row alike
  }
}

// The baseline (4-lane) kernels give the bytes of the kernels PilResize picks (8-lane AVX2 where the CPU
// has it), over sizes that exercise partial row blocks, odd widths and every tail of the vertical loop.
TEST(PilResizeTest, BaselineKernelsAgree) {
  for (const int channels : {1, 3}) {
    const cv::Mat big = Noise(211, 167, channels, 17);
    const cv::Mat view = big(cv::Rect(5, 3, 199, 157));
    const cv::Size sizes[] = {{224, 224}, {176, 176}, {37, 11},  {1, 1},
                              {600, 9},   {3, 500},   {199, 60}, {70, 157}};
    for (const cv::Size& size : sizes) {
      for (Interp interp : kAll) {
        cv::Mat fast(size, big.type()), base(size, big.type());
        internal::PilResizeForTesting(view, fast, interp, /*allow_avx2=*/true);
        internal::PilResizeForTesting(view, base, interp, /*allow_avx2=*/false);
        EXPECT_EQ(MatBytes(base), MatBytes(fast)) << size << " interp " << int(interp) << " channels " << channels;
      }
    }
  }
}

// Per-thread scratch: concurrent calls with different sizes give the single-threaded bytes.
TEST(PilResizeTest, ConcurrentCallsAgree) {
  const cv::Mat src = Noise(180, 150, 3, 21);
  const cv::Size sizes[] = {{96, 96}, {64, 64}, {250, 163}, {31, 90}, {180, 50}, {17, 150}};
  std::vector<std::vector<uint8_t>> expected;
  for (const cv::Size& size : sizes)
    expected.push_back(MatBytes(Resize(src, size.width, size.height, Interp::kBicubic)));
  std::vector<int> mismatches(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 3; ++round) {
        for (size_t i = 0; i < std::size(sizes); ++i) {
          const size_t k = (i + size_t(t) + size_t(round)) % std::size(sizes);
          if (MatBytes(Resize(src, sizes[k].width, sizes[k].height, Interp::kBicubic)) != expected[k]) {
            ++mismatches[t];
          }
        }
      }
    });
  }
  for (std::thread& th : threads) th.join();
  for (int t = 0; t < 4; ++t) EXPECT_EQ(mismatches[t], 0) << "thread " << t;
}

}  // namespace
}  // namespace ferry::kernels
