// The hostile-file test: an ImageFolder where good JPEGs sit next to every kind of bad
// file a real dataset contains (corrupt, truncated, empty, not an image, unsupported,
// pixel bombs, a dangling symlink, a directory named like an image). One epoch through
// the Loader, and through the real ferry-bench CLI, must deliver every good file
// exactly once, none of the bad ones, and report each bad one exactly once with a
// reason that names the problem. Nothing may crash (run it under ASan too).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <ostream>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "ferry/loader.h"
#include "image/image_test_util.h"
#include "testutil.h"

namespace ferry {

// Names the parameter in test output ("GetParam() = pad").
void PrintTo(LastBatch policy, std::ostream* os) {
  *os << (policy == LastBatch::kKeep ? "keep" : policy == LastBatch::kPad ? "pad" : "drop");
}

namespace {

using testing::EncodeJpeg;
using testing::EncodePng;
using testing::MakeDirs;
using testing::ReadFile;
using testing::TempDir;
using testing::WriteFile;

constexpr int kGoodPerClass = 12;

struct BadFile {
  std::string path;
  std::string keyword;  // what the reason must say
  bool listing;         // found while listing (no sample index)
};

struct HostileFolder {
  std::vector<std::string> good;
  std::vector<BadFile> bad;
  int64_t bad_samples() const {
    return std::count_if(bad.begin(), bad.end(), [](const BadFile& b) { return !b.listing; });
  }
};

// root/a and root/b, each with kGoodPerClass good JPEGs and half of the bad files.
HostileFolder MakeHostileFolder(const std::string& root) {
  HostileFolder f;
  for (const char* cls : {"a", "b"}) {
    MakeDirs(root + "/" + cls);
    for (int j = 0; j < kGoodPerClass; ++j) {
      char name[32];
      std::snprintf(name, sizeof name, "/good_%02d.jpg", j);
      const std::string path = root + "/" + cls + name;
      WriteFile(path, EncodeJpeg(60 + 13 * j, 150 - 5 * j, uint64_t(cls[0]) * 100 + j));
      f.good.push_back(path);
    }
  }
  auto bad = [&](const std::string& rel, const std::string& bytes, const std::string& keyword) {
    WriteFile(root + "/" + rel, bytes);
    f.bad.push_back({root + "/" + rel, keyword, false});
  };
  const std::string jpeg = EncodeJpeg(200, 150, 77);
  bad("a/corrupt.jpg", testing::JpegSoiThenNoise(4000, 1) + "\xFF\xD9", "corrupt");
  bad("b/truncated.jpg", jpeg.substr(0, jpeg.size() * 6 / 10), "truncated");
  bad("a/empty.jpg", "", "zero-byte");
  bad("b/readme.jpg", "This is not an image; it is a text file with an image's name.\n", "not an image");
  bad("a/animation.png", testing::TinyGif(), "unsupported");
  bad("b/bomb.jpg", testing::WithJpegSize(EncodeJpeg(64, 48, 78), 65000, 65000), "too large");
  bad("a/bomb.png", testing::WithPngSize(EncodePng(16, 16, 79), 70000, 70000), "too large");
  bad("b/bomb.ppm", "P6\n100000 100000\n255\n" + std::string(64, '\x7f'), "too large");
  bad("a/bomb.tif", testing::TiffWithSize(100000, 100000, true), "too large");
  bad("b/bomb.tiff", testing::TiffWithSize(30000, 30000, false), "too large");  // under OpenCV's own 2^30
  const std::string dangling = root + "/b/dangling.jpg";
  if (::symlink((root + "/b/no_such_target.jpg").c_str(), dangling.c_str()) != 0) std::abort();
  f.bad.push_back({dangling, "dangling", false});
  MakeDirs(root + "/a/folder.jpg");
  WriteFile(root + "/a/folder.jpg/notes.txt", "not listed: no image extension\n");
  f.bad.push_back({root + "/a/folder.jpg", "directory", true});
  return f;
}

PipelineSpec SmallUint8Spec() { return testing::Uint8Spec(32, /*rrc=*/true, /*hflip=*/0.5); }

// Checks the skip reports against the corpus: each bad file exactly once, by path,
// with its keyword, and with its sample index (-1 for listing problems).
void ExpectEachBadFileReportedOnce(const HostileFolder& f, const Dataset& ds,
                                   const std::vector<SkippedSample>& skipped) {
  std::map<std::string, int64_t> index_of;
  for (int64_t i = 0; i < ds.size(); ++i) index_of[ds.Path(i)] = i;
  std::map<std::string, int> seen;
  for (const SkippedSample& s : skipped) ++seen[s.path];
  for (const BadFile& b : f.bad) {
    EXPECT_EQ(seen[b.path], 1) << b.path;
    for (const SkippedSample& s : skipped) {
      if (s.path != b.path) continue;
      EXPECT_NE(s.reason.find(b.keyword), std::string::npos) << b.path << ": " << s.reason;
      EXPECT_EQ(s.index, b.listing ? -1 : index_of.at(b.path)) << b.path;
    }
  }
  EXPECT_EQ(skipped.size(), f.bad.size());
}

class HostileTest : public ::testing::TestWithParam<LastBatch> {};

TEST_P(HostileTest, OneEpochDeliversTheGoodAndReportsTheBad) {
  TempDir tmp;
  const HostileFolder f = MakeHostileFolder(tmp.path());
  Result<std::unique_ptr<Dataset>> ds_or = OpenDataset(tmp.path());
  ASSERT_TRUE(ds_or.ok()) << ds_or.status().ToString();
  const Dataset& ds = **ds_or;
  ASSERT_EQ(ds.size(), int64_t(f.good.size()) + f.bad_samples());
  std::set<int64_t> good_indices, bad_indices;
  for (int64_t i = 0; i < ds.size(); ++i) {
    const bool good = std::find(f.good.begin(), f.good.end(), ds.Path(i)) != f.good.end();
    (good ? good_indices : bad_indices).insert(i);
  }
  ASSERT_EQ(good_indices.size(), f.good.size());

  LoaderOptions o;
  o.job.dataset = tmp.path();
  o.job.pipeline = SmallUint8Spec();
  o.job.batch_size = 5;
  o.job.last_batch = GetParam();
  o.threads = 2;
  o.job.seed = 11;
  o.job.epochs = 1;
  Result<std::unique_ptr<Loader>> loader_or = Loader::Open(o);
  ASSERT_TRUE(loader_or.ok()) << loader_or.status().ToString();
  Loader& loader = **loader_or;
  const int64_t planned = loader.batches_per_epoch();
  EXPECT_EQ(planned, (ds.size() + 4) / 5);

  std::map<int64_t, int> delivered;
  std::vector<SkippedSample> skipped;
  int64_t batches = 0, batch_skips = 0;
  for (;;) {
    Result<Batch> b = loader.Next();
    if (!b.ok()) {
      EXPECT_EQ(b.status().code(), StatusCode::kOutOfRange) << b.status().ToString();
      break;
    }
    ++batches;
    batch_skips += b->skipped;
    EXPECT_EQ(b->provenance.epoch, 0u);
    if (GetParam() == LastBatch::kPad) {
      EXPECT_EQ(b->rows(), 5);  // fixed shape: bad files leave padding rows at the end
      EXPECT_EQ(b->images.shape[0], 5);
    } else {
      EXPECT_EQ(b->rows(), b->valid_rows());
      EXPECT_GT(b->valid_rows(), 0) << "under keep, a batch of only bad files is not delivered";
    }
    EXPECT_LE(b->valid_rows() + b->skipped, 5);
    const auto* labels = b->labels.as<int64_t>();
    const auto* indices = b->indices.as<int64_t>();
    for (int64_t r = 0; r < b->rows(); ++r) {
      if (r < b->valid_rows()) {
        ++delivered[indices[r]];
        EXPECT_EQ(labels[r], ds.Label(indices[r]));
      } else {
        EXPECT_EQ(indices[r], -1);
        EXPECT_EQ(labels[r], -1);
      }
    }
    for (SkippedSample& s : loader.TakeSkipped()) skipped.push_back(std::move(s));
  }
  for (SkippedSample& s : loader.TakeSkipped()) skipped.push_back(std::move(s));

  // Every good file exactly once; no bad file.
  for (int64_t i : good_indices) EXPECT_EQ(delivered[i], 1) << ds.Path(i);
  for (int64_t i : bad_indices) EXPECT_EQ(delivered.count(i), 0u) << ds.Path(i);
  EXPECT_EQ(delivered.size(), good_indices.size());
  EXPECT_LE(batches, planned);
  if (GetParam() == LastBatch::kPad) {
    EXPECT_EQ(batches, planned);
  }

  // Every bad file reported exactly once, with its reason.
  ExpectEachBadFileReportedOnce(f, ds, skipped);
  EXPECT_EQ(batch_skips, f.bad_samples());
  const IteratorStats st = loader.stats();
  EXPECT_EQ(st.skipped, int64_t(f.bad.size()));
  EXPECT_EQ(st.samples, int64_t(f.good.size()));
  EXPECT_EQ(st.batches, batches);
}

INSTANTIATE_TEST_SUITE_P(LastBatch, HostileTest, ::testing::Values(LastBatch::kKeep, LastBatch::kPad),
                         [](const ::testing::TestParamInfo<LastBatch>& info) {
                           return info.param == LastBatch::kKeep ? std::string("Keep") : std::string("Pad");
                         });

// Runs `command` with /bin/sh; returns its exit status and its stdout.
int RunCommand(const std::string& command, std::string* out) {
  FILE* p = ::popen(command.c_str(), "r");
  if (p == nullptr) return -1;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out->append(buf, n);
  const int status = ::pclose(p);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

TEST(HostileCliTest, FerryBenchPipelineOneEpoch) {
  const char* bin = std::getenv("FERRY_BENCH_BIN");
  if (bin == nullptr || *bin == '\0') {
    GTEST_SKIP() << "FERRY_BENCH_BIN is not set (CTest sets it to ferry-bench when that target is built)";
  }
  TempDir tmp;
  const std::string root = tmp / "data";
  MakeDirs(root);
  const HostileFolder f = MakeHostileFolder(root);
  const std::string errors = tmp / "errors.tsv", stderr_file = tmp / "stderr.txt";
  const std::string spec = SmallUint8Spec().ToJson();
  ASSERT_EQ(spec.find('\''), std::string::npos);
  const std::string command = std::string("'") + bin + "' pipeline --data '" + root +
                              "' --epochs 1 --errors '" + errors + "' --batch-size 5 --threads 2 --pipeline '" +
                              spec + "' 2>'" + stderr_file + "'";
  std::string out;
  const int code = RunCommand(command, &out);
  ASSERT_EQ(code, 0) << command << "\nstdout:\n" << out << "\nstderr:\n" << ReadFile(stderr_file);
  const std::vector<std::string> lines = Lines(out);
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(lines.back(), "samples=" + std::to_string(f.good.size()) + " skipped=" + std::to_string(f.bad.size()))
      << out;

  // One `path<TAB>reason` line per bad file.
  std::vector<SkippedSample> reported;
  for (const std::string& line : Lines(ReadFile(errors))) {
    const size_t tab = line.find('\t');
    ASSERT_NE(tab, std::string::npos) << line;
    reported.push_back({-1, line.substr(0, tab), line.substr(tab + 1)});
  }
  EXPECT_EQ(reported.size(), f.bad.size());
  std::map<std::string, int> seen;
  for (const SkippedSample& s : reported) ++seen[s.path];
  for (const BadFile& b : f.bad) {
    EXPECT_EQ(seen[b.path], 1) << b.path;
    for (const SkippedSample& s : reported) {
      if (s.path == b.path) {
        EXPECT_NE(s.reason.find(b.keyword), std::string::npos) << b.path << ": " << s.reason;
      }
    }
  }
}

}  // namespace
}  // namespace ferry
