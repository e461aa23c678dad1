#include "pipeline/producer.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/global_control.h>
#include <oneapi/tbb/parallel_for.h>

#include "core/check.h"
#include "core/histogram.h"
#include "core/mutex.h"
#include "core/resources.h"
#include "core/tsan.h"
#include "data/permutation.h"
#include "pipeline/batch_pool.h"

namespace ferry {

// ---------------------------------------------------------------------------------
// StaticShardPlan

Status Shard::Validate() const {
  if (num_shards <= 0 || shard_index < 0 || shard_index >= num_shards)
    return Status::InvalidArgument("shard_index must be in [0, num_shards)");
  return Status::OK();
}

StaticShardPlan::StaticShardPlan(int64_t dataset_size, const JobSpec& job, Shard shard)
    : n_(dataset_size),
      job_(job),
      shard_(shard),
      shard_size_(dataset_size / shard.num_shards + (shard.shard_index < dataset_size % shard.num_shards ? 1 : 0)) {}

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
    const std::vector<int64_t> perm = EpochPermutation(n_, job_.seed, epoch, job_.shuffle);
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
  ++next_batch_;
  return plan;
}

// ---------------------------------------------------------------------------------
// PooledBatchAllocator

namespace {
size_t AlignUp(size_t n) { return (n + 63) / 64 * 64; }
}  // namespace

PooledBatchAllocator::PooledBatchAllocator(int64_t max_rows, size_t sample_bytes, int capacity)
    : labels_offset_(AlignUp(size_t(max_rows) * sample_bytes)),
      indices_offset_(labels_offset_ + AlignUp(sizeof(int64_t) * size_t(max_rows))),
      pool_(BatchPool::Create(indices_offset_ + AlignUp(sizeof(int64_t) * size_t(max_rows)), capacity)) {}

BatchMemory PooledBatchAllocator::Allocate(const BatchPlan&, int64_t rows, size_t sample_bytes) {
  BatchMemory m;
  FERRY_CHECK(size_t(rows) * sample_bytes <= labels_offset_);
  m.owner = pool_->Acquire();
  if (m.owner == nullptr) return m;
  auto* base = static_cast<uint8_t*>(m.owner.get());
  m.images = base;
  m.labels = reinterpret_cast<int64_t*>(base + labels_offset_);
  m.indices = reinterpret_cast<int64_t*>(base + indices_offset_);
  m.size = indices_offset_ + (indices_offset_ - labels_offset_);  // [images | labels | indices]
  return m;
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

BatchProducer::BatchProducer(std::shared_ptr<const Dataset> dataset, const PipelineSpec& spec, uint64_t seed,
                             std::unique_ptr<PlanSource> plans, std::shared_ptr<BatchAllocator> allocator,
                             std::shared_ptr<tbb::task_arena> arena, int max_in_flight, EmitFn emit, DoneFn done)
    : dataset_(std::move(dataset)),
      processor_(spec),
      seed_(seed),
      sample_bytes_(spec.sample_bytes()),
      plans_(std::move(plans)),
      allocator_(std::move(allocator)),
      arena_(std::move(arena)),
      max_in_flight_(std::max(1, max_in_flight)),
      emit_(std::move(emit)),
      done_(std::move(done)) {}

BatchProducer::~BatchProducer() { Stop(); }

void BatchProducer::Start() { thread_ = std::thread([this] { Run(); }); }

void BatchProducer::Stop() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
    cv_.SignalAll();
  }
  plans_->Cancel();
  allocator_->Cancel();
  if (thread_.joinable()) thread_.join();
  MutexLock lock(&mu_);
  while (in_flight_ != 0 || done_running_) cv_.Wait(&mu_);
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
  uint64_t seq = 0;
  Status status;
  for (;;) {
    {
      MutexLock lock(&mu_);
      while (!stop_ && !stop_planning_ && in_flight_ >= max_in_flight_) cv_.Wait(&mu_);
      if (stop_ || stop_planning_ || !status_.ok()) break;
    }
    std::optional<BatchPlan> plan;
    try {
      plan = plans_->Next();
    } catch (const std::exception& e) {
      status = Status::Internal(std::string("planning failed: ") + e.what());
      break;
    }
    if (!plan) break;
    auto batch = std::make_unique<ProducedBatch>();
    batch->plan = std::move(*plan);
    const int64_t rows = std::max<int64_t>(batch->plan.rows, int64_t(batch->plan.samples.size()));
    const int64_t wait_from = MonoNs();
    try {
      batch->memory = allocator_->Allocate(batch->plan, rows, sample_bytes_);  // may block: outside the arena
    } catch (const std::bad_alloc&) {
      // No exception leaves this thread: the stream ends with the error, the process
      // goes on (workers also bound each stream's memory before it starts).
      status = Status::ResourceExhausted("out of memory for a batch of " + std::to_string(rows) + " samples");
      break;
    }
    if (batch->memory.owner == nullptr) break;  // cancelled
    {
      MutexLock lock(&mu_);
      ++in_flight_;
    }
    const int64_t memory_wait_ns = MonoNs() - wait_from;
    const uint64_t my_seq = seq++;
    ProducedBatch* raw = batch.release();
    FERRY_TSAN_RELEASE(raw);  // libtbb orders the enqueue before the task (core/tsan.h)
    arena_->enqueue([this, my_seq, raw, memory_wait_ns] {
      FERRY_TSAN_ACQUIRE(raw);
      std::unique_ptr<ProducedBatch> owned(raw);
      // Busy while some batch is being made (PipelineStats::Busy).
      if (stats_ != nullptr) stats_->Busy(true);
      try {
        Fill(owned.get(), memory_wait_ns);
      } catch (const std::bad_alloc&) {
        MutexLock lock(&mu_);
        if (status_.ok()) status_ = Status::ResourceExhausted("out of memory while decoding a batch");
      } catch (const std::exception& e) {
        MutexLock lock(&mu_);
        if (status_.ok()) status_ = Status::Internal(std::string("decoding a batch failed: ") + e.what());
      }
      if (stats_ != nullptr) stats_->Busy(false);
      Finish(my_seq, std::move(owned));
    });
  }
  bool call_done = false;
  Status final_status;
  {
    MutexLock lock(&mu_);
    if (status_.ok() && !status.ok()) status_ = status;
    planning_done_ = true;
    if (in_flight_ == 0 && !done_called_) {
      done_called_ = true;
      call_done = true;
      final_status = status_;
    }
  }
  if (call_done && done_) done_(final_status);
}

void BatchProducer::Fill(ProducedBatch* b, int64_t memory_wait_ns) {
  const BatchMemory& m = b->memory;
  const std::vector<int64_t>& samples = b->plan.samples;
  const int n = int(samples.size());
  if (dataset_->kind() == "synthetic") return FillSynthetic(b, memory_wait_ns);
  PipelineStats* stats = stats_.get();
  std::vector<Status> status(static_cast<size_t>(n));
  std::vector<uint8_t> read_failed(static_cast<size_t>(n));
  // libtbb forks the chunks after this point and joins them before parallel_for
  // returns; TSan sees neither edge by itself (core/tsan.h).
  FERRY_TSAN_RELEASE(b);
  tbb::parallel_for(tbb::blocked_range<int>(0, n, 1), [&](const tbb::blocked_range<int>& r) {
    FERRY_TSAN_ACQUIRE(b);
    thread_local std::string bytes;
    for (int i = r.begin(); i != r.end(); ++i) {
      const int64_t idx = samples[size_t(i)];
      m.labels[i] = dataset_->Label(idx);
      m.indices[i] = idx;
      const int64_t t0 = stats != nullptr ? MonoNs() : 0;
      Status st = dataset_->ReadSample(idx, &bytes);
      const int64_t t1 = stats != nullptr ? MonoNs() : 0;
      if (stats != nullptr) stats->read.ObserveNs(t1 - t0);
      if (!st.ok()) {
        read_failed[size_t(i)] = 1;
      } else {
        int64_t t2 = 0;
        st = processor_.Process(bytes, seed_, b->plan.epoch, idx, m.images + size_t(i) * sample_bytes_,
                                stats != nullptr ? &t2 : nullptr);
        if (stats != nullptr && st.ok()) {
          stats->decode.ObserveNs(t2 - t1);
          stats->augment.ObserveNs(MonoNs() - t2);
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
    if (!status[size_t(i)].ok()) {
      b->skipped.push_back({samples[size_t(i)], dataset_->Path(samples[size_t(i)]), status[size_t(i)].ToString()});
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
    }
    ++valid;
  }
  b->valid = valid;
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
    if (!failed) {
      for (auto& b : ready) emit_(std::move(*b));
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
    if (done_) done_(final_status);
    MutexLock lock(&mu_);
    done_running_ = false;
    cv_.SignalAll();
  }
}

}  // namespace ferry
