// BatchProducer: the engine under both the in-process Loader and the worker daemon.
//
// Glossary
//   plan       which samples make up the next batch, and its provenance (PlanSource).
//   memory     where the batch's pixels, labels and indices are written: a pooled
//              buffer in-process, the tensor fields of an outgoing Cap'n Proto message
//              on a worker (BatchAllocator). The pipeline writes pixels there
//              directly; nothing copies them afterwards.
//   emit       hands a finished batch on, in plan order (the emit callback).
//
// Threads
//   One producer thread per BatchProducer plans batches and takes memory for them.
//   Both can block (a slow consumer means no free memory), so they happen outside
//   the TBB arena: a stalled stream never holds an arena thread, and other streams
//   sharing the arena keep going. Each planned batch becomes one task enqueued in the
//   arena; inside it a parallel_for decodes the samples. Up to `max_in_flight`
//   batches of one producer are in the arena at once, so threads that finish their
//   part of one batch start on the next instead of idling at batch boundaries.
//   Finished batches are re-ordered and emitted strictly in plan order. A whole
//   user-code dataset is the exception: its batches wait on Python processes, so
//   each is made on a plain thread that plans its own next one (RunUserCode).
//
// Bad files are skipped: the batch is compacted around them (or padded, under
// LastBatch::kPad) and each is reported in ProducedBatch::skipped. Under
// BadSamples::kRefill, later good samples of the same refill group take their rows
// instead (Refill in producer.cc).
#ifndef FERRY_PIPELINE_PRODUCER_H_
#define FERRY_PIPELINE_PRODUCER_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include <oneapi/tbb/task_arena.h>

#include "core/mutex.h"
#include "data/dataset.h"
#include "ferry/iterator.h"
#include "ferry/job.h"
#include "ops/pipeline.h"
#include "ops/targets.h"
#include "pyrt/python_pool.h"
#include "text/tokenizer.h"
#include "pipeline/batch_window.h"
#include "pipeline/fair_scheduler.h"
#include "pipeline/prepared_job.h"
#include "pipeline/stats.h"

namespace ferry {

struct BatchPlan {
  uint64_t epoch = 0;
  int64_t batch_in_epoch = 0;
  int64_t batches_in_epoch = 0;  // of its rank (ranked jobs) or shard
  bool last_in_epoch = false;
  int64_t split = 0, batch_in_split = 0, batches_in_split = 0;
  std::vector<int64_t> samples;  // global sample indices, in order
  int64_t rows = 0;              // tensor rows to allocate (>= samples.size())
  bool pad = false;              // keep `rows` rows, padding after the valid ones
  // BadSamples::kRefill: consecutive plans of one producer with the same (epoch,
  // refill_group) pass good rows up the group to take bad samples' places (see
  // BatchProducer). -1: the plan refills nothing (BadSamples::kSkip).
  int64_t refill_group = -1;
  bool last_in_group = false;
  // Made, because a later batch of its refill group needs its rows, but not emitted: a
  // resumed stream's consumer already yielded it (ResumePlan).
  bool discard = false;

  BatchProvenance provenance() const {
    BatchProvenance p;
    p.epoch = epoch;
    p.batch_in_epoch = batch_in_epoch;
    p.batches_in_epoch = batches_in_epoch;
    p.last_in_epoch = last_in_epoch;
    p.split = split;
    p.batch_in_split = batch_in_split;
    p.batches_in_split = batches_in_split;
    return p;
  }
};

// Under BadSamples::kRefill, makes `plan` the t-th of `count` plans a producer makes of
// its epoch: refill groups are batches_per_split consecutive plans. In-process and
// point to point with one stream, they are the dispatcher's splits, so all three
// modes yield the same batches.
void SetRefillGroup(const JobSpec& job, int64_t t, int64_t count, BatchPlan* plan);

// Decides the batches. Called from one thread only (thread-compatible).
class PlanSource {
 public:
  virtual ~PlanSource() = default;
  // The next batch, or nullopt when there are no more. May block (the producer
  // calls it on its own thread, outside the arena).
  virtual std::optional<BatchPlan> Next() = 0;
  // Makes a blocked Next(), and every later one, return nullopt. Thread-safe.
  virtual void Cancel() {}
};

// A share of each epoch: every num_shards-th sample of the epoch's order from
// shard_index on (DistributedSampler's cut), from epoch first_epoch.
struct Shard {
  int shard_index = 0;
  int num_shards = 1;
  uint64_t first_epoch = 0;
  Status Validate() const;
};

// The shard's samples of each epoch of `job`, batched in order, for job.epochs epochs
// (<= 0: forever), under the job's last-batch policy.
class StaticShardPlan : public PlanSource {
 public:
  StaticShardPlan(int64_t dataset_size, const JobSpec& job, Shard shard);
  std::optional<BatchPlan> Next() override;
  int64_t batches_per_epoch() const;
  int64_t shard_size() const { return shard_size_; }

 private:
  const int64_t n_;
  const JobSpec job_;
  const Shard shard_;
  const int64_t shard_size_;
  uint64_t epoch_offset_ = 0;
  int64_t next_batch_ = 0;
  std::vector<int64_t> order_;
};

// Skips the plans of `inner` before (epoch, batch_in_epoch) = (epoch, batches_done):
// a resumed stream continues exactly after what its consumer already yielded. Under
// refill, a batch's rows depend on the bad samples before it in its refill group, so
// the group's earlier plans are made again, marked `discard`.
class ResumePlan : public PlanSource {
 public:
  ResumePlan(std::unique_ptr<PlanSource> inner, uint64_t epoch, int64_t batches_done)
      : inner_(std::move(inner)), epoch_(epoch), done_(batches_done) {}
  std::optional<BatchPlan> Next() override;
  void Cancel() override { inner_->Cancel(); }

 private:
  std::unique_ptr<PlanSource> inner_;
  const uint64_t epoch_;
  const int64_t done_;
  bool reached_ = false;
  std::vector<BatchPlan> group_;   // skipped plans of the current refill group
  std::vector<BatchPlan> replay_;  // to return before anything else, reversed
};

// Where a batch's tensors live. `owner` keeps the memory alive; `tag` is for the
// allocator's own use (e.g. the message being built).
struct BatchMemory {
  uint8_t* images = nullptr;  // rows * sample_bytes
  int64_t* labels = nullptr;  // rows
  int64_t* indices = nullptr; // rows
  float* targets = nullptr;   // rows * num_classes, when the pipeline has a batch op
  std::shared_ptr<void> owner;
  std::shared_ptr<void> tag;
  size_t size = 0;  // bytes of the buffer `owner` holds, from `images` on
};

class BatchAllocator {
 public:
  virtual ~BatchAllocator() = default;
  // Memory for `rows` rows of `sample_bytes` each. Blocks while the allocator's bound
  // is reached; returns memory with a null owner once Cancel() was called.
  virtual BatchMemory Allocate(const BatchPlan& plan, int64_t rows, size_t sample_bytes) = 0;
  // Like Allocate, but never blocks: may go past the bound (refill's emptied batches).
  virtual BatchMemory AllocateNow(const BatchPlan& plan, int64_t rows, size_t sample_bytes) = 0;
  virtual void Cancel() = 0;
};

class BatchPool;

// Batch buffers from a bounded pool, laid out [images | labels | indices | targets],
// each part 64-byte aligned (targets: float32 rows x num_classes, only when
// num_classes > 0). At most `capacity` buffers exist: that is the memory bound of
// whoever produces with it.
class PooledBatchAllocator : public BatchAllocator {
 public:
  PooledBatchAllocator(int64_t max_rows, size_t sample_bytes, int capacity, int num_classes = 0);
  BatchMemory Allocate(const BatchPlan& plan, int64_t rows, size_t sample_bytes) override;
  BatchMemory AllocateNow(const BatchPlan& plan, int64_t rows, size_t sample_bytes) override;
  void Cancel() override;
  // The batch whose buffer starts at `images` went to the consumer: it no longer
  // counts against the bound (see BatchPool).
  void Detach(const void* images);
  // Bytes of one buffer (images, labels and indices, each 64-byte aligned).
  size_t buffer_bytes() const;

 private:
  BatchMemory Allocate(const BatchPlan& plan, int64_t rows, size_t sample_bytes, bool wait);
  const size_t labels_offset_, indices_offset_, targets_offset_, end_offset_;
  const std::shared_ptr<BatchPool> pool_;
};

// A user-code batch (BatchProducer::SetUserCode): what the Python process collated.
struct UserCodeBatch {
  std::string structure;  // "": not user code
  const void* data = nullptr;
  size_t bytes = 0;
  std::shared_ptr<void> owner;
};

struct ProducedBatch {
  BatchPlan plan;
  UserCodeBatch user;
  BatchMemory memory;
  int64_t rows = 0;   // rows in the tensors after compaction/padding
  int64_t valid = 0;  // leading rows that are real samples
  std::vector<SkippedSample> skipped;
  // With targets (BatchProducer::SetTargets): row r's moved targets, for r < valid;
  // they travel with their rows through compaction and refill.
  std::vector<SampleTargets> targets;
  // Not OK: a sample could not be read for a reason that may pass (EIO, a short read,
  // EAGAIN, ...) even after retries. The batch is not emitted and production stops
  // with this error: the split is served again, never with that sample counted bad.
  Status failure = {};
};

class BatchProducer {
 public:
  using EmitFn = std::function<void(ProducedBatch&&)>;
  using DoneFn = std::function<void(const Status&)>;

  // `pipeline` is the job's, compiled (Pipeline::Compile). `arena` may be shared by
  // several producers. Batch ops run on each batch as it is emitted, once its rows
  // are final. `emit` is called in plan order, one
  // call at a time, from an arena thread; it must not block for long. `done` is
  // called once, after the last emit, with OK or the error that stopped production.
  // `source` is the job's (PreparedJob::source()): how each batch is made.
  BatchProducer(std::shared_ptr<const Dataset> dataset, BatchSource source, std::shared_ptr<const Pipeline> pipeline,
                uint64_t seed,
                std::unique_ptr<PlanSource> plans, std::shared_ptr<BatchAllocator> allocator,
                std::shared_ptr<tbb::task_arena> arena, int max_in_flight, EmitFn emit, DoneFn done);
  // Stops and waits for every task of this producer to finish.
  ~BatchProducer();

  // Synthetic jobs (BatchSource::kSynthetic): instead of decoding, each batch's rows
  // are filled with a byte pattern and the batch takes `cost_us` of wall time, so a
  // worker emits batches at a fixed rate (the scaling benchmark). Before Start().
  void SetSyntheticBatchCost(int64_t cost_us) { synthetic_cost_us_ = cost_us; }
  // Stage timings and skips are added to `stats` (pipeline/stats.h). Before Start().
  void SetStats(std::shared_ptr<PipelineStats> stats) { stats_ = std::move(stats); }
  // The job's targets (JobSpec::targets): each sample's annotations are read, moved
  // by the pipeline and kept in ProducedBatch::targets. Requires a dataset with
  // annotations and a pipeline that moves targets (the job's check). Before Start().
  void SetTargets(std::vector<std::string> names) { targets_ = std::move(names); }
  // Tokenizes each sample's caption into SampleTargets::tokens (the "tokens" target).
  void SetTokenizer(std::shared_ptr<const Tokenizer> t) { tokenizer_ = std::move(t); }
  // User code (JobSpec::user_code): `pool` makes each batch; of a whole Dataset
  // (BatchSource::kUserCode) with no pipeline (it may be null), else from the rows the
  // pipeline made (UserCodeSpec::input). Before Start().
  void SetUserCode(std::shared_ptr<PythonPool> pool, JobSpec job) {
    user_code_ = std::move(pool);
    user_key_ = PythonPool::CodeKey(job);  // once: it hashes the whole payload
    user_job_ = std::move(job);
  }

  // A mixture's pipeline for each source (PreparedJob::source_pipelines()): a sample's
  // source's (Dataset::Part) runs on it; the job's runs the batch ops. Before Start().
  void SetSourcePipelines(std::vector<std::shared_ptr<const Pipeline>> p) { source_pipelines_ = std::move(p); }

  // A sweep's lane (JobSpec::sharing every): the batches of `content`
  // (JobSpec::ContentKey) are shared through `window` with the other producers of that
  // content on this worker (pipeline/batch_window.h): each made once while they keep
  // pace. Decoded jobs only, without refill (whose rows depend on the producer's
  // group). Before Start().
  void SetWindow(std::shared_ptr<BatchWindow> window, uint64_t content) {
    window_ = std::move(window);
    window_content_ = content;
  }

  // The worker's threads shared among jobs (pipeline/fair_scheduler.h): batches are
  // submitted to `flow` (this job's) instead of straight into the arena. Before Start().
  void SetFlow(std::shared_ptr<FairScheduler::Flow> flow) { flow_ = std::move(flow); }

  void Start();
  // Stops planning, cancels the allocator, waits for tasks in flight. Idempotent.
  void Stop();
  // Plans no new batch; those already planned are finished and emitted, then `done`
  // is called with OK. For draining. Thread-safe, returns at once.
  void StopPlanning();

 private:
  void Run();
  void Fill(ProducedBatch* batch, int64_t memory_wait_ns);
  void FillSynthetic(ProducedBatch* batch, int64_t memory_wait_ns);
  void FillUserCode(ProducedBatch* batch, int64_t memory_wait_ns);
  void FinishInPython(ProducedBatch* batch);
  // A whole user-code dataset: loops on plain threads that each plan and make one
  // batch at a time (producer.cc says why).
  void RunUserCode();
  void UserCodeLoop() LOCKS_EXCLUDED(plan_mu_, mu_);
  // Plans the next batch and takes its memory (counted in flight); false at the end of
  // the plan, on a stop, or with *status set.
  bool PlanOne(std::unique_ptr<ProducedBatch>* out, int64_t* memory_wait_ns, Status* status) LOCKS_EXCLUDED(mu_);
  // Fills a planned batch and finishes it (emitted in sequence order); a shareable one
  // through the window (MakeShared).
  void Make(uint64_t seq, std::unique_ptr<ProducedBatch> batch, int64_t memory_wait_ns) LOCKS_EXCLUDED(mu_);
  void MakeHere(uint64_t seq, std::unique_ptr<ProducedBatch> batch, int64_t memory_wait_ns) LOCKS_EXCLUDED(mu_);
  void MakeShared(uint64_t seq, std::unique_ptr<ProducedBatch> batch, int64_t memory_wait_ns) LOCKS_EXCLUDED(mu_);
  // Fill, its exceptions and failures turned into the producer's status: whether the
  // batch was made.
  bool FillChecked(ProducedBatch* batch, int64_t memory_wait_ns) LOCKS_EXCLUDED(mu_);
  // A made batch's rows, copied out of its memory (Snapshot); and taken by another
  // lane's batch (TakeMade): its tensors are then the window's copy, or a copy of it
  // when a batch op will write to them.
  std::shared_ptr<BatchWindow::Made> Snapshot(const ProducedBatch& b) const;
  void TakeMade(const std::shared_ptr<const BatchWindow::Made>& made, ProducedBatch* b) const;
  // Batch memory that is a window batch's tensors (it keeps the batch alive).
  static BatchMemory WindowMemory(const std::shared_ptr<BatchWindow::Made>& m);
  void EndPlanning(const Status& status) LOCKS_EXCLUDED(mu_);
  void Finish(uint64_t seq, std::unique_ptr<ProducedBatch> batch);
  // BadSamples::kRefill: takes the next batch in plan order; appends to `out` those
  // whose rows are final (see producer.cc).
  void Refill(std::unique_ptr<ProducedBatch> b, std::vector<std::unique_ptr<ProducedBatch>>* out)
      EXCLUSIVE_LOCKS_REQUIRED(emit_mu_);
  void DropHeldLocked() EXCLUSIVE_LOCKS_REQUIRED(emit_mu_);
  void DropHeld() LOCKS_EXCLUDED(emit_mu_);

  const std::shared_ptr<const Dataset> dataset_;
  const BatchSource source_;
  const std::shared_ptr<const Pipeline> pipeline_;
  const uint64_t seed_;
  const size_t sample_bytes_;
  std::unique_ptr<PlanSource> plans_;
  std::vector<std::shared_ptr<const Pipeline>> source_pipelines_;  // a mixture's; set before Start()
  const std::shared_ptr<BatchAllocator> allocator_;
  const std::shared_ptr<tbb::task_arena> arena_;
  const int max_in_flight_;
  const EmitFn emit_;
  const DoneFn done_;
  int64_t synthetic_cost_us_ = 0;
  std::shared_ptr<BatchWindow> window_;
  std::shared_ptr<FairScheduler::Flow> flow_;
  uint64_t window_content_ = 0;
  std::shared_ptr<PipelineStats> stats_;
  std::vector<std::string> targets_;
  std::shared_ptr<const Tokenizer> tokenizer_;
  std::shared_ptr<PythonPool> user_code_;
  JobSpec user_job_;
  uint64_t user_key_ = 0;
  std::atomic<bool> cancel_user_code_{false};  // Stop(): a batch waiting on Python returns
  std::thread thread_;

  Mutex plan_mu_ ACQUIRED_BEFORE(mu_);  // UserCodeLoop: one loop plans at a time
  bool planning_ended_ GUARDED_BY(plan_mu_) = false;
  uint64_t user_seq_ GUARDED_BY(plan_mu_) = 0;
  Mutex emit_mu_ ACQUIRED_BEFORE(mu_);  // serializes emit_ calls
  Mutex mu_;
  CondVar cv_;
  bool stop_ GUARDED_BY(mu_) = false;
  bool stop_planning_ GUARDED_BY(mu_) = false;
  int in_flight_ GUARDED_BY(mu_) = 0;
  bool planning_done_ GUARDED_BY(mu_) = false;
  bool done_called_ GUARDED_BY(mu_) = false;
  bool done_running_ GUARDED_BY(mu_) = false;  // a task is inside done_
  Status status_ GUARDED_BY(mu_);
  uint64_t next_emit_ GUARDED_BY(mu_) = 0;
  std::map<uint64_t, std::unique_ptr<ProducedBatch>> finished_ GUARDED_BY(mu_);
  // Refill: batches in plan order whose rows are not final yet (one refill group's).
  std::deque<std::unique_ptr<ProducedBatch>> held_ GUARDED_BY(emit_mu_);
  // RunUserCode's other loops' threads (made by Run's thread, joined by Stop once Run
  // ended).
  std::vector<std::thread> user_threads_;
};

// An arena of exactly `threads` worker threads (0 = all cores) for BatchProducers.
// Raises TBB's global thread limit when needed so that all of them exist.
std::shared_ptr<tbb::task_arena> MakeDecodeArena(int threads);

}  // namespace ferry

#endif  // FERRY_PIPELINE_PRODUCER_H_
