// Tests of lib/data/image_folder.cc (ImageFolder: torchvision's order, symlinks,
// listing issues, fingerprints, reads) and of what the sources share in
// dataset_common.cc / file_util.h: HasImageExtension and ReadWholeFile.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "data/data_test_util.h"
#include "data/dataset.h"
#include "data/file_util.h"
#include "testutil.h"

namespace ferry {
namespace {

namespace fs = std::filesystem;
using testing::AllLabels;
using testing::AllPaths;
using testing::EncodeJpeg;
using testing::EncodePng;
using testing::HasIssue;
using testing::MakeDirs;
using testing::MakeImageFolder;
using testing::MustOpen;
using testing::ReadFile;
using testing::TempDir;
using testing::WriteFile;

// ---------------------------------------------------------------- extensions

TEST(HasImageExtensionTest, MatchesTorchvisionListCaseInsensitively) {
  for (const char* yes : {"a.jpg", "a.jpeg", "a.png", "a.ppm", "a.bmp", "a.pgm", "a.tif", "a.tiff",
                          "a.webp", "A.JPG", "b.JpEg", "c.WEBP", "x.y.PNG", ".jpg", "d.TiFf"}) {
    EXPECT_TRUE(HasImageExtension(yes)) << yes;
  }
  for (const char* no : {"a.gif", "a.txt", "jpg", "a.jpg.txt", "a.jpe", "a", "", "a.JPG ", "a.heic",
                         "a_jpg", "a.avif"}) {
    EXPECT_FALSE(HasImageExtension(no)) << no;
  }
}

// ---------------------------------------------------------------- ImageFolder

TEST(ImageFolderTest, MatchesMakeImageFolder) {
  TempDir tmp;
  const std::vector<std::string> expected = MakeImageFolder(tmp.path(), 3, 4);
  auto ds = MustOpen(OpenImageFolder(tmp.path()));
  ASSERT_NE(ds, nullptr);
  EXPECT_EQ(ds->kind(), "image_folder");
  EXPECT_EQ(ds->size(), 12);
  EXPECT_EQ(AllPaths(*ds), expected);
  EXPECT_EQ(ds->classes(), (std::vector<std::string>{"class_0", "class_1", "class_2"}));
  for (int64_t i = 0; i < ds->size(); ++i) EXPECT_EQ(ds->Label(i), i / 4);
  EXPECT_TRUE(ds->listing_issues().empty());
  std::string bytes;
  for (int64_t i = 0; i < ds->size(); ++i) {
    ASSERT_TRUE(ds->ReadSample(i, &bytes).ok());
    EXPECT_EQ(bytes, ReadFile(expected[i]));
  }
}

// The layout and the order torchvision 0.15+ produces for it:
//   classes = sorted(scandir is_dir) = ["B", "a", "c"] (bytes: 'B' < 'a')
//   per class: sorted(os.walk(...)) sorts directories by path: "a" < "a/b" <
//   "a/b-c" < "a/b/sub" ('-' < '/'), and files sorted within each.
TEST(ImageFolderTest, TorchvisionOrderWithNestedDirsAndMixedCase) {
  TempDir tmp;
  const std::string r = tmp.path();
  const std::string img = EncodeJpeg(16, 16, 1);
  for (const char* f : {"a/z.jpg", "a/A.JPG", "a/m.JpEg", "a/.hidden.png", "a/notes.txt",
                        "a/README", "a/gif.gif", "a/b/x.png", "a/b-c/y.jpg", "a/b/sub/w.TIFF",
                        "a/b/sub/v.webp", "B/only.bmp", "c/deep/er/est/q.ppm", "c/k.PGM"}) {
    const fs::path p = fs::path(r) / f;
    MakeDirs(p.parent_path().string());
    WriteFile(p.string(), img);
  }
  WriteFile(r + "/stray.jpg", img);  // files directly under root are not samples

  auto ds = MustOpen(OpenImageFolder(r));
  ASSERT_NE(ds, nullptr);
  EXPECT_EQ(ds->classes(), (std::vector<std::string>{"B", "a", "c"}));
  const std::vector<std::string> expected = {
      r + "/B/only.bmp",
      r + "/a/.hidden.png",
      r + "/a/A.JPG",
      r + "/a/m.JpEg",
      r + "/a/z.jpg",
      r + "/a/b/x.png",
      r + "/a/b-c/y.jpg",
      r + "/a/b/sub/v.webp",
      r + "/a/b/sub/w.TIFF",
      r + "/c/k.PGM",
      r + "/c/deep/er/est/q.ppm",
  };
  EXPECT_EQ(AllPaths(*ds), expected);
  EXPECT_EQ(AllLabels(*ds), (std::vector<int32_t>{0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2}));
  EXPECT_TRUE(ds->listing_issues().empty());
}

TEST(ImageFolderTest, DirectoryNamedLikeImageIsAnIssueAndIsWalked) {
  TempDir tmp;
  const std::string r = tmp.path();
  MakeDirs(r + "/cat/dir.jpg");
  WriteFile(r + "/cat/dir.jpg/inner.png", EncodePng(8, 8, 2));
  WriteFile(r + "/cat/a.jpg", EncodeJpeg(8, 8, 3));
  auto ds = MustOpen(OpenImageFolder(r));
  ASSERT_NE(ds, nullptr);
  EXPECT_EQ(AllPaths(*ds),
            (std::vector<std::string>{r + "/cat/a.jpg", r + "/cat/dir.jpg/inner.png"}));
  EXPECT_TRUE(HasIssue(*ds, r + "/cat/dir.jpg", "is a directory"));
  EXPECT_EQ(ds->listing_issues().size(), 1u);
}

TEST(ImageFolderTest, SymlinksFollowedAndDanglingListed) {
  TempDir tmp, other;
  const std::string r = tmp.path();
  const std::string real = EncodeJpeg(20, 10, 4);
  MakeDirs(r + "/dog");
  WriteFile(r + "/dog/real.jpg", real);
  ASSERT_EQ(symlink((r + "/dog/real.jpg").c_str(), (r + "/dog/link.jpg").c_str()), 0);
  ASSERT_EQ(symlink((r + "/dog/missing.jpg").c_str(), (r + "/dog/broken.jpg").c_str()), 0);
  // A symlinked subdirectory and a symlinked class folder are walked.
  MakeDirs(other.path() + "/extra");
  WriteFile(other.path() + "/extra/e.png", EncodePng(8, 8, 5));
  ASSERT_EQ(symlink((other.path() + "/extra").c_str(), (r + "/dog/sub").c_str()), 0);
  ASSERT_EQ(symlink((other.path() + "/extra").c_str(), (r + "/emu").c_str()), 0);

  auto ds = MustOpen(OpenImageFolder(r));
  ASSERT_NE(ds, nullptr);
  EXPECT_EQ(ds->classes(), (std::vector<std::string>{"dog", "emu"}));
  EXPECT_EQ(AllPaths(*ds), (std::vector<std::string>{r + "/dog/broken.jpg", r + "/dog/link.jpg",
                                                     r + "/dog/real.jpg", r + "/dog/sub/e.png",
                                                     r + "/emu/e.png"}));
  EXPECT_TRUE(ds->listing_issues().empty());

  std::string bytes;
  const Status broken = ds->ReadSample(0, &bytes);
  EXPECT_EQ(broken.code(), StatusCode::kNotFound) << broken.ToString();
  EXPECT_NE(broken.message().find("broken.jpg"), std::string::npos);
  EXPECT_NE(broken.message().find("dangling"), std::string::npos);
  ASSERT_TRUE(ds->ReadSample(1, &bytes).ok());
  EXPECT_EQ(bytes, real);
}

TEST(ImageFolderTest, SymlinkLoopToClassFolderIsReported) {
  TempDir tmp;
  const std::string r = tmp.path();
  MakeDirs(r + "/cls");
  WriteFile(r + "/cls/a.jpg", "x");
  ASSERT_EQ(symlink(".", (r + "/cls/self").c_str()), 0);
  auto ds = MustOpen(OpenImageFolder(r));
  ASSERT_NE(ds, nullptr);
  EXPECT_EQ(AllPaths(*ds), (std::vector<std::string>{r + "/cls/a.jpg"}));
  EXPECT_TRUE(HasIssue(*ds, r + "/cls/self", "symlink loop"));
}

TEST(ImageFolderTest, EmptyClassKeepsItsLabelAndIsReported) {
  TempDir tmp;
  const std::string r = tmp.path();
  MakeDirs(r + "/a");
  MakeDirs(r + "/b");
  MakeDirs(r + "/c");
  WriteFile(r + "/a/1.jpg", "x");
  WriteFile(r + "/b/notes.txt", "x");
  WriteFile(r + "/c/1.png", "y");
  auto ds = MustOpen(OpenImageFolder(r));
  ASSERT_NE(ds, nullptr);
  EXPECT_EQ(ds->classes(), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(AllLabels(*ds), (std::vector<int32_t>{0, 2}));
  EXPECT_TRUE(HasIssue(*ds, r + "/b", "no image files"));
}

TEST(ImageFolderTest, ZeroByteFileReadsAsEmpty) {
  TempDir tmp;
  MakeDirs(tmp / "c");
  WriteFile(tmp / "c/empty.jpg", "");
  auto ds = MustOpen(OpenImageFolder(tmp.path()));
  ASSERT_NE(ds, nullptr);
  std::string bytes = "stale";
  const Status s = ds->ReadSample(0, &bytes);
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(bytes.empty());
}

TEST(ImageFolderTest, FileRemovedAfterListingIsNotFound) {
  TempDir tmp;
  MakeDirs(tmp / "c");
  WriteFile(tmp / "c/gone.jpg", "x");
  auto ds = MustOpen(OpenImageFolder(tmp.path()));
  ASSERT_NE(ds, nullptr);
  fs::remove(tmp / "c/gone.jpg");
  std::string bytes;
  EXPECT_EQ(ds->ReadSample(0, &bytes).code(), StatusCode::kNotFound);
}

TEST(ImageFolderTest, BadRoots) {
  TempDir tmp;
  EXPECT_EQ(OpenImageFolder(tmp / "nope").status().code(), StatusCode::kNotFound);
  WriteFile(tmp / "file", "x");
  EXPECT_EQ(OpenImageFolder(tmp / "file").status().code(), StatusCode::kInvalidArgument);
  // No class folders.
  EXPECT_EQ(OpenImageFolder(tmp.path()).status().code(), StatusCode::kNotFound);
  // Class folders but no images.
  MakeDirs(tmp / "a");
  WriteFile(tmp / "a/x.txt", "x");
  EXPECT_EQ(OpenImageFolder(tmp.path()).status().code(), StatusCode::kNotFound);
}

TEST(ImageFolderTest, FingerprintStableAndSensitive) {
  TempDir tmp;
  MakeImageFolder(tmp.path(), 2, 3);
  auto a = MustOpen(OpenImageFolder(tmp.path()));
  auto b = MustOpen(OpenImageFolder(tmp.path() + "/"));
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(a->fingerprint(), b->fingerprint());

  // The same listing under another root has the same fingerprint (paths are relative).
  TempDir tmp2;
  MakeImageFolder(tmp2.path(), 2, 3);
  auto c = MustOpen(OpenImageFolder(tmp2.path()));
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(a->fingerprint(), c->fingerprint());

  WriteFile(tmp / "class_1/zzz.jpg", EncodeJpeg(8, 8, 9));
  auto d = MustOpen(OpenImageFolder(tmp.path()));
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->size(), a->size() + 1);
  EXPECT_NE(d->fingerprint(), a->fingerprint());

  // Moving a file to another class changes labels and so the fingerprint.
  fs::rename(tmp / "class_1/zzz.jpg", tmp / "class_0/zzz.jpg");
  auto e = MustOpen(OpenImageFolder(tmp.path()));
  ASSERT_NE(e, nullptr);
  EXPECT_NE(e->fingerprint(), d->fingerprint());
}

TEST(ImageFolderTest, ConcurrentReads) {
  TempDir tmp;
  const std::vector<std::string> files = MakeImageFolder(tmp.path(), 2, 4);
  auto ds = MustOpen(OpenImageFolder(tmp.path()));
  ASSERT_NE(ds, nullptr);
  std::vector<std::string> expected;
  for (const auto& f : files) expected.push_back(ReadFile(f));
  std::vector<std::thread> threads;
  std::vector<int> failures(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::string buf;
      for (int rep = 0; rep < 20; ++rep) {
        for (int64_t i = 0; i < ds->size(); ++i) {
          if (!ds->ReadSample(i, &buf).ok() || buf != expected[i]) ++failures[t];
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures, std::vector<int>(4, 0));
}

// ---------------------------------------------------------------- file reads

TEST(ReadWholeFileTest, Errors) {
  TempDir tmp;
  std::string out;
  EXPECT_EQ(internal::ReadWholeFile(tmp / "missing.jpg", &out).code(), StatusCode::kNotFound);
  const Status dir = internal::ReadWholeFile(tmp.path(), &out);
  EXPECT_EQ(dir.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(dir.message().find("is a directory"), std::string::npos);
  WriteFile(tmp / "big.jpg", std::string(100, 'x'));
  EXPECT_EQ(internal::ReadWholeFile(tmp / "big.jpg", &out, /*max_bytes=*/99).code(),
            StatusCode::kInvalidArgument);
  EXPECT_TRUE(internal::ReadWholeFile(tmp / "big.jpg", &out, /*max_bytes=*/100).ok());
  EXPECT_EQ(out, std::string(100, 'x'));
  ASSERT_EQ(mkfifo((tmp / "fifo.jpg").c_str(), 0600), 0);
  EXPECT_EQ(internal::ReadWholeFile(tmp / "fifo.jpg", &out).code(), StatusCode::kInvalidArgument);
  if (geteuid() != 0) {  // root reads anything
    WriteFile(tmp / "secret.jpg", "x");
    ASSERT_EQ(chmod((tmp / "secret.jpg").c_str(), 0), 0);
    EXPECT_EQ(internal::ReadWholeFile(tmp / "secret.jpg", &out).code(),
              StatusCode::kPermissionDenied);
  }
}

}  // namespace
}  // namespace ferry
