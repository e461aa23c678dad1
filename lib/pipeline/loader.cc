// The in-process loader: a TBB parallel_pipeline of three stages per batch.
//
//   plan (serial, in order)   next batch's sample indices; takes a pooled buffer
//                             (blocks while all are out: this is the prefetch bound)
//   fill (parallel)           parallel_for over the batch's samples: read, decode,
//                             augment, written straight into the batch's row
//   emit (serial, in order)   compacts around bad files, pads, queues the Batch
//
// Up to `prefetch` batches are in the fill stage at once, so threads that finish
// their share of one batch start on the next instead of idling at the boundary.
#include "ferry/loader.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

#include <opencv2/core.hpp>
#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/global_control.h>
#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/parallel_pipeline.h>
#include <oneapi/tbb/task_arena.h>

#include "core/check.h"
#include "core/hash.h"
#include "data/dataset.h"
#include "data/permutation.h"
#include "image/augment.h"
#include "pipeline/batch_pool.h"

namespace ferry {

LastBatch ParseLastBatch(const std::string& s, bool* ok) {
  *ok = true;
  if (s == "drop") return LastBatch::kDrop;
  if (s == "pad") return LastBatch::kPad;
  if (s == "keep") return LastBatch::kKeep;
  *ok = false;
  return LastBatch::kDrop;
}

namespace {

struct Job {
  uint64_t epoch = 0;
  int64_t batch_in_epoch = 0;
  bool last_in_epoch = false;
  std::vector<int64_t> samples;  // global indices, in epoch order
  int64_t rows = 0;              // tensor rows (batch_size under kPad)
  std::shared_ptr<void> buffer;
  std::vector<Status> status;    // per sample
};

size_t AlignUp(size_t n) { return (n + 63) / 64 * 64; }

}  // namespace

class Loader::Impl {
 public:
  Impl(const LoaderOptions& o, std::unique_ptr<Dataset> ds)
      : opts_(o), dataset_(std::move(ds)), processor_(o.pipeline) {
    sample_bytes_ = opts_.pipeline.sample_bytes();
    images_bytes_ = AlignUp(sample_bytes_ * size_t(opts_.batch_size));
    labels_offset_ = images_bytes_;
    indices_offset_ = labels_offset_ + AlignUp(sizeof(int64_t) * size_t(opts_.batch_size));
    const size_t total = indices_offset_ + AlignUp(sizeof(int64_t) * size_t(opts_.batch_size));
    pool_ = BatchPool::Create(total, opts_.prefetch + 2);
    for (const ListingIssue& issue : dataset_->listing_issues()) {
      skipped_.push_back({-1, issue.path, issue.reason});
    }
    total_skipped_ = int64_t(skipped_.size());
    Fingerprinter f;
    f.AddU64(dataset_->fingerprint());
    f.AddU64(opts_.pipeline.Fingerprint());
    fingerprint_ = f.Finish();
  }

  ~Impl() {
    stop_ = true;
    pool_->Cancel();
    if (producer_.joinable()) producer_.join();
  }

  void Start() {
    const int threads = opts_.threads > 0 ? opts_.threads : int(std::thread::hardware_concurrency());
    // TBB caps its worker pool at the core count; allow exactly `threads` if asked
    // for more. The arena then admits exactly `threads` threads: the producer thread
    // (its master slot) plus threads - 1 workers.
    if (threads > tbb::this_task_arena::max_concurrency()) {
      global_control_ = std::make_unique<tbb::global_control>(
          tbb::global_control::max_allowed_parallelism, size_t(threads));
    }
    arena_ = std::make_unique<tbb::task_arena>(threads, 1);
    producer_ = std::thread([this] { Produce(); });
  }

  Result<Batch> Next() {
    const auto t0 = std::chrono::steady_clock::now();
    std::unique_lock<std::mutex> lock(mu_);
    ready_cv_.wait(lock, [&] { return !ready_.empty() || done_; });
    stats_.wait_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (ready_.empty()) {
      if (final_status_.ok()) return Status::OutOfRange("end of data");
      return final_status_;
    }
    Batch b = std::move(ready_.front());
    ready_.pop_front();
    ++stats_.batches;
    stats_.samples += b.valid;
    return b;
  }

  std::vector<SkippedSample> TakeSkipped() {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<SkippedSample> out;
    out.swap(skipped_);
    return out;
  }

  IteratorStats stats() const {
    std::lock_guard<std::mutex> lock(mu_);
    IteratorStats s = stats_;
    s.skipped = total_skipped_;
    return s;
  }

  int64_t dataset_size() const { return dataset_->size(); }
  uint64_t fingerprint() const { return fingerprint_; }

  int64_t ShardSize() const {
    const int64_t n = dataset_->size();
    const int64_t k = opts_.num_shards;
    return n / k + (opts_.shard_index < n % k ? 1 : 0);
  }

  int64_t BatchesPerEpoch() const {
    const int64_t n = ShardSize(), b = opts_.batch_size;
    return n / b + ((n % b) != 0 && opts_.last_batch != LastBatch::kDrop ? 1 : 0);
  }

 private:
  // Plans the next batch, or returns nullptr at the end of all epochs.
  Job* Plan() {
    const int64_t per_epoch = BatchesPerEpoch();
    if (per_epoch == 0) return nullptr;
    if (next_batch_ >= per_epoch) {
      next_batch_ = 0;
      ++epoch_offset_;
      order_.clear();
    }
    if (opts_.epochs > 0 && epoch_offset_ >= uint64_t(opts_.epochs)) return nullptr;
    const uint64_t epoch = opts_.first_epoch + epoch_offset_;
    if (order_.empty()) {
      std::vector<int64_t> perm = EpochPermutation(dataset_->size(), opts_.seed, epoch, opts_.shuffle);
      for (size_t i = size_t(opts_.shard_index); i < perm.size(); i += size_t(opts_.num_shards)) {
        order_.push_back(perm[i]);
      }
    }
    auto job = std::make_unique<Job>();
    job->epoch = epoch;
    job->batch_in_epoch = next_batch_;
    const int64_t begin = next_batch_ * opts_.batch_size;
    const int64_t end = std::min<int64_t>(begin + opts_.batch_size, int64_t(order_.size()));
    job->samples.assign(order_.begin() + begin, order_.begin() + end);
    job->rows = opts_.last_batch == LastBatch::kPad ? opts_.batch_size : end - begin;
    job->last_in_epoch = next_batch_ + 1 == per_epoch;
    job->status.resize(job->samples.size());
    ++next_batch_;
    job->buffer = pool_->Acquire();
    if (job->buffer == nullptr) return nullptr;  // cancelled
    return job.release();
  }

  void Fill(Job* job) {
    uint8_t* base = static_cast<uint8_t*>(job->buffer.get());
    auto* labels = reinterpret_cast<int64_t*>(base + labels_offset_);
    auto* indices = reinterpret_cast<int64_t*>(base + indices_offset_);
    const int n = int(job->samples.size());
    tbb::parallel_for(tbb::blocked_range<int>(0, n, 1), [&](const tbb::blocked_range<int>& r) {
      thread_local std::string bytes;
      for (int i = r.begin(); i != r.end(); ++i) {
        const int64_t idx = job->samples[size_t(i)];
        labels[i] = dataset_->Label(idx);
        indices[i] = idx;
        Status st = dataset_->ReadSample(idx, &bytes);
        if (st.ok()) st = processor_.Process(bytes, opts_.seed, job->epoch, idx, base + size_t(i) * sample_bytes_);
        job->status[size_t(i)] = std::move(st);
      }
    });
  }

  void Emit(Job* job) {
    std::unique_ptr<Job> owned(job);
    uint8_t* base = static_cast<uint8_t*>(job->buffer.get());
    auto* labels = reinterpret_cast<int64_t*>(base + labels_offset_);
    auto* indices = reinterpret_cast<int64_t*>(base + indices_offset_);
    std::vector<SkippedSample> bad;
    int64_t valid = 0;
    for (size_t i = 0; i < job->samples.size(); ++i) {
      if (!job->status[i].ok()) {
        bad.push_back({job->samples[i], dataset_->Path(job->samples[i]), job->status[i].ToString()});
        continue;
      }
      if (int64_t(i) != valid) {  // compaction: only when a bad file left a hole
        std::memmove(base + size_t(valid) * sample_bytes_, base + i * sample_bytes_, sample_bytes_);
        labels[valid] = labels[i];
        indices[valid] = indices[i];
      }
      ++valid;
    }
    int64_t rows = job->rows;
    if (opts_.last_batch == LastBatch::kPad) {
      std::memset(base + size_t(valid) * sample_bytes_, 0, size_t(rows - valid) * sample_bytes_);
      for (int64_t i = valid; i < rows; ++i) labels[i] = indices[i] = -1;
    } else {
      rows = valid;
    }
    Batch b;
    const PipelineSpec& spec = opts_.pipeline;
    b.images.data = base;
    b.images.dtype = spec.dtype();
    b.images.rank = 4;
    if (spec.output == PipelineSpec::Output::kUint8NHWC) {
      b.images.shape = {rows, spec.size, spec.size, spec.channels()};
    } else {
      b.images.shape = {rows, spec.channels(), spec.size, spec.size};
    }
    b.labels = {labels, DType::kInt64, 1, {rows, 0, 0, 0}};
    b.indices = {indices, DType::kInt64, 1, {rows, 0, 0, 0}};
    b.valid = valid;
    b.skipped = int64_t(bad.size());
    b.provenance.epoch = job->epoch;
    b.provenance.batch_in_epoch = job->batch_in_epoch;
    b.provenance.last_in_epoch = job->last_in_epoch;
    b.keepalive = std::move(job->buffer);
    std::lock_guard<std::mutex> lock(mu_);
    total_skipped_ += int64_t(bad.size());
    for (auto& s : bad) skipped_.push_back(std::move(s));
    // A batch emptied entirely by bad files is not delivered (nothing to train on),
    // but its skips are reported. Under kPad it is delivered: shapes stay fixed.
    if (rows > 0) {
      ready_.push_back(std::move(b));
      ready_cv_.notify_one();
    }
  }

  void Produce() {
    Status status;
    try {
      arena_->execute([&] {
        tbb::parallel_pipeline(
            size_t(opts_.prefetch),
            tbb::make_filter<void, Job*>(tbb::filter_mode::serial_in_order,
                                         [&](tbb::flow_control& fc) -> Job* {
                                           Job* j = stop_ ? nullptr : Plan();
                                           if (j == nullptr) fc.stop();
                                           return j;
                                         }) &
                tbb::make_filter<Job*, Job*>(tbb::filter_mode::parallel,
                                             [&](Job* j) {
                                               Fill(j);
                                               return j;
                                             }) &
                tbb::make_filter<Job*, void>(tbb::filter_mode::serial_in_order, [&](Job* j) { Emit(j); }));
      });
    } catch (const std::bad_alloc&) {
      status = Status::ResourceExhausted("out of memory in the loader pipeline");
    } catch (const std::exception& e) {
      status = Status::Internal(std::string("loader pipeline failed: ") + e.what());
    }
    std::lock_guard<std::mutex> lock(mu_);
    final_status_ = status;
    done_ = true;
    ready_cv_.notify_all();
  }

  const LoaderOptions opts_;
  const std::unique_ptr<Dataset> dataset_;
  const SampleProcessor processor_;
  size_t sample_bytes_ = 0, images_bytes_ = 0, labels_offset_ = 0, indices_offset_ = 0;
  uint64_t fingerprint_ = 0;
  std::shared_ptr<BatchPool> pool_;
  std::unique_ptr<tbb::global_control> global_control_;
  std::unique_ptr<tbb::task_arena> arena_;
  std::thread producer_;
  std::atomic<bool> stop_{false};

  // Producer-only state (the plan stage is serial).
  uint64_t epoch_offset_ = 0;
  int64_t next_batch_ = 0;
  std::vector<int64_t> order_;

  mutable std::mutex mu_;
  std::condition_variable ready_cv_;
  std::deque<Batch> ready_;              // GUARDED_BY(mu_)
  std::vector<SkippedSample> skipped_;   // GUARDED_BY(mu_)
  int64_t total_skipped_ = 0;            // GUARDED_BY(mu_)
  IteratorStats stats_;                  // GUARDED_BY(mu_)
  bool done_ = false;                    // GUARDED_BY(mu_)
  Status final_status_;                  // GUARDED_BY(mu_)
};

Result<std::unique_ptr<Loader>> Loader::Open(const LoaderOptions& options) {
  FERRY_RETURN_IF_ERROR(options.pipeline.Validate());
  if (options.batch_size <= 0) return Status::InvalidArgument("batch_size must be > 0");
  if (options.prefetch <= 0) return Status::InvalidArgument("prefetch must be > 0");
  if (options.threads < 0) return Status::InvalidArgument("threads must be >= 0");
  if (options.num_shards <= 0 || options.shard_index < 0 || options.shard_index >= options.num_shards)
    return Status::InvalidArgument("shard_index must be in [0, num_shards)");
  FERRY_ASSIGN_OR_RETURN(std::unique_ptr<Dataset> ds, OpenDataset(options.data));
  // OpenCV's own thread pool would oversubscribe the arena: the loader's parallelism
  // is per sample, and `threads` must be honoured exactly.
  cv::setNumThreads(0);
  auto impl = std::make_unique<Impl>(options, std::move(ds));
  impl->Start();
  return std::unique_ptr<Loader>(new Loader(std::move(impl)));
}

Loader::Loader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Loader::~Loader() = default;
Result<Batch> Loader::Next() { return impl_->Next(); }
std::vector<SkippedSample> Loader::TakeSkipped() { return impl_->TakeSkipped(); }
IteratorStats Loader::stats() const { return impl_->stats(); }
int64_t Loader::dataset_size() const { return impl_->dataset_size(); }
int64_t Loader::batches_per_epoch() const { return impl_->BatchesPerEpoch(); }
uint64_t Loader::fingerprint() const { return impl_->fingerprint(); }

}  // namespace ferry
