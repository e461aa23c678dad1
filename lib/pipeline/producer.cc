#include "pipeline/producer.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <iterator>
#include <thread>

#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/global_control.h>
#include <oneapi/tbb/parallel_for.h>

#include "core/check.h"
#include "core/histogram.h"
#include "core/log.h"
#include "core/mutex.h"
#include "core/resources.h"
#include "core/tsan.h"
#include "data/mixture.h"
#include "data/permutation.h"
#include "pipeline/batch_pool.h"
#include "pipeline/targets_batch.h"

namespace ferry {

// ---------------------------------------------------------------------------------
// Read errors

// A read error is the file's (a bad sample, skipped and reported) only when reading
// again cannot change it: the file is missing, its permissions refuse us, it is outside
// the data roots, or it is not a regular file of a sane size. Anything else (EIO, a
// read cut short, EAGAIN/ESTALE/ETIMEDOUT, EMFILE) may pass: it is retried, and if it
// persists the batch is not made (BatchProducer::Fill). Counted bad, it would make a
// split served again after a worker's death hold other bad samples than the first time,
// and refill would cut its batches otherwise: the client, which keys batches by their
// index, would keep a sample twice or lose one.
namespace {

bool PermanentReadError(const Status& s) {
  return s.code() == StatusCode::kNotFound || s.code() == StatusCode::kPermissionDenied ||
         s.code() == StatusCode::kInvalidArgument;
}

// Waits before each retry of a read that failed for a reason that may pass.
constexpr int kReadRetryMs[] = {10, 100, 400};

}  // namespace

// Refill groups and ResumePlan

void SetRefillGroup(const JobSpec& job, int64_t t, int64_t count, BatchPlan* plan) {
  if (job.bad_samples != BadSamples::kRefill) return;
  const int64_t k = std::max<int64_t>(1, job.batches_per_split);
  plan->refill_group = t / k;
  plan->last_in_group = (t + 1) % k == 0 || t + 1 >= count;
}

std::optional<BatchPlan> ResumePlan::Next() {
  if (!replay_.empty()) {
    BatchPlan p = std::move(replay_.back());
    replay_.pop_back();
    return p;
  }
  auto same_group = [](const BatchPlan& a, const BatchPlan& b) {
    return a.refill_group >= 0 && a.epoch == b.epoch && a.refill_group == b.refill_group;
  };
  for (;;) {
    std::optional<BatchPlan> p = inner_->Next();
    if (!p || reached_) return p;
    if (p->epoch > epoch_ || (p->epoch == epoch_ && p->batch_in_epoch >= done_)) {
      reached_ = true;
      if (group_.empty() || !same_group(group_.back(), *p)) return p;
      // The resume point is inside a refill group: its earlier batches are made
      // again (their bad samples decide this one's rows) and not emitted.
      replay_.push_back(std::move(*p));
      for (auto it = group_.rbegin(); it != group_.rend(); ++it) {
        it->discard = true;
        replay_.push_back(std::move(*it));
      }
      group_.clear();
      return Next();
    }
    if (p->refill_group < 0) continue;
    if (!group_.empty() && !same_group(group_.back(), *p)) group_.clear();
    group_.push_back(std::move(*p));
  }
}

// ---------------------------------------------------------------------------------
// StaticShardPlan

Status Shard::Validate() const {
  if (num_shards <= 0 || shard_index < 0 || shard_index >= num_shards)
    return Status::InvalidArgument("shard_index must be in [0, num_shards)");
  return Status::OK();
}

StaticShardPlan::StaticShardPlan(int64_t dataset_size, const JobSpec& job, Shard shard)
    : n_(job.mixed() ? job.mixture_epoch : dataset_size),
      job_(job),
      shard_(shard),
      shard_size_(n_ / shard.num_shards + (shard.shard_index < n_ % shard.num_shards ? 1 : 0)) {}

int64_t StaticShardPlan::batches_per_epoch() const { return BatchesIn(shard_size_, job_.batch_size, job_.last_batch); }

std::optional<BatchPlan> StaticShardPlan::Next() {
  const int64_t per_epoch = batches_per_epoch();
  if (per_epoch == 0) return std::nullopt;
  if (next_batch_ >= per_epoch) {
    next_batch_ = 0;
    ++epoch_offset_;
    order_.clear();
  }
  if (job_.epochs > 0 && epoch_offset_ >= uint64_t(job_.epochs)) return std::nullopt;
  const uint64_t epoch = shard_.first_epoch + epoch_offset_;
  if (order_.empty()) {
    const std::vector<int64_t> perm =
        job_.mixed() ? MixtureOrder(job_, epoch) : EpochPermutation(n_, job_.seed, epoch, job_.shuffle);
    order_.reserve(size_t(shard_size_));
    for (size_t i = size_t(shard_.shard_index); i < perm.size(); i += size_t(shard_.num_shards)) {
      order_.push_back(perm[i]);
    }
  }
  BatchPlan plan;
  plan.epoch = epoch;
  plan.batch_in_epoch = next_batch_;
  const int64_t begin = next_batch_ * job_.batch_size;
  const int64_t end = std::min<int64_t>(begin + job_.batch_size, int64_t(order_.size()));
  plan.samples.assign(order_.begin() + begin, order_.begin() + end);
  plan.pad = job_.last_batch == LastBatch::kPad;
  plan.rows = plan.pad ? job_.batch_size : end - begin;
  plan.last_in_epoch = next_batch_ + 1 == per_epoch;
  plan.batches_in_epoch = per_epoch;
  plan.batches_in_split = per_epoch;  // in-process, the whole shard epoch is one split
  plan.batch_in_split = next_batch_;
  SetRefillGroup(job_, next_batch_, per_epoch, &plan);
  ++next_batch_;
  return plan;
}

// ---------------------------------------------------------------------------------
// PooledBatchAllocator

namespace {
size_t AlignUp(size_t n) { return (n + 63) / 64 * 64; }
}  // namespace

PooledBatchAllocator::PooledBatchAllocator(int64_t max_rows, size_t sample_bytes, int capacity, int num_classes)
    : labels_offset_(AlignUp(size_t(max_rows) * sample_bytes)),
      indices_offset_(labels_offset_ + AlignUp(sizeof(int64_t) * size_t(max_rows))),
      targets_offset_(indices_offset_ + AlignUp(sizeof(int64_t) * size_t(max_rows))),
      end_offset_(targets_offset_ + AlignUp(sizeof(float) * size_t(max_rows) * size_t(num_classes))),
      pool_(BatchPool::Create(end_offset_, capacity)) {}

BatchMemory PooledBatchAllocator::Allocate(const BatchPlan& plan, int64_t rows, size_t sample_bytes) {
  return Allocate(plan, rows, sample_bytes, /*wait=*/true);
}

BatchMemory PooledBatchAllocator::Allocate(const BatchPlan&, int64_t rows, size_t sample_bytes, bool wait) {
  BatchMemory m;
  FERRY_CHECK(size_t(rows) * sample_bytes <= labels_offset_);
  m.owner = pool_->Acquire(wait);
  if (m.owner == nullptr) return m;
  auto* base = static_cast<uint8_t*>(m.owner.get());
  m.images = base;
  m.labels = reinterpret_cast<int64_t*>(base + labels_offset_);
  m.indices = reinterpret_cast<int64_t*>(base + indices_offset_);
  if (end_offset_ > targets_offset_) m.targets = reinterpret_cast<float*>(base + targets_offset_);
  m.size = end_offset_;  // [images | labels | indices | targets]
  return m;
}

BatchMemory PooledBatchAllocator::AllocateNow(const BatchPlan& plan, int64_t rows, size_t sample_bytes) {
  return Allocate(plan, rows, sample_bytes, /*wait=*/false);
}

void PooledBatchAllocator::Cancel() { pool_->Cancel(); }

size_t PooledBatchAllocator::buffer_bytes() const { return pool_->buffer_bytes(); }

void PooledBatchAllocator::Detach(const void* images) { pool_->Detach(images); }

// ---------------------------------------------------------------------------------
// MakeDecodeArena

std::shared_ptr<tbb::task_arena> MakeDecodeArena(int threads) {
  if (threads <= 0) threads = AvailableCpus();  // the container's share, not the node's
  // Tasks are only ever enqueued into the arena (no thread joins it with execute),
  // so all `threads` slots go to TBB workers. TBB keeps max_allowed_parallelism - 1
  // workers; make sure there are enough. The control lives for the process.
  static Mutex mu;
  static std::unique_ptr<tbb::global_control> control;
  static size_t granted = 0;
  {
    MutexLock lock(&mu);
    const size_t want = size_t(threads) + 1;
    if (want > granted &&
        want > size_t(tbb::global_control::active_value(tbb::global_control::max_allowed_parallelism))) {
      control.reset();
      control = std::make_unique<tbb::global_control>(tbb::global_control::max_allowed_parallelism, want);
      granted = want;
    }
  }
  return std::make_shared<tbb::task_arena>(threads, /*reserved_for_masters=*/0);
}

// ---------------------------------------------------------------------------------
// BatchProducer

BatchProducer::BatchProducer(std::shared_ptr<const Dataset> dataset, BatchSource source,
                             std::shared_ptr<const Pipeline> pipeline, uint64_t seed,
                             std::unique_ptr<PlanSource> plans, std::shared_ptr<BatchAllocator> allocator,
                             std::shared_ptr<tbb::task_arena> arena, int max_in_flight, EmitFn emit, DoneFn done)
    : dataset_(std::move(dataset)),
      source_(source),
      pipeline_(std::move(pipeline)),
      seed_(seed),
      sample_bytes_(pipeline_ != nullptr ? pipeline_->sample_bytes() : 0),
      plans_(std::move(plans)),
      allocator_(std::move(allocator)),
      arena_(std::move(arena)),
      max_in_flight_(std::max(1, max_in_flight)),
      emit_(std::move(emit)),
      done_(std::move(done)) {}

BatchProducer::~BatchProducer() { Stop(); }

void BatchProducer::Start() { thread_ = std::thread([this] { Run(); }); }

void BatchProducer::Stop() {
  cancel_user_code_.store(true);
  {
    MutexLock lock(&mu_);
    stop_ = true;
    cv_.SignalAll();
  }
  plans_->Cancel();
  allocator_->Cancel();
  if (thread_.joinable()) thread_.join();
  {
    MutexLock lock(&mu_);
    while (in_flight_ != 0 || done_running_) cv_.Wait(&mu_);
  }
  // Run has ended (joined above): user_threads_ no longer grows, and each of its loops
  // sees stop_ before it plans again.
  for (std::thread& t : user_threads_) {
    if (!t.joinable()) continue;
    if (t.get_id() == std::this_thread::get_id()) {
      // Not reached today (Stop waits for every task first, so a task cannot be the
      // caller); joining oneself would throw, so never try.
      t.detach();
    } else {
      t.join();
    }
  }
  MutexLock emit_lock(&emit_mu_);
  held_.clear();  // their buffers go back to the pool
}

void BatchProducer::StopPlanning() {
  {
    MutexLock lock(&mu_);
    stop_planning_ = true;
    cv_.SignalAll();
  }
  plans_->Cancel();
}

void BatchProducer::Run() {
  if (source_ == BatchSource::kUserCode) return RunUserCode();
  uint64_t seq = 0;
  Status status;
  for (;;) {
    {
      MutexLock lock(&mu_);
      while (!stop_ && !stop_planning_ && in_flight_ >= max_in_flight_) cv_.Wait(&mu_);
      if (stop_ || stop_planning_ || !status_.ok()) break;
    }
    std::unique_ptr<ProducedBatch> batch;
    int64_t memory_wait_ns = 0;
    if (!PlanOne(&batch, &memory_wait_ns, &status)) break;
    const uint64_t my_seq = seq++;
    ProducedBatch* raw = batch.release();
    FERRY_TSAN_RELEASE(raw);  // libtbb orders the enqueue before the task (core/tsan.h)
    auto make = [this, my_seq, raw, memory_wait_ns] {
      FERRY_TSAN_ACQUIRE(raw);
      Make(my_seq, std::unique_ptr<ProducedBatch>(raw), memory_wait_ns);
    };
    if (flow_ != nullptr) flow_->Submit(std::move(make));  // the job's turn among the worker's jobs
    else arena_->enqueue(std::move(make));
  }
  EndPlanning(status);
}

bool BatchProducer::PlanOne(std::unique_ptr<ProducedBatch>* out, int64_t* memory_wait_ns, Status* status) {
  std::optional<BatchPlan> plan;
  try {
    plan = plans_->Next();
  } catch (const std::exception& e) {
    *status = Status::Internal(std::string("planning failed: ") + e.what());
    return false;
  }
  if (!plan) return false;
  auto batch = std::make_unique<ProducedBatch>();
  batch->plan = std::move(*plan);
  // Reads that wait on a network start now, while earlier batches decode.
  dataset_->Prefetch(batch->plan.samples);
  const int64_t rows = std::max<int64_t>(batch->plan.rows, int64_t(batch->plan.samples.size()));
  const int64_t wait_from = MonoNs();
  try {
    batch->memory = allocator_->Allocate(batch->plan, rows, sample_bytes_);  // may block: outside the arena
  } catch (const std::bad_alloc&) {
    // No exception leaves this thread: the stream ends with the error, the process
    // goes on (workers also bound each stream's memory before it starts).
    *status = Status::ResourceExhausted("out of memory for a batch of " + std::to_string(rows) + " samples");
    return false;
  }
  if (batch->memory.owner == nullptr) return false;  // cancelled
  {
    MutexLock lock(&mu_);
    ++in_flight_;
  }
  *memory_wait_ns = MonoNs() - wait_from;
  *out = std::move(batch);
  return true;
}

void BatchProducer::Make(uint64_t seq, std::unique_ptr<ProducedBatch> batch, int64_t memory_wait_ns) {
  const BatchPlan& p = batch->plan;
  const bool shareable = window_ != nullptr && source_ == BatchSource::kDecode && user_code_ == nullptr &&
                         p.refill_group < 0 && !p.discard;
  if (shareable) return MakeShared(seq, std::move(batch), memory_wait_ns);
  MakeHere(seq, std::move(batch), memory_wait_ns);
}

void BatchProducer::MakeHere(uint64_t seq, std::unique_ptr<ProducedBatch> batch, int64_t memory_wait_ns) {
  FillChecked(batch.get(), memory_wait_ns);
  Finish(seq, std::move(batch));
}

bool BatchProducer::FillChecked(ProducedBatch* batch, int64_t memory_wait_ns) {
  // Busy while some batch is being made (PipelineStats::Busy).
  if (stats_ != nullptr) stats_->Busy(true);
  bool made = false;
  try {
    Fill(batch, memory_wait_ns);
    made = batch->failure.ok();
    if (!made) {
      MutexLock lock(&mu_);
      if (status_.ok()) status_ = batch->failure;
    }
  } catch (const std::bad_alloc&) {
    MutexLock lock(&mu_);
    if (status_.ok()) status_ = Status::ResourceExhausted("out of memory while decoding a batch");
  } catch (const std::exception& e) {
    MutexLock lock(&mu_);
    if (status_.ok()) status_ = Status::Internal(std::string("decoding a batch failed: ") + e.what());
  }
  if (stats_ != nullptr) stats_->Busy(false);
  return made;
}


// Planning has ended (for good: its end, an error, a stop). `done` is called here when
// no batch is in flight, else by the last one's Finish. Called by each planning loop.
void BatchProducer::EndPlanning(const Status& status) {
  bool call_done = false;
  Status final_status;
  {
    MutexLock lock(&mu_);
    if (status_.ok() && !status.ok()) status_ = status;
    planning_done_ = true;
    if (in_flight_ == 0 && !done_called_) {
      done_called_ = true;
      done_running_ = true;  // Stop() waits for it: done_ may touch the owner
      call_done = true;
      final_status = status_;
    }
  }
  if (call_done) {
    DropHeld();
    if (done_) done_(final_status);
    MutexLock lock(&mu_);
    done_running_ = false;
    cv_.SignalAll();
  }
}

void BatchProducer::Fill(ProducedBatch* b, int64_t memory_wait_ns) {
  const BatchMemory& m = b->memory;
  const std::vector<int64_t>& samples = b->plan.samples;
  const int n = int(samples.size());
  if (source_ == BatchSource::kSynthetic) return FillSynthetic(b, memory_wait_ns);
  if (source_ == BatchSource::kUserCode) return FillUserCode(b, memory_wait_ns);
  PipelineStats* stats = stats_.get();
  std::vector<Status> status(static_cast<size_t>(n));
  std::vector<uint8_t> read_failed(static_cast<size_t>(n));
  const bool with_targets = !targets_.empty();
  bool geometric = false;  // targets that move with the image (not only ids, captions, metadata)
  for (const std::string& t : targets_) geometric = geometric || JobSpec::GeometricTarget(t);
  const bool masks = std::find(targets_.begin(), targets_.end(), "masks") != targets_.end() ||
                     std::find(targets_.begin(), targets_.end(), "semantic") != targets_.end();
  const bool annotated = with_targets && dataset_->has_annotations();
  const bool keys = std::find(targets_.begin(), targets_.end(), "key") != targets_.end();
  if (with_targets) b->targets.assign(size_t(std::max<int64_t>(b->plan.rows, n)), SampleTargets());
  // libtbb forks the chunks after this point and joins them before parallel_for
  // returns; TSan sees neither edge by itself (core/tsan.h).
  FERRY_TSAN_RELEASE(b);
  tbb::parallel_for(tbb::blocked_range<int>(0, n, 1), [&](const tbb::blocked_range<int>& r) {
    FERRY_TSAN_ACQUIRE(b);
    thread_local std::string bytes;
    thread_local uint32_t sampled = 0;  // every kOpSampling-th sample of a thread is timed step by step
    thread_local StepTimes times;
    for (int i = r.begin(); i != r.end(); ++i) {
      const int64_t idx = samples[size_t(i)];  // a mixture's draw id: its augmentation's key
      m.labels[i] = dataset_->Label(idx);
      m.indices[i] = dataset_->SampleIndex(idx);
      const Pipeline& pipeline =
          source_pipelines_.empty() ? *pipeline_ : *source_pipelines_[size_t(dataset_->Part(idx))];
      const int64_t t0 = stats != nullptr ? MonoNs() : 0;
      // The annotations are read with the bytes (a shard's caption is a read too, whose
      // errors may pass like the image's).
      SampleAnnotations annotations;
      auto read = [&] {
        Status s = dataset_->ReadSample(idx, &bytes);
        if (s.ok() && with_targets && annotated) s = dataset_->ReadAnnotations(idx, &annotations);
        return s;
      };
      Status st = read();
      for (size_t tries = 0; !st.ok() && !PermanentReadError(st) && tries < std::size(kReadRetryMs); ++tries) {
        std::this_thread::sleep_for(std::chrono::milliseconds(kReadRetryMs[tries]));
        st = read();
      }
      const int64_t t1 = stats != nullptr ? MonoNs() : 0;
      if (stats != nullptr) stats->read.ObserveNs(t1 - t0);
      SampleTargets* targets = with_targets ? &b->targets[size_t(i)] : nullptr;
      if (st.ok() && targets != nullptr) {
        // An annotation that cannot become targets (an RLE that does not add up) is the
        // sample's fault: it is bad, not retried.
        st = TargetsFromAnnotations(annotations, masks, targets);
        if (!st.ok()) st = Status::InvalidArgument("annotations: " + st.message());
        if (st.ok() && tokenizer_ != nullptr) st = tokenizer_->Encode(targets->text, &targets->tokens);
        if (st.ok() && keys) targets->key = dataset_->Key(idx);
      } else if (!st.ok()) {
        read_failed[size_t(i)] = 1;
      }
      if (st.ok()) {
        int64_t t2 = 0;
        const bool profile = stats != nullptr && ++sampled % PipelineStats::kOpSampling == 0;
        if (profile) times.ns.assign(pipeline.step_names().size(), 0);
        st = pipeline.Process(bytes, seed_, b->plan.epoch, idx, m.images + size_t(i) * sample_bytes_,
                                stats != nullptr ? &t2 : nullptr, profile ? &times : nullptr,
                                geometric ? targets : nullptr);
        if (stats != nullptr && st.ok()) {
          stats->decode.ObserveNs(t2 - t1);
          stats->augment.ObserveNs(MonoNs() - t2);
          if (profile) {
            stats->ops.Add("read", t1 - t0);
            stats->ops.Add(pipeline.step_names(), times.ns);
          }
        }
      }
      status[size_t(i)] = std::move(st);
    }
    FERRY_TSAN_RELEASE(&status);
  });
  FERRY_TSAN_ACQUIRE(&status);
  const int64_t compact_from = stats != nullptr ? MonoNs() : 0;
  // Compaction around bad files: only when one left a hole (memmove of later rows).
  int64_t valid = 0;
  for (int i = 0; i < n; ++i) {
    if (read_failed[size_t(i)] && !PermanentReadError(status[size_t(i)])) {
      const std::string path = dataset_->Path(samples[size_t(i)]);
      b->failure = Status::Unavailable("reading " + path + " failed " + std::to_string(std::size(kReadRetryMs) + 1) +
                                       " times (" + status[size_t(i)].ToString() +
                                       "): an error that may pass, so the sample is not counted bad; this batch is "
                                       "not made here, and its split is served again");
      LogWarn("%s", b->failure.message().c_str());
      return;
    }
  }
  for (int i = 0; i < n; ++i) {
    if (!status[size_t(i)].ok()) {
      b->skipped.push_back(
          {dataset_->SampleIndex(samples[size_t(i)]), dataset_->Path(samples[size_t(i)]), status[size_t(i)].ToString()});
      if (stats != nullptr) {
        const PipelineStats::Reason r =
            read_failed[size_t(i)] ? PipelineStats::kReadFailed : PipelineStats::DecodeReason(status[size_t(i)].code());
        stats->skipped[r].fetch_add(1, std::memory_order_relaxed);
      }
      continue;
    }
    if (i != valid) {
      std::memmove(m.images + size_t(valid) * sample_bytes_, m.images + size_t(i) * sample_bytes_, sample_bytes_);
      m.labels[valid] = m.labels[i];
      m.indices[valid] = m.indices[i];
      if (with_targets) b->targets[size_t(valid)] = std::move(b->targets[size_t(i)]);
    }
    ++valid;
  }
  b->valid = valid;
  for (size_t i = size_t(valid); i < b->targets.size(); ++i) b->targets[i] = SampleTargets();
  if (b->plan.pad) {
    b->rows = b->plan.rows;
    std::memset(m.images + size_t(valid) * sample_bytes_, 0, size_t(b->rows - valid) * sample_bytes_);
    for (int64_t i = valid; i < b->rows; ++i) m.labels[i] = m.indices[i] = -1;
  } else {
    b->rows = valid;
  }
  if (stats != nullptr) {
    stats->samples.fetch_add(valid, std::memory_order_relaxed);
    stats->assemble.ObserveNs(memory_wait_ns + MonoNs() - compact_from);
  }
  if (user_code_ != nullptr) FinishInPython(b);
}

void BatchProducer::FillSynthetic(ProducedBatch* b, int64_t memory_wait_ns) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(synthetic_cost_us_);
  const BatchMemory& m = b->memory;
  const std::vector<int64_t>& samples = b->plan.samples;
  for (size_t i = 0; i < samples.size(); ++i) {
    m.labels[i] = dataset_->Label(samples[i]);
    m.indices[i] = samples[i];
    std::memset(m.images + i * sample_bytes_, int(samples[i] & 0xff), sample_bytes_);
  }
  b->valid = int64_t(samples.size());
  b->rows = b->plan.pad ? b->plan.rows : b->valid;
  for (int64_t i = b->valid; i < b->rows; ++i) {
    std::memset(m.images + size_t(i) * sample_bytes_, 0, sample_bytes_);
    m.labels[i] = m.indices[i] = -1;
  }
  std::this_thread::sleep_until(until);
  if (stats_ != nullptr) {
    stats_->samples.fetch_add(b->valid, std::memory_order_relaxed);
    stats_->assemble.ObserveNs(memory_wait_ns);
  }
}

void BatchProducer::Finish(uint64_t seq, std::unique_ptr<ProducedBatch> batch) {
  {
    // emit_mu_ is held from collecting the in-order run until it is emitted, so that
    // two finishing tasks cannot emit their runs out of order.
    MutexLock emit_lock(&emit_mu_);
    std::vector<std::unique_ptr<ProducedBatch>> ready;
    bool failed;
    {
      MutexLock lock(&mu_);
      finished_.emplace(seq, std::move(batch));
      for (auto it = finished_.find(next_emit_); it != finished_.end(); it = finished_.find(next_emit_)) {
        ready.push_back(std::move(it->second));
        finished_.erase(it);
        ++next_emit_;
      }
      failed = !status_.ok();
    }
    if (failed) {
      held_.clear();
    } else {
      std::vector<std::unique_ptr<ProducedBatch>> final;
      for (auto& b : ready) Refill(std::move(b), &final);
      for (auto& b : final) {
        if (b->plan.discard) continue;
        if (pipeline_ != nullptr && pipeline_->has_batch_ops() && b->memory.owner != nullptr && b->rows > 0) {
          // The batch op (MixUp/CutMix) sees the batch's final rows, keyed by its
          // position and first sample: the same on any worker and on the trainer.
          BatchView v;
          v.images = reinterpret_cast<float*>(b->memory.images);
          v.rows = b->rows;
          v.valid = b->valid;
          v.labels = b->memory.labels;
          v.targets = b->memory.targets;
          pipeline_->ApplyBatchOps(v, seed_, b->plan.epoch,
                                   Pipeline::BatchKey(b->plan.batch_in_epoch, b->memory.indices, b->valid));
        }
        emit_(std::move(*b));
      }
    }
  }
  bool call_done = false;
  Status final_status;
  {
    MutexLock lock(&mu_);
    --in_flight_;
    if (planning_done_ && in_flight_ == 0 && !done_called_) {
      done_called_ = true;
      done_running_ = true;  // Stop() waits for it: done_ may touch the owner
      call_done = true;
      final_status = status_;
    }
    cv_.SignalAll();
  }
  if (call_done) {
    DropHeld();
    if (done_) done_(final_status);
    MutexLock lock(&mu_);
    done_running_ = false;
    cv_.SignalAll();
  }
}

// ---------------------------------------------------------------------------------
// Refill (BadSamples::kRefill)
//
// A refill group's batches, in plan order, take its good rows in order: batch i of the
// group gets good rows [i*B, (i+1)*B) of the group's concatenated good rows, B its
// planned samples. So a batch is final once it is full, or once the group's last
// batch has been made; until then it is held here. Rows only move up the group: a
// newly made batch pours its leading good rows into the held ones, front first, and
// keeps the rest at its own front. Only the front held batch is ever partly full;
// the ones behind it are empty, and an empty held batch gives its buffer back (it
// takes the next made batch's buffer, rows and all, when its turn comes), so refill
// holds at most one buffer more than skip does, however many samples are bad. The
// batches a group's bad samples leave empty at its end go out without a buffer
// (no rows), or, padded, each in one allocated past the bound (see below).

namespace {

int64_t Target(const ProducedBatch& b) { return int64_t(b.plan.samples.size()); }

bool SameGroup(const BatchPlan& a, const BatchPlan& b) {
  return a.refill_group >= 0 && a.epoch == b.epoch && a.refill_group == b.refill_group;
}

// Moves the targets of those rows too (when the batches carry targets): `to`'s grow
// to hold them.
void MoveTargets(std::vector<SampleTargets>* from, int64_t from_row, std::vector<SampleTargets>* to, int64_t to_row,
                 int64_t n) {
  if (n <= 0 || from->empty() || (from == to && from_row == to_row)) return;
  if (to->size() < size_t(to_row + n)) to->resize(size_t(to_row + n));
  // Forward: to_row < from_row whenever from == to (rows move up).
  for (int64_t k = 0; k < n; ++k) (*to)[size_t(to_row + k)] = std::move((*from)[size_t(from_row + k)]);
}

// Moves rows [from_row, from_row + n) of `from` to [to_row, to_row + n) of `to` (the
// same memory, or another batch's).
void MoveRows(const BatchMemory& from, int64_t from_row, const BatchMemory& to, int64_t to_row, int64_t n,
              size_t sample_bytes) {
  if (n <= 0 || (&from == &to && from_row == to_row)) return;
  std::memmove(to.images + size_t(to_row) * sample_bytes, from.images + size_t(from_row) * sample_bytes,
               size_t(n) * sample_bytes);
  std::memmove(to.labels + to_row, from.labels + from_row, size_t(n) * sizeof(int64_t));
  std::memmove(to.indices + to_row, from.indices + from_row, size_t(n) * sizeof(int64_t));
}

}  // namespace

void BatchProducer::Refill(std::unique_ptr<ProducedBatch> b, std::vector<std::unique_ptr<ProducedBatch>>* out) {
  if (!held_.empty() && !SameGroup(held_.front()->plan, b->plan)) DropHeldLocked();
  if (b->plan.refill_group < 0) {
    out->push_back(std::move(b));
    return;
  }
  int64_t from = 0;  // b's rows poured so far
  for (auto& h : held_) {
    if (from == b->valid) break;
    const int64_t need = Target(*h) - h->valid;
    if (need <= 0) continue;
    if (h->memory.owner == nullptr) {
      // h is empty and gave its buffer back: it takes b's, with b's remaining rows
      // moved to the front. They fit: only a group's last batch plans fewer samples.
      FERRY_CHECK(b->valid - from <= need);
      MoveRows(b->memory, from, b->memory, 0, b->valid - from, sample_bytes_);
      MoveTargets(&b->targets, from, &b->targets, 0, b->valid - from);
      h->targets = std::move(b->targets);
      b->targets.clear();
      h->memory = std::move(b->memory);
      b->memory = BatchMemory{};
      h->valid = b->valid - from;
      b->valid = 0;
      from = 0;
      break;
    }
    const int64_t n = std::min(need, b->valid - from);
    MoveRows(b->memory, from, h->memory, h->valid, n, sample_bytes_);
    MoveTargets(&b->targets, from, &h->targets, h->valid, n);
    h->valid += n;
    from += n;
  }
  if (from > 0) {
    MoveRows(b->memory, from, b->memory, 0, b->valid - from, sample_bytes_);
    MoveTargets(&b->targets, from, &b->targets, 0, b->valid - from);
    b->valid -= from;
  }
  const bool last = b->plan.last_in_group;
  if (b->valid == 0 && !last) b->memory = BatchMemory{};  // an empty held batch holds no buffer
  held_.push_back(std::move(b));
  while (!held_.empty() && (last || held_.front()->valid >= Target(*held_.front()))) {
    std::unique_ptr<ProducedBatch> f = std::move(held_.front());
    held_.pop_front();
    if (f->memory.owner == nullptr && f->plan.pad) {
      // Emptied by bad samples, and padded: it is still emitted (the batch count and the
      // shape do not change), all padding, in a buffer past the bound. Rare: it takes a
      // batch's worth of bad samples in one group, and then it costs at most
      // batches_per_split - 1 buffers more for that group. Unpadded, an emptied batch
      // has no rows and needs no buffer.
      bool cancelled = false;
      try {
        f->memory = allocator_->AllocateNow(f->plan, f->plan.rows, sample_bytes_);
        cancelled = f->memory.owner == nullptr;
      } catch (const std::bad_alloc&) {
        MutexLock lock(&mu_);
        if (status_.ok()) status_ = Status::ResourceExhausted("out of memory for a padding batch");
        cancelled = true;
      }
      if (cancelled) {
        // Nothing more of the group goes out: the stream is stopping (or failed), and
        // a later batch must not be emitted without this one.
        held_.clear();
        return;
      }
    }
    f->rows = f->plan.pad ? f->plan.rows : f->valid;
    if (f->memory.owner == nullptr) {
      out->push_back(std::move(f));  // unpadded and empty: no rows, no tensors
      continue;
    }
    if (f->rows > f->valid) {
      std::memset(f->memory.images + size_t(f->valid) * sample_bytes_, 0, size_t(f->rows - f->valid) * sample_bytes_);
      for (int64_t i = f->valid; i < f->rows; ++i) f->memory.labels[i] = f->memory.indices[i] = -1;
    }
    out->push_back(std::move(f));
  }
}

void BatchProducer::DropHeldLocked() {
  if (held_.empty()) return;
  // The group was cut short (the stream stopped or was drained mid-split): its held
  // batches are incomplete and never emitted; the split is not acknowledged, so it is
  // made again, whole, wherever it goes next.
  LogDebug("refill: %zu batch(es) of epoch %llu group %lld not emitted: the group was cut short", held_.size(),
           static_cast<unsigned long long>(held_.front()->plan.epoch),
           static_cast<long long>(held_.front()->plan.refill_group));
  held_.clear();
}

void BatchProducer::DropHeld() {
  MutexLock emit_lock(&emit_mu_);
  DropHeldLocked();
}

}  // namespace ferry
