// Tests of the in-process Loader on a real ImageFolder of encoded JPEGs, with real
// threads: coverage of each epoch, determinism whatever the thread count, last-batch
// policies, epochs, sharding, the prefetch bound, shutdown, option errors and the
// lifetime of a Batch's memory.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "data/dataset.h"
#include "ferry/loader.h"
#include "ops/pipeline.h"
#include "image/image_test_util.h"
#include "testutil.h"

namespace ferry {
namespace {

using testing::MakeDirs;
using testing::MakeImageFolder;
using testing::ReadFile;
using testing::TempDir;
using testing::WriteFile;

constexpr int kClasses = 3, kPerClass = 20, kSamples = kClasses * kPerClass;
constexpr int kSize = 32;

// Small uint8 NHWC output: a random crop and a random flip, so that pixels depend on
// (seed, epoch, index) as in training, but cheap to produce.
PipelineSpec SmallSpec() { return testing::Uint8Spec(kSize, /*rrc=*/true, /*hflip=*/0.5); }

struct Row {
  int64_t index;
  int64_t label;
  std::string pixels;
  bool operator==(const Row& o) const { return index == o.index && label == o.label && pixels == o.pixels; }
};

struct Delivered {
  BatchProvenance provenance;
  int64_t rows = 0;
  int64_t valid = 0;
  std::vector<Row> items;  // all rows, padding included
};

struct Taken {
  std::vector<Delivered> batches;
  Status end;  // what Next() returned after the last batch
  IteratorStats stats;
  std::vector<SkippedSample> skipped;

  // Indices of the valid rows, in delivery order.
  std::vector<int64_t> Indices() const {
    std::vector<int64_t> out;
    for (const Delivered& b : batches) {
      for (int64_t r = 0; r < b.valid; ++r) out.push_back(b.items[size_t(r)].index);
    }
    return out;
  }
  std::vector<Row> ValidRows() const {
    std::vector<Row> out;
    for (const Delivered& b : batches) out.insert(out.end(), b.items.begin(), b.items.begin() + b.valid);
    return out;
  }
};

// Copies a batch out, checking its shapes against the spec.
Delivered Copy(const Batch& b, const PipelineSpec& spec) {
  Delivered d;
  d.provenance = b.provenance;
  d.rows = b.rows();
  d.valid = b.valid_rows();
  EXPECT_LE(d.valid, d.rows);
  EXPECT_EQ(b.images.rank, 4);
  EXPECT_EQ(b.images.dtype, spec.dtype());
  EXPECT_EQ(b.images.shape[0], d.rows);
  // Keep the shared_ptr: a reference through the temporary Result would dangle.
  const std::shared_ptr<const Pipeline> compiled_ptr = *Pipeline::Compile(spec);
  const Pipeline& compiled = *compiled_ptr;
  const Shape shape = compiled.output_shape();
  const size_t sample_bytes = compiled.sample_bytes();
  if (spec.output == PipelineSpec::Output::kUint8NHWC) {
    EXPECT_EQ(b.images.shape[1], shape.height);
    EXPECT_EQ(b.images.shape[2], shape.width);
    EXPECT_EQ(b.images.shape[3], shape.channels);
  } else {
    EXPECT_EQ(b.images.shape[1], shape.channels);
    EXPECT_EQ(b.images.shape[2], shape.height);
    EXPECT_EQ(b.images.shape[3], shape.width);
  }
  EXPECT_EQ(b.images.num_bytes(), size_t(d.rows) * sample_bytes);
  EXPECT_EQ(b.labels.rank, 1);
  EXPECT_EQ(b.labels.dtype, DType::kInt64);
  EXPECT_EQ(b.labels.shape[0], d.rows);
  EXPECT_EQ(b.indices.rank, 1);
  EXPECT_EQ(b.indices.dtype, DType::kInt64);
  EXPECT_EQ(b.indices.shape[0], d.rows);
  const auto* pixels = b.images.as<const char>();
  for (int64_t r = 0; r < d.rows; ++r) {
    d.items.push_back({b.indices.as<int64_t>()[r], b.labels.as<int64_t>()[r],
                       std::string(pixels + size_t(r) * sample_bytes, sample_bytes)});
  }
  return d;
}

std::unique_ptr<Loader> MustOpen(const LoaderOptions& o) {
  Result<std::unique_ptr<Loader>> r = Loader::Open(o);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  if (!r.ok()) return nullptr;
  return std::move(r).value();
}

// Runs the loader until Next() fails (or max_batches were taken).
Taken Drain(Loader& loader, const PipelineSpec& spec, size_t max_batches = SIZE_MAX) {
  Taken run;
  while (run.batches.size() < max_batches) {
    Result<Batch> b = loader.Next();
    if (!b.ok()) {
      run.end = b.status();
      break;
    }
    run.batches.push_back(Copy(*b, spec));
  }
  run.stats = loader.stats();
  run.skipped = loader.TakeSkipped();
  return run;
}

Taken OpenAndDrain(const LoaderOptions& o, size_t max_batches = SIZE_MAX) {
  std::unique_ptr<Loader> loader = MustOpen(o);
  if (loader == nullptr) return {};
  return Drain(*loader, o.job.pipeline, max_batches);
}

bool WaitFor(const std::function<bool()>& done, double seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

double SecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

class LoaderTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir;
    paths_ = new std::vector<std::string>(MakeImageFolder(dir_->path(), kClasses, kPerClass, /*seed=*/3));
  }
  static void TearDownTestSuite() {
    delete paths_;
    delete dir_;
  }

  static LoaderOptions Options() {
    LoaderOptions o;
    o.job.dataset = dir_->path();
    o.job.pipeline = SmallSpec();
    o.job.batch_size = 8;
    o.job.seed = 7;
    o.job.last_batch = LastBatch::kKeep;
    o.threads = 2;
    return o;
  }

  // Each valid row has its sample's label and exactly the pixels SampleProcessor
  // makes for (seed, epoch, index): rows are not mixed up or torn.
  static void ExpectRowsAreTheirSamples(const Taken& run, const LoaderOptions& o) {
    const testing::SampleProcessor proc(o.job.pipeline);
    std::string expected(proc.sample_bytes(), '\0');
    for (const Delivered& b : run.batches) {
      for (int64_t r = 0; r < b.valid; ++r) {
        const Row& row = b.items[size_t(r)];
        ASSERT_GE(row.index, 0);
        ASSERT_LT(row.index, kSamples);
        EXPECT_EQ(row.label, row.index / kPerClass);
        const std::string bytes = ReadFile((*paths_)[size_t(row.index)]);
        ASSERT_TRUE(proc.Process(bytes, o.job.seed, b.provenance.epoch, row.index, expected.data()).ok());
        EXPECT_TRUE(row.pixels == expected) << "index " << row.index << " epoch " << b.provenance.epoch;
      }
    }
  }

  static TempDir* dir_;
  static std::vector<std::string>* paths_;
};

TempDir* LoaderTest::dir_ = nullptr;
std::vector<std::string>* LoaderTest::paths_ = nullptr;

std::vector<int64_t> Sorted(std::vector<int64_t> v) {
  std::sort(v.begin(), v.end());
  return v;
}

std::vector<int64_t> Iota(int64_t n) {
  std::vector<int64_t> v(size_t(n), 0);
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = i;
  return v;
}

TEST_F(LoaderTest, EveryIndexOncePerEpochUint8) {
  const LoaderOptions o = Options();
  std::unique_ptr<Loader> loader = MustOpen(o);
  ASSERT_NE(loader, nullptr);
  EXPECT_EQ(loader->dataset_size(), kSamples);
  EXPECT_EQ(loader->batches_per_epoch(), 8);  // 7 full + 4 kept
  const Taken run = Drain(*loader, o.job.pipeline);
  EXPECT_EQ(run.end.code(), StatusCode::kOutOfRange) << run.end.ToString();
  EXPECT_EQ(Sorted(run.Indices()), Iota(kSamples));
  EXPECT_NE(run.Indices(), Iota(kSamples));  // shuffled
  ExpectRowsAreTheirSamples(run, o);
  EXPECT_EQ(run.stats.batches, 8);
  EXPECT_EQ(run.stats.samples, kSamples);
  EXPECT_EQ(run.stats.skipped, 0);
  EXPECT_GE(run.stats.wait_seconds, 0.0);
  EXPECT_TRUE(run.skipped.empty());

  // Labels agree with the dataset layer's listing.
  Result<std::unique_ptr<Dataset>> ds = OpenDataset(o.job.dataset);
  ASSERT_TRUE(ds.ok());
  for (const Row& row : run.ValidRows()) EXPECT_EQ(row.label, (*ds)->Label(row.index));
}

TEST_F(LoaderTest, EveryIndexOncePerEpochImagenetTrain) {
  LoaderOptions o = Options();
  o.job.pipeline = PipelineSpec::ImagenetTrain();
  o.job.batch_size = 16;
  const Taken run = OpenAndDrain(o);
  EXPECT_EQ(run.end.code(), StatusCode::kOutOfRange);
  ASSERT_EQ(run.batches.size(), 4u);
  EXPECT_EQ(Sorted(run.Indices()), Iota(kSamples));
  for (const Row& row : run.ValidRows()) {
    EXPECT_EQ(row.label, row.index / kPerClass);
    ASSERT_EQ(row.pixels.size(), size_t(3 * 224 * 224 * 4));
    const auto* f = reinterpret_cast<const float*>(row.pixels.data());
    float lo = 1e9f, hi = -1e9f;
    for (size_t i = 0; i < row.pixels.size() / 4; ++i) lo = std::min(lo, f[i]), hi = std::max(hi, f[i]);
    EXPECT_GE(lo, -2.2f) << row.index;  // (0 - 0.485) / 0.229 = -2.118
    EXPECT_LE(hi, 2.7f) << row.index;   // (1 - 0.406) / 0.225 = 2.64
    EXPECT_LT(lo + 0.5f, hi) << row.index;
  }
}

TEST_F(LoaderTest, SameBatchesWhateverTheThreadCount) {
  LoaderOptions o = Options();
  o.job.batch_size = 7;
  o.threads = 1;
  const Taken one = OpenAndDrain(o);
  ASSERT_EQ(one.batches.size(), 9u);
  ExpectRowsAreTheirSamples(one, o);
  for (int threads : {2, 3, 2}) {  // 3 on a 2-core machine: the arena asks TBB for more
    o.threads = threads;
    const Taken other = OpenAndDrain(o);
    ASSERT_EQ(other.batches.size(), one.batches.size()) << threads;
    for (size_t b = 0; b < one.batches.size(); ++b) {
      EXPECT_TRUE(other.batches[b].items == one.batches[b].items) << "threads " << threads << " batch " << b;
      EXPECT_EQ(other.batches[b].provenance.batch_in_epoch, int64_t(b));
    }
  }
}

TEST_F(LoaderTest, SeedAndShuffleDecideTheOrder) {
  LoaderOptions o = Options();
  const std::vector<int64_t> a = OpenAndDrain(o).Indices();
  o.job.seed = 8;
  const std::vector<int64_t> b = OpenAndDrain(o).Indices();
  EXPECT_EQ(Sorted(b), Iota(kSamples));
  EXPECT_NE(a, b);
  o.job.shuffle = false;
  EXPECT_EQ(OpenAndDrain(o).Indices(), Iota(kSamples));
}

TEST_F(LoaderTest, LastBatchPolicies) {
  LoaderOptions o = Options();  // 60 samples, batch 8: 7 full batches and 4 left over
  o.first_epoch = 5;

  o.job.last_batch = LastBatch::kDrop;
  const Taken drop = OpenAndDrain(o);
  o.job.last_batch = LastBatch::kKeep;
  const Taken keep = OpenAndDrain(o);
  o.job.last_batch = LastBatch::kPad;
  const std::unique_ptr<Loader> pad_loader = MustOpen(o);
  ASSERT_NE(pad_loader, nullptr);
  EXPECT_EQ(pad_loader->batches_per_epoch(), 8);
  const Taken pad = Drain(*pad_loader, o.job.pipeline);

  ASSERT_EQ(drop.batches.size(), 7u);
  ASSERT_EQ(keep.batches.size(), 8u);
  ASSERT_EQ(pad.batches.size(), 8u);
  for (const Taken* run : {&drop, &keep, &pad}) {
    EXPECT_EQ(run->end.code(), StatusCode::kOutOfRange);
    for (size_t b = 0; b < run->batches.size(); ++b) {
      const BatchProvenance& p = run->batches[b].provenance;
      EXPECT_EQ(p.epoch, 5u);
      EXPECT_EQ(p.batch_in_epoch, int64_t(b));
      EXPECT_EQ(p.last_in_epoch, b + 1 == run->batches.size()) << b;
    }
  }
  for (size_t b = 0; b < 7; ++b) {
    EXPECT_EQ(drop.batches[b].rows, 8);
    EXPECT_EQ(drop.batches[b].valid, 8);
    // The same permutation under every policy.
    EXPECT_TRUE(drop.batches[b].items == keep.batches[b].items) << b;
    EXPECT_TRUE(pad.batches[b].items == keep.batches[b].items) << b;
  }
  EXPECT_EQ(drop.Indices().size(), 56u);
  EXPECT_EQ(drop.stats.samples, 56);

  EXPECT_EQ(keep.batches[7].rows, 4);
  EXPECT_EQ(keep.batches[7].valid, 4);
  EXPECT_EQ(Sorted(keep.Indices()), Iota(kSamples));

  const Delivered& last = pad.batches[7];
  EXPECT_EQ(last.rows, 8);
  EXPECT_EQ(last.valid, 4);
  for (int64_t r = 0; r < 4; ++r) EXPECT_TRUE(last.items[size_t(r)] == keep.batches[7].items[size_t(r)]);
  for (int64_t r = 4; r < 8; ++r) {
    const Row& row = last.items[size_t(r)];
    EXPECT_EQ(row.label, -1);
    EXPECT_EQ(row.index, -1);
    EXPECT_TRUE(std::all_of(row.pixels.begin(), row.pixels.end(), [](char c) { return c == 0; }));
  }
  EXPECT_EQ(Sorted(pad.Indices()), Iota(kSamples));
  EXPECT_EQ(pad.stats.samples, kSamples);

  // No remainder: all three agree.
  o.job.batch_size = 6;
  for (LastBatch policy : {LastBatch::kDrop, LastBatch::kPad, LastBatch::kKeep}) {
    o.job.last_batch = policy;
    const Taken run = OpenAndDrain(o);
    ASSERT_EQ(run.batches.size(), 10u);
    for (const Delivered& b : run.batches) EXPECT_EQ(b.valid, 6);
  }

  // Fewer samples than one batch: nothing under drop, one short batch under keep.
  o.job.batch_size = 100;
  o.job.last_batch = LastBatch::kDrop;
  const std::unique_ptr<Loader> none = MustOpen(o);
  ASSERT_NE(none, nullptr);
  EXPECT_EQ(none->batches_per_epoch(), 0);
  EXPECT_EQ(none->Next().status().code(), StatusCode::kOutOfRange);
  o.job.last_batch = LastBatch::kPad;
  const Taken padded = OpenAndDrain(o);
  ASSERT_EQ(padded.batches.size(), 1u);
  EXPECT_EQ(padded.batches[0].rows, 100);
  EXPECT_EQ(padded.batches[0].valid, kSamples);
}

TEST_F(LoaderTest, EpochsThenOutOfRange) {
  LoaderOptions o = Options();
  o.job.epochs = 2;
  const std::unique_ptr<Loader> loader = MustOpen(o);
  ASSERT_NE(loader, nullptr);
  const Taken run = Drain(*loader, o.job.pipeline);
  ASSERT_EQ(run.batches.size(), 16u);
  EXPECT_EQ(run.end.code(), StatusCode::kOutOfRange);
  EXPECT_EQ(loader->Next().status().code(), StatusCode::kOutOfRange);  // and stays there
  EXPECT_EQ(run.stats.batches, 16);
  EXPECT_EQ(run.stats.samples, 2 * kSamples);
  std::vector<int64_t> epoch[2];
  for (size_t b = 0; b < 16; ++b) {
    const BatchProvenance& p = run.batches[b].provenance;
    EXPECT_EQ(p.epoch, b / 8);
    EXPECT_EQ(p.batch_in_epoch, int64_t(b % 8));
    EXPECT_EQ(p.last_in_epoch, b % 8 == 7);
    for (int64_t r = 0; r < run.batches[b].valid; ++r) epoch[b / 8].push_back(run.batches[b].items[size_t(r)].index);
  }
  EXPECT_EQ(Sorted(epoch[0]), Iota(kSamples));
  EXPECT_EQ(Sorted(epoch[1]), Iota(kSamples));
  EXPECT_NE(epoch[0], epoch[1]);  // a new permutation each epoch
  ExpectRowsAreTheirSamples(run, o);  // and new augmentations (epoch is in the key)

  // Resuming at epoch 1 gives exactly the second epoch.
  o.job.epochs = 1;
  o.first_epoch = 1;
  const Taken resumed = OpenAndDrain(o);
  ASSERT_EQ(resumed.batches.size(), 8u);
  for (size_t b = 0; b < 8; ++b) EXPECT_TRUE(resumed.batches[b].items == run.batches[8 + b].items) << b;
}

TEST_F(LoaderTest, ForeverUntilDestroyed) {
  LoaderOptions o = Options();
  o.job.epochs = 0;
  const Taken run = OpenAndDrain(o, /*max_batches=*/20);
  ASSERT_EQ(run.batches.size(), 20u);
  for (size_t b = 0; b < 20; ++b) {
    EXPECT_EQ(run.batches[b].provenance.epoch, b / 8);
    EXPECT_EQ(run.batches[b].provenance.batch_in_epoch, int64_t(b % 8));
  }
}

TEST_F(LoaderTest, ShardsCoverEverySampleOnce) {
  LoaderOptions o = Options();
  const std::vector<int64_t> whole = OpenAndDrain(o).Indices();
  for (int shards : {2, 7}) {
    std::vector<int64_t> all;
    for (int k = 0; k < shards; ++k) {
      o.num_shards = shards;
      o.shard_index = k;
      const std::unique_ptr<Loader> loader = MustOpen(o);
      ASSERT_NE(loader, nullptr);
      const int64_t shard_size = kSamples / shards + (k < kSamples % shards ? 1 : 0);
      EXPECT_EQ(loader->batches_per_epoch(), (shard_size + 7) / 8);
      const std::vector<int64_t> mine = Drain(*loader, o.job.pipeline).Indices();
      EXPECT_EQ(int64_t(mine.size()), shard_size) << shards << "/" << k;
      // Every num_shards-th sample of the epoch's order, from shard_index.
      std::vector<int64_t> expected;
      for (size_t i = size_t(k); i < whole.size(); i += size_t(shards)) expected.push_back(whole[i]);
      EXPECT_EQ(mine, expected) << shards << "/" << k;
      all.insert(all.end(), mine.begin(), mine.end());
    }
    EXPECT_EQ(Sorted(all), Iota(kSamples)) << shards;
  }
}

// The loader runs at most prefetch + 2 batches ahead of its consumer (the batch pool's
// size). Observable through stats().skipped, which counts bad files as their batch is
// emitted: with only bad files, batch size 1 and `pad`, every emitted batch adds one.
TEST(LoaderPrefetchTest, RunsAheadOnlyBoundedly) {
  TempDir tmp;
  MakeDirs(tmp / "c");
  constexpr int kFiles = 40;
  for (int i = 0; i < kFiles; ++i) {
    char name[32];
    std::snprintf(name, sizeof name, "c/empty_%02d.jpg", i);
    WriteFile(tmp / name, "");
  }
  for (int prefetch : {1, 3}) {
    LoaderOptions o;
    o.job.dataset = tmp.path();
    o.job.pipeline = SmallSpec();
    o.job.batch_size = 1;
    o.job.last_batch = LastBatch::kPad;
    o.prefetch = prefetch;
    o.threads = 2;
    const std::unique_ptr<Loader> loader = MustOpen(o);
    ASSERT_NE(loader, nullptr);
    const int64_t bound = prefetch + 2;
    auto produced = [&] { return loader->stats().skipped; };
    // It runs ahead until its buffers are all in use (each batch holds one until it
    // is handed out), and no further: waiting for the bound, rather than for the
    // count to stop changing, holds however slow the machine (or a sanitizer) is.
    ASSERT_TRUE(WaitFor([&] { return produced() >= bound; }, 30)) << produced();
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    const int64_t ahead = produced();
    EXPECT_EQ(ahead, bound) << "the loader ran past its bound; prefetch " << prefetch;
    {
      // Taking a batch lets exactly one more through, even while the consumer holds
      // it: what the consumer keeps is its own, and the pipeline's bound counts only
      // what it has not handed out (a trainer may keep its batches; it must not
      // stall the loader).
      Result<Batch> held = loader->Next();
      ASSERT_TRUE(held.ok()) << held.status().ToString();
      EXPECT_EQ(held->rows(), 1);
      EXPECT_EQ(held->valid_rows(), 0);
      EXPECT_EQ(held->skipped, 1);
      EXPECT_EQ(held->labels.as<int64_t>()[0], -1);
      ASSERT_TRUE(WaitFor([&] { return produced() >= ahead + 1; }, 20)) << produced();
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      EXPECT_EQ(produced(), ahead + 1) << "prefetch " << prefetch;
    }
    // Releasing it lets nothing more through (its buffer goes back to the free list).
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    EXPECT_EQ(produced(), ahead + 1) << "prefetch " << prefetch;
    // Draining delivers one padding batch per file and reports every file.
    int64_t batches = 1;
    for (;;) {
      Result<Batch> b = loader->Next();
      if (!b.ok()) {
        EXPECT_EQ(b.status().code(), StatusCode::kOutOfRange);
        break;
      }
      ++batches;
    }
    EXPECT_EQ(batches, kFiles);
    EXPECT_EQ(produced(), kFiles);
    const std::vector<SkippedSample> skipped = loader->TakeSkipped();
    EXPECT_EQ(int64_t(skipped.size()), kFiles);
    EXPECT_TRUE(loader->TakeSkipped().empty());  // drained
    EXPECT_EQ(loader->stats().samples, 0);
  }
}

TEST_F(LoaderTest, DestroyMidEpochIsPromptAndSafe) {
  LoaderOptions o = Options();
  o.job.pipeline = PipelineSpec::ImagenetTrain();  // slower samples: work is in flight
  o.job.batch_size = 4;
  o.job.epochs = 0;
  for (int held_batches : {0, 2, 4}) {  // 4 = prefetch + 2: the producer waits for a buffer
    std::unique_ptr<Loader> loader = MustOpen(o);
    ASSERT_NE(loader, nullptr);
    std::vector<Batch> held;
    for (int i = 0; i < held_batches; ++i) {
      Result<Batch> b = loader->Next();
      ASSERT_TRUE(b.ok()) << b.status().ToString();
      held.push_back(std::move(b).value());
    }
    std::vector<std::string> copies;
    for (const Batch& b : held) copies.emplace_back(b.images.as<const char>(), b.images.num_bytes());
    const auto t0 = std::chrono::steady_clock::now();
    loader.reset();
    EXPECT_LT(SecondsSince(t0), 10.0) << "held " << held_batches;
    for (size_t i = 0; i < held.size(); ++i) {
      EXPECT_EQ(std::memcmp(held[i].images.data, copies[i].data(), copies[i].size()), 0);
    }
  }
  // Destroyed right after Open, before any Next().
  for (int k = 0; k < 5; ++k) {
    const auto t0 = std::chrono::steady_clock::now();
    MustOpen(o).reset();
    EXPECT_LT(SecondsSince(t0), 10.0);
  }
}

TEST_F(LoaderTest, BatchMemoryOutlivesLoader) {
  LoaderOptions o = Options();
  std::unique_ptr<Loader> loader = MustOpen(o);
  ASSERT_NE(loader, nullptr);
  Result<Batch> b = loader->Next();
  ASSERT_TRUE(b.ok());
  const Delivered copy = Copy(*b, o.job.pipeline);
  // Keep only the views and a copy of keepalive (as a Python tensor would).
  const TensorView images = b->images, labels = b->labels, indices = b->indices;
  std::shared_ptr<void> keepalive = b->keepalive;
  { Batch gone = std::move(b).value(); }
  const Taken rest = Drain(*loader, o.job.pipeline);  // the pool cycles its other buffers
  EXPECT_EQ(rest.batches.size(), 7u);
  loader.reset();
  for (int64_t r = 0; r < copy.rows; ++r) {
    EXPECT_EQ(labels.as<int64_t>()[r], copy.items[size_t(r)].label);
    EXPECT_EQ(indices.as<int64_t>()[r], copy.items[size_t(r)].index);
    EXPECT_EQ(std::memcmp(images.as<const char>() + size_t(r) * testing::SampleBytes(o.job.pipeline),
                          copy.items[size_t(r)].pixels.data(), testing::SampleBytes(o.job.pipeline)),
              0);
  }
  keepalive.reset();  // frees the buffer (ASan checks it is freed once, and not before)
}

TEST_F(LoaderTest, OpenErrors) {
  TempDir empty;
  struct Case {
    std::function<void(LoaderOptions&)> change;
    StatusCode code;
    const char* what;
  } cases[] = {
      {[&](LoaderOptions& o) { o.job.dataset = empty / "missing"; }, StatusCode::kNotFound, "missing path"},
      {[&](LoaderOptions& o) { o.job.dataset = empty.path(); }, StatusCode::kNotFound, "no class folders"},
      {[](LoaderOptions& o) { o.job.dataset = (*paths_)[0]; }, StatusCode::kInvalidArgument, "a .jpg file"},
      {[](LoaderOptions& o) { o.job.dataset = ""; }, StatusCode::kInvalidArgument, "empty path"},
      {[](LoaderOptions& o) { o.job.batch_size = 0; }, StatusCode::kInvalidArgument, "batch_size 0"},
      {[](LoaderOptions& o) { o.job.batch_size = -3; }, StatusCode::kInvalidArgument, "batch_size < 0"},
      {[](LoaderOptions& o) { o.num_shards = 2, o.shard_index = 2; }, StatusCode::kInvalidArgument,
       "shard_index == num_shards"},
      {[](LoaderOptions& o) { o.num_shards = 2, o.shard_index = -1; }, StatusCode::kInvalidArgument,
       "shard_index < 0"},
      {[](LoaderOptions& o) { o.num_shards = 0; }, StatusCode::kInvalidArgument, "num_shards 0"},
      {[](LoaderOptions& o) { o.prefetch = 0; }, StatusCode::kInvalidArgument, "prefetch 0"},
      {[](LoaderOptions& o) { o.threads = -1; }, StatusCode::kInvalidArgument, "threads < 0"},
      {[](LoaderOptions& o) { o.job.pipeline.ops[0].params = R"({"size": 0})"; }, StatusCode::kInvalidArgument,
       "invalid pipeline"},
      {[](LoaderOptions& o) { o.job.pipeline.Add("no_such_op"); }, StatusCode::kInvalidArgument, "unknown op"},
  };
  for (const Case& c : cases) {
    LoaderOptions o = Options();
    c.change(o);
    Result<std::unique_ptr<Loader>> r = Loader::Open(o);
    ASSERT_FALSE(r.ok()) << c.what;
    EXPECT_EQ(r.status().code(), c.code) << c.what << ": " << r.status().ToString();
  }
  EXPECT_EQ(*ParseLastBatch("pad"), LastBatch::kPad);
  EXPECT_EQ(*ParseLastBatch("keep"), LastBatch::kKeep);
  EXPECT_EQ(*ParseLastBatch("drop"), LastBatch::kDrop);
  EXPECT_FALSE(ParseLastBatch("Pad").ok());
}

TEST_F(LoaderTest, FingerprintDependsOnListingAndSpec) {
  LoaderOptions o = Options();
  const std::unique_ptr<Loader> a = MustOpen(o), b = MustOpen(o);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(a->fingerprint(), b->fingerprint());
  o.job.pipeline = testing::Uint8Spec(24, /*rrc=*/true, /*hflip=*/0.5);
  const std::unique_ptr<Loader> c = MustOpen(o);
  ASSERT_NE(c, nullptr);
  EXPECT_NE(a->fingerprint(), c->fingerprint());
}

}  // namespace
}  // namespace ferry
