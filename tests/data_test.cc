// Tests of the dataset layer: ImageFolder (torchvision's order), FileList, TarShards,
// OpenDataset's dispatch, fingerprints and file reads.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "data/dataset.h"
#include "data/file_util.h"
#include "data/permutation.h"
#include "testutil.h"

namespace ferry {
namespace {

namespace fs = std::filesystem;
using testing::EncodeJpeg;
using testing::EncodePng;
using testing::MakeDirs;
using testing::MakeImageFolder;
using testing::ReadFile;
using testing::TempDir;
using testing::WriteFile;

std::unique_ptr<Dataset> MustOpen(Result<std::unique_ptr<Dataset>> r) {
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  if (!r.ok()) return nullptr;
  return std::move(r).value();
}

std::vector<std::string> AllPaths(const Dataset& ds) {
  std::vector<std::string> out;
  for (int64_t i = 0; i < ds.size(); ++i) out.push_back(ds.Path(i));
  return out;
}

std::vector<int32_t> AllLabels(const Dataset& ds) {
  std::vector<int32_t> out;
  for (int64_t i = 0; i < ds.size(); ++i) out.push_back(ds.Label(i));
  return out;
}

// prefix + i + suffix. (Spelled out because GCC 12 warns falsely on
// "literal" + std::to_string(i): -Wrestrict, GCC bug 105329.)
std::string Name(const char* prefix, int i, const char* suffix) {
  std::string s = prefix;
  s += std::to_string(i);
  s += suffix;
  return s;
}

bool HasIssue(const Dataset& ds, const std::string& path, const std::string& reason_part) {
  for (const ListingIssue& issue : ds.listing_issues()) {
    if (issue.path == path && issue.reason.find(reason_part) != std::string::npos) return true;
  }
  return false;
}

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

TEST(ImageFolderTest, EpochPermutationOverDatasetSize) {
  TempDir tmp;
  MakeImageFolder(tmp.path(), 3, 5);
  auto a = MustOpen(OpenImageFolder(tmp.path()));
  auto b = MustOpen(OpenImageFolder(tmp.path()));
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  const std::vector<int64_t> p = EpochPermutation(a->size(), 42, 3);
  EXPECT_EQ(p, EpochPermutation(b->size(), 42, 3));
  EXPECT_NE(p, EpochPermutation(a->size(), 42, 4));
  std::vector<int64_t> sorted = p;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int64_t> identity(static_cast<size_t>(a->size()));
  std::iota(identity.begin(), identity.end(), 0);
  EXPECT_EQ(sorted, identity);
  // Both opens agree on what each permuted index means.
  for (int64_t i : p) {
    EXPECT_EQ(a->Path(i), b->Path(i));
    EXPECT_EQ(a->Label(i), b->Label(i));
  }
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

// ---------------------------------------------------------------- FileList

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

// ---------------------------------------------------------------- TarShards

// A minimal tar writer: ustar headers, with GNU 'L' long names or pax 'x' headers.
class TarWriter {
 public:
  void Add(const std::string& name, const std::string& data, char type = '0') {
    if (name.size() > 100) {
      Header("././@LongLink", name.size() + 1, 'L');
      Data(name + '\0');
    }
    Header(name.substr(0, 100), data.size(), type);
    Data(data);
  }
  void AddWithPaxPath(const std::string& path, const std::string& data) {
    std::string record = " path=" + path + "\n";
    // The length prefix counts itself.
    size_t len = record.size() + 1;
    while (std::to_string(len).size() + record.size() != len) ++len;
    const std::string pax = std::to_string(len) + record;
    Header("PaxHeaders/x", pax.size(), 'x');
    Data(pax);
    Header("placeholder-name", data.size(), '0');
    Data(data);
  }
  void AddDirectory(const std::string& name) { Header(name, 0, '5'); }
  std::string Finish() {
    out_.append(1024, '\0');
    return out_;
  }
  size_t offset() const { return out_.size(); }

 private:
  void Header(const std::string& name, size_t size, char type) {
    char h[512] = {};
    std::snprintf(h, 100, "%s", name.c_str());
    std::snprintf(h + 100, 8, "%07o", 0644);
    std::snprintf(h + 108, 8, "%07o", 0);
    std::snprintf(h + 116, 8, "%07o", 0);
    std::snprintf(h + 124, 12, "%011llo", static_cast<unsigned long long>(size));
    std::snprintf(h + 136, 12, "%011o", 0);
    h[156] = type;
    std::memcpy(h + 257,
                "ustar\0"
                "00",
                8);
    std::memset(h + 148, ' ', 8);
    unsigned sum = 0;
    for (unsigned char c : h) sum += c;
    std::snprintf(h + 148, 8, "%06o", sum);
    out_.append(h, 512);
  }
  void Data(const std::string& d) {
    out_ += d;
    out_.append((512 - d.size() % 512) % 512, '\0');
  }
  std::string out_;
};

TEST(TarShardsTest, SamplesLabelsAndInPlaceReads) {
  TempDir tmp;
  const std::string j0 = EncodeJpeg(32, 24, 10), p1 = EncodePng(16, 16, 11),
                    j2 = EncodeJpeg(8, 8, 12);
  const std::string long_key = "dir/" + std::string(120, 'k');
  TarWriter w0;
  w0.AddDirectory("dir/");
  w0.Add("dir/s0.jpg", j0);
  w0.Add("dir/s0.cls", "5\n");
  w0.Add("dir/s0.json", "{}");
  w0.Add("s1.cls", " 2");
  w0.Add("s1.PNG", p1);  // upper-case extension, cls first
  w0.Add("nocls.jpg", j2);
  w0.Add("noimage.cls", "1");
  w0.Add("README", "not a sample member");
  w0.Add(long_key + ".jpeg", j2);
  w0.Add(long_key + ".cls", "9");
  WriteFile(tmp / "a.tar", w0.Finish());

  TarWriter w1;
  w1.AddWithPaxPath("pax/p.seg.png", "segmentation, not an image member");
  w1.AddWithPaxPath("pax/p.webp", p1);
  w1.Add("pax/p.cls", "0");
  w1.Add("bad.jpg", j0);
  w1.Add("bad.cls", "-1");
  WriteFile(tmp / "b.tar", w1.Finish());

  auto ds = MustOpen(OpenTarShards({tmp / "a.tar", tmp / "b.tar"}));
  ASSERT_NE(ds, nullptr);
  EXPECT_EQ(ds->kind(), "tar_shards");
  EXPECT_TRUE(ds->classes().empty());
  ASSERT_EQ(ds->size(), 4);
  EXPECT_EQ(AllPaths(*ds), (std::vector<std::string>{tmp / "a.tar:dir/s0.jpg", tmp / "a.tar:s1.PNG",
                                                     tmp / "a.tar:" + long_key + ".jpeg",
                                                     tmp / "b.tar:pax/p.webp"}));
  EXPECT_EQ(AllLabels(*ds), (std::vector<int32_t>{5, 2, 9, 0}));
  const std::vector<std::string> expected = {j0, p1, j2, p1};
  std::string bytes;
  for (int64_t i = 0; i < ds->size(); ++i) {
    ASSERT_TRUE(ds->ReadSample(i, &bytes).ok());
    EXPECT_EQ(bytes, expected[i]) << i;
  }
  EXPECT_TRUE(HasIssue(*ds, tmp / "a.tar:nocls", "no cls"));
  EXPECT_TRUE(HasIssue(*ds, tmp / "a.tar:noimage", "no image"));
  EXPECT_TRUE(HasIssue(*ds, tmp / "b.tar:bad", "cls"));
  EXPECT_EQ(ds->listing_issues().size(), 3u);

  auto again = MustOpen(OpenTarShards({tmp / "a.tar", tmp / "b.tar"}));
  ASSERT_NE(again, nullptr);
  EXPECT_EQ(again->fingerprint(), ds->fingerprint());
  auto only_a = MustOpen(OpenTarShards({tmp / "a.tar"}));
  ASSERT_NE(only_a, nullptr);
  EXPECT_EQ(only_a->size(), 3);
  EXPECT_NE(only_a->fingerprint(), ds->fingerprint());
}

TEST(TarShardsTest, GroupsMembersOfAKeyEvenWhenNotAdjacent) {
  TempDir tmp;
  TarWriter w;
  w.Add("a.cls", "1");
  w.Add("b.jpg", "image b");
  w.Add("c.png", "image c");
  w.Add("a.jpg", "image a");
  w.Add("b.cls", "2");
  w.Add("a.JPG", "duplicate of a.jpg");
  WriteFile(tmp / "s.tar", w.Finish());
  auto ds = MustOpen(OpenTarShards({tmp / "s.tar"}));
  ASSERT_NE(ds, nullptr);
  // Order of first appearance of each key: a, b (c has no cls).
  EXPECT_EQ(AllPaths(*ds), (std::vector<std::string>{tmp / "s.tar:a.jpg", tmp / "s.tar:b.jpg"}));
  EXPECT_EQ(AllLabels(*ds), (std::vector<int32_t>{1, 2}));
  std::string bytes;
  ASSERT_TRUE(ds->ReadSample(0, &bytes).ok());
  EXPECT_EQ(bytes, "image a");
  EXPECT_TRUE(HasIssue(*ds, tmp / "s.tar:c", "no cls"));
  EXPECT_TRUE(HasIssue(*ds, tmp / "s.tar:a.JPG", "duplicate"));
  EXPECT_EQ(ds->listing_issues().size(), 2u);
}

TEST(TarShardsTest, ReadsArchivesWrittenByGnuTar) {
  TempDir tmp;
  const std::string src = tmp / "src";
  MakeDirs(src);
  std::vector<std::string> images;
  std::string members;
  const std::string long_prefix = std::string(110, 'L');  // forces long-name records
  for (int i = 0; i < 5; ++i) {
    const std::string key =
        (i == 3 ? long_prefix : std::string("n01440764")) + "_" + std::to_string(i);
    images.push_back(EncodeJpeg(24 + i, 16, 100 + i));
    WriteFile(src + "/" + key + ".jpg", images.back());
    WriteFile(src + "/" + key + ".cls", std::to_string(i * 10) + "\n");
    members += " " + key + ".jpg " + key + ".cls";
  }
  for (const char* format : {"gnu", "pax"}) {
    const std::string tar = tmp / (std::string(format) + ".tar");
    const std::string cmd =
        std::string("tar --format=") + format + " -cf " + tar + " -C " + src + members;
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    auto ds = MustOpen(OpenDataset(tar));
    ASSERT_NE(ds, nullptr);
    ASSERT_EQ(ds->size(), 5) << format;
    std::string bytes;
    for (int i = 0; i < 5; ++i) {
      EXPECT_EQ(ds->Label(i), i * 10);
      ASSERT_TRUE(ds->ReadSample(i, &bytes).ok());
      EXPECT_EQ(bytes, images[i]) << format << " " << i;
    }
    EXPECT_NE(ds->Path(3).find(long_prefix), std::string::npos);
  }
}

TEST(TarShardsTest, TruncatedAndCorruptShardsFailToOpen) {
  TempDir tmp;
  TarWriter w;
  w.Add("a.jpg", std::string(3000, 'j'));
  w.Add("a.cls", "1");
  const size_t second_header = w.offset();
  w.Add("b.jpg", std::string(2000, 'j'));
  w.Add("b.cls", "2");
  const std::string good = w.Finish();
  WriteFile(tmp / "good.tar", good);
  ASSERT_TRUE(OpenTarShards({tmp / "good.tar"}).ok());

  // Cut inside the data of b.jpg.
  WriteFile(tmp / "cut.tar", good.substr(0, second_header + 1000));
  Status s = OpenTarShards({tmp / "good.tar", tmp / "cut.tar"}).status();
  EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s.ToString();
  EXPECT_NE(s.message().find("cut.tar"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("offset"), std::string::npos) << s.message();

  // Cut inside a header.
  WriteFile(tmp / "cut2.tar", good.substr(0, second_header + 100));
  s = OpenTarShards({tmp / "cut2.tar"}).status();
  EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s.ToString();

  // Cut at a header boundary: no end-of-archive block.
  WriteFile(tmp / "cut3.tar", good.substr(0, good.size() - 1024));
  s = OpenTarShards({tmp / "cut3.tar"}).status();
  EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s.ToString();

  // A flipped byte in the name of the second member's header.
  std::string bad = good;
  const size_t b_header = second_header;
  ASSERT_EQ(b_header, 512u + 3072 + 512 + 512);  // a.jpg header+data, a.cls header+data
  ASSERT_EQ(bad.substr(b_header, 5), "b.jpg");
  bad[b_header] = 'c';
  WriteFile(tmp / "bad.tar", bad);
  s = OpenTarShards({tmp / "bad.tar"}).status();
  EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s.ToString();
  EXPECT_NE(s.message().find("bad.tar"), std::string::npos);
  EXPECT_NE(s.message().find(Name("offset ", static_cast<int>(b_header), "")), std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("checksum"), std::string::npos);

  EXPECT_EQ(OpenTarShards({tmp / "missing.tar"}).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(OpenTarShards({}).status().code(), StatusCode::kInvalidArgument);
}

TEST(TarShardsTest, ConcurrentReads) {
  TempDir tmp;
  TarWriter w;
  std::vector<std::string> images;
  for (int i = 0; i < 16; ++i) {
    images.push_back(EncodeJpeg(16 + i, 16, 200 + i));
    w.Add(Name("k", 100 + i, ".jpg"), images.back());
    w.Add(Name("k", 100 + i, ".cls"), std::to_string(i));
  }
  WriteFile(tmp / "s.tar", w.Finish());
  auto ds = MustOpen(OpenTarShards({tmp / "s.tar"}));
  ASSERT_NE(ds, nullptr);
  ASSERT_EQ(ds->size(), 16);
  std::vector<int> failures(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::string buf;
      for (int rep = 0; rep < 50; ++rep) {
        for (int64_t i = 0; i < ds->size(); ++i) {
          if (!ds->ReadSample(i, &buf).ok() || buf != images[i]) ++failures[t];
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures, std::vector<int>(4, 0));
}

// ---------------------------------------------------------------- OpenDataset

TEST(OpenDatasetTest, DispatchesByShape) {
  TempDir tmp;
  MakeImageFolder(tmp / "folder", 2, 2);
  auto folder = MustOpen(OpenDataset(tmp / "folder"));
  ASSERT_NE(folder, nullptr);
  EXPECT_EQ(folder->kind(), "image_folder");

  WriteFile(tmp / "list.tsv", "folder/class_0/img_0000.jpg\t0\n");
  WriteFile(tmp / "list.txt", "folder/class_0/img_0000.jpg\t0\n");
  for (const char* name : {"list.tsv", "list.txt"}) {
    auto list = MustOpen(OpenDataset(tmp / name));
    ASSERT_NE(list, nullptr);
    EXPECT_EQ(list->kind(), "file_list");
    std::string bytes;
    EXPECT_TRUE(list->ReadSample(0, &bytes).ok());
  }

  MakeDirs(tmp / "shards");
  for (int s = 0; s < 2; ++s) {
    TarWriter w;
    w.Add(Name("k", s, ".jpg"), "img");
    w.Add(Name("k", s, ".cls"), std::to_string(s));
    WriteFile(tmp / Name("shards/shard-", s, ".tar"), w.Finish());
  }
  WriteFile(tmp / "shards/index.json", "{}");  // other files are allowed
  auto one = MustOpen(OpenDataset(tmp / "shards/shard-0.tar"));
  ASSERT_NE(one, nullptr);
  EXPECT_EQ(one->kind(), "tar_shards");
  EXPECT_EQ(one->size(), 1);
  auto list = MustOpen(OpenDataset(tmp / "shards/shard-1.tar," + tmp / "shards/shard-0.tar"));
  ASSERT_NE(list, nullptr);
  EXPECT_EQ(list->kind(), "tar_shards");
  EXPECT_EQ(AllLabels(*list), (std::vector<int32_t>{1, 0}));
  auto dir = MustOpen(OpenDataset(tmp / "shards"));
  ASSERT_NE(dir, nullptr);
  EXPECT_EQ(dir->kind(), "tar_shards");
  EXPECT_EQ(AllLabels(*dir), (std::vector<int32_t>{0, 1}));  // sorted by name

  // A subdirectory makes it an ImageFolder.
  MakeDirs(tmp / "shards/cls");
  WriteFile(tmp / "shards/cls/x.jpg", "x");
  auto mixed = MustOpen(OpenDataset(tmp / "shards"));
  ASSERT_NE(mixed, nullptr);
  EXPECT_EQ(mixed->kind(), "image_folder");

  EXPECT_EQ(OpenDataset(tmp / "nothing").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(OpenDataset(tmp / "a.tar," + tmp / "b.tar").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(OpenDataset(tmp / "a.tar,b.zip").status().code(), StatusCode::kInvalidArgument);
  WriteFile(tmp / "weird.bin", "x");
  EXPECT_EQ(OpenDataset(tmp / "weird.bin").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(OpenDataset("").status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ferry
