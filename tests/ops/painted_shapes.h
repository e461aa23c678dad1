// Real photographs with painted shapes, for the tests of targets (boxes and masks that
// follow their image): filled shapes of distinct saturated colours painted into real
// photographs ($FERRY_SAMPLE_DATA, desaturated first so that no photo pixel is near a
// painted colour), with their boxes, polygons, raster masks and a semantic mask as
// annotations, and the check that a processed sample's targets match its pixels.
#ifndef FERRY_TESTS_OPS_PAINTED_SHAPES_H_
#define FERRY_TESTS_OPS_PAINTED_SHAPES_H_

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

#include "core/philox.h"
#include "ops/targets.h"

namespace ferry::testing {

inline constexpr int kShapes = 6;
inline const cv::Vec3b kColours[kShapes] = {{255, 0, 0},   {0, 255, 0},   {0, 0, 255},
                                     {255, 255, 0}, {255, 0, 255}, {0, 255, 255}};

// Real photographs: the first JPEG of each class folder of the sample ImageFolder.
inline std::vector<std::string> Photos(size_t n) {
  const char* dir = std::getenv("FERRY_SAMPLE_DATA");
  if (dir == nullptr || *dir == '\0') {
    ADD_FAILURE() << "FERRY_SAMPLE_DATA must point to the sample ImageFolder (bench/setup.sh builds it)";
    return {};
  }
  std::vector<std::string> classes;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.is_directory()) classes.push_back(e.path().string());
  std::sort(classes.begin(), classes.end());
  std::vector<std::string> out;
  for (const std::string& c : classes) {
    std::vector<std::string> files;
    for (const auto& e : std::filesystem::directory_iterator(c)) files.push_back(e.path().string());
    std::sort(files.begin(), files.end());
    if (!files.empty()) out.push_back(files.front());
    if (out.size() == n) break;
  }
  EXPECT_EQ(out.size(), n) << "too few classes in " << dir;
  return out;
}

struct Painted {
  std::string bytes;  // the encoded photo
  SampleTargets targets;
  int width = 0, height = 0;
};

// Paints kShapes shapes (rectangles; the last two triangles) at random, non-overlapping
// places; shape k has colour k and label k + 1. Shapes 0-3 give polygon masks, 4-5
// raster masks; the semantic mask holds k + 1 under shape k.
inline Painted PaintPhoto(const std::string& path, uint64_t seed, bool png) {
  Painted p;
  cv::Mat bgr = cv::imread(path, cv::IMREAD_COLOR);
  EXPECT_FALSE(bgr.empty()) << path;
  if (bgr.empty()) return p;
  cv::Mat rgb, gray, gray3;
  cv::cvtColor(bgr, rgb, cv::COLOR_BGR2RGB);
  cv::cvtColor(rgb, gray, cv::COLOR_RGB2GRAY);
  cv::cvtColor(gray, gray3, cv::COLOR_GRAY2RGB);
  cv::addWeighted(rgb, 0.5, gray3, 0.5, 0, rgb);  // no channel gap over 128 is left
  p.width = rgb.cols, p.height = rgb.rows;
  p.targets.semantic = cv::Mat::zeros(rgb.rows, rgb.cols, CV_8UC1);
  SampleRng rng(seed, 0, 0, 99);
  std::vector<cv::Rect> taken;
  for (int k = 0; k < kShapes; ++k) {
    cv::Rect r;
    for (int attempt = 0; attempt < 500; ++attempt) {
      const int w = rgb.cols / 8 + int(rng.Below(uint64_t(rgb.cols / 6)));
      const int h = rgb.rows / 8 + int(rng.Below(uint64_t(rgb.rows / 6)));
      r = cv::Rect(int(rng.Below(uint64_t(rgb.cols - w))), int(rng.Below(uint64_t(rgb.rows - h))), w, h);
      bool free = true;
      for (const cv::Rect& t : taken) free = free && (r & cv::Rect(t.x - 8, t.y - 8, t.width + 16, t.height + 16)).empty();
      if (free) break;
      r = cv::Rect();
    }
    EXPECT_FALSE(r.empty()) << "no room for shape " << k << " in " << path;
    if (r.empty()) continue;
    taken.push_back(r);
    std::vector<cv::Point2f> poly;
    if (k < 4) {
      poly = {{float(r.x), float(r.y)}, {float(r.x + r.width), float(r.y)},
              {float(r.x + r.width), float(r.y + r.height)}, {float(r.x), float(r.y + r.height)}};
    } else {
      poly = {{float(r.x) + 0.5f * r.width, float(r.y)}, {float(r.x + r.width), float(r.y + r.height)},
              {float(r.x), float(r.y + r.height)}};
    }
    // Painted with the rasterizer's convention (pixel centres inside the polygon).
    cv::Mat shape = cv::Mat::zeros(rgb.rows, rgb.cols, CV_8UC1);
    std::vector<cv::Point> drawn;
    for (const cv::Point2f& q : poly) drawn.emplace_back(int(std::lround((q.x - 0.5) * 256)), int(std::lround((q.y - 0.5) * 256)));
    cv::fillPoly(shape, std::vector<std::vector<cv::Point>>{drawn}, cv::Scalar(1), cv::LINE_8, 8);
    rgb.setTo(cv::Scalar(kColours[k][0], kColours[k][1], kColours[k][2]), shape);
    p.targets.semantic.setTo(cv::Scalar(k + 1), shape);
    p.targets.boxes.push_back({float(r.x), float(r.y), float(r.x + r.width), float(r.y + r.height)});
    p.targets.labels.push_back(k + 1);
    InstanceMask m;
    if (k < 4) m.polygons.push_back(poly);
    else m.raster = shape;
    p.targets.masks.push_back(std::move(m));
  }
  cv::cvtColor(rgb, bgr, cv::COLOR_RGB2BGR);
  std::vector<uint8_t> buf;
  const std::vector<int> params = png ? std::vector<int>{} : std::vector<int>{cv::IMWRITE_JPEG_QUALITY, 98};
  EXPECT_TRUE(cv::imencode(png ? ".png" : ".jpg", bgr, buf, params));
  p.bytes.assign(buf.begin(), buf.end());
  return p;
}

// The pixels of colour k in an RGB output (every channel within 60).
inline cv::Mat ColourPixels(const cv::Mat& rgb, int k) {
  cv::Mat lo, out;
  const cv::Vec3b c = kColours[k];
  cv::inRange(rgb, cv::Scalar(std::max(0, c[0] - 60), std::max(0, c[1] - 60), std::max(0, c[2] - 60)),
              cv::Scalar(std::min(255, c[0] + 60), std::min(255, c[1] + 60), std::min(255, c[2] + 60)), out);
  return out;
}

inline double BoxIoU(const std::array<float, 4>& a, const cv::Rect& b) {
  const double ix = std::max(0.0, std::min<double>(a[2], b.x + b.width) - std::max<double>(a[0], b.x));
  const double iy = std::max(0.0, std::min<double>(a[3], b.y + b.height) - std::max<double>(a[1], b.y));
  const double inter = ix * iy;
  const double uni = double(a[2] - a[0]) * (a[3] - a[1]) + double(b.area()) - inter;
  return uni > 0 ? inter / uni : 0;
}

inline double MaskIoU(const cv::Mat& a, const cv::Mat& b) {  // nonzero = inside
  const int inter = cv::countNonZero(a & b), uni = cv::countNonZero(a | b);
  return uni > 0 ? double(inter) / uni : 1.0;
}

struct Checked {
  int visible = 0;  // colours checked this sample
  int boxes = 0;
};

// The check described at the top, on one processed sample. A box is transformed as a
// box (torchvision v2's rule: the bounding box of its four mapped corners, clamped), so
// it bounds its shape's pixels exactly (IoU >= 0.8) only when nothing turned the shape
// against the box: a rectangle (colours 0-3) under axis-aligned ops (crops, resizes,
// flips, pads), or any shape with tight boxes (boxes_from_masks). Otherwise (triangles,
// 4-5, cut by a crop; shapes rotated and cut) the box must contain the pixels. A
// rectangle's box of 10 x 10 or more shows some of it. Masks: IoU >= 0.75 with the
// colour's pixels. Slivers under 8 pixels across (a shape cut by a crop's edge): one
// blended row changes their IoU by a third, so their box's edges must be within 1.5
// pixels of their pixels' instead, and their masks are not compared.
// `drops_by_centre`: an op dropped boxes by a rule of its own (RandomIoUCrop drops those
// whose centre leaves its crop), so a visible colour may have none.
inline Checked ExpectTargetsFollow(const cv::Mat& out, const SampleTargets& t, bool axis_aligned, bool tight,
                            const std::string& what, bool drops_by_centre = false) {
  Checked c;
  const int h = out.rows;
  for (int k = 0; k < kShapes; ++k) {
    const bool rectangle = k < 4;
    const bool exact = tight || (rectangle && axis_aligned);
    const cv::Mat pixels = ColourPixels(out, k);
    const int count = cv::countNonZero(pixels);
    const auto it = std::find(t.labels.begin(), t.labels.end(), int64_t(k + 1));
    const size_t i = size_t(it - t.labels.begin());
    if (count >= 150) {
      ++c.visible;
      if (!drops_by_centre) {
        EXPECT_NE(it, t.labels.end()) << what << ": colour " << k << " shows " << count << " pixels but has no box";
      }
      if (it == t.labels.end()) continue;
      const cv::Rect bound = cv::boundingRect(pixels);
      const auto& b = t.boxes[i];
      const std::string box = "[" + std::to_string(b[0]) + ", " + std::to_string(b[1]) + ", " + std::to_string(b[2]) +
                              ", " + std::to_string(b[3]) + "]";
      const bool sliver = bound.width < 8 || bound.height < 8;
      if (exact && sliver) {
        // One blended row is a third of a sliver: its edges within 1.5 pixels instead.
        EXPECT_TRUE(std::abs(b[0] - bound.x) <= 1.5 && std::abs(b[1] - bound.y) <= 1.5 &&
                    std::abs(b[2] - (bound.x + bound.width)) <= 1.5 && std::abs(b[3] - (bound.y + bound.height)) <= 1.5)
            << what << ": colour " << k << " box " << box << " vs its pixels " << bound;
      } else if (exact) {
        EXPECT_GE(BoxIoU(b, bound), 0.8) << what << ": colour " << k << " box " << box << " vs its pixels " << bound;
      } else {
        EXPECT_TRUE(b[0] <= bound.x + 1.5 && b[1] <= bound.y + 1.5 && b[2] >= bound.x + bound.width - 1.5 &&
                    b[3] >= bound.y + bound.height - 1.5)
            << what << ": colour " << k << " box " << box << " does not contain its pixels " << bound;
      }
      if (bound.width >= 8 && bound.height >= 8) {
        const cv::Mat mask = t.instance_masks.rowRange(int(i) * h, int(i + 1) * h) != 0;
        EXPECT_GE(MaskIoU(mask, pixels != 0), 0.75) << what << ": colour " << k << " instance mask";
        if (!t.semantic.empty()) {
          EXPECT_GE(MaskIoU(t.semantic == k + 1, pixels != 0), 0.75) << what << ": colour " << k << " semantic mask";
        }
      }
    }
    if (it != t.labels.end()) {
      ++c.boxes;
      const auto& b = t.boxes[i];
      if ((rectangle || tight) && b[2] - b[0] >= 10 && b[3] - b[1] >= 10) {
        EXPECT_GT(count, 0) << what << ": colour " << k << " has a box of " << (b[2] - b[0]) << "x" << (b[3] - b[1])
                            << " but no pixel";
      }
    }
  }
  return c;
}

}  // namespace ferry::testing

#endif  // FERRY_TESTS_OPS_PAINTED_SHAPES_H_
