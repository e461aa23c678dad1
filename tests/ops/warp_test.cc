#include "ops/kernels/warp.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "image/image_test_util.h"

namespace ferry::kernels {
namespace {

using ::ferry::testing::MatBytes;
using ::ferry::testing::SameBytes;

constexpr Interp kAllInterps[] = {Interp::kNearest, Interp::kBilinear, Interp::kBicubic};

// The test pattern of the recorded constants below:
// value(x, y, c) = (37x + 61y + 101c + 13xy + 7) mod 256.
cv::Mat WarpPattern(int w, int h, int channels) {
  cv::Mat m(h, w, CV_8UC(channels));
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      for (int c = 0; c < channels; ++c) {
        m.ptr<uint8_t>(y)[x * channels + c] = uint8_t((x * 37 + y * 61 + c * 101 + x * y * 13 + 7) % 256);
      }
    }
  }
  return m;
}

cv::Mat Affine(const cv::Mat& src, std::array<double, 6> a, Interp interp, const uint8_t* fill,
               cv::Size size = {}) {
  cv::Mat dst(size.empty() ? src.size() : size, src.type());
  PilAffine(src, dst, a.data(), interp, fill);
  return dst;
}

cv::Mat Perspective(const cv::Mat& src, std::array<double, 8> a, Interp interp, const uint8_t* fill) {
  cv::Mat dst(src.size(), src.type());
  PilPerspective(src, dst, a.data(), interp, fill);
  return dst;
}

// ------------------------------------------------------------------------------------------------
// Invariants

TEST(WarpTest, IdentityIsExactForEveryInterpolation) {
  for (int channels : {1, 3}) {
    const cv::Mat src = WarpPattern(13, 9, channels);
    for (Interp interp : kAllInterps) {
      EXPECT_TRUE(SameBytes(Affine(src, {1, 0, 0, 0, 1, 0}, interp, nullptr), src)) << int(interp);
      EXPECT_TRUE(SameBytes(Perspective(src, {1, 0, 0, 0, 1, 0, 0, 0}, interp, nullptr), src)) << int(interp);
    }
  }
}

TEST(WarpTest, IntegerTranslationShiftsAndFills) {
  const uint8_t fill[3] = {1, 2, 3};
  const cv::Mat src = WarpPattern(11, 8, 3);
  for (Interp interp : kAllInterps) {
    // Output (x, y) reads source (x + 3, y - 2).
    const cv::Mat out = Affine(src, {1, 0, 3, 0, 1, -2}, interp, fill);
    for (int y = 0; y < out.rows; ++y) {
      for (int x = 0; x < out.cols; ++x) {
        const bool inside = x + 3 < src.cols && y - 2 >= 0;
        const cv::Vec3b expected = inside ? src.at<cv::Vec3b>(y - 2, x + 3) : cv::Vec3b(1, 2, 3);
        ASSERT_EQ(out.at<cv::Vec3b>(y, x), expected) << int(interp) << " " << x << "," << y;
      }
    }
  }
}

TEST(WarpTest, MirrorIsExact) {
  const cv::Mat src = WarpPattern(10, 7, 3);
  cv::Mat flipped;
  cv::flip(src, flipped, 1);
  for (Interp interp : kAllInterps) {
    EXPECT_TRUE(SameBytes(Affine(src, {-1, 0, 10, 0, 1, 0}, interp, nullptr), flipped)) << int(interp);
  }
}

TEST(WarpTest, ConstantImageGivesOnlyConstantOrFill) {
  const uint8_t fill[1] = {9};
  const cv::Mat src(40, 30, CV_8UC1, cv::Scalar(200));
  for (Interp interp : kAllInterps) {
    for (double angle : {13.0, -135.0, 77.7}) {
      const cv::Mat out = PilRotate(src, angle, interp, true, nullptr, fill);
      int constant = 0, filled = 0;
      for (int y = 0; y < out.rows; ++y) {
        for (int x = 0; x < out.cols; ++x) {
          const uint8_t v = out.at<uint8_t>(y, x);
          ASSERT_TRUE(v == 200 || v == 9) << int(v);
          (v == 200 ? constant : filled)++;
        }
      }
      EXPECT_GT(constant, 0);
      EXPECT_GT(filled, 0);
    }
  }
}

TEST(WarpTest, EverythingOutsideGivesFillAndNullFillIsZero) {
  const uint8_t fill[3] = {7, 8, 9};
  const cv::Mat src = WarpPattern(9, 6, 3);
  for (Interp interp : kAllInterps) {
    EXPECT_TRUE(
        SameBytes(Affine(src, {1, 0.2, 500, 0, 1, 0}, interp, fill), cv::Mat(6, 9, CV_8UC3, cv::Scalar(7, 8, 9))));
    EXPECT_TRUE(SameBytes(Affine(src, {1, 0, -500, 0, 1, 0}, interp, nullptr), cv::Mat::zeros(6, 9, CV_8UC3)));
    EXPECT_TRUE(SameBytes(Perspective(src, {1, 0, 0, 0, 1, 900, 0, 0}, interp, fill),
                     cv::Mat(6, 9, CV_8UC3, cv::Scalar(7, 8, 9))));
  }
}

TEST(WarpTest, OutputSizeIsTheCallers) {
  // Image.transform with a larger canvas: a 2x upscale of the pattern's top-left quarter.
  const cv::Mat src = WarpPattern(8, 6, 1);
  const cv::Mat out = Affine(src, {0.5, 0, 0, 0, 0.5, 0}, Interp::kNearest, nullptr, {16, 12});
  ASSERT_EQ(out.size(), cv::Size(16, 12));
  for (int y = 0; y < 12; ++y) {
    for (int x = 0; x < 16; ++x) ASSERT_EQ(out.at<uint8_t>(y, x), src.at<uint8_t>(y / 2, x / 2));
  }
}

TEST(WarpTest, NonContiguousViews) {
  const cv::Mat big = WarpPattern(40, 30, 3);
  const cv::Mat src = big(cv::Rect(5, 4, 17, 13));
  const cv::Mat packed = src.clone();
  const auto coeffs = InverseAffineMatrix(8.5, 6.5, 21.0, 1, -2, 1.1, 8.0, -3.0);
  for (Interp interp : kAllInterps) {
    cv::Mat canvas(20, 25, CV_8UC3, cv::Scalar::all(0));
    cv::Mat dst = canvas(cv::Rect(3, 2, 17, 13));
    PilAffine(src, dst, coeffs.data(), interp, nullptr);
    EXPECT_TRUE(SameBytes(dst, Affine(packed, coeffs, interp, nullptr))) << int(interp);
    EXPECT_EQ(canvas.at<cv::Vec3b>(0, 0), cv::Vec3b(0, 0, 0));  // nothing written outside the view
    EXPECT_TRUE(SameBytes(PilRotate(src, 33, interp, true, nullptr, nullptr),
                     PilRotate(packed, 33, interp, true, nullptr, nullptr)));
  }
}

TEST(WarpTest, ReadsNothingPastTheSource) {
  // The source is exactly w * h * C bytes (no allocator slack, so AddressSanitizer sees a read
  // past it) and every mapping below samples its last pixel, with every engine.
  for (int channels : {1, 3}) {
    const int w = 9, h = 7;
    std::vector<uint8_t> bytes(size_t(w) * h * channels);
    for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = uint8_t(i * 7);
    const cv::Mat src(h, w, CV_8UC(channels), bytes.data());
    const cv::Mat last_px = src(cv::Rect(w - 1, h - 1, 1, 1));
    for (Interp interp : kAllInterps) {
      // 180-degree turns: the scale engine (no shear), the fixed-point one (a tiny shear) and the
      // double one (a far-away corner), then a perspective map.
      for (const std::array<double, 6>& a : {std::array<double, 6>{-1, 0, double(w), 0, -1, double(h)},
                                             std::array<double, 6>{-1, 1e-9, double(w), 0, -1, double(h)},
                                             std::array<double, 6>{-1, 1e4, w - 5000.0, 0, -1, double(h)}}) {
        const cv::Mat out = Affine(src, a, interp, nullptr);
        EXPECT_TRUE(SameBytes(out(cv::Rect(0, 0, 1, 1)), last_px)) << int(interp) << " " << a[1];
      }
      const cv::Mat out = Perspective(src, {-1, 0, double(w), 0, -1, double(h), 0, 0}, interp, nullptr);
      EXPECT_TRUE(SameBytes(out(cv::Rect(0, 0, 1, 1)), last_px)) << int(interp);
    }
  }
}

// ------------------------------------------------------------------------------------------------
// Rotation: Pillow's transposes and sizes.

TEST(WarpTest, RotateRightAnglesAreTransposes) {
  for (int channels : {1, 3}) {
    const cv::Mat src = WarpPattern(7, 5, channels);
    cv::Mat ccw, cw, half;
    cv::rotate(src, ccw, cv::ROTATE_90_COUNTERCLOCKWISE);
    cv::rotate(src, cw, cv::ROTATE_90_CLOCKWISE);
    cv::flip(src, half, -1);
    for (Interp interp : kAllInterps) {
      EXPECT_TRUE(SameBytes(PilRotate(src, 90, interp, true, nullptr, nullptr), ccw));
      EXPECT_TRUE(SameBytes(PilRotate(src, -90, interp, true, nullptr, nullptr), cw));
      EXPECT_TRUE(SameBytes(PilRotate(src, 270, interp, true, nullptr, nullptr), cw));
      EXPECT_TRUE(SameBytes(PilRotate(src, -450, interp, true, nullptr, nullptr), cw));
      EXPECT_TRUE(SameBytes(PilRotate(src, 180, interp, false, nullptr, nullptr), half));
      EXPECT_TRUE(SameBytes(PilRotate(src, -180, interp, true, nullptr, nullptr), half));
      EXPECT_TRUE(SameBytes(PilRotate(src, 0, interp, true, nullptr, nullptr), src));
      EXPECT_TRUE(SameBytes(PilRotate(src, 720, interp, false, nullptr, nullptr), src));
    }
  }
  // Square images take the transpose without expand too.
  const cv::Mat square = WarpPattern(6, 6, 3);
  cv::Mat ccw;
  cv::rotate(square, ccw, cv::ROTATE_90_COUNTERCLOCKWISE);
  EXPECT_TRUE(SameBytes(PilRotate(square, 90, Interp::kBicubic, false, nullptr, nullptr), ccw));
}

TEST(WarpTest, RotateExpandSizes) {
  // Image.new("L", size).rotate(angle, expand=True[, center=...]).size in Pillow 9.4.
  const cv::Mat a(50, 100, CV_8UC1, cv::Scalar(0)), b(224, 224, CV_8UC1, cv::Scalar(0)),
      c(37, 101, CV_8UC1, cv::Scalar(0));
  EXPECT_EQ(PilRotate(a, 45, Interp::kNearest, true, nullptr, nullptr).size(), cv::Size(108, 108));
  EXPECT_EQ(PilRotate(b, -135, Interp::kBilinear, true, nullptr, nullptr).size(), cv::Size(318, 318));
  EXPECT_EQ(PilRotate(c, 90, Interp::kBilinear, true, nullptr, nullptr).size(), cv::Size(37, 101));
  const double origin[2] = {0, 0};
  EXPECT_EQ(PilRotate(c, 10, Interp::kBilinear, true, origin, nullptr).size(), cv::Size(107, 54));
  EXPECT_EQ(PilRotate(c, 10, Interp::kBilinear, false, origin, nullptr).size(), cv::Size(101, 37));
}

// ------------------------------------------------------------------------------------------------
// Outputs recorded from Pillow 9.4.0 on WarpPattern() images (/tmp/warp/record_constants.py:
// Image.fromarray(pattern) then .rotate / .transform with the same arguments; fill (10, 20, 30)
// for RGB and 200 for L).

constexpr uint8_t kRgbFill[3] = {10, 20, 30};
constexpr uint8_t kGrayFill[1] = {200};

TEST(WarpTest, RecordedRotate) {
  const cv::Mat rgb = WarpPattern(6, 5, 3), gray = WarpPattern(7, 5, 1);
  // rgb.rotate(30, Image.BILINEAR, fillcolor=(10, 20, 30))
  EXPECT_EQ(MatBytes(PilRotate(rgb, 30, Interp::kBilinear, false, nullptr, kRgbFill)),
            std::vector<uint8_t>({10,  20,  30,  88,  189, 34,  121, 201, 68,  86,  63,  156, 54,  151, 50,
                                  10,  20,  30,  37,  138, 239, 101, 133, 95,  185, 60,  131, 113, 125, 127,
                                  130, 163, 97,  138, 81,  84,  68,  169, 78,  147, 145, 93,  224, 82,  170,
                                  95,  123, 41,  195, 104, 141, 127, 121, 73,  105, 206, 51,  160, 93,  127,
                                  120, 122, 134, 116, 102, 75,  91,  93,  147, 109, 168, 55,  10,  20,  30,
                                  153, 52,  150, 51,  143, 120, 165, 31,  111, 39,  89,  190, 10,  20,  30}));
  // rgb.rotate(-135, Image.BICUBIC, expand=True, fillcolor=(10, 20, 30)): 8x9
  const cv::Mat expanded = PilRotate(rgb, -135, Interp::kBicubic, true, nullptr, kRgbFill);
  EXPECT_EQ(expanded.size(), cv::Size(8, 9));
  EXPECT_EQ(
      MatBytes(expanded),
      std::vector<uint8_t>(
          {10,  20,  30,  10,  20,  30,  10,  20,  30,  10, 20,  30,  10,  20,  30,  10,  20,  30,  10,  20,
           30,  10,  20,  30,  10,  20,  30,  10,  20,  30, 10,  20,  30,  124, 198, 41,  234, 76,  182, 10,
           20,  30,  10,  20,  30,  10,  20,  30,  10,  20, 30,  10,  20,  30,  163, 0,   160, 83,  134, 56,
           45,  86,  213, 154, 161, 102, 10,  20,  30,  10, 20,  30,  10,  20,  30,  0,   211, 102, 53,  63,
           186, 100, 160, 21,  171, 72,  197, 164, 143, 54, 62,  163, 23,  10,  20,  30,  197, 17,  143, 149,
           149, 67,  233, 18,  188, 93,  115, 21,  242, 49, 192, 130, 137, 85,  41,  160, 212, 0,   100, 235,
           10,  20,  30,  63,  156, 9,   197, 162, 112, 51, 212, 75,  234, 52,  152, 109, 144, 33,  50,  166,
           159, 10,  20,  30,  10,  20,  30,  10,  20,  30, 149, 74,  98,  0,   121, 166, 130, 87,  125, 93,
           255, 37,  10,  20,  30,  10,  20,  30,  10,  20, 30,  10,  20,  30,  10,  20,  30,  155, 70,  103,
           193, 0,   109, 10,  20,  30,  10,  20,  30,  10, 20,  30,  10,  20,  30,  10,  20,  30,  10,  20,
           30,  10,  20,  30,  10,  20,  30,  10,  20,  30, 10,  20,  30,  10,  20,  30}));
  // rgb.rotate(90, Image.NEAREST, fillcolor=(10, 20, 30)): not square, no expand: an affine map.
  EXPECT_EQ(MatBytes(PilRotate(rgb, 90, Interp::kNearest, false, nullptr, kRgbFill)),
            std::vector<uint8_t>({192, 37,  138, 62,  163, 8,   188, 33,  134, 58,  159, 4,   184, 29,  130,
                                  10,  20,  30,  155, 0,   101, 12,  113, 214, 125, 226, 71,  238, 83,  184,
                                  95,  196, 41,  10,  20,  30,  118, 219, 64,  218, 63,  164, 62,  163, 8,
                                  162, 7,   108, 6,   107, 208, 10,  20,  30,  81,  182, 27,  168, 13,  114,
                                  255, 100, 201, 86,  187, 32,  173, 18,  119, 10,  20,  30,  44,  145, 246,
                                  118, 219, 64,  192, 37,  138, 10,  111, 212, 84,  185, 30,  10,  20,  30}));
  // gray.rotate(17, Image.BICUBIC, center=(1, 2), fillcolor=200)
  const double center[2] = {1, 2};
  EXPECT_EQ(MatBytes(PilRotate(gray, 17, Interp::kBicubic, false, center, kGrayFill)),
            std::vector<uint8_t>({15,  74,  158, 163, 0,   127, 221, 61,  155, 236, 84, 134,
                                  151, 195, 104, 162, 184, 132, 246, 128, 74,  189, 83, 22,
                                  103, 18,  151, 200, 200, 207, 98,  200, 200, 200, 200}));
}

TEST(WarpTest, RecordedRandAugmentShear) {
  const cv::Mat rgb = WarpPattern(6, 5, 3);
  // torchvision's ShearX(0.6): F.affine(..., shear=[degrees(atan(0.6)), 0], center=[0, 0]). Pillow
  // gets the matrix [1.0, 0.6, 0.0, -0.0, 1.0, 0.0].
  const auto m = InverseAffineMatrix(0, 0, 0, 0, 0, 1, std::atan(0.6) * 180 / M_PI, 0);
  EXPECT_EQ(m, (std::array<double, 6>{1.0, 0.6, 0.0, -0.0, 1.0, 0.0}));
  EXPECT_EQ(MatBytes(Affine(rgb, m, Interp::kNearest, kRgbFill)),
            std::vector<uint8_t>({7,   108, 209, 44,  145, 246, 81,  182, 27,  118, 219, 64,  155, 0,   101,
                                  192, 37,  138, 118, 219, 64,  168, 13,  114, 218, 63,  164, 12,  113, 214,
                                  62,  163, 8,   10,  20,  30,  255, 100, 201, 62,  163, 8,   125, 226, 71,
                                  188, 33,  134, 10,  20,  30,  10,  20,  30,  86,  187, 32,  162, 7,   108,
                                  238, 83,  184, 58,  159, 4,   10,  20,  30,  10,  20,  30,  6,   107, 208,
                                  95,  196, 41,  184, 29,  130, 10,  20,  30,  10,  20,  30,  10,  20,  30}));
  EXPECT_EQ(MatBytes(Affine(rgb, m, Interp::kBicubic, kRgbFill)),
            std::vector<uint8_t>({15,  116, 233, 58,  159, 183, 95,  212, 3,   132, 156, 78,  171, 0,   117,
                                  197, 42,  143, 108, 230, 54,  159, 30,  105, 230, 52,  155, 28,  104, 226,
                                  55,  158, 29,  10,  20,  30,  255, 36,  201, 158, 131, 104, 61,  226, 7,
                                  164, 137, 110, 10,  20,  30,  10,  20,  30,  99,  174, 24,  177, 0,   123,
                                  226, 96,  172, 43,  165, 0,   10,  20,  30,  10,  20,  30,  48,  56,  211,
                                  44,  199, 83,  162, 84,  92,  10,  20,  30,  10,  20,  30,  10,  20,  30}));
}

TEST(WarpTest, RecordedNearestAffineEngines) {
  const cv::Mat gray = WarpPattern(7, 5, 1);
  // ImagingScaleAffine: transform(AFFINE, [0.6, 0, 0.3, 0, 0.7, -0.2], NEAREST, fillcolor=200)
  EXPECT_EQ(MatBytes(Affine(gray, {0.6, 0, 0.3, 0, 0.7, -0.2}, Interp::kNearest, kGrayFill)),
            std::vector<uint8_t>({7,   44,  44, 81,  118, 118, 155, 7,   44, 44,  81,  118,
                                  118, 155, 68, 118, 118, 168, 218, 218, 12, 129, 192, 192,
                                  255, 62,  62, 125, 129, 192, 192, 255, 62, 62,  125}));
  // The double-precision engine (corners beyond +-32768):
  // transform(AFFINE, [10000, 0.3, -4997.5, 0.2, 1, 0.1], NEAREST, fillcolor=200)
  EXPECT_EQ(MatBytes(Affine(gray, {10000.0, 0.3, -4997.5, 0.2, 1.0, 0.1}, Interp::kNearest, kGrayFill)),
            std::vector<uint8_t>({81,  200, 200, 200, 200, 200, 200, 168, 200, 200, 200, 200,
                                  200, 200, 62,  200, 200, 200, 200, 200, 200, 162, 200, 200,
                                  200, 200, 200, 200, 6,   200, 200, 200, 200, 200, 200}));
}

TEST(WarpTest, RecordedPerspective) {
  const cv::Mat rgb = WarpPattern(6, 5, 3), gray = WarpPattern(7, 5, 1);
  const std::array<double, 8> p = {1.1, 0.2, -1.0, -0.1, 0.9, 0.5, 0.03, -0.02};
  EXPECT_EQ(MatBytes(Perspective(rgb, p, Interp::kBilinear, kRgbFill)),
            std::vector<uint8_t>({10,  20,  30,  32,  133, 164, 64,  156, 175, 92,  181, 38,  121, 197, 67,
                                  153, 9,   99,  10,  20,  30,  101, 182, 47,  143, 122, 89,  179, 51,  125,
                                  142, 94,  156, 72,  82,  148, 147, 171, 93,  159, 101, 124, 230, 80,  176,
                                  142, 120, 88,  97,  159, 102, 92,  135, 108, 208, 53,  154, 37,  108, 189,
                                  101, 172, 61,  131, 62,  77,  172, 144, 118, 149, 100, 95,  251, 96,  197,
                                  94,  164, 40,  135, 50,  123, 78,  87,  156, 168, 127, 114, 85,  130, 31}));
  EXPECT_EQ(MatBytes(Perspective(gray, p, Interp::kNearest, kGrayFill)),
            std::vector<uint8_t>({200, 7,   44,  81,  118, 155, 192, 200, 68,  118, 168, 218,
                                  12,  62,  129, 192, 255, 62,  125, 12,  62,  190, 10,  86,
                                  162, 238, 188, 251, 251, 84,  173, 6,   238, 58,  134}));
  EXPECT_EQ(MatBytes(Perspective(gray, p, Interp::kBicubic, kGrayFill)),
            std::vector<uint8_t>({200, 27,  66,  96,  120, 166, 200, 200, 104, 148, 209, 159,
                                  32,  109, 153, 154, 255, 149, 50,  53,  122, 247, 18,  90,
                                  137, 208, 155, 222, 255, 88,  142, 81,  188, 64,  116}));
}

TEST(WarpTest, RecordedPerspectiveNanPoints) {
  // [1, 0, -0.5, 0, 0, 0, -2, 0] makes column 0's source point 0/0: Pillow fills it with NEAREST
  // and writes 0 with BILINEAR / BICUBIC; every other column maps to u < 0 (fill).
  const cv::Mat gray = WarpPattern(7, 5, 1);
  const std::array<double, 8> p = {1, 0, -0.5, 0, 0, 0, -2.0, 0.0};
  EXPECT_TRUE(
      SameBytes(Perspective(gray, p, Interp::kNearest, kGrayFill), cv::Mat(5, 7, CV_8UC1, cv::Scalar(200))));
  cv::Mat expected(5, 7, CV_8UC1, cv::Scalar(200));
  expected.col(0).setTo(0);
  EXPECT_TRUE(SameBytes(Perspective(gray, p, Interp::kBilinear, kGrayFill), expected));
  EXPECT_TRUE(SameBytes(Perspective(gray, p, Interp::kBicubic, kGrayFill), expected));
}

// ------------------------------------------------------------------------------------------------
// Parameter helpers, against torchvision 0.14's values (repr() of its Python floats).

TEST(WarpTest, InverseAffineMatrixMatchesTorchvision) {
  // _get_inverse_affine_matrix([112.0, 112.0], 30.0, [5, -3], 1.2, [10.0, -5.0])
  const std::array<double, 6> expected = {0.6370850630356901,   0.5374919489360557, -21.1255748092058,
                                          -0.47980617096383266, 0.6852342266845639, 93.44679129415096};
  const auto m = InverseAffineMatrix(112, 112, 30, 5, -3, 1.2, 10, -5);
  for (int i = 0; i < 6; ++i) EXPECT_DOUBLE_EQ(m[i], expected[i]) << i;
  // TranslateX(-17) about the default centre: a pure shift (Pillow's scale engine).
  EXPECT_EQ(InverseAffineMatrix(112, 112, 0, -17, 0, 1, 0, 0), (std::array<double, 6>{1, 0, 17, -0.0, 1, 0}));
}

TEST(WarpTest, PerspectiveCoeffsMatchTorchvisionBitForBit) {
  // _get_perspective_coeffs([[0, 0], [223, 0], [223, 223], [0, 223]],
  //                         [[10, 5], [215, 12], [200, 220], [3, 210]])
  EXPECT_EQ(PerspectiveCoeffs({{{0, 0}, {223, 0}, {223, 223}, {0, 223}}},
                              {{{10, 5}, {215, 12}, {200, 220}, {3, 210}}}),
            (std::array<double, 8>{1.1045176982879639, 0.03771524131298065, -11.233762741088867,
                                   -0.035694610327482224, 1.0453449487686157, -4.869794845581055,
                                   8.711293048691005e-05, -0.00018177895981352776}));
  // Identical quadrilaterals: float32 QR leaves torchvision's residue, which is kept.
  const std::array<cv::Point2d, 4> q = {{{0, 0}, {99, 0}, {99, 79}, {0, 79}}};
  EXPECT_EQ(PerspectiveCoeffs(q, q),
            (std::array<double, 8>{0.9999998807907104, -2.7852030370922876e-07, 2.179113835154567e-05, 0.0,
                                   0.9999997615814209, -3.998469821908657e-07, -2.3459276188297906e-10,
                                   -2.8675393171084806e-09}));
}

TEST(WarpTest, DegeneratePerspectiveGivesNan) {
  // torchvision raises (torch.linalg.lstsq: rank-deficient) for collinear points.
  const std::array<cv::Point2d, 4> line = {{{0, 0}, {1, 0}, {2, 0}, {3, 0}}};
  for (double c : PerspectiveCoeffs(line, line)) EXPECT_TRUE(std::isnan(c));
}

}  // namespace
}  // namespace ferry::kernels
