// Targets: what a sample carries besides its image (boxes with their classes,
// instance masks, a semantic mask), moved with the image by every geometric op.
//
// Glossary
//   point        continuous pixel coordinates of an image: it spans [0, W] x [0, H],
//                pixel (row i, column j) covers [j, j + 1) x [i, i + 1). COCO boxes and
//                polygons, torchvision's BoundingBoxes and Pillow's transforms all use
//                this convention. A sample's targets are given in the points of its
//                decoded image, after EXIF orientation (the image Ferry augments).
//   warp         a 3 x 3 homography from an op's input points to its output points:
//                crops, resizes, flips, pads, rotations, affine and perspective maps
//                are all warps (op.h: Motion::kWarp).
//   box          XYXY, float. After each warp a box is the bounding box of its four
//                mapped corners, clamped to the output (torchvision v2's rule).
//   tight boxes  with boxes_from_masks, an instance with a mask gets the bounding box of
//                its final mask instead (ultralytics' rule after rotations and
//                perspective, where a box's mapped corners overshoot the object).
//   sanitize     after the last op, boxes narrower or lower than min_size, smaller than
//                min_area, or with less than min_visibility of their area left inside
//                the image are dropped with their labels and masks (torchvision v2's
//                SanitizeBoundingBoxes, plus albumentations' min_visibility).
//   mask         an instance's mask is rasterized once, at the output size, from its
//                source (COCO polygons mapped point by point, or a raster mask warped
//                with nearest neighbour through the composed warp), and kept only where
//                every intermediate image had pixels: a part cropped away by one op
//                and padded back by a later one stays empty, as it would if the mask
//                were warped step by step. One rasterization per sample, not one per op.
//
// Thread-compatible: one TargetTracker per sample.
#ifndef FERRY_OPS_TARGETS_H_
#define FERRY_OPS_TARGETS_H_

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include <opencv2/core.hpp>

#include "ferry/status.h"

namespace ferry {

using Warp = cv::Matx33d;

// Warps of the common steps (points of the input -> points of the output).
Warp IdentityWarp();
// The window `x0, y0, w, h` of the input, resampled to out_w x out_h (crops, resizes).
Warp CropResizeWarp(double x0, double y0, double w, double h, int out_w, int out_h);
// Mirrors an image `width` wide left-right (or one `height` high top-bottom).
Warp HFlipWarp(int width);
Warp VFlipWarp(int height);
// Pillow's inverse coefficients (an output point -> its input point) as a forward warp:
// 6 for AFFINE, 8 for PERSPECTIVE.
Warp FromPilAffine(const double inverse[6]);
Warp FromPilPerspective(const double inverse[8]);

// One instance's mask, in the decoded image's points: polygons (COCO's form) or a
// raster (CV_8UC1, nonzero inside, the decoded image's size: a decoded COCO RLE).
struct InstanceMask {
  std::vector<std::vector<cv::Point2f>> polygons;
  cv::Mat raster;
};

struct TargetRules {
  float min_size = 1.0f;         // both sides, in output pixels
  float min_area = 1.0f;         // output pixels
  float min_visibility = 0.0f;   // the part of the box (as warped) left inside the output
  bool boxes_from_masks = false;  // see "tight boxes"
};

struct SampleTargets {
  // In: the decoded image's points. Out (after the pipeline): the output's, sanitized.
  std::vector<std::array<float, 4>> boxes;  // XYXY
  std::vector<int64_t> labels;              // one per box
  std::vector<uint8_t> iscrowd;             // empty or one per box
  std::vector<float> area;                  // empty or one per box (COCO's: the source's, unchanged)
  std::vector<InstanceMask> masks;          // empty or one per box
  cv::Mat semantic;                         // CV_8UC1 label image of the decoded size, or empty
  uint8_t semantic_fill = 0;                // its value where no source pixel lands (VOC: 255, "ignore")
  int64_t image_id = -1;                    // the source's id for the image, carried as is
  std::string text, meta;                   // a caption and the sample's JSON, carried as they are
  std::vector<int32_t> tokens;              // the caption's ids (a job with a tokenizer), at most L
  std::string key;                          // the sample's key (Dataset::Key)

  // Out only: the instance masks as one CV_8UC1 Mat of (N * H) x W rows, values 0/1
  // (N = boxes.size() after sanitizing), when `masks` was given.
  cv::Mat instance_masks;
};

// Checks what a source gives before any op runs: one label (and iscrowd, area, mask
// when given) per box, finite boxes with x1 <= x2 and y1 <= y2, rasters and the
// semantic mask of the decoded size. InvalidArgument naming the field otherwise.
Status ValidateTargets(const SampleTargets& t, int width, int height);

// Follows one sample's targets through its ops.
class TargetTracker {
 public:
  // `t` in the points of a width x height decoded image.
  TargetTracker(SampleTargets* t, int width, int height);

  // An op sent the image's points through `m` to an out_w x out_h image.
  void Move(const Warp& m, int out_w, int out_h);

  // The boxes not dropped so far, in the current image's points, and their ids.
  std::vector<std::array<double, 4>> LiveBoxes(std::vector<size_t>* ids) const;
  // Drops box `id` (an op's rule, e.g. RandomIoUCrop's centres), with its fields.
  void Drop(size_t id) { dropped_[id] = 1; }

  // After the last op: sanitizes the boxes and rasterizes the masks at the output size.
  void Finish(const TargetRules& rules);

  int width() const { return w_; }
  int height() const { return h_; }

 private:
  SampleTargets* t_;
  int w_, h_;
  Warp total_;                        // the decoded image's points -> the current image's
  std::vector<cv::Point2d> visible_;  // the decoded image's part still present, in current points (convex)
  std::vector<std::array<double, 4>> boxes_;
  std::vector<uint8_t> dropped_;
};

}  // namespace ferry

#endif  // FERRY_OPS_TARGETS_H_
