// Tests of lib/data/tar_shards.cc (TarShards) on tars written here and by GNU tar, and
// of OpenDataset's dispatch by shape (dataset_common.cc), which needs the tar writer.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "data/data_test_util.h"
#include "data/dataset.h"
#include "testutil.h"

namespace ferry {
namespace {

using testing::AllLabels;
using testing::AllPaths;
using testing::EncodeJpeg;
using testing::EncodePng;
using testing::HasIssue;
using testing::MakeDirs;
using testing::MakeImageFolder;
using testing::MustOpen;
using testing::TempDir;
using testing::WriteFile;

// prefix + i + suffix. (Spelled out because GCC 12 warns falsely on
// "literal" + std::to_string(i): -Wrestrict, GCC bug 105329.)
std::string Name(const char* prefix, int i, const char* suffix) {
  std::string s = prefix;
  s += std::to_string(i);
  s += suffix;
  return s;
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

TEST(TarShardsTest, CaptionsAndJsonMakeImageTextSamples) {
  TempDir tmp;
  const std::string j = EncodeJpeg(16, 12, 3);
  TarWriter w;
  w.Add("a/k0.jpg", j);
  w.Add("a/k0.txt", "a dog on a sofa");
  w.Add("a/k0.json", R"({"w": 16})");
  w.Add("a/k1.jpg", j);
  w.Add("a/k1.txt", "only a caption");
  w.Add("a/k2.jpg", j);
  w.Add("a/k2.cls", "7");  // a labelled sample in the same shard: no caption
  w.Add("a/k3.jpg", j);
  w.Add("a/k3.txt", std::string((1 << 20) + 1, 'x'));  // too long a caption
  WriteFile(tmp / "c.tar", w.Finish());
  auto ds = MustOpen(OpenTarShards({tmp / "c.tar"}));
  ASSERT_NE(ds, nullptr);
  ASSERT_EQ(ds->size(), 3);
  EXPECT_TRUE(ds->has_annotations());
  EXPECT_EQ(AllLabels(*ds), (std::vector<int32_t>{0, 0, 7}));
  SampleAnnotations a;
  ASSERT_TRUE(ds->ReadAnnotations(0, &a).ok());
  EXPECT_EQ(a.text, "a dog on a sofa");
  EXPECT_EQ(a.meta, R"({"w": 16})");
  ASSERT_TRUE(ds->ReadAnnotations(1, &a).ok());
  EXPECT_EQ(a.text, "only a caption");
  EXPECT_EQ(a.meta, "");
  ASSERT_TRUE(ds->ReadAnnotations(2, &a).ok());
  EXPECT_EQ(a.text, "");
  EXPECT_TRUE(HasIssue(*ds, tmp / "c.tar:a/k3", "larger than 1 MiB"));
  for (const ListingIssue& i : ds->listing_issues()) EXPECT_EQ(i.reason.find("xxx"), std::string::npos);
  // A shard of classification samples only has no annotations.
  TarWriter plain;
  plain.Add("p.jpg", j);
  plain.Add("p.cls", "1");
  WriteFile(tmp / "p.tar", plain.Finish());
  auto p = MustOpen(OpenTarShards({tmp / "p.tar"}));
  ASSERT_NE(p, nullptr);
  EXPECT_FALSE(p->has_annotations());
}

TEST(TarShardsTest, SegPngAndMaskPngMembersMakeSegmentationSamples) {
  TempDir tmp;
  const std::string j = EncodeJpeg(16, 12, 3);
  TarWriter w;
  w.Add("m/k0.jpg", j);
  w.Add("m/k0.seg.png", "PNG-A");  // bytes are decoded later, by the pipeline
  w.Add("m/k1.jpg", j);
  w.Add("m/k1.mask.png", "PNG-B");
  w.Add("m/k1.seg.png", "PNG-C");  // a second mask: reported, the first one kept
  w.Add("m/k2.jpg", j);            // no cls, caption, JSON or mask: not a sample
  w.Add("m/k3.jpg", j);
  w.Add("m/k3.cls", "4");          // a labelled sample in the same shard: no mask
  WriteFile(tmp / "s.tar", w.Finish());
  auto ds = MustOpen(OpenTarShards({tmp / "s.tar"}));
  ASSERT_NE(ds, nullptr);
  ASSERT_EQ(ds->size(), 3);
  EXPECT_TRUE(ds->has_annotations());
  EXPECT_EQ(AllLabels(*ds), (std::vector<int32_t>{0, 0, 4}));
  SampleAnnotations a;
  ASSERT_TRUE(ds->ReadAnnotations(0, &a).ok());
  EXPECT_EQ(a.semantic_bytes, "PNG-A");
  EXPECT_EQ(a.semantic_path, tmp / "s.tar" + ":m/k0.seg.png");
  EXPECT_EQ(a.semantic_fill, 255);
  EXPECT_EQ(a.text, "");
  ASSERT_TRUE(ds->ReadAnnotations(1, &a).ok());
  EXPECT_EQ(a.semantic_bytes, "PNG-B");
  ASSERT_TRUE(ds->ReadAnnotations(2, &a).ok());
  EXPECT_EQ(a.semantic_bytes, "");
  EXPECT_EQ(a.semantic_path, "");
  bool second_mask = false, no_member = false;
  for (const ListingIssue& i : ds->listing_issues()) {
    second_mask = second_mask || (i.path == tmp / "s.tar" + ":m/k1.seg.png" && i.reason.find("second mask") != std::string::npos);
    no_member = no_member || (i.path == tmp / "s.tar" + ":m/k2" && i.reason.find("nor txt, json or mask") != std::string::npos);
  }
  EXPECT_TRUE(second_mask);
  EXPECT_TRUE(no_member);
}

TEST(TarShardsTest, BracePatternsNameShards) {
  Result<std::vector<std::string>> e = ExpandBraces("d/shard-{008..011}.tar");
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_EQ(*e, (std::vector<std::string>{"d/shard-008.tar", "d/shard-009.tar", "d/shard-010.tar", "d/shard-011.tar"}));
  e = ExpandBraces("{0..1}-{5..6}.tar");
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(*e, (std::vector<std::string>{"0-5.tar", "0-6.tar", "1-5.tar", "1-6.tar"}));
  EXPECT_FALSE(ExpandBraces("s-{3..1}.tar").ok());
  EXPECT_FALSE(ExpandBraces("s-{a..c}.tar").ok());
  EXPECT_FALSE(ExpandBraces("s-{0..}.tar").ok());
  EXPECT_FALSE(ExpandBraces("s-{0..99999999}.tar").ok());

  TempDir tmp;
  for (int i = 0; i < 3; ++i) {
    TarWriter w;
    w.Add(Name("k", i, ".jpg"), EncodeJpeg(8, 8, uint64_t(i)));
    w.Add(Name("k", i, ".txt"), Name("caption ", i, ""));
    WriteFile(tmp / Name("shard-0", i, ".tar"), w.Finish());
  }
  auto ds = MustOpen(OpenDataset(tmp / "shard-{00..02}.tar"));
  ASSERT_NE(ds, nullptr);
  EXPECT_EQ(ds->size(), 3);
  SampleAnnotations a;
  ASSERT_TRUE(ds->ReadAnnotations(2, &a).ok());
  EXPECT_EQ(a.text, "caption 2");
  EXPECT_FALSE(OpenDataset(tmp / "shard-{00..03}.tar").ok());  // shard-03.tar is missing
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
