// Tests of lib/data/data_roots.cc (--data-root): what a confined OpenDataset refuses
// at open, what a confined dataset refuses when a sample is read, and that the
// refusals name the path and the rule, never a file's contents.
#include "data/data_roots.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "data/data_test_util.h"
#include "data/dataset.h"
#include "testutil.h"

namespace ferry {
namespace {

using testing::EncodeJpeg;
using testing::MakeDirs;
using testing::TempDir;
using testing::WriteFile;

class DataRootsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    MakeDirs(tmp_ / "root/imgs/cat");
    MakeDirs(tmp_ / "outside");
    WriteFile(tmp_ / "root/imgs/cat/a.jpg", EncodeJpeg(8, 8, 1));
    WriteFile(tmp_ / "outside/b.jpg", EncodeJpeg(8, 8, 2));
    auto r = DataRoots::Make({tmp_ / "root"});
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    roots_ = *r;
  }
  void ExpectRefused(const std::string& spec, const std::string& what) {
    auto ds = OpenDataset(spec, roots_);
    ASSERT_FALSE(ds.ok()) << spec << " was opened";
    EXPECT_EQ(ds.status().code(), StatusCode::kPermissionDenied) << ds.status().ToString();
    EXPECT_NE(ds.status().message().find(what), std::string::npos) << ds.status().ToString();
    EXPECT_NE(ds.status().message().find("--data-root"), std::string::npos) << ds.status().ToString();
  }
  TempDir tmp_;
  DataRoots roots_;
};

TEST_F(DataRootsTest, PathsOutsideAreRefusedAtOpenByName) {
  ExpectRefused("/", "dataset / is outside");
  ExpectRefused("/proc/self/root/etc", "dataset /proc/self/root/etc (/etc) is outside");
  ExpectRefused(tmp_ / "root/..", "is outside");
  ExpectRefused(tmp_ / "outside", "dataset " + (tmp_ / "outside"));
  // Missing outside the roots: refused the same, not NotFound (no existence oracle).
  ExpectRefused("/no/such/folder", "dataset /no/such/folder is outside");
  ExpectRefused("/no/such/a.tar,/no/such/b.tar", "shard /no/such/a.tar is outside");
  std::filesystem::create_directory_symlink("/etc", tmp_ / "root/etc-link");
  ExpectRefused(tmp_ / "root/etc-link", "(/etc) is outside");
  WriteFile(tmp_ / "root/absolute.tsv", "imgs/cat/a.jpg\t0\n/etc/hostname\t0\n");
  ExpectRefused(tmp_ / "root/absolute.tsv", "file list entry /etc/hostname is outside");
  WriteFile(tmp_ / "root/climbs.tsv", "../outside/b.jpg\t0\n");
  ExpectRefused(tmp_ / "root/climbs.tsv", "file list entry " + (tmp_ / "root/../outside/b.jpg"));
}

TEST_F(DataRootsTest, InsideOpensAndASymlinkOutIsABadSampleWhenRead) {
  auto folder = OpenDataset(tmp_ / "root/imgs", roots_);
  ASSERT_TRUE(folder.ok()) << folder.status().ToString();
  std::string bytes;
  EXPECT_TRUE((*folder)->ReadSample(0, &bytes).ok());
  // A list inside, whose entry is a link inside that leads out: the job opens (the
  // entry reads as inside), and that sample is refused when read, by path.
  std::filesystem::create_symlink(tmp_ / "outside/b.jpg", tmp_ / "root/link.jpg");
  WriteFile(tmp_ / "root/list.tsv", "imgs/cat/a.jpg\t0\nlink.jpg\t1\n");
  auto list = OpenDataset(tmp_ / "root/list.tsv", roots_);
  ASSERT_TRUE(list.ok()) << list.status().ToString();
  EXPECT_TRUE((*list)->ReadSample(0, &bytes).ok());
  Status s = (*list)->ReadSample(1, &bytes);
  EXPECT_EQ(s.code(), StatusCode::kPermissionDenied) << s.ToString();
  EXPECT_NE(s.message().find("sample " + (tmp_ / "root/link.jpg")), std::string::npos) << s.ToString();
  // Unconfined, the same link reads.
  auto open = OpenDataset(tmp_ / "root/list.tsv");
  ASSERT_TRUE(open.ok());
  EXPECT_TRUE((*open)->ReadSample(1, &bytes).ok());
}

TEST_F(DataRootsTest, AListThatFailsToParseIsNeverQuoted) {
  WriteFile(tmp_ / "root/secret.txt", "SECRET-VALUE\tnot-a-number\n");
  auto ds = OpenDataset(tmp_ / "root/secret.txt", roots_);
  ASSERT_FALSE(ds.ok());
  EXPECT_NE(ds.status().message().find("secret.txt:1: the label is not an integer"), std::string::npos)
      << ds.status().ToString();
  EXPECT_EQ(ds.status().message().find("SECRET"), std::string::npos) << ds.status().ToString();
  EXPECT_EQ(ds.status().message().find("not-a-number"), std::string::npos) << ds.status().ToString();
}

TEST(DataRootsMakeTest, ARootMustBeAFolder) {
  TempDir tmp;
  WriteFile(tmp / "file", "x");
  EXPECT_EQ(DataRoots::Make({tmp / "file"}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(DataRoots::Make({tmp / "missing"}).status().code(), StatusCode::kNotFound);
  auto all = DataRoots::Make({"/"});
  ASSERT_TRUE(all.ok());
  EXPECT_TRUE(all->Check("/etc", "dataset").ok());
  EXPECT_FALSE(DataRoots().confined());
}

}  // namespace
}  // namespace ferry
