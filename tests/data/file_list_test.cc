// Tests of lib/data/file_list.cc (FileList): parsing TSV listings, relative paths,
// fingerprints, and errors that name the file and line.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "data/data_test_util.h"
#include "data/dataset.h"
#include "testutil.h"

namespace ferry {
namespace {

using testing::AllLabels;
using testing::EncodeJpeg;
using testing::EncodePng;
using testing::MakeDirs;
using testing::MustOpen;
using testing::ReadFile;
using testing::TempDir;
using testing::WriteFile;

TEST(FileListTest, ParsesPathsLabelsCommentsAndRelativePaths) {
  TempDir tmp;
  MakeDirs(tmp / "lists");
  MakeDirs(tmp / "lists/imgs");
  const std::string a = EncodeJpeg(10, 10, 1), b = EncodePng(10, 10, 2);
  WriteFile(tmp / "lists/imgs/a.jpg", a);
  WriteFile(tmp / "elsewhere.png", b);
  const std::string tsv = tmp / "lists/train.tsv";
  WriteFile(tsv,
            "# header comment\n"
            "\n"
            "imgs/a.jpg\t3\n"
            "   \n" +
                tmp.path() +
                "/elsewhere.png\t 0 \r\n"
                "imgs/a.jpg\t7");  // no final newline
  auto ds = MustOpen(OpenFileList(tsv));
  ASSERT_NE(ds, nullptr);
  EXPECT_EQ(ds->kind(), "file_list");
  EXPECT_TRUE(ds->classes().empty());
  EXPECT_TRUE(ds->listing_issues().empty());
  ASSERT_EQ(ds->size(), 3);
  EXPECT_EQ(AllLabels(*ds), (std::vector<int32_t>{3, 0, 7}));
  EXPECT_EQ(ds->Path(0), tmp.path() + "/lists/imgs/a.jpg");
  EXPECT_EQ(ds->Path(1), tmp.path() + "/elsewhere.png");
  std::string bytes;
  ASSERT_TRUE(ds->ReadSample(0, &bytes).ok());
  EXPECT_EQ(bytes, a);
  ASSERT_TRUE(ds->ReadSample(1, &bytes).ok());
  EXPECT_EQ(bytes, b);

  auto again = MustOpen(OpenFileList(tsv));
  ASSERT_NE(again, nullptr);
  EXPECT_EQ(again->fingerprint(), ds->fingerprint());
  WriteFile(tsv, ReadFile(tsv) + "\nimgs/a.jpg\t1\n");
  auto more = MustOpen(OpenFileList(tsv));
  ASSERT_NE(more, nullptr);
  EXPECT_EQ(more->size(), 4);
  EXPECT_NE(more->fingerprint(), ds->fingerprint());
}

TEST(FileListTest, MissingFileFailsAtReadTime) {
  TempDir tmp;
  WriteFile(tmp / "l.tsv", "nope.jpg\t1\n");
  auto ds = MustOpen(OpenFileList(tmp / "l.tsv"));
  ASSERT_NE(ds, nullptr);
  std::string bytes;
  EXPECT_EQ(ds->ReadSample(0, &bytes).code(), StatusCode::kNotFound);
}

TEST(FileListTest, MalformedLinesNameTheLine) {
  TempDir tmp;
  const std::string tsv = tmp / "bad.tsv";
  struct Case {
    std::string text;
    std::string line;
  };
  for (const Case& c : std::vector<Case>{{"a.jpg\t1\nb.jpg 2\n", ":2:"},
                                         {"# c\na.jpg\tcat\n", ":2:"},
                                         {"a.jpg\t1\n\nb.jpg\t-3\n", ":3:"},
                                         {"a.jpg\t1.5\n", ":1:"},
                                         {"a.jpg\t\n", ":1:"},
                                         {"\t4\n", ":1:"},
                                         {"a.jpg\t99999999999\n", ":1:"},
                                         {"a.jpg\t1\tx\n", ":1:"}}) {
    WriteFile(tsv, c.text);
    const Status s = OpenFileList(tsv).status();
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << c.text;
    EXPECT_NE(s.message().find(tsv + c.line), std::string::npos) << s.message();
  }
  WriteFile(tsv, "# only comments\n\n");
  EXPECT_EQ(OpenFileList(tsv).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(OpenFileList(tmp / "missing.tsv").status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace ferry
