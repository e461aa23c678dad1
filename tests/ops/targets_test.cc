// Boxes and masks follow their image through every geometric op (lib/ops/targets.h,
// Pipeline::Process with targets), checked from the pixels: filled shapes of distinct
// saturated colours are painted into real photographs ($FERRY_SAMPLE_DATA, desaturated
// first so that no photo pixel is near a painted colour), with their boxes, polygons,
// raster masks and a semantic mask as annotations. After each pipeline, every colour
// still visible must have its box (IoU >= 0.8 with its pixels' bounding box) and its
// masks (IoU >= 0.75 with its pixels), and every box must show its colour. Both decode
// paths run: JPEG (the crop plan reads only its window) and PNG (decoded whole).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

#include "core/philox.h"
#include "image/image_test_util.h"
#include "ops/painted_shapes.h"
#include "ops/pipeline.h"
#include "ops/targets.h"
#include "testutil.h"

namespace ferry {
namespace {

using testing::Checked;
using testing::Contains;
using testing::ExpectTargetsFollow;
using testing::kShapes;
using testing::Painted;
using testing::PaintPhoto;
using testing::Photos;

struct Case {
  const char* name;
  const char* ops;    // the image ops, JSON
  bool axis_aligned;  // crops, resizes, flips and pads only
  bool drops_by_centre = false;  // random_iou_crop
};

const Case kCases[] = {
    {"random_resized_crop+hflip",
     R"([{"op": "random_resized_crop", "size": 256, "scale": [0.25, 1.0]}, {"op": "hflip"}])", true},
    {"resize+random_crop+hflip+colour",
     R"([{"op": "resize", "size": 300}, {"op": "random_crop", "size": 256}, {"op": "hflip"},
         {"op": "color_jitter", "brightness": 0.1}])",
     true},
    {"rotation(expand)+resize",
     R"([{"op": "random_rotation", "degrees": 40, "expand": true}, {"op": "resize", "size": [256, 256]}])", false},
    {"affine+vflip+center_crop",
     R"([{"op": "random_affine", "degrees": 25, "translate": [0.1, 0.1], "scale": [0.8, 1.2], "shear": 10},
         {"op": "vflip"}, {"op": "resize", "size": 280}, {"op": "center_crop", "size": 256}])",
     false},
    {"center_crop+pad (a crop padded back)",
     R"([{"op": "resize", "size": 320}, {"op": "center_crop", "size": 200}, {"op": "pad", "padding": 28}])", true},
    {"perspective+random_apply(flips)+resize",
     R"([{"op": "random_perspective", "distortion_scale": 0.4, "p": 1.0},
         {"op": "random_apply", "p": 0.7, "ops": [{"op": "hflip", "p": 1.0}, {"op": "vflip", "p": 1.0}]},
         {"op": "resize", "size": [256, 256]}])",
     false},
    {"random_crop(padding)+hflip",
     R"([{"op": "resize", "size": [256, 256]}, {"op": "random_crop", "size": 256, "padding": 24}, {"op": "hflip"}])",
     true},
    // torchvision's detection presets (references/detection/presets.py).
    {"ssd: zoom_out+iou_crop+hflip+resize",
     R"([{"op": "random_zoom_out", "fill": [123, 117, 104], "p": 0.7}, {"op": "random_iou_crop"}, {"op": "hflip"},
         {"op": "resize", "size": [256, 256]}])",
     true, true},
    {"lsj: scale_jitter+fixed_size_crop+hflip",
     R"([{"op": "scale_jitter", "target_size": [256, 256], "scale_range": [0.3, 2.0]},
         {"op": "fixed_size_crop", "size": 256, "fill": 0}, {"op": "hflip"}])",
     true},
    {"multiscale: random_shortest_size+hflip+letterbox",
     R"([{"op": "random_shortest_size", "min_size": [200, 240, 280], "max_size": 400}, {"op": "hflip"},
         {"op": "letterbox", "size": 256}])",
     true},
    // torchvision's segmentation preset (references/segmentation/presets.py), its crop
    // at times larger than the resized image (padded right and below).
    {"segmentation: random_resize+hflip+random_crop(pad_if_smaller)",
     R"([{"op": "random_resize", "min_size": 160, "max_size": 400}, {"op": "hflip"},
         {"op": "random_crop", "size": 224, "pad_if_smaller": true}])",
     true},
};

class TargetsFollowTest : public ::testing::TestWithParam<std::tuple<size_t, bool>> {};

TEST_P(TargetsFollowTest, OnPaintedPhotos) {
  const Case& cs = kCases[std::get<0>(GetParam())];
  const bool png = std::get<1>(GetParam());
  const std::vector<std::string> photos = Photos(4);
  std::vector<Painted> painted;
  for (size_t ph = 0; ph < photos.size(); ++ph) {
    painted.push_back(PaintPhoto(photos[ph], ph + 1, png));
    ASSERT_FALSE(painted.back().bytes.empty());
  }
  // Ops that turn shapes run twice: with torchvision's boxes, and with tight ones.
  for (const bool tight : cs.axis_aligned ? std::vector<bool>{false} : std::vector<bool>{false, true}) {
    std::string ops = cs.ops;
    if (tight) ops.insert(ops.size() - 1, R"(, {"op": "sanitize_boxes", "boxes_from_masks": true})");
    Result<PipelineSpec> spec = PipelineSpec::FromJson(R"({"ops": )" + ops + "}");
    ASSERT_TRUE(spec.ok()) << spec.status().ToString();
    Result<std::shared_ptr<const Pipeline>> p = Pipeline::Compile(*spec);
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    ASSERT_TRUE((*p)->CheckTargets().ok());
    const Shape shape = (*p)->output_shape();
    int visible = 0, boxes = 0;
    for (size_t ph = 0; ph < photos.size(); ++ph) {
      for (int64_t index = 0; index < 8; ++index) {
        SampleTargets t = painted[ph].targets;
        cv::Mat out(shape.height, shape.width, CV_8UC3);
        const Status s = (*p)->Process(painted[ph].bytes, 7, 1, index, out.data, nullptr, nullptr, &t);
        ASSERT_TRUE(s.ok()) << s.ToString();
        ASSERT_EQ(t.boxes.size(), t.labels.size());
        ASSERT_EQ(t.instance_masks.rows, int(t.boxes.size()) * shape.height);
        ASSERT_EQ(t.semantic.size(), out.size());
        const std::string what = std::string(cs.name) + (tight ? " tight" : "") + (png ? " png " : " jpeg ") +
                                 photos[ph] + " #" + std::to_string(index);
        const Checked c = ExpectTargetsFollow(out, t, cs.axis_aligned, tight, what, cs.drops_by_centre);
        visible += c.visible;
        boxes += c.boxes;
        if (::testing::Test::HasFailure()) {
          cv::Mat bgr;
          cv::cvtColor(out, bgr, cv::COLOR_RGB2BGR);
          cv::imwrite(::testing::TempDir() + "targets_failure.png", bgr);
          cv::imwrite(::testing::TempDir() + "targets_failure_masks.png", t.instance_masks * 255);
          cv::imwrite(::testing::TempDir() + "targets_failure_semantic.png", t.semantic * 40);
          return;
        }
      }
    }
    // The draws must have left most shapes in view: the check above ran on them.
    EXPECT_GE(visible, 4 * 8 * kShapes / 3) << cs.name;
    if (!cs.drops_by_centre) {
      EXPECT_GE(boxes, visible) << cs.name;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Pipelines, TargetsFollowTest,
                         ::testing::Combine(::testing::Range<size_t>(0, std::size(kCases)), ::testing::Bool()),
                         [](const auto& info) {
                           return "case" + std::to_string(std::get<0>(info.param)) +
                                  (std::get<1>(info.param) ? "_png" : "_jpeg");
                         });

// ---------------------------------------------------------------- exact geometry

SampleTargets OneBox(float x1, float y1, float x2, float y2) {
  SampleTargets t;
  t.boxes.push_back({x1, y1, x2, y2});
  t.labels.push_back(3);
  return t;
}

TEST(TargetTrackerTest, FlipCropResizeAreExact) {
  SampleTargets t = OneBox(10, 20, 50, 60);
  TargetTracker tr(&t, 200, 100);
  tr.Move(HFlipWarp(200), 200, 100);                    // x -> 200 - x: [150, 20, 190, 60]
  tr.Move(CropResizeWarp(100, 0, 100, 100, 50, 50), 50, 50);  // (x - 100) / 2, y / 2
  tr.Finish(TargetRules{});
  ASSERT_EQ(t.boxes.size(), 1u);
  EXPECT_FLOAT_EQ(t.boxes[0][0], 25);
  EXPECT_FLOAT_EQ(t.boxes[0][1], 10);
  EXPECT_FLOAT_EQ(t.boxes[0][2], 45);
  EXPECT_FLOAT_EQ(t.boxes[0][3], 30);
  EXPECT_EQ(t.labels[0], 3);
}

TEST(TargetTrackerTest, BoxesAreClampedAtEachStepSoPaddingDoesNotRegrowThem) {
  // A crop that cuts the box, then a pad: the box ends at the crop's edge, not in the pad.
  SampleTargets t = OneBox(0, 0, 60, 40);
  InstanceMask m;
  m.polygons.push_back({{0, 0}, {60, 0}, {60, 40}, {0, 40}});
  t.masks.push_back(m);
  TargetTracker tr(&t, 100, 100);
  tr.Move(CropResizeWarp(20, 0, 80, 100, 80, 100), 80, 100);  // crop x in [20, 100]
  tr.Move(CropResizeWarp(-20, 0, 120, 100, 120, 100), 120, 100);  // pad 20 left and right
  tr.Finish(TargetRules{});
  ASSERT_EQ(t.boxes.size(), 1u);
  EXPECT_FLOAT_EQ(t.boxes[0][0], 20);  // the crop's edge, shifted by the pad
  EXPECT_FLOAT_EQ(t.boxes[0][2], 60);
  // The mask is empty in the pad: no pixel left of x = 20.
  const cv::Mat mask = t.instance_masks;
  EXPECT_EQ(cv::countNonZero(mask.colRange(0, 20)), 0);
  EXPECT_EQ(cv::countNonZero(mask.colRange(20, 60).rowRange(0, 40)), 40 * 40);
}

TEST(TargetTrackerTest, SanitizeDropsSmallInvisibleAndOutsideBoxesWithTheirFields) {
  SampleTargets t;
  t.boxes = {{10, 10, 30, 30}, {95, 10, 120, 30}, {150, 150, 160, 160}, {40, 40, 40.5f, 60}};
  t.labels = {1, 2, 3, 4};
  t.iscrowd = {0, 1, 0, 0};
  t.area = {400, 500, 100, 10};
  TargetTracker tr(&t, 200, 200);
  tr.Move(CropResizeWarp(0, 0, 100, 100, 100, 100), 100, 100);  // crop to the top-left 100 x 100
  TargetRules rules;
  rules.min_visibility = 0.3f;  // box 2 keeps 5 of its 25 columns: 0.2
  tr.Finish(rules);
  ASSERT_EQ(t.labels, std::vector<int64_t>({1}));  // 2: too little visible; 3: outside; 4: too thin
  EXPECT_EQ(t.iscrowd, std::vector<uint8_t>({0}));
  EXPECT_EQ(t.area, std::vector<float>({400}));
}

TEST(TargetTrackerTest, ValidateNamesTheField) {
  SampleTargets t = OneBox(10, 10, 5, 20);
  EXPECT_TRUE(Contains(ValidateTargets(t, 100, 100).message(), "x2 < x1"));
  t = OneBox(1, 1, 5, 5);
  t.labels.push_back(2);
  EXPECT_TRUE(Contains(ValidateTargets(t, 100, 100).message(), "labels"));
  t = OneBox(1, 1, 5, 5);
  t.semantic = cv::Mat::zeros(10, 10, CV_8UC1);
  EXPECT_TRUE(Contains(ValidateTargets(t, 100, 100).message(), "semantic mask"));
}

TEST(PipelineTargetsTest, OpsThatCannotMoveTargetsAreRefusedByName) {
  auto check = [](const std::string& ops, const std::string& named) {
    Result<PipelineSpec> spec = PipelineSpec::FromJson(R"({"ops": )" + ops + "}");
    ASSERT_TRUE(spec.ok()) << spec.status().ToString();
    Result<std::shared_ptr<const Pipeline>> p = Pipeline::Compile(*spec);
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    const Status s = (*p)->CheckTargets();
    EXPECT_FALSE(s.ok()) << ops;
    EXPECT_TRUE(Contains(s.message(), named)) << s.ToString();
    // Process refuses too, rather than move nothing.
    SampleTargets t = OneBox(1, 1, 5, 5);
    std::vector<uint8_t> out((*p)->sample_bytes());
    const std::string jpeg = testing::EncodeJpeg(64, 48, 1);
    EXPECT_FALSE((*p)->Process(jpeg, 1, 0, 0, out.data(), nullptr, nullptr, &t).ok());
  };
  check(R"([{"op": "rand_augment"}, {"op": "resize", "size": [32, 32]}])", "rand_augment");
  check(R"([{"op": "resize", "size": [32, 32]}, {"op": "random_apply", "ops": [{"op": "trivial_augment_wide"}]}])",
        "random_apply");
}

TEST(PipelineTargetsTest, SanitizeBoxesSetsTheRules) {
  Result<PipelineSpec> spec = PipelineSpec::FromJson(
      R"({"ops": [{"op": "resize", "size": [64, 64]},
          {"op": "sanitize_boxes", "min_size": 12}]})");
  ASSERT_TRUE(spec.ok());
  Result<std::shared_ptr<const Pipeline>> p = Pipeline::Compile(*spec);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ((*p)->target_rules().min_size, 12.0f);
  SampleTargets t;
  t.boxes = {{0, 0, 20, 20}, {0, 0, 40, 40}};  // on 128 x 96: 10 x 13.3 and 20 x 26.7
  t.labels = {1, 2};
  std::vector<uint8_t> out((*p)->sample_bytes());
  ASSERT_TRUE((*p)->Process(testing::EncodeJpeg(128, 96, 2), 1, 0, 0, out.data(), nullptr, nullptr, &t).ok());
  EXPECT_EQ(t.labels, std::vector<int64_t>({2}));
  EXPECT_NEAR(t.boxes[0][2], 20, 1e-4);
  EXPECT_NEAR(t.boxes[0][3], 40 * 64 / 96.0, 1e-4);
}

}  // namespace
}  // namespace ferry

namespace ferry {
namespace {

TEST(DetectionOpsTest, IoUCropKeepsExactlyTheBoxesWhoseCentreItKeeps) {
  Result<PipelineSpec> spec = PipelineSpec::FromJson(
      R"({"ops": [{"op": "random_iou_crop", "sampler_options": [0.0]}, {"op": "resize", "size": [50, 50]},
                  {"op": "sanitize_boxes", "min_size": 0, "min_area": 0}]})");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  Result<std::shared_ptr<const Pipeline>> p = Pipeline::Compile(*spec);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  const std::string jpeg = testing::EncodeJpeg(200, 100, 3);
  // A grid of 10 x 10 boxes over the 200 x 100 image, labelled by position.
  SampleTargets grid;
  for (int y = 0; y < 100; y += 10)
    for (int x = 0; x < 200; x += 20) {
      grid.boxes.push_back({float(x), float(y), float(x + 10), float(y + 10)});
      grid.labels.push_back(y * 1000 + x);
    }
  int cropped = 0;
  for (int64_t index = 0; index < 20; ++index) {
    SampleTargets t = grid;
    DrawLog log;
    std::vector<uint8_t> out((*p)->sample_bytes());
    {
      ScopedDrawLog scoped(&log);
      ASSERT_TRUE((*p)->Process(jpeg, 5, 0, index, out.data(), nullptr, nullptr, &t).ok());
    }
    double left = 0, top = 0, width = 200, height = 100;
    for (const auto& [name, v] : log.draws) {
      if (name == "left") left = v, ++cropped;
      if (name == "top") top = v;
      if (name == "width") width = v;
      if (name == "height") height = v;
    }
    std::vector<int64_t> want;
    for (size_t i = 0; i < grid.boxes.size(); ++i) {
      const auto& b = grid.boxes[i];
      const double cx = 0.5 * (b[0] + b[2]), cy = 0.5 * (b[1] + b[3]);
      if (left < cx && cx < left + width && top < cy && cy < top + height) want.push_back(grid.labels[i]);
    }
    EXPECT_EQ(t.labels, want) << "crop " << left << "," << top << " " << width << "x" << height;
    for (size_t i = 0; i < t.boxes.size(); ++i) {
      const double x = double(t.labels[i] % 1000), y = double(t.labels[i] / 1000);
      EXPECT_NEAR(t.boxes[i][0], std::max(0.0, x - left) * 50 / width, 1e-3);
      EXPECT_NEAR(t.boxes[i][3], std::min(height, y + 10 - top) * 50 / height, 1e-3);
    }
  }
  EXPECT_GT(cropped, 10);  // sampler_options [0.0]: every draw crops
}

TEST(DetectionOpsTest, IoUCropWithoutTargetsIsAClearError) {
  Result<PipelineSpec> spec =
      PipelineSpec::FromJson(R"({"ops": [{"op": "random_iou_crop"}, {"op": "resize", "size": [32, 32]}]})");
  Result<std::shared_ptr<const Pipeline>> p = Pipeline::Compile(*spec);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  std::vector<uint8_t> out((*p)->sample_bytes());
  const Status s = (*p)->Process(testing::EncodeJpeg(64, 48, 1), 1, 0, 0, out.data());
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(testing::Contains(s.message(), "job with targets")) << s.ToString();
}

TEST(DetectionOpsTest, FixedSizeCropAndLetterboxGiveTheirSize) {
  for (const char* ops : {R"([{"op": "scale_jitter", "target_size": [96, 64]}, {"op": "fixed_size_crop", "size": [64, 96]}])",
                          R"([{"op": "letterbox", "size": [64, 96]}])"}) {
    Result<PipelineSpec> spec = PipelineSpec::FromJson(std::string(R"({"ops": )") + ops + "}");
    Result<std::shared_ptr<const Pipeline>> p = Pipeline::Compile(*spec);
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    EXPECT_EQ((*p)->output_shape().height, 64);
    EXPECT_EQ((*p)->output_shape().width, 96);
    for (int64_t i = 0; i < 6; ++i) {
      SampleTargets t = OneBox(10, 10, 60, 40);
      std::vector<uint8_t> out((*p)->sample_bytes());
      ASSERT_TRUE((*p)->Process(testing::EncodeJpeg(120, 80, 4), 2, 0, i, out.data(), nullptr, nullptr, &t).ok());
      for (const auto& b : t.boxes) EXPECT_TRUE(b[0] >= 0 && b[2] <= 96 && b[1] >= 0 && b[3] <= 64);
    }
  }
  // Letterbox of a 120 x 80 image into 96 x 64 is exactly 0.8x with no border: the box scales.
  Result<std::shared_ptr<const Pipeline>> p =
      Pipeline::Compile(*PipelineSpec::FromJson(R"({"ops": [{"op": "letterbox", "size": [64, 96]}]})"));
  SampleTargets t = OneBox(10, 10, 60, 40);
  std::vector<uint8_t> out((*p)->sample_bytes());
  ASSERT_TRUE((*p)->Process(testing::EncodeJpeg(120, 80, 4), 2, 0, 0, out.data(), nullptr, nullptr, &t).ok());
  ASSERT_EQ(t.boxes.size(), 1u);
  EXPECT_NEAR(t.boxes[0][0], 8, 1e-4);
  EXPECT_NEAR(t.boxes[0][3], 32, 1e-4);
  // Into 96 x 96: the 96 x 64 picture centred, 16 rows of fill above.
  p = Pipeline::Compile(*PipelineSpec::FromJson(R"({"ops": [{"op": "letterbox", "size": 96}]})"));
  t = OneBox(10, 10, 60, 40);
  out.resize((*p)->sample_bytes());
  ASSERT_TRUE((*p)->Process(testing::EncodeJpeg(120, 80, 4), 2, 0, 0, out.data(), nullptr, nullptr, &t).ok());
  EXPECT_NEAR(t.boxes[0][1], 8 + 16, 1e-4);
  EXPECT_NEAR(t.boxes[0][2], 48, 1e-4);
}

}  // namespace
}  // namespace ferry
