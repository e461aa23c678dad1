// Tests of lib/data/coco.cc: the listing (image id order, paths), the annotations of
// each sample (XYXY boxes, labels raw and contiguous, iscrowd, area, polygons, both RLE
// forms), the options, malformed elements reported by index and rule without quoting
// the file, malformed JSON, and the JSON dataset spec with --data-root.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "data/annotations.h"
#include "data/data_roots.h"
#include "data/dataset.h"
#include "testutil.h"

namespace ferry {
namespace {

using testing::TempDir;
using testing::WriteFile;

// pycocotools' rleToString, written from its definition: each count after the second
// as the difference from the one two before, in 5-bit groups (low first) with 0x20 for
// "more" and the last group's 0x10 as the sign, each + 48.
std::string EncodeRle(const std::vector<uint32_t>& counts) {
  std::string s;
  for (size_t i = 0; i < counts.size(); ++i) {
    int64_t x = counts[i];
    if (i > 2) x -= int64_t(counts[i - 2]);
    bool more = true;
    while (more) {
      int64_t c = x & 0x1f;
      x >>= 5;
      more = (c & 0x10) ? x != -1 : x != 0;
      if (more) c |= 0x20;
      s.push_back(char(c + 48));
    }
  }
  return s;
}

constexpr char kInstances[] = R"({
  "info": {"description": "test", "nested": [[1, 2], {"a": [3]}]},
  "licenses": [{"id": 1, "name": "x"}],
  "images": [
    {"id": 9, "file_name": "c.jpg", "width": 40, "height": 30},
    {"id": 2, "file_name": "a.jpg", "width": 40, "height": 30},
    {"id": 5, "file_name": "b.jpg", "width": 40, "height": 30},
    {"id": 7, "file_name": "d.jpg", "width": 40, "height": 30}
  ],
  "annotations": [
    {"id": 1, "image_id": 2, "category_id": 18, "bbox": [1, 2, 10, 20], "area": 150.5, "iscrowd": 0,
     "segmentation": [[1, 2, 11, 2, 11, 22], [0, 0, 1, 0, 1, 1, 0, 1]]},
    {"id": 2, "image_id": 5, "category_id": 3, "bbox": [0, 0, 4, 3], "iscrowd": 1,
     "segmentation": {"size": [3, 4], "counts": [2, 3, 4, 3]}},
    {"id": 3, "image_id": 2, "category_id": 3, "bbox": [5, 5, 1, 1], "iscrowd": 0, "segmentation": []},
    {"id": 4, "image_id": 9, "category_id": 18, "bbox": [1, 1, 5, 5], "iscrowd": 1,
     "segmentation": {"size": [3, 4], "counts": "RLE"}},
    {"id": 5, "image_id": 9, "category_id": 18, "bbox": [1, 2, "SECRET-TEXT"]},
    {"id": 6, "image_id": 404, "category_id": 18, "bbox": [1, 2, 3, 4]},
    {"id": 7, "image_id": 9, "category_id": 3, "bbox": [0, 0, -1, 4]},
    "SECRET-SCALAR"
  ],
  "categories": [{"id": 18, "name": "dog"}, {"id": 3, "name": "car"}]
})";

std::string Instances() {
  std::string s = kInstances;
  // Image 9's crowd mask in the compressed form: 3 x 4 with runs 1, 6, 5.
  const size_t at = s.find("\"RLE\"");
  s.replace(at, 5, "\"" + EncodeRle({1, 6, 5}) + "\"");
  return s;
}

TEST(CocoRleTest, CompressedStringsRoundTrip) {
  const std::vector<std::vector<uint32_t>> cases = {
      {0}, {5, 3}, {1, 6, 5}, {100000, 1, 99999, 2, 3, 40000, 0, 7}, {31, 32, 15, 16, 17, 1u << 30}};
  for (const auto& c : cases) {
    Result<std::vector<uint32_t>> d = DecodeCocoRleString(EncodeRle(c));
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    EXPECT_EQ(*d, c);
  }
  EXPECT_FALSE(DecodeCocoRleString("0\x7f").ok());             // outside the alphabet
  EXPECT_FALSE(DecodeCocoRleString("o").ok());                 // ends inside a count (0x20 set)
  EXPECT_FALSE(DecodeCocoRleString("321F").ok());             // the 4th count: 2 + (-10), negative
}

TEST(CocoRleTest, ExpandIsColumnMajorAndMustAddUp) {
  // 3 x 4, column-major: 2 zeros, 3 ones, 4 zeros, 3 ones.
  std::vector<uint8_t> m(12);
  ASSERT_TRUE(ExpandRle({2, 3, 4, 3}, 3, 4, m.data()).ok());
  const std::vector<uint8_t> want = {0, 1, 0, 1,   // row 0: (x=0,y=0)=0, (1,0)=1 (pos 3), (2,0)=0, (3,0)=1 (pos 9)
                                     0, 1, 0, 1,   // row 1
                                     1, 0, 0, 1};  // row 2
  EXPECT_EQ(m, want);
  EXPECT_FALSE(ExpandRle({2, 3}, 3, 4, m.data()).ok());
  EXPECT_FALSE(ExpandRle({20}, 3, 4, m.data()).ok());
}

TEST(CocoTest, ListsImagesByIdWithTheirAnnotations) {
  TempDir dir;
  WriteFile(dir.path() + "/instances.json", Instances());
  Result<std::unique_ptr<Dataset>> ds = OpenCoco(dir.path() + "/instances.json", dir.path() + "/images");
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  ASSERT_EQ((*ds)->size(), 4);
  EXPECT_EQ((*ds)->kind(), "coco");
  EXPECT_TRUE((*ds)->has_annotations());
  EXPECT_EQ((*ds)->Path(0), dir.path() + "/images/a.jpg");  // id 2
  EXPECT_EQ((*ds)->Path(1), dir.path() + "/images/b.jpg");  // id 5
  EXPECT_EQ((*ds)->Path(2), dir.path() + "/images/d.jpg");  // id 7 (no annotations: kept)
  EXPECT_EQ((*ds)->Path(3), dir.path() + "/images/c.jpg");  // id 9

  SampleAnnotations a;
  ASSERT_TRUE((*ds)->ReadAnnotations(0, &a).ok());
  EXPECT_EQ(a.image_id, 2);
  ASSERT_EQ(a.boxes.size(), 2u);  // ids 1 and 3, in the file's order
  EXPECT_EQ(a.boxes[0], (std::array<float, 4>{1, 2, 11, 22}));
  EXPECT_EQ(a.boxes[1], (std::array<float, 4>{5, 5, 6, 6}));
  EXPECT_EQ(a.labels, (std::vector<int64_t>{18, 3}));
  EXPECT_EQ(a.iscrowd, (std::vector<uint8_t>{0, 0}));
  EXPECT_EQ(a.area, (std::vector<float>{150.5f, 1.0f}));
  ASSERT_EQ(a.masks.size(), 2u);
  ASSERT_EQ(a.masks[0].polygons.size(), 2u);
  EXPECT_EQ(a.masks[0].polygons[0], (std::vector<float>{1, 2, 11, 2, 11, 22}));
  EXPECT_TRUE(a.masks[1].empty());

  ASSERT_TRUE((*ds)->ReadAnnotations(1, &a).ok());
  EXPECT_EQ(a.image_id, 5);
  ASSERT_EQ(a.masks.size(), 1u);
  EXPECT_EQ(a.masks[0].rle_counts, (std::vector<uint32_t>{2, 3, 4, 3}));
  EXPECT_EQ(a.masks[0].rle_height, 3);
  EXPECT_EQ(a.masks[0].rle_width, 4);
  EXPECT_EQ(a.iscrowd, (std::vector<uint8_t>{1}));
  EXPECT_EQ(a.area, (std::vector<float>{12.0f}));  // no area given: the box's

  ASSERT_TRUE((*ds)->ReadAnnotations(2, &a).ok());
  EXPECT_EQ(a.image_id, 7);
  EXPECT_TRUE(a.boxes.empty());

  ASSERT_TRUE((*ds)->ReadAnnotations(3, &a).ok());
  ASSERT_EQ(a.masks.size(), 1u);
  EXPECT_EQ(a.masks[0].rle_counts, (std::vector<uint32_t>{1, 6, 5}));  // the compressed string, decoded

  // Each bad element is a listing issue naming the file, the index and the rule, and
  // nothing of what the element holds.
  const auto& issues = (*ds)->listing_issues();
  ASSERT_EQ(issues.size(), 4u);
  auto has = [&](const std::string& where, const std::string& why) {
    for (const ListingIssue& i : issues)
      if (i.path == dir.path() + "/instances.json:" + where && i.reason.find(why) != std::string::npos) return true;
    return false;
  };
  EXPECT_TRUE(has("annotations[4]", "bbox must be"));
  EXPECT_TRUE(has("annotations[5]", "image_id names no image"));
  EXPECT_TRUE(has("annotations[6]", "negative width"));
  EXPECT_TRUE(has("annotations[7]", "not an object"));
  for (const ListingIssue& i : issues) {
    EXPECT_EQ(i.reason.find("SECRET"), std::string::npos) << i.reason;
    EXPECT_EQ(i.path.find("SECRET"), std::string::npos) << i.path;
  }
}

TEST(CocoTest, OptionsFollowTheDetectionReference) {
  TempDir dir;
  WriteFile(dir.path() + "/instances.json", Instances());
  CocoOptions o;
  o.remove_images_without_annotations = true;  // image 7 (none) and ... every other has a box > 1 x 1
  o.skip_crowd = true;                         // image 5's and 9's only annotations are crowds
  o.contiguous_labels = true;                  // 3 -> 1, 18 -> 2
  Result<std::unique_ptr<Dataset>> ds = OpenCoco(dir.path() + "/instances.json", dir.path(), o);
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  // The reference keeps an image by all its annotations, crowds included, and only then
  // (ConvertCocoPolysToMask) drops the crowds: images 5 and 9 stay, with no box.
  ASSERT_EQ((*ds)->size(), 3);
  SampleAnnotations a;
  ASSERT_TRUE((*ds)->ReadAnnotations(0, &a).ok());
  EXPECT_EQ(a.image_id, 2);
  EXPECT_EQ(a.labels, (std::vector<int64_t>{2, 1}));
  for (int64_t i : {1, 2}) {
    ASSERT_TRUE((*ds)->ReadAnnotations(i, &a).ok());
    EXPECT_EQ(a.image_id, i == 1 ? 5 : 9);
    EXPECT_TRUE(a.boxes.empty());
  }
  Result<std::unique_ptr<Dataset>> plain = OpenCoco(dir.path() + "/instances.json", dir.path());
  ASSERT_TRUE(plain.ok());
  EXPECT_NE((*ds)->fingerprint(), (*plain)->fingerprint());
}

TEST(CocoTest, MalformedFilesFailTheOpenWithWhere) {
  TempDir dir;
  WriteFile(dir.path() + "/broken.json", R"({"images": [{"id": 1, "file_name": "a.jpg"}, )");
  Result<std::unique_ptr<Dataset>> ds = OpenCoco(dir.path() + "/broken.json", dir.path());
  ASSERT_FALSE(ds.ok());
  EXPECT_NE(ds.status().message().find("malformed JSON at byte"), std::string::npos) << ds.status().ToString();
  WriteFile(dir.path() + "/array.json", R"([{"images": []}])");
  ds = OpenCoco(dir.path() + "/array.json", dir.path());
  ASSERT_FALSE(ds.ok());
  EXPECT_NE(ds.status().message().find("not a JSON object"), std::string::npos) << ds.status().ToString();
  WriteFile(dir.path() + "/empty.json", R"({"images": [], "annotations": []})");
  EXPECT_EQ(OpenCoco(dir.path() + "/empty.json", dir.path()).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(OpenCoco(dir.path() + "/missing.json", dir.path()).status().code(), StatusCode::kNotFound);
}

TEST(CocoTest, JsonSpecAndDataRoots) {
  TempDir dir, outside;
  testing::MakeDirs(dir.path() + "/train");
  WriteFile(dir.path() + "/instances.json", Instances());
  WriteFile(outside.path() + "/instances.json", Instances());
  const std::string spec = R"({"format": "coco", "annotations": ")" + dir.path() +
                           R"(/instances.json", "images": ")" + dir.path() + R"(/train", "skip_crowd": true})";
  Result<std::unique_ptr<Dataset>> ds = OpenDataset(spec);
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  EXPECT_EQ((*ds)->size(), 4);
  SampleAnnotations a;
  ASSERT_TRUE((*ds)->ReadAnnotations(1, &a).ok());
  EXPECT_TRUE(a.boxes.empty());  // image 5's one annotation is a crowd

  auto refused = [](const std::string& s, const std::string& why) {
    Result<std::unique_ptr<Dataset>> r = OpenDataset(s);
    EXPECT_FALSE(r.ok()) << s;
    EXPECT_NE(r.status().message().find(why), std::string::npos) << r.status().ToString();
  };
  refused(R"({"format": "coco", "annotations": "x.json"})", "\"images\" must be");
  refused(R"({"format": "coco", "annotations": "x.json", "images": ".", "skip_crowds": true})", "unknown key \"skip_crowds\"");
  refused(R"({"format": "voc"})", "unknown format");
  refused(R"({"format": "coco", )", "not valid JSON");

  Result<DataRoots> roots = DataRoots::Make({dir.path()});
  ASSERT_TRUE(roots.ok());
  ASSERT_TRUE(OpenDataset(spec, *roots).ok());
  const std::string out = R"({"format": "coco", "annotations": ")" + outside.path() +
                          R"(/instances.json", "images": ")" + dir.path() + R"(/train"})";
  Result<std::unique_ptr<Dataset>> r = OpenDataset(out, *roots);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kPermissionDenied);
  EXPECT_NE(r.status().message().find("annotations file"), std::string::npos) << r.status().ToString();
  // A file_name that climbs out of the roots is refused before anything is read.
  std::string climbing = Instances();
  climbing.replace(climbing.find("a.jpg"), 5, "../../../etc/passwd");
  WriteFile(dir.path() + "/climbing.json", climbing);
  r = OpenDataset(R"({"format": "coco", "annotations": ")" + dir.path() + R"(/climbing.json", "images": ")" +
                      dir.path() + R"(/train"})",
                  *roots);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kPermissionDenied) << r.status().ToString();
}

}  // namespace
}  // namespace ferry

namespace ferry {
namespace {

TEST(SegmentationTest, PairsImagesAndMasksByStemInTheThreeLayouts) {
  testing::TempDir dir;
  const std::string png = testing::EncodePng(8, 8, 1), jpg = testing::EncodeJpeg(8, 8, 2);
  // VOC: JPEGImages + SegmentationClass + a list of stems.
  testing::MakeDirs(dir.path() + "/voc/JPEGImages");
  testing::MakeDirs(dir.path() + "/voc/SegmentationClass");
  for (const char* s : {"2007_000032", "2007_000039", "2007_000063"}) {
    testing::WriteFile(dir.path() + "/voc/JPEGImages/" + s + ".jpg", jpg);
    testing::WriteFile(dir.path() + "/voc/SegmentationClass/" + s + ".png", png);
  }
  testing::WriteFile(dir.path() + "/voc/train.txt", "2007_000063\n\n2007_000032\r\nmissing_stem\n");
  Result<std::unique_ptr<Dataset>> voc = OpenDataset(
      R"({"format": "segmentation", "images": ")" + dir.path() + R"(/voc/JPEGImages", "masks": ")" + dir.path() +
      R"(/voc/SegmentationClass", "list": ")" + dir.path() + R"(/voc/train.txt"})");
  ASSERT_TRUE(voc.ok()) << voc.status().ToString();
  ASSERT_EQ((*voc)->size(), 2);
  EXPECT_EQ((*voc)->Path(0), dir.path() + "/voc/JPEGImages/2007_000063.jpg");  // the list's order
  ASSERT_EQ((*voc)->listing_issues().size(), 1u);
  EXPECT_EQ((*voc)->listing_issues()[0].path, dir.path() + "/voc/train.txt:4");
  SampleAnnotations a;
  ASSERT_TRUE((*voc)->ReadAnnotations(1, &a).ok());
  EXPECT_EQ(a.semantic_path, dir.path() + "/voc/SegmentationClass/2007_000032.png");
  EXPECT_EQ(a.semantic_bytes, png);
  EXPECT_EQ(a.semantic_fill, 255);

  // Cityscapes: city folders, suffixes; an image without its mask is an issue.
  testing::MakeDirs(dir.path() + "/cs/leftImg8bit/aachen");
  testing::MakeDirs(dir.path() + "/cs/gtFine/aachen");
  testing::WriteFile(dir.path() + "/cs/leftImg8bit/aachen/aachen_000000_000019_leftImg8bit.png", png);
  testing::WriteFile(dir.path() + "/cs/gtFine/aachen/aachen_000000_000019_gtFine_labelIds.png", png);
  testing::WriteFile(dir.path() + "/cs/leftImg8bit/aachen/aachen_000001_000019_leftImg8bit.png", png);
  Result<std::unique_ptr<Dataset>> cs = OpenDataset(
      R"({"format": "segmentation", "images": ")" + dir.path() + R"(/cs/leftImg8bit", "masks": ")" + dir.path() +
      R"(/cs/gtFine", "image_suffix": "_leftImg8bit", "mask_suffix": "_gtFine_labelIds", "ignore_index": 0})");
  ASSERT_TRUE(cs.ok()) << cs.status().ToString();
  ASSERT_EQ((*cs)->size(), 1);
  ASSERT_TRUE((*cs)->ReadAnnotations(0, &a).ok());
  EXPECT_EQ(a.semantic_path, dir.path() + "/cs/gtFine/aachen/aachen_000000_000019_gtFine_labelIds.png");
  EXPECT_EQ(a.semantic_fill, 0);
  ASSERT_EQ((*cs)->listing_issues().size(), 1u);
  EXPECT_NE((*cs)->listing_issues()[0].reason.find("no mask"), std::string::npos);

  // ADE20K-like: the same stems in two folders, no list.
  testing::MakeDirs(dir.path() + "/ade/images");
  testing::MakeDirs(dir.path() + "/ade/annotations");
  testing::WriteFile(dir.path() + "/ade/images/ADE_train_00000002.jpg", jpg);
  testing::WriteFile(dir.path() + "/ade/annotations/ADE_train_00000002.png", png);
  Result<std::unique_ptr<Dataset>> ade = OpenDataset(R"({"format": "segmentation", "images": ")" + dir.path() +
                                                     R"(/ade/images", "masks": ")" + dir.path() + R"(/ade/annotations"})");
  ASSERT_TRUE(ade.ok()) << ade.status().ToString();
  EXPECT_EQ((*ade)->size(), 1);

  // Unknown keys and a mask folder outside the roots are refused by name.
  Result<std::unique_ptr<Dataset>> bad =
      OpenDataset(R"({"format": "segmentation", "images": "a", "masks": "b", "mask_suffixes": "x"})");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("mask_suffixes"), std::string::npos);
  Result<DataRoots> roots = DataRoots::Make({dir.path() + "/voc"});
  ASSERT_TRUE(roots.ok());
  bad = OpenDataset(R"({"format": "segmentation", "images": ")" + dir.path() + R"(/voc/JPEGImages", "masks": ")" +
                        dir.path() + R"(/cs/gtFine"})",
                    *roots);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kPermissionDenied);
}

}  // namespace
}  // namespace ferry
