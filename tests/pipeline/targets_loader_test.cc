// Targets end to end in process: a COCO dataset of real photographs with painted shapes
// (tests/ops/painted_shapes.h; polygons for the rectangles, RLE for the triangles,
// category ids 10, 20, ...), read by the Loader with a job's targets. Every batch
// carries boxes, labels, masks and image ids as fields (ferry/batch.h), each image's
// targets match its pixels, and every image comes once per epoch. A sample whose
// annotation does not fit its image is skipped and reported; jobs that cannot carry
// targets are refused by name.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <opencv2/core.hpp>

#include "ferry/loader.h"
#include "ops/painted_shapes.h"
#include "testutil.h"

namespace ferry {
namespace {

using testing::Checked;
using testing::ExpectTargetsFollow;
using testing::kShapes;
using testing::Painted;
using testing::PaintPhoto;
using testing::Photos;
using testing::TempDir;
using testing::WriteFile;

// COCO's uncompressed RLE of a 0/1 raster: column-major runs from 0s.
std::vector<uint32_t> Rle(const cv::Mat& raster) {
  std::vector<uint32_t> counts;
  uint8_t v = 0;
  uint32_t run = 0;
  for (int x = 0; x < raster.cols; ++x) {
    for (int y = 0; y < raster.rows; ++y) {
      const uint8_t p = raster.at<uint8_t>(y, x) != 0;
      if (p != v) {
        counts.push_back(run);
        run = 0;
        v = p;
      }
      ++run;
    }
  }
  counts.push_back(run);
  return counts;
}

struct Coco {
  std::string spec;
  int images = 0;
  std::vector<int64_t> ids;
};

// `n` painted photos as JPEGs plus instances.json; image i has id 1000 + 7 i.
// `bad_rle`: image 1's RLE claims a size its image does not have.
Coco MakeCoco(const TempDir& dir, int n, bool bad_rle = false) {
  testing::MakeDirs(dir.path() + "/images");
  const std::vector<std::string> photos = Photos(4);
  nlohmann::json images = nlohmann::json::array(), anns = nlohmann::json::array(), cats = nlohmann::json::array();
  for (int k = 0; k < kShapes; ++k) cats.push_back({{"id", 10 * (k + 1)}, {"name", "colour" + std::to_string(k)}});
  Coco c;
  int64_t ann_id = 1;
  for (int i = 0; i < n; ++i) {
    const Painted p = PaintPhoto(photos[size_t(i) % photos.size()], uint64_t(i) + 1, false);
    const std::string name = "img_" + std::to_string(i) + ".jpg";
    WriteFile(dir.path() + "/images/" + name, p.bytes);
    const int64_t id = 1000 + 7 * i;
    c.ids.push_back(id);
    images.push_back({{"id", id}, {"file_name", name}, {"width", p.width}, {"height", p.height}});
    for (size_t k = 0; k < p.targets.boxes.size(); ++k) {
      const auto& b = p.targets.boxes[k];
      nlohmann::json a = {{"id", ann_id++},
                          {"image_id", id},
                          {"category_id", p.targets.labels[k] * 10},
                          {"bbox", {b[0], b[1], b[2] - b[0], b[3] - b[1]}},
                          {"area", (b[2] - b[0]) * (b[3] - b[1])},
                          {"iscrowd", 0}};
      const InstanceMask& m = p.targets.masks[k];
      if (!m.polygons.empty()) {
        nlohmann::json poly = nlohmann::json::array();
        for (const cv::Point2f& q : m.polygons[0]) poly.push_back(q.x), poly.push_back(q.y);
        a["segmentation"] = nlohmann::json::array({poly});
      } else {
        const int h = bad_rle && i == 1 ? m.raster.rows / 2 : m.raster.rows;
        a["segmentation"] = {{"size", {h, m.raster.cols}}, {"counts", Rle(m.raster.rowRange(0, h))}};
      }
      anns.push_back(a);
    }
  }
  WriteFile(dir.path() + "/instances.json",
            nlohmann::json({{"images", images}, {"annotations", anns}, {"categories", cats}}).dump());
  c.images = n;
  c.spec = nlohmann::json({{"format", "coco"},
                           {"annotations", dir.path() + "/instances.json"},
                           {"images", dir.path() + "/images"}})
               .dump();
  return c;
}

JobSpec TargetsJob(const std::string& dataset, const std::string& ops) {
  JobSpec job;
  job.dataset = dataset;
  job.pipeline = *PipelineSpec::FromJson(R"({"ops": )" + ops + "}");
  job.batch_size = 4;
  job.epochs = 2;
  job.seed = 11;
  job.targets = {"boxes", "labels", "masks", "image_id"};
  return job;
}

// The targets of row r of a batch, as a SampleTargets whose labels are colour + 1.
SampleTargets RowTargets(const Batch& b, int64_t r, int h) {
  SampleTargets t;
  const BatchField* boxes = b.field("boxes");
  const BatchField* labels = b.field("labels");
  const BatchField* masks = b.field("masks");
  const auto [lo, hi] = boxes->range(r);
  EXPECT_EQ(labels->range(r), boxes->range(r));
  EXPECT_EQ(masks->range(r), boxes->range(r));
  for (int64_t i = lo; i < hi; ++i) {
    const float* x = boxes->values.as<float>() + 4 * i;
    t.boxes.push_back({x[0], x[1], x[2], x[3]});
    t.labels.push_back(labels->values.as<int64_t>()[i] / 10);
  }
  const int w = int(masks->values.shape[2]);
  t.instance_masks = cv::Mat(int(hi - lo) * h, w, CV_8UC1, masks->values.as<uint8_t>() + size_t(lo) * h * w);
  return t;
}

TEST(TargetsLoaderTest, CocoBoxesAndMasksFollowEachImageOncePerEpoch) {
  TempDir dir;
  const Coco coco = MakeCoco(dir, 10);
  LoaderOptions o;
  o.job = TargetsJob(coco.spec, R"([{"op": "random_resized_crop", "size": 224, "scale": [0.3, 1.0]}, {"op": "hflip"}])");
  o.threads = 2;
  Result<std::unique_ptr<Loader>> loader = Loader::Open(o);
  ASSERT_TRUE(loader.ok()) << loader.status().ToString();
  std::map<uint64_t, std::map<int64_t, int>> seen;  // epoch -> image id -> times
  int visible = 0;
  for (;;) {
    Result<Batch> b = (*loader)->Next();
    if (!b.ok()) {
      ASSERT_EQ(b.status().code(), StatusCode::kOutOfRange) << b.status().ToString();
      break;
    }
    ASSERT_EQ(b->fields.size(), 4u);
    const BatchField* ids = b->field("image_id");
    ASSERT_NE(ids, nullptr);
    ASSERT_FALSE(ids->ragged());
    const int h = int(b->images.shape[1]), w = int(b->images.shape[2]);
    for (int64_t r = 0; r < b->valid_rows(); ++r) {
      const int64_t id = ids->values.as<int64_t>()[r];
      const int64_t index = b->indices.as<int64_t>()[r];
      EXPECT_EQ(id, coco.ids[size_t(index)]);  // the id goes with its own image
      ++seen[b->provenance.epoch][id];
      const cv::Mat img(h, w, CV_8UC3, b->images.as<uint8_t>() + size_t(r) * h * w * 3);
      const SampleTargets t = RowTargets(*b, r, h);
      const Checked c = ExpectTargetsFollow(img, t, /*axis_aligned=*/true, /*tight=*/false,
                                            "epoch " + std::to_string(b->provenance.epoch) + " image " + std::to_string(id));
      visible += c.visible;
      if (::testing::Test::HasFailure()) return;
    }
  }
  ASSERT_EQ(seen.size(), 2u);
  for (const auto& [epoch, ids] : seen) {
    EXPECT_EQ(ids.size(), size_t(coco.images)) << "epoch " << epoch;
    for (const auto& [id, times] : ids) EXPECT_EQ(times, 1) << "epoch " << epoch << " image " << id;
  }
  EXPECT_GE(visible, 2 * coco.images * kShapes / 3);
  EXPECT_TRUE((*loader)->TakeSkipped().empty());
}

TEST(TargetsLoaderTest, AnAnnotationThatDoesNotFitIsASkippedSample) {
  TempDir dir;
  const Coco coco = MakeCoco(dir, 4, /*bad_rle=*/true);
  LoaderOptions o;
  o.job = TargetsJob(coco.spec, R"([{"op": "resize", "size": [128, 128]}])");
  o.job.epochs = 1;
  o.job.shuffle = false;
  Result<std::unique_ptr<Loader>> loader = Loader::Open(o);
  ASSERT_TRUE(loader.ok()) << loader.status().ToString();
  int64_t rows = 0;
  for (Result<Batch> b = (*loader)->Next(); b.ok(); b = (*loader)->Next()) rows += b->valid_rows();
  EXPECT_EQ(rows, 3);
  const std::vector<SkippedSample> skipped = (*loader)->TakeSkipped();
  ASSERT_EQ(skipped.size(), 1u);
  EXPECT_EQ(skipped[0].path, dir.path() + "/images/img_1.jpg");
  EXPECT_NE(skipped[0].reason.find("mask of box"), std::string::npos) << skipped[0].reason;
}

TEST(TargetsLoaderTest, JobsThatCannotCarryTargetsAreRefused) {
  TempDir dir;
  const Coco coco = MakeCoco(dir, 2);
  LoaderOptions o;
  o.job = TargetsJob(coco.spec, R"([{"op": "rand_augment"}, {"op": "resize", "size": [64, 64]}])");
  Result<std::unique_ptr<Loader>> loader = Loader::Open(o);
  ASSERT_FALSE(loader.ok());
  EXPECT_NE(loader.status().message().find("rand_augment"), std::string::npos) << loader.status().ToString();

  testing::MakeDirs(dir.path() + "/folder/a");
  WriteFile(dir.path() + "/folder/a/x.jpg", testing::EncodeJpeg(64, 48, 1));
  o.job = TargetsJob(dir.path() + "/folder", R"([{"op": "resize", "size": [64, 64]}])");
  loader = Loader::Open(o);
  ASSERT_FALSE(loader.ok());
  EXPECT_NE(loader.status().message().find("has no annotations"), std::string::npos) << loader.status().ToString();

  o.job.targets = {"boxes", "captions"};
  loader = Loader::Open(o);
  ASSERT_FALSE(loader.ok());
  EXPECT_NE(loader.status().message().find("unknown field"), std::string::npos) << loader.status().ToString();
}

}  // namespace
}  // namespace ferry
