// Tests of lib/ops/kernels/color.h: contract checks (types, arguments, views), identities and
// invariants on synthetic images, and outputs of Pillow / torchvision recorded as constants.
// The bit-exactness checks over real photos live outside the suite (they need Python, Pillow and
// torchvision); these pin the same arithmetic on small inputs.
#include "ops/kernels/color.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <opencv2/core.hpp>
#include <random>
#include <vector>

#include "image/image_test_util.h"

namespace ferry::kernels {
namespace {

using ::ferry::testing::SameBytes;

// Recorded with /usr/bin/python3 on Debian 12 (Pillow 9.4.0, torchvision 0.14.1, torch 1.13.1) by
// applying torchvision.transforms.functional to Image.fromarray(TestImage()) (PIL ops) and to
// F.pil_to_tensor of it (tensor ops): F.adjust_hue(img, 0.21), F.adjust_hue(img, -0.47),
// F.adjust_saturation(img, 1.37), F.adjust_contrast(img, 0.6), F.adjust_brightness(img, 1.37),
// F.adjust_sharpness(img, 2.3), F.equalize, F.autocontrast, F.gaussian_blur(img, [3, 5], [0.8, 1.3]).
// The 5x4 RGB test image (TestImage()): value ((x * 53 + y * 101 + c * 91 + x * y * 11) * 7) % 256.
constexpr uint8_t kHue021[] = {182, 0,   250, 109, 214, 240, 230, 133, 99,  83,  188, 214, 204, 107, 74,
                               195, 98,  64,  131, 34,  0,   62,  166, 192, 186, 4,   253, 195, 98,  64,
                               134, 37,  3,   147, 50,  16,  160, 63,  29,  173, 76,  42,  186, 89,  55,
                               68,  172, 198, 163, 66,  33,  253, 156, 122, 81,  186, 212, 177, 80,  47};
constexpr uint8_t kHueMinus047[] = {250, 171, 0,   240, 109, 217, 99,  230, 130, 214, 83,  191, 74, 204, 104,
                                    64,  195, 95,  0,   131, 31,  192, 62,  169, 253, 174, 4,   64, 195, 95,
                                    3,   134, 34,  16,  147, 47,  29,  160, 60,  42,  173, 73,  55, 186, 86,
                                    198, 68,  175, 33,  163, 63,  122, 253, 153, 212, 81,  189, 47, 177, 77};
constexpr uint8_t kSaturation137[] = {
    0,   133, 255, 87, 255, 79,  255, 79,  250, 61,  233, 53,  232, 53,  224, 223, 44,  215, 159, 0,
    151, 39,  211, 31, 0,   136, 255, 223, 44,  215, 162, 0,   154, 175, 0,   167, 188, 9,   180, 201,
    22,  193, 214, 35, 206, 45,  217, 37,  191, 12,  183, 255, 102, 255, 59,  231, 51,  205, 26,  197};
constexpr uint8_t kContrast06[] = {46,  121, 196, 115, 190, 112, 184, 106, 181, 100, 175, 96,  169, 90, 165,
                                   163, 85,  160, 125, 46,  121, 87,  162, 83,  48,  123, 198, 163, 85, 160,
                                   127, 48,  123, 135, 56,  131, 142, 64,  139, 150, 72,  147, 158, 79, 154,
                                   90,  165, 87,  144, 66,  141, 198, 120, 195, 99,  174, 95,  153, 74, 149};
constexpr uint8_t kBrightness137[] = {
    0,   171, 255, 157, 255, 149, 255, 135, 255, 121, 255, 113, 255, 100, 255, 255, 87,  255, 179, 0,
    171, 91,  255, 83,  4,   175, 255, 255, 87,  255, 183, 4,   175, 201, 21,  193, 219, 39,  210, 237,
    57,  228, 254, 75,  246, 100, 255, 91,  223, 43,  215, 255, 167, 255, 119, 255, 110, 242, 63,  234};
constexpr uint8_t kSharpness23[] = {0,   125, 250, 115, 240, 109, 230, 99,  224, 89,  214, 83,  204, 73, 198,
                                    195, 64,  189, 131, 0,   99,  16,  255, 0,   0,   154, 255, 195, 64, 189,
                                    134, 3,   128, 147, 0,   141, 186, 0,   154, 199, 0,   167, 186, 55, 180,
                                    73,  198, 67,  163, 32,  157, 253, 122, 247, 87,  212, 81,  177, 46, 171};
constexpr uint8_t kEqualize[] = {0,   125, 250, 115, 240, 109, 230, 99,  224, 89,  214, 83,  204, 73, 198,
                                 195, 64,  189, 131, 0,   125, 67,  192, 61,  3,   128, 253, 195, 64, 189,
                                 134, 3,   128, 147, 16,  141, 160, 29,  154, 173, 42,  167, 186, 55, 180,
                                 73,  198, 67,  163, 32,  157, 253, 122, 247, 87,  212, 81,  177, 46, 171};
constexpr uint8_t kAutocontrast[] = {
    0,  132, 251, 115, 255, 63,  231, 105, 216, 89,  227, 29,  205, 77,  181, 196, 68,  170, 132, 0,
    85, 67,  204, 0,   3,   136, 255, 196, 68,  170, 135, 3,   88,  148, 17,  106, 161, 30,  123, 174,
    44, 140, 187, 58,  158, 73,  210, 7,   164, 34,  127, 255, 129, 247, 87,  225, 26,  178, 48,  146};
constexpr uint8_t kBlur3x5[] = {124, 76, 161, 129, 90, 143, 118, 120, 142, 113, 119, 172, 133, 100, 186,
                                128, 71, 154, 134, 82, 143, 126, 113, 146, 119, 116, 170, 136, 98,  181,
                                132, 58, 139, 144, 61, 144, 146, 89,  155, 139, 100, 165, 147, 87,  171,
                                137, 49, 131, 149, 50, 143, 152, 79,  158, 143, 94,  164, 150, 83,  168};
constexpr uint8_t kSaturationTensor137[] = {
    0,   133, 255, 88, 255, 80,  255, 79,  250, 62,  233, 54,  232, 53,  224, 223, 44,  215, 159, 0,
    151, 40,  211, 32, 0,   136, 255, 223, 44,  215, 162, 0,   154, 175, 0,   167, 188, 9,   180, 201,
    22,  193, 214, 35, 206, 46,  217, 38,  191, 12,  183, 255, 102, 255, 60,  231, 52,  205, 26,  197};
constexpr uint8_t kContrastTensor06[] = {
    46,  121, 196, 115, 190, 112, 184, 106, 181, 100, 175, 96,  169, 90,  165, 163, 85,  160, 125, 46,
    121, 86,  161, 83,  48,  123, 198, 163, 85,  160, 127, 48,  123, 134, 56,  131, 142, 64,  139, 150,
    71,  146, 158, 79,  154, 90,  165, 86,  144, 65,  140, 198, 119, 194, 98,  173, 95,  152, 74,  149};
constexpr uint8_t kBrightnessTensor137[] = {
    0,   171, 255, 157, 255, 149, 255, 135, 255, 121, 255, 113, 255, 100, 255, 255, 87,  255, 179, 0,
    171, 91,  255, 83,  4,   175, 255, 255, 87,  255, 183, 4,   175, 201, 21,  193, 219, 39,  210, 237,
    57,  228, 254, 75,  246, 100, 255, 91,  223, 43,  215, 255, 167, 255, 119, 255, 110, 242, 63,  234};
constexpr uint8_t kSharpnessTensor23[] = {
    0,  125, 250, 115, 240, 109, 230, 99,  224, 89,  214, 83,  204, 73,  198, 195, 64,  188, 131, 0,
    99, 16,  255, 0,   0,   154, 255, 195, 64,  188, 133, 2,   128, 147, 0,   141, 186, 0,   153, 199,
    0,  167, 186, 55,  180, 73,  198, 66,  163, 32,  157, 252, 122, 247, 86,  212, 81,  177, 45,  171};
constexpr uint8_t kAutocontrastTensor[] = {
    0,  132, 251, 115, 255, 63,  231, 105, 216, 89,  227, 29,  205, 77,  181, 196, 68,  170, 132, 0,
    85, 67,  204, 0,   3,   136, 255, 196, 68,  170, 135, 3,   88,  148, 17,  106, 161, 30,  123, 174,
    44, 140, 187, 58,  158, 73,  210, 7,   164, 34,  127, 255, 129, 247, 87,  225, 26,  178, 48,  146};

cv::Mat TestImage() {
  cv::Mat m(4, 5, CV_8UC3);
  for (int y = 0; y < 4; ++y) {
    for (int x = 0; x < 5; ++x) {
      for (int c = 0; c < 3; ++c)
        m.ptr<uint8_t>(y)[3 * x + c] = uint8_t((x * 53 + y * 101 + c * 91 + x * y * 11) * 7);
    }
  }
  return m;
}

cv::Mat FromBytes(const uint8_t* bytes, int rows, int cols, int type) {
  return cv::Mat(rows, cols, type, const_cast<uint8_t*>(bytes)).clone();
}

int MaxDiff(const cv::Mat& a, const cv::Mat& b) { return int(cv::norm(a, b, cv::NORM_INF)); }

cv::Mat RandomImage(int rows, int cols, int type, uint32_t seed) {
  cv::Mat m(rows, cols, type);
  std::mt19937 rng(seed);
  for (int y = 0; y < rows; ++y) {
    uint8_t* p = m.ptr<uint8_t>(y);
    for (size_t i = 0; i < size_t(cols) * m.channels(); ++i) p[i] = uint8_t(rng());
  }
  return m;
}

// A smooth, photo-like image (neighbouring values close), so that blurs and equalization have
// something other than noise to work on.
cv::Mat SmoothImage(int rows, int cols, int type) {
  cv::Mat m(rows, cols, type);
  for (int y = 0; y < rows; ++y) {
    uint8_t* p = m.ptr<uint8_t>(y);
    for (int x = 0; x < cols; ++x) {
      for (int c = 0; c < m.channels(); ++c) {
        p[x * m.channels() + c] =
            uint8_t(128 + 100 * std::sin(0.05 * x * (c + 1) + 0.08 * y) * std::cos(0.03 * y));
      }
    }
  }
  return m;
}

struct Op {
  const char* name;
  bool (*apply)(cv::Mat&);
};

// Every op with some argument, for the contract tests.
const Op kOps[] = {
    {"Grayscale3", [](cv::Mat& m) { return Grayscale(m, 3); }},
    {"AdjustBrightness", [](cv::Mat& m) { return AdjustBrightness(m, 1.3); }},
    {"AdjustContrast", [](cv::Mat& m) { return AdjustContrast(m, 0.7); }},
    {"AdjustSaturation", [](cv::Mat& m) { return AdjustSaturation(m, 1.6); }},
    {"AdjustSharpness", [](cv::Mat& m) { return AdjustSharpness(m, 1.9); }},
    {"AdjustHue", [](cv::Mat& m) { return AdjustHue(m, 0.3); }},
    {"Posterize", [](cv::Mat& m) { return Posterize(m, 3); }},
    {"Solarize", [](cv::Mat& m) { return Solarize(m, 100); }},
    {"Invert", [](cv::Mat& m) { return Invert(m); }},
    {"Equalize", [](cv::Mat& m) { return Equalize(m); }},
    {"Autocontrast", [](cv::Mat& m) { return Autocontrast(m); }},
    {"GaussianBlur", [](cv::Mat& m) { return GaussianBlur(m, 5, 3, 1.2, 0.7); }},
    {"AdjustBrightnessTensor", [](cv::Mat& m) { return AdjustBrightnessTensor(m, 1.3); }},
    {"AdjustContrastTensor", [](cv::Mat& m) { return AdjustContrastTensor(m, 0.7); }},
    {"AdjustSaturationTensor", [](cv::Mat& m) { return AdjustSaturationTensor(m, 1.6); }},
    {"AdjustSharpnessTensor", [](cv::Mat& m) { return AdjustSharpnessTensor(m, 1.9); }},
    {"AutocontrastTensor", [](cv::Mat& m) { return AutocontrastTensor(m); }},
};

TEST(ColorTest, RefusesOtherTypesAndLeavesThemAlone) {
  for (const Op& op : kOps) {
    for (int type : {CV_8UC4, CV_8UC2, CV_16UC3, CV_32FC3}) {
      cv::Mat m(6, 7, type, cv::Scalar::all(9));
      const cv::Mat before = m.clone();
      EXPECT_FALSE(op.apply(m)) << op.name << " type " << type;
      EXPECT_TRUE(SameBytes(m, before)) << op.name;
    }
    cv::Mat empty;
    EXPECT_FALSE(op.apply(empty)) << op.name;
  }
}

TEST(ColorTest, RefusesArgumentsTorchvisionRejects) {
  const cv::Mat img = TestImage();
  cv::Mat m = img.clone();
  EXPECT_FALSE(Grayscale(m, 2));
  EXPECT_FALSE(AdjustHue(m, 0.51));
  EXPECT_FALSE(AdjustHue(m, -0.5001));
  EXPECT_FALSE(AdjustHue(m, NAN));
  EXPECT_FALSE(Posterize(m, -1));
  EXPECT_FALSE(Posterize(m, 9));
  EXPECT_FALSE(Solarize(m, NAN));
  EXPECT_FALSE(AdjustBrightness(m, INFINITY));
  EXPECT_FALSE(AdjustSaturationTensor(m, NAN));
  EXPECT_FALSE(GaussianBlur(m, 4, 3, 1, 1));   // even
  EXPECT_FALSE(GaussianBlur(m, 3, 0, 1, 1));   // empty
  EXPECT_FALSE(GaussianBlur(m, 3, 3, 0, 1));   // sigma 0
  EXPECT_FALSE(GaussianBlur(m, 11, 3, 1, 1));  // pad 5 >= 5 columns
  EXPECT_FALSE(GaussianBlur(m, 3, 9, 1, 1));   // pad 4 >= 4 rows
  EXPECT_TRUE(SameBytes(m, img));
  EXPECT_TRUE(GaussianBlur(m, 9, 7, 1, 1));  // pads 4 and 3: the largest torch accepts
  cv::Mat deg(3, 3, CV_8UC3);
  EXPECT_FALSE(Blend(deg, m, 0.5));  // size mismatch
}

// A view (ROI) is processed as its contiguous copy would be, and nothing outside it is written.
TEST(ColorTest, ViewsMatchContiguousCopiesAndStayInside) {
  for (int type : {CV_8UC3, CV_8UC1}) {
    const cv::Mat parent = RandomImage(40, 53, type, 7);
    for (const Op& op : kOps) {
      cv::Mat big = parent.clone();
      cv::Mat view = big(cv::Rect(5, 3, 37, 29));
      cv::Mat copy = view.clone();
      ASSERT_TRUE(op.apply(view)) << op.name;
      ASSERT_TRUE(op.apply(copy)) << op.name;
      EXPECT_TRUE(SameBytes(view, copy)) << op.name;
      cv::Mat outside = big.clone();
      parent(cv::Rect(5, 3, 37, 29)).copyTo(outside(cv::Rect(5, 3, 37, 29)));
      EXPECT_TRUE(SameBytes(outside, parent)) << op.name << " wrote outside its view";
    }
  }
}

TEST(ColorTest, RecordedPillowOutputs) {
  struct Case {
    const char* name;
    bool (*apply)(cv::Mat&);
    const uint8_t* expected;
  };
  const Case cases[] = {
      {"hue 0.21", [](cv::Mat& m) { return AdjustHue(m, 0.21); }, kHue021},
      {"hue -0.47", [](cv::Mat& m) { return AdjustHue(m, -0.47); }, kHueMinus047},
      {"saturation 1.37", [](cv::Mat& m) { return AdjustSaturation(m, 1.37); }, kSaturation137},
      {"contrast 0.6", [](cv::Mat& m) { return AdjustContrast(m, 0.6); }, kContrast06},
      {"brightness 1.37", [](cv::Mat& m) { return AdjustBrightness(m, 1.37); }, kBrightness137},
      {"sharpness 2.3", [](cv::Mat& m) { return AdjustSharpness(m, 2.3); }, kSharpness23},
      {"equalize", [](cv::Mat& m) { return Equalize(m); }, kEqualize},
      {"autocontrast", [](cv::Mat& m) { return Autocontrast(m); }, kAutocontrast},
      {"tensor saturation 1.37", [](cv::Mat& m) { return AdjustSaturationTensor(m, 1.37); },
       kSaturationTensor137},
      {"tensor contrast 0.6", [](cv::Mat& m) { return AdjustContrastTensor(m, 0.6); }, kContrastTensor06},
      {"tensor brightness 1.37", [](cv::Mat& m) { return AdjustBrightnessTensor(m, 1.37); },
       kBrightnessTensor137},
      {"tensor sharpness 2.3", [](cv::Mat& m) { return AdjustSharpnessTensor(m, 2.3); }, kSharpnessTensor23},
      {"tensor autocontrast", [](cv::Mat& m) { return AutocontrastTensor(m); }, kAutocontrastTensor},
      {"tensor equalize", [](cv::Mat& m) { return EqualizeTensor(m); }, kEqualize},
  };
  for (const Case& c : cases) {
    cv::Mat m = TestImage();
    ASSERT_TRUE(c.apply(m)) << c.name;
    EXPECT_TRUE(SameBytes(m, FromBytes(c.expected, 4, 5, CV_8UC3))) << c.name;
  }
  // The blur's float sums may round differently from PyTorch's; here they do not.
  cv::Mat m = TestImage();
  ASSERT_TRUE(GaussianBlur(m, 3, 5, 0.8, 1.3));
  EXPECT_LE(MaxDiff(m, FromBytes(kBlur3x5, 4, 5, CV_8UC3)), 1);
}

TEST(ColorTest, GreyLevels) {
  // PIL's L: (19595 R + 38470 G + 7471 B + 32768) >> 16. torchvision's tensor grey truncates the
  // float sum 0.2989 R + 0.587 G + 0.114 B (values recorded from both).
  const uint8_t rgb[] = {255, 0, 0, 0, 255, 0, 0, 0, 255, 255, 255, 255, 10, 200, 30};
  const uint8_t pil[] = {76, 150, 29, 255, 124};
  const uint8_t tensor[] = {76, 149, 29, 254, 123};
  const cv::Mat img = FromBytes(rgb, 1, 5, CV_8UC3);
  cv::Mat g;
  ASSERT_TRUE(ToGray(img, g));
  EXPECT_TRUE(SameBytes(g, FromBytes(pil, 1, 5, CV_8UC1)));
  ASSERT_TRUE(ToGrayTensor(img, g));
  EXPECT_TRUE(SameBytes(g, FromBytes(tensor, 1, 5, CV_8UC1)));
  // In place (dst is src).
  cv::Mat same = img.clone();
  ASSERT_TRUE(ToGray(same, same));
  EXPECT_TRUE(SameBytes(same, FromBytes(pil, 1, 5, CV_8UC1)));
}

TEST(ColorTest, GrayscaleChannels) {
  const cv::Mat img = RandomImage(9, 11, CV_8UC3, 3);
  cv::Mat l;
  ASSERT_TRUE(ToGray(img, l));
  cv::Mat one = img.clone();
  ASSERT_TRUE(Grayscale(one, 1));
  EXPECT_TRUE(SameBytes(one, l));
  cv::Mat three = img.clone();
  const uint8_t* data = three.data;
  ASSERT_TRUE(Grayscale(three, 3));
  EXPECT_EQ(three.data, data);  // in place
  cv::Mat planes[3];
  cv::split(three, planes);
  for (const cv::Mat& p : planes) EXPECT_TRUE(SameBytes(p, l));
  cv::Mat grey = l.clone();
  ASSERT_TRUE(Grayscale(grey, 1));
  EXPECT_TRUE(SameBytes(grey, l));
  ASSERT_TRUE(Grayscale(grey, 3));
  EXPECT_TRUE(SameBytes(grey, three));
}

TEST(ColorTest, BlendEndpointsAndClipping) {
  const cv::Mat deg(2, 3, CV_8UC3, cv::Scalar(100, 0, 255));
  const cv::Mat img(2, 3, CV_8UC3, cv::Scalar(200, 255, 0));
  cv::Mat m = img.clone();
  ASSERT_TRUE(Blend(deg, m, 0.0));
  EXPECT_TRUE(SameBytes(m, deg));
  m = img.clone();
  ASSERT_TRUE(Blend(deg, m, 1.0));
  EXPECT_TRUE(SameBytes(m, img));
  m = img.clone();
  ASSERT_TRUE(Blend(deg, m, 2.0));  // 100 + 2 * 100, 0 + 2 * 255, 255 - 2 * 255: clipped
  EXPECT_TRUE(SameBytes(m, cv::Mat(2, 3, CV_8UC3, cv::Scalar(255, 255, 0))));
  m = img.clone();
  ASSERT_TRUE(Blend(deg, m, -1.0));  // 0, -255, 510: clipped
  EXPECT_TRUE(SameBytes(m, cv::Mat(2, 3, CV_8UC3, cv::Scalar(0, 0, 255))));
  m = img.clone();
  ASSERT_TRUE(Blend(deg, m, 0.5));  // truncation: 150, 127.5 -> 127, 127.5 -> 127
  EXPECT_TRUE(SameBytes(m, cv::Mat(2, 3, CV_8UC3, cv::Scalar(150, 127, 127))));
  // Weights too large for the vectorised path take the scalar one, with the same clipping.
  m = img.clone();
  ASSERT_TRUE(Blend(deg, m, 1e12));
  EXPECT_TRUE(SameBytes(m, cv::Mat(2, 3, CV_8UC3, cv::Scalar(255, 255, 0))));
}

TEST(ColorTest, EnhanceIdentitiesAndDegenerates) {
  const cv::Mat img = RandomImage(17, 23, CV_8UC3, 11);
  for (auto f : {AdjustBrightness, AdjustContrast, AdjustSaturation, AdjustSharpness, AdjustBrightnessTensor,
                 AdjustContrastTensor, AdjustSaturationTensor, AdjustSharpnessTensor}) {
    cv::Mat m = img.clone();
    ASSERT_TRUE(f(m, 1.0));
    EXPECT_TRUE(SameBytes(m, img));
  }
  cv::Mat m = img.clone();
  ASSERT_TRUE(AdjustBrightness(m, 0.0));
  EXPECT_EQ(cv::countNonZero(m.reshape(1)), 0);
  // Contrast 0: the grey int(mean(L) + 0.5) everywhere.
  cv::Mat l;
  ToGray(img, l);
  const int grey = int(cv::mean(l)[0] + 0.5);
  m = img.clone();
  ASSERT_TRUE(AdjustContrast(m, 0.0));
  EXPECT_TRUE(SameBytes(m, cv::Mat(img.size(), CV_8UC3, cv::Scalar::all(grey))));
  // Saturation 0: the L image (PIL) or the tensor grey on every channel.
  m = img.clone();
  ASSERT_TRUE(AdjustSaturation(m, 0.0));
  cv::Mat expected = img.clone();
  Grayscale(expected, 3);
  EXPECT_TRUE(SameBytes(m, expected));
  m = img.clone();
  ASSERT_TRUE(AdjustSaturationTensor(m, 0.0));
  cv::Mat tg;
  ToGrayTensor(img, tg);
  cv::Mat planes[3];
  cv::split(m, planes);
  for (const cv::Mat& p : planes) EXPECT_TRUE(SameBytes(p, tg));
  // Saturation and hue leave single-channel images alone.
  const cv::Mat grey_img = RandomImage(5, 6, CV_8UC1, 2);
  m = grey_img.clone();
  EXPECT_TRUE(AdjustSaturation(m, 3.0) && AdjustSaturationTensor(m, 0.2) && AdjustHue(m, 0.4));
  EXPECT_TRUE(SameBytes(m, grey_img));
}

// Sharpness 0 is the degenerate itself: PIL's SMOOTH, round(S / 13) for S = 5 * centre + the
// 8 neighbours, with the first and last rows and columns copied.
TEST(ColorTest, SharpnessZeroIsPillowSmooth) {
  for (int type : {CV_8UC3, CV_8UC1}) {
    const cv::Mat img = RandomImage(13, 19, type, 5);
    cv::Mat m = img.clone();
    ASSERT_TRUE(AdjustSharpness(m, 0.0));
    const int c = img.channels();
    for (int y = 0; y < img.rows; ++y) {
      for (int x = 0; x < img.cols; ++x) {
        for (int k = 0; k < c; ++k) {
          int expected = img.ptr<uint8_t>(y)[x * c + k];
          if (y > 0 && x > 0 && y < img.rows - 1 && x < img.cols - 1) {
            int s = 4 * expected;
            for (int dy = -1; dy <= 1; ++dy) {
              for (int dx = -1; dx <= 1; ++dx) s += img.ptr<uint8_t>(y + dy)[(x + dx) * c + k];
            }
            expected = int(std::floor(s / 13.0 + 0.5));
          }
          ASSERT_EQ(m.ptr<uint8_t>(y)[x * c + k], expected) << y << " " << x << " " << k;
        }
      }
    }
  }
  // The tensor degenerate is the same inside; at factor 0 its border goes through the float blend
  // 0 * v + 1 * v, which is exact.
  const cv::Mat img = RandomImage(13, 19, CV_8UC3, 6);
  cv::Mat pil = img.clone(), tensor = img.clone();
  AdjustSharpness(pil, 0.0);
  AdjustSharpnessTensor(tensor, 0.0);
  EXPECT_TRUE(SameBytes(pil, tensor));
  // Images under 3x3 are left alone (Pillow does not filter them, torchvision returns them).
  const cv::Mat small = RandomImage(2, 9, CV_8UC3, 8);
  cv::Mat s1 = small.clone(), s2 = small.clone();
  EXPECT_TRUE(AdjustSharpness(s1, 0.0) && AdjustSharpnessTensor(s2, 0.0));
  EXPECT_TRUE(SameBytes(s1, small) && SameBytes(s2, small));
}

TEST(ColorTest, ConstantImages) {
  const cv::Mat img(7, 9, CV_8UC3, cv::Scalar(200, 13, 77));
  for (auto f : {Equalize, Autocontrast, EqualizeTensor, AutocontrastTensor}) {
    cv::Mat m = img.clone();
    ASSERT_TRUE(f(m));
    EXPECT_TRUE(SameBytes(m, img));
  }
  cv::Mat m = img.clone();
  ASSERT_TRUE(AdjustSharpness(m, 3.7));  // the smoothed constant is the constant
  EXPECT_TRUE(SameBytes(m, img));
  m = img.clone();
  ASSERT_TRUE(GaussianBlur(m, 7, 5, 2.0, 1.1));  // the kernels sum to 1 within rounding
  EXPECT_TRUE(SameBytes(m, img));
}

TEST(ColorTest, HueKeepsGreysAndRoundTripsPrimaries) {
  // Grey pixels have saturation 0 and come back as they were, whatever the shift.
  cv::Mat greys(1, 256, CV_8UC3);
  for (int v = 0; v < 256; ++v) greys.at<cv::Vec3b>(0, v) = cv::Vec3b(v, v, v);
  for (double h : {-0.5, -0.2, 0.0, 0.1, 0.5}) {
    cv::Mat m = greys.clone();
    ASSERT_TRUE(AdjustHue(m, h));
    EXPECT_TRUE(SameBytes(m, greys)) << h;
  }
  // Pure red with a third of a turn (np.uint8(0.334 * 255) = 85 of 256) becomes green: H = 85 gives
  // sector 1 (q, v, p) with q = round(255 * (1 - f)), f = 85 * 6 / 255 - 1 = 1, so (0, 255, 0).
  cv::Mat red(1, 1, CV_8UC3, cv::Scalar(255, 0, 0));
  ASSERT_TRUE(AdjustHue(red, 0.334));
  EXPECT_EQ(red.at<cv::Vec3b>(0, 0), cv::Vec3b(0, 255, 0));
}

TEST(ColorTest, PosterizeSolarizeInvert) {
  cv::Mat all(1, 256, CV_8UC1);
  for (int v = 0; v < 256; ++v) all.at<uint8_t>(0, v) = uint8_t(v);
  for (int bits = 0; bits <= 8; ++bits) {
    cv::Mat m = all.clone();
    ASSERT_TRUE(Posterize(m, bits));
    for (int v = 0; v < 256; ++v) ASSERT_EQ(m.at<uint8_t>(0, v), v & (0xFF00 >> bits) & 0xFF) << bits;
  }
  for (double t : {-5.0, 0.0, 1.0, 127.5, 128.0, 255.0, 255.5, 256.0, 1000.0}) {
    cv::Mat m = all.clone();
    ASSERT_TRUE(Solarize(m, t));
    for (int v = 0; v < 256; ++v) ASSERT_EQ(m.at<uint8_t>(0, v), v < t ? v : 255 - v) << t;
  }
  cv::Mat m = all.clone();
  ASSERT_TRUE(Invert(m));
  for (int v = 0; v < 256; ++v) ASSERT_EQ(m.at<uint8_t>(0, v), 255 - v);
  ASSERT_TRUE(Invert(m));
  EXPECT_TRUE(SameBytes(m, all));
}

TEST(ColorTest, EqualizeStepRule) {
  // Two values: one bin besides the last: step = count(first) // 255; with fewer than 255 pixels
  // of it, step is 0 and the image stays.
  cv::Mat m(1, 300, CV_8UC1, cv::Scalar(40));
  m(cv::Rect(0, 0, 100, 1)).setTo(10);
  const cv::Mat before = m.clone();
  ASSERT_TRUE(Equalize(m));
  EXPECT_TRUE(SameBytes(m, before));
  // 510 pixels of 10 and 90 of 40: step = 2, lut[10] = (1 + 0) // 2 = 0, lut[40] = (1 + 510) // 2,
  // which is 255 after the clamp to 255.
  cv::Mat e(1, 600, CV_8UC1, cv::Scalar(40));
  e(cv::Rect(0, 0, 510, 1)).setTo(10);
  ASSERT_TRUE(Equalize(e));
  EXPECT_EQ(e.at<uint8_t>(0, 0), 0);
  EXPECT_EQ(e.at<uint8_t>(0, 599), 255);
  // Channels are equalized independently, and the tensor version is the same computation.
  const cv::Mat img = SmoothImage(31, 37, CV_8UC3);
  cv::Mat a = img.clone(), b = img.clone();
  ASSERT_TRUE(Equalize(a));
  ASSERT_TRUE(EqualizeTensor(b));
  EXPECT_TRUE(SameBytes(a, b));
  cv::Mat planes[3];
  cv::split(img, planes);
  cv::Mat out_planes[3];
  cv::split(a, out_planes);
  for (int c = 0; c < 3; ++c) {
    ASSERT_TRUE(Equalize(planes[c]));
    EXPECT_TRUE(SameBytes(planes[c], out_planes[c])) << c;
  }
}

TEST(ColorTest, AutocontrastStretchesEachChannel) {
  cv::Mat m(2, 2, CV_8UC3);
  m.at<cv::Vec3b>(0, 0) = cv::Vec3b(50, 0, 7);
  m.at<cv::Vec3b>(0, 1) = cv::Vec3b(100, 255, 7);
  m.at<cv::Vec3b>(1, 0) = cv::Vec3b(75, 128, 7);
  m.at<cv::Vec3b>(1, 1) = cv::Vec3b(60, 1, 7);
  cv::Mat pil = m.clone(), tensor = m.clone();
  ASSERT_TRUE(Autocontrast(pil));
  ASSERT_TRUE(AutocontrastTensor(tensor));
  // Red: lo 50, hi 100. Pillow in double: scale 5.1, offset -255, and 100 * 5.1 - 255 is
  // 254.99999999999997, so 254; 75 -> 127 (127.5 truncated), 60 -> 51. torchvision in float:
  // (100 - 50) * ((1 / 50) * 255) rounds to 255. Green already spans [0, 255]; blue is constant and
  // stays. (Both recorded from Pillow 9.4 and torchvision 0.14 too.)
  for (const cv::Mat& r : {pil, tensor}) {
    EXPECT_EQ(r.at<cv::Vec3b>(0, 0), cv::Vec3b(0, 0, 7));
    EXPECT_EQ(r.at<cv::Vec3b>(1, 0), cv::Vec3b(127, 128, 7));
    EXPECT_EQ(r.at<cv::Vec3b>(1, 1), cv::Vec3b(51, 1, 7));
  }
  EXPECT_EQ(pil.at<cv::Vec3b>(0, 1), cv::Vec3b(254, 255, 7));
  EXPECT_EQ(tensor.at<cv::Vec3b>(0, 1), cv::Vec3b(255, 255, 7));
}

TEST(ColorTest, GaussianBlurImpulseIsTheKernel) {
  // A single 255 inside zeros spreads as 255 * kx[i] * ky[j] (no reflection reaches it).
  cv::Mat m(15, 17, CV_8UC1, cv::Scalar(0));
  m.at<uint8_t>(7, 8) = 255;
  ASSERT_TRUE(GaussianBlur(m, 5, 3, 1.5, 0.7));
  std::vector<double> kx(5), ky(3);
  double sx = 0, sy = 0;
  for (int i = 0; i < 5; ++i) sx += kx[i] = std::exp(-0.5 * std::pow((i - 2) / 1.5, 2));
  for (int i = 0; i < 3; ++i) sy += ky[i] = std::exp(-0.5 * std::pow((i - 1) / 0.7, 2));
  for (int y = 0; y < 15; ++y) {
    for (int x = 0; x < 17; ++x) {
      const int dy = y - 7 + 1, dx = x - 8 + 2;
      const double v = dy >= 0 && dy < 3 && dx >= 0 && dx < 5 ? 255 * kx[dx] / sx * ky[dy] / sy : 0;
      EXPECT_NEAR(m.at<uint8_t>(y, x), v, 0.5 + 1e-3) << y << " " << x;
    }
  }
  // 'reflect' padding does not repeat the edge pixel: row -1 is row 1. With a 1x3 kernel of
  // weights (k, 1 - 2k, k), k = exp(-0.5) / (1 + 2 exp(-0.5)) = 0.2741, a column 200, 0, 0, 0, 0
  // gives row 0 = 200 (1 - 2k) = 90.35 and row 1 = 200 k = 54.8 (torchvision: 90, 55, 0, 0, 0).
  cv::Mat col(5, 1, CV_8UC1, cv::Scalar(0));
  col.at<uint8_t>(0, 0) = 200;
  ASSERT_TRUE(GaussianBlur(col, 1, 3, 1.0, 1.0));
  EXPECT_EQ(col.at<uint8_t>(0, 0), 90);
  EXPECT_EQ(col.at<uint8_t>(1, 0), 55);
  EXPECT_EQ(col.at<uint8_t>(2, 0), 0);
}

}  // namespace
}  // namespace ferry::kernels
