// Tests of lib/data/source.cc: the source registry and OpenDataset's dispatch through
// it, the description reader, and the traits OpenDataset acts on (dataset_bases.h).
#include "data/source.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "data/data_roots.h"
#include "data/data_test_util.h"
#include "data/dataset.h"
#include "data/dataset_bases.h"
#include "testutil.h"

namespace ferry {
namespace {

using testing::EncodeJpeg;
using testing::MakeDirs;
using testing::MakeImageFolder;
using testing::TempDir;
using testing::WriteFile;

std::vector<std::string> Names() {
  std::vector<std::string> names;
  for (const auto& k : RegisteredSources()) names.push_back(k->name);
  return names;
}

TEST(SourceTest, TheBuiltInSourcesRegisterInTheOrderTheyAreAsked) {
  const std::vector<std::string> names = Names();
  const std::vector<std::string> builtin = {"coco", "segmentation", "objects", "tar_shards", "file_list",
                                            "image_folder"};
  ASSERT_GE(names.size(), builtin.size());
  EXPECT_EQ(std::vector<std::string>(names.begin(), names.begin() + long(builtin.size())), builtin);
}

TEST(SourceTest, ASpecIsReadOnceIntoItsForm) {
  TempDir tmp;
  MakeDirs(tmp / "d");
  WriteFile(tmp / "f.tsv", "");
  const DataRoots none;
  auto form = [&](const std::string& spec) { return ReadSourceSpec(spec, none); };
  auto url = form("S3://bucket/train/");
  ASSERT_TRUE(url.ok());
  EXPECT_EQ(url->form, SpecForm::kUrl);
  EXPECT_EQ(url->scheme, "s3");
  auto description = form(R"({"format": "coco", "annotations": "a.json", "images": "i"})");
  ASSERT_TRUE(description.ok());
  EXPECT_EQ(description->form, SpecForm::kDescription);
  EXPECT_EQ(description->format, "coco");
  EXPECT_EQ(form("{000..003}.tar")->form, SpecForm::kPattern) << "a brace pattern, though it starts with '{'";
  EXPECT_EQ(form("/no/such/a.tar,/no/such/b.tar")->form, SpecForm::kPattern);
  EXPECT_EQ(form(tmp / "d")->form, SpecForm::kPath);
  EXPECT_TRUE(form(tmp / "d")->is_dir);
  EXPECT_FALSE(form(tmp / "f.tsv")->is_dir);
  EXPECT_EQ(form(tmp / "missing").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(form("").status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(form(R"({"format": 3})").status().message().find("\"format\" must name the source"), std::string::npos);
  EXPECT_NE(form(R"({"format": )").status().message().find("not valid JSON"), std::string::npos);
}

TEST(SourceTest, WhenNoSourceClaimsASpecTheMessageSaysWhatEachWouldTake) {
  TempDir tmp;
  WriteFile(tmp / "notes.md", "x");
  auto ds = OpenDataset(tmp / "notes.md");
  ASSERT_FALSE(ds.ok());
  const std::string m = ds.status().message();
  EXPECT_NE(m.find("cannot tell the dataset kind"), std::string::npos) << m;
  EXPECT_NE(m.find(".tsv/.txt file list"), std::string::npos) << m;
  EXPECT_NE(m.find("ImageFolder"), std::string::npos) << m;
  EXPECT_NE(m.find(".tar shard"), std::string::npos) << m;
  auto unknown = OpenDataset(R"({"format": "voc"})");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("unknown format \"voc\" (known: coco, segmentation"), std::string::npos)
      << unknown.status().ToString();
}

// A source of the test's own, added the way a new source is: one registration. It
// reads "numbers" descriptions: n samples whose bytes are a JPEG each.
class NumbersDataset final : public ListedDataset {
 public:
  NumbersDataset(int64_t n, std::string jpeg)
      : ListedDataset({.kind = "numbers", .fingerprint = uint64_t(n), .reads = SampleReads::kChecked}),
        n_(n),
        jpeg_(std::move(jpeg)) {}
  int64_t size() const override { return n_; }
  std::string Path(int64_t index) const override { return "numbers:" + std::to_string(index); }
  Status ReadSample(int64_t, std::string* out) const override {
    *out = jpeg_;
    return Status::OK();
  }

 private:
  const int64_t n_;
  const std::string jpeg_;
};

TEST(SourceTest, ANewSourceIsOneRegistrationAndOpensLikeTheBuiltIns) {
  RegisterSource({
      .name = "numbers",
      .formats = {"numbers"},
      .open = [](const SourceSpec& s, const DataRoots&) -> Result<std::unique_ptr<Dataset>> {
        DescriptionArgs args(s);
        const int64_t n = args.Int("n", 1, 1, 1000);
        FERRY_RETURN_IF_ERROR(args.Finish());
        return std::unique_ptr<Dataset>(new NumbersDataset(n, EncodeJpeg(8, 8, 1)));
      },
  });
  auto ds = OpenDataset(R"({"format": "numbers", "n": 5})");
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  EXPECT_EQ((*ds)->kind(), "numbers");
  EXPECT_EQ((*ds)->size(), 5);
  EXPECT_EQ((*ds)->Label(3), 0) << "no labels listed: every label is 0";
  EXPECT_TRUE((*ds)->classes().empty());
  // Its description is checked like every other: a misspelt key, a value out of range.
  auto misspelt = OpenDataset(R"({"format": "numbers", "count": 5})");
  ASSERT_FALSE(misspelt.ok());
  EXPECT_NE(misspelt.status().message().find("unknown key \"count\" for format numbers (n)"), std::string::npos)
      << misspelt.status().ToString();
  auto range = OpenDataset(R"({"format": "numbers", "n": 0})");
  EXPECT_NE(range.status().message().find("\"n\" must be an integer in [1, 1000]"), std::string::npos)
      << range.status().ToString();
  // The registry names it among the formats it knows.
  EXPECT_NE(OpenDataset(R"({"format": "voc"})").status().message().find("numbers"), std::string::npos);
}

TEST(SourceTest, TraitsSayHowSamplesAreReadAndConfinementFollowsThem) {
  TempDir tmp;
  MakeImageFolder(tmp / "root/imgs", 2, 2);
  WriteFile(tmp / "root/list.tsv", "imgs/class_0/img_0.jpg\t0\n");
  auto folder = OpenDataset(tmp / "root/imgs");
  ASSERT_TRUE(folder.ok());
  EXPECT_EQ((*folder)->sample_reads(), SampleReads::kByPath);
  EXPECT_FALSE((*folder)->entries_from_contents()) << "found by walking a folder";
  auto list = OpenDataset(tmp / "root/list.tsv");
  ASSERT_TRUE(list.ok());
  EXPECT_EQ((*list)->sample_reads(), SampleReads::kByPath);
  EXPECT_TRUE((*list)->entries_from_contents()) << "written in the list";
  EXPECT_EQ(MakeSyntheticDataset(4)->sample_reads(), SampleReads::kNone);
  EXPECT_EQ(MakeUserCodeDataset(4, 1)->sample_reads(), SampleReads::kNone);
  // Confined: a by-path dataset keeps its traits through the wrapper that re-checks
  // each read, and a list entry written outside the roots is refused at open.
  auto roots = DataRoots::Make({tmp / "root"});
  ASSERT_TRUE(roots.ok());
  auto confined = OpenDataset(tmp / "root/list.tsv", *roots);
  ASSERT_TRUE(confined.ok()) << confined.status().ToString();
  EXPECT_EQ((*confined)->sample_reads(), SampleReads::kByPath);
  EXPECT_TRUE((*confined)->entries_from_contents());
  EXPECT_EQ((*confined)->kind(), "file_list");
  WriteFile(tmp / "root/out.tsv", "/etc/hostname\t0\n");
  auto out = OpenDataset(tmp / "root/out.tsv", *roots);
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("file list entry /etc/hostname is outside"), std::string::npos)
      << out.status().ToString();
}

}  // namespace
}  // namespace ferry
