// The in-process loader: a BatchProducer (see producer.h) writing into a bounded pool
// of 64-byte-aligned batch buffers, and a queue of finished batches for Next().
#include "ferry/loader.h"

#include <chrono>
#include <deque>

#include <opencv2/core.hpp>

#include "core/mutex.h"
#include "core/resources.h"
#include "data/data_roots.h"
#include "data/dataset.h"
#include "data/job_listing.h"
#include "pipeline/batch_pool.h"
#include "pipeline/producer.h"
#include "pipeline/split_plan.h"
#include "pipeline/targets_batch.h"

namespace ferry {

class Loader::Impl {
 public:
  Impl(const LoaderOptions& o, std::shared_ptr<const Dataset> ds, std::shared_ptr<const PreparedJob> prepared,
       std::shared_ptr<const Tokenizer> tokenizer, std::shared_ptr<PythonPool> python)
      : opts_(WithListing(o, *ds)),
        python_(std::move(python)),
        prepared_(std::move(prepared)),
        pipeline_(prepared_->pipeline()),
        tokenizer_(std::move(tokenizer)),
        shard_{o.shard_index, o.num_shards, o.first_epoch},
        dataset_(std::move(ds)),
        fingerprint_(JobFingerprint(dataset_->fingerprint(), opts_.job.pipeline)),
        batches_per_epoch_(opts_.job.ranked() ? opts_.job.RankBatches()
                                              : StaticShardPlan(dataset_->size(), opts_.job, shard_).batches_per_epoch()) {
    MutexLock lock(&mu_);
    for (const ListingIssue& issue : dataset_->listing_issues()) skipped_.push_back({-1, issue.path, issue.reason});
    total_skipped_ = int64_t(skipped_.size());
  }

  ~Impl() {
    if (producer_) producer_->Stop();
  }

  static LoaderOptions WithListing(LoaderOptions o, const Dataset& ds) {
    o.job.num_samples = ds.size();
    const std::vector<int64_t> parts = ds.part_sizes();  // a mixture's sources
    for (size_t k = 0; k < o.job.mixture.size() && k < parts.size(); ++k) o.job.mixture[k].num_samples = parts[k];
    return o;
  }

  std::unique_ptr<PlanSource> Plan() const {
    std::unique_ptr<PlanSource> plan;
    if (opts_.job.ranked()) plan = std::make_unique<RankPlan>(opts_.job, opts_.rank, shard_);
    else plan = std::make_unique<StaticShardPlan>(dataset_->size(), opts_.job, shard_);
    if (opts_.resume_batches > 0)
      plan = std::make_unique<ResumePlan>(std::move(plan), opts_.first_epoch, opts_.resume_batches);
    return plan;
  }

  bool WaitReady(double seconds) {
    const auto t0 = std::chrono::steady_clock::now();
    const auto deadline = DeadlineIn(seconds);
    MutexLock lock(&mu_);
    while (ready_.empty() && !done_) {
      if (!ready_cv_.WaitUntil(&mu_, deadline)) break;
    }
    stats_.wait_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return !ready_.empty() || done_;
  }

  void Start() {
    const JobSpec& job = opts_.job;
    const bool user = prepared_->source() == BatchSource::kUserCode;  // a whole Dataset
    // User code: a batch in flight per Python process (and the prefetch after them).
    const bool python = python_ != nullptr;
    const int in_flight = python ? std::max(opts_.prefetch, opts_.python.processes) : opts_.prefetch;
    // A batch whose rows go on in Python holds its arena thread while it waits (the
    // decoding of others goes on in the other threads): one more thread per process.
    const int threads = !python ? opts_.threads
                        : user  ? std::max(opts_.python.processes, 1)
                                : (opts_.threads > 0 ? opts_.threads : AvailableCpus()) + opts_.python.processes;
    allocator_ = std::make_shared<PooledBatchAllocator>(job.batch_size, prepared_->sample_bytes(), in_flight + 2,
                                                        prepared_->num_classes());
    producer_ = std::make_unique<BatchProducer>(
        dataset_, prepared_->source(), prepared_->sample_pipeline(), job.seed, Plan(), allocator_,
        MakeDecodeArena(threads), in_flight,
        [this](ProducedBatch&& b) { OnBatch(std::move(b)); }, [this](const Status& s) { OnDone(s); });
    producer_->SetTargets(job.targets);
    producer_->SetTokenizer(tokenizer_);
    producer_->SetSourcePipelines(prepared_->source_pipelines());
    if (python_ != nullptr) producer_->SetUserCode(python_, job);
    producer_->Start();
  }

  Result<Batch> Next() {
    const auto t0 = std::chrono::steady_clock::now();
    MutexLock lock(&mu_);
    while (ready_.empty() && !done_) ready_cv_.Wait(&mu_);
    stats_.wait_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (ready_.empty()) {
      if (final_status_.ok()) return Status::OutOfRange("end of data");
      return final_status_;
    }
    Batch b = std::move(ready_.front());
    ready_.pop_front();
    if (b.buffer != nullptr) allocator_->Detach(b.buffer);  // the consumer may keep it: the pipeline goes on
    ++stats_.batches;
    stats_.samples += b.valid;
    return b;
  }

  std::vector<SkippedSample> TakeSkipped() {
    MutexLock lock(&mu_);
    std::vector<SkippedSample> out;
    out.swap(skipped_);
    return out;
  }

  IteratorStats stats() const {
    MutexLock lock(&mu_);
    IteratorStats s = stats_;
    s.skipped = total_skipped_;
    return s;
  }

  int64_t dataset_size() const { return dataset_->size(); }
  int64_t batches_per_epoch() const { return batches_per_epoch_; }
  uint64_t fingerprint() const { return fingerprint_; }

 private:
  void OnBatch(ProducedBatch&& p) {
    const Shape s = pipeline_->output_shape();
    const int64_t rows = p.rows;
    Batch b;
    b.images.data = p.memory.images;
    b.images.dtype = pipeline_->dtype();
    b.images.rank = 4;
    if (b.images.dtype == DType::kUint8) {
      b.images.shape = {rows, s.height, s.width, s.channels};
    } else {
      b.images.shape = {rows, s.channels, s.height, s.width};
    }
    b.labels = {p.memory.labels, DType::kInt64, 1, {rows, 0, 0, 0}};
    b.indices = {p.memory.indices, DType::kInt64, 1, {rows, 0, 0, 0}};
    if (pipeline_->num_classes() > 0 && p.memory.targets != nullptr)
      b.targets = {p.memory.targets, DType::kFloat32, 2, {rows, pipeline_->num_classes(), 0, 0}};
    b.valid = p.valid;
    b.skipped = int64_t(p.skipped.size());
    b.provenance = p.plan.provenance();
    b.keepalive = std::move(p.memory.owner);
    if (!opts_.job.targets.empty()) {
      PackedFields f = PackFields(opts_.job.targets, p.targets, rows, s.height, s.width, opts_.job.tokenizer.length,
                                  tokenizer_ != nullptr ? tokenizer_->pad_id() : 0);
      b.fields = std::move(f.fields);
      b.keepalive = std::make_shared<std::pair<std::shared_ptr<void>, std::shared_ptr<void>>>(std::move(b.keepalive),
                                                                                             std::move(f.owner));
    }
    b.buffer = p.memory.images;
    b.buffer_size = p.memory.size;
    if (python_ != nullptr) {
      b.images.dtype = DType::kUint8;
      b.images.shape = {rows, 0, 0, 0};
      b.structure = std::move(p.user.structure);
      b.user_data = {const_cast<void*>(p.user.data), DType::kUint8, 1, {int64_t(p.user.bytes), 0, 0, 0}};
      b.keepalive = std::make_shared<std::pair<std::shared_ptr<void>, std::shared_ptr<void>>>(std::move(b.keepalive),
                                                                                             std::move(p.user.owner));
    }
    bool delivered = false;
    {
      MutexLock lock(&mu_);
      total_skipped_ += int64_t(p.skipped.size());
      for (auto& s : p.skipped) skipped_.push_back(std::move(s));
      // A batch emptied entirely by bad files is not delivered (there is nothing in it);
      // its skips are reported. Under kPad it is delivered, so that shapes stay fixed,
      // and so is an empty last batch of an epoch: it carries last_in_epoch.
      if (rows > 0 || p.plan.last_in_epoch) {
        ready_.push_back(std::move(b));
        delivered = true;
      }
    }
    // After the lock: the consumer it wakes does not wake only to wait for the lock.
    // (The producer, whose thread this is, is stopped before this Impl goes.)
    if (delivered) ready_cv_.Signal();
  }

  void OnDone(const Status& s) {
    MutexLock lock(&mu_);
    final_status_ = s;
    done_ = true;
    ready_cv_.SignalAll();
  }

  const LoaderOptions opts_;
  const std::shared_ptr<PythonPool> python_;  // user code's processes, or null
  const std::shared_ptr<const PreparedJob> prepared_;
  const std::shared_ptr<const Pipeline> pipeline_;
  const std::shared_ptr<const Tokenizer> tokenizer_;  // the job's, if it asks for tokens
  const Shard shard_;
  const std::shared_ptr<const Dataset> dataset_;
  const uint64_t fingerprint_;
  const int64_t batches_per_epoch_;
  std::shared_ptr<PooledBatchAllocator> allocator_;
  std::unique_ptr<BatchProducer> producer_;

  mutable Mutex mu_;
  CondVar ready_cv_;
  std::deque<Batch> ready_ GUARDED_BY(mu_);
  std::vector<SkippedSample> skipped_ GUARDED_BY(mu_);
  int64_t total_skipped_ GUARDED_BY(mu_) = 0;
  IteratorStats stats_ GUARDED_BY(mu_);
  bool done_ GUARDED_BY(mu_) = false;
  Status final_status_ GUARDED_BY(mu_);
};

Result<std::unique_ptr<Loader>> Loader::Open(const LoaderOptions& options) {
  FERRY_ASSIGN_OR_RETURN(std::shared_ptr<const PreparedJob> prepared, PreparedJob::Prepare(options.job));
  if (options.prefetch <= 0) return Status::InvalidArgument("prefetch must be > 0");
  if (options.threads < 0) return Status::InvalidArgument("threads must be >= 0");
  FERRY_RETURN_IF_ERROR((Shard{options.shard_index, options.num_shards, options.first_epoch}.Validate()));
  if (options.job.ranked()) {
    if (options.rank < 0 || options.rank >= options.job.num_consumers)
      return Status::InvalidArgument("rank must be in [0, num_consumers)");
    if (options.num_shards != 1)
      return Status::InvalidArgument("give ranks (job.num_consumers, rank) or shards, not both");
  }
  // The trainer's own code runs in Python processes of this machine (like DataLoader's
  // workers, but seeded per sample: the same batches as remote workers make).
  std::shared_ptr<PythonPool> python;
  if (prepared->runs_python()) python = std::make_shared<PythonPool>(options.python);
  DataOpeners openers;
  openers.dataset = [](const std::string& spec) -> Result<std::shared_ptr<const Dataset>> {
    FERRY_ASSIGN_OR_RETURN(std::unique_ptr<Dataset> ds, OpenDataset(spec));
    return std::shared_ptr<const Dataset>(std::move(ds));
  };
  openers.user_code = [&python](const JobSpec& job) -> Result<std::shared_ptr<const Dataset>> {
    FERRY_ASSIGN_OR_RETURN(JobSpec listed, ListJob(job));
    return OpenUserCode(python.get(), listed);
  };
  openers.check_user_code = [&python](const JobSpec& job) { return CheckUserCode(python.get(), job); };
  openers.allow_synthetic = true;
  FERRY_ASSIGN_OR_RETURN(std::shared_ptr<const Dataset> ds, prepared->OpenData(openers));
  FERRY_RETURN_IF_ERROR(prepared->CheckData(*ds));
  FERRY_RETURN_IF_ERROR(Impl::WithListing(options, *ds).job.CheckListed());
  // OpenCV runs its parallel loops on TBB, in whatever arena calls it; disabling them
  // keeps the parallelism per sample, where it is cheapest, and `threads` exact.
  cv::setNumThreads(0);
  std::shared_ptr<const Tokenizer> tokenizer;
  if (!options.job.tokenizer.model.empty()) {
    FERRY_ASSIGN_OR_RETURN(tokenizer, Tokenizer::Load(options.job.tokenizer, DataRoots()));
  }
  auto impl = std::make_unique<Impl>(options, std::move(ds), std::move(prepared), std::move(tokenizer),
                                     std::move(python));
  impl->Start();
  return std::unique_ptr<Loader>(new Loader(std::move(impl)));
}

Loader::Loader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Loader::~Loader() = default;
Result<Batch> Loader::Next() { return impl_->Next(); }
bool Loader::WaitReady(double seconds) { return impl_->WaitReady(seconds); }
std::vector<SkippedSample> Loader::TakeSkipped() { return impl_->TakeSkipped(); }
IteratorStats Loader::stats() const { return impl_->stats(); }
int64_t Loader::dataset_size() const { return impl_->dataset_size(); }
int64_t Loader::batches_per_epoch() const { return impl_->batches_per_epoch(); }
uint64_t Loader::fingerprint() const { return impl_->fingerprint(); }

}  // namespace ferry
