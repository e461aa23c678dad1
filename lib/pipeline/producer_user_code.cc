// BatchProducer's user code (JobSpec::user_code): batches a Python process of the
// pool makes, whole (a "python" dataset) or after the native pipeline. See producer.h.
#include <algorithm>
#include <string>
#include <system_error>
#include <vector>

#include "core/histogram.h"
#include "core/log.h"
#include "core/mutex.h"
#include "pipeline/producer.h"

namespace ferry {

// A batch of a whole user-code dataset is made by a Python process: making it only
// waits on a socket. So it is made on plain threads of this producer's, one per batch
// in flight, and each thread plans its own next batch as soon as it has emitted one: no
// TBB arena thread is held for a whole batch (after each one TBB's workers spin looking
// for work), and no hand-off from a planning thread wakes a second thread per batch.
// Measured on the trainer of an in-process loader with two Python processes: both were
// most of its own CPU per batch (a context switch costs more than the rest of what the
// trainer does for a batch). With more batches in flight than processes (a worker's
// default with one process), the other loops plan ahead and wait for a process: a
// split that has to come from the dispatcher is waited for while the process works.
void BatchProducer::RunUserCode() {
  const int loops = max_in_flight_;
  for (int i = 1; i < loops; ++i) {
    try {
      user_threads_.emplace_back([this] { UserCodeLoop(); });
    } catch (const std::system_error& e) {
      // No thread to be had (a process or pid limit): fewer batches in flight.
      LogWarn("user code: %d of %d threads for batches (%s)", i, loops, e.what());
      break;
    }
  }
  UserCodeLoop();
}

void BatchProducer::UserCodeLoop() {
  Status status;
  for (;;) {
    std::unique_ptr<ProducedBatch> batch;
    int64_t memory_wait_ns = 0;
    uint64_t my_seq;
    {
      // One loop plans at a time, so that sequence numbers follow the plan; a loop that
      // ends planning ends it for all (a plan source is not asked again after its end).
      MutexLock plan_lock(&plan_mu_);
      if (planning_ended_) break;
      bool go;
      {
        MutexLock lock(&mu_);
        go = !stop_ && !stop_planning_ && status_.ok();
      }
      if (!go || !PlanOne(&batch, &memory_wait_ns, &status)) {
        planning_ended_ = true;
        break;
      }
      my_seq = user_seq_++;
    }
    Make(my_seq, std::move(batch), memory_wait_ns);
  }
  EndPlanning(status);
}

// User code after the native pipeline: the rows it made go on through the rest of
// the trainer's transform (and its collate) in a Python process; the batch is then
// what that made.
void BatchProducer::FinishInPython(ProducedBatch* b) {
  const int64_t t0 = MonoNs();
  const BatchMemory& m = b->memory;
  NativeRows native;
  native.images = m.images;
  native.row_bytes = sample_bytes_;
  native.rows = b->valid;
  const Shape s = pipeline_->output_shape();
  native.float32 = pipeline_->dtype() == DType::kFloat32;
  native.dims = native.float32 ? std::vector<int64_t>{s.channels, s.height, s.width}
                               : std::vector<int64_t>{s.height, s.width, s.channels};
  native.labels = m.labels;
  const std::vector<int64_t> samples(m.indices, m.indices + b->valid);
  Result<UserBatch> made = user_code_->MakeBatch(user_job_, b->plan.epoch, samples, b->plan.pad ? b->plan.rows : 0,
                                                 &cancel_user_code_, &native, user_key_);
  if (!made.ok()) {
    b->failure = made.status();
    return;
  }
  const int64_t valid = int64_t(made->kept.size());
  std::vector<int64_t> labels;
  for (int64_t i = 0, k = 0; i < b->valid && k < valid; ++i)
    if (m.indices[i] == made->kept[size_t(k)]) labels.push_back(m.labels[i]), ++k;
  for (int64_t i = 0; i < valid; ++i) {
    m.labels[i] = labels[size_t(i)];
    m.indices[i] = made->kept[size_t(i)];
  }
  b->valid = valid;
  b->rows = b->plan.pad ? b->plan.rows : valid;
  for (int64_t i = valid; i < b->rows; ++i) m.labels[i] = m.indices[i] = -1;
  for (SkippedSample& s : made->skipped) {
    s.path = dataset_->Path(s.index);
    b->skipped.push_back(std::move(s));
  }
  b->user.structure = std::move(made->structure);
  b->user.data = made->data;
  b->user.bytes = made->bytes;
  b->user.owner = std::move(made->owner);
  if (stats_ != nullptr) stats_->augment.ObserveNs(MonoNs() - t0);
}

// User code: the pool's Python process makes the whole batch (its samples, then its
// collate); here only its rows' indices are written, and its memory kept with it.
void BatchProducer::FillUserCode(ProducedBatch* b, int64_t memory_wait_ns) {
  const int64_t t0 = MonoNs();
  Result<UserBatch> made = user_code_->MakeBatch(user_job_, b->plan.epoch, b->plan.samples,
                                                 b->plan.pad ? b->plan.rows : 0, &cancel_user_code_,
                                                 nullptr, user_key_);
  if (!made.ok()) {
    b->failure = made.status();
    return;
  }
  const BatchMemory& m = b->memory;
  const int64_t valid = int64_t(made->kept.size());
  for (int64_t i = 0; i < valid; ++i) {
    m.labels[i] = 0;
    m.indices[i] = made->kept[size_t(i)];
  }
  b->valid = valid;
  b->rows = b->plan.pad ? b->plan.rows : valid;
  for (int64_t i = valid; i < b->rows; ++i) m.labels[i] = m.indices[i] = -1;
  b->skipped = std::move(made->skipped);
  b->user.structure = std::move(made->structure);
  b->user.data = made->data;
  b->user.bytes = made->bytes;
  b->user.owner = std::move(made->owner);
  if (stats_ != nullptr) {
    stats_->samples.fetch_add(valid, std::memory_order_relaxed);
    for (size_t i = 0; i < b->skipped.size(); ++i)
      stats_->skipped[PipelineStats::kOther].fetch_add(1, std::memory_order_relaxed);
    stats_->augment.ObserveNs(MonoNs() - t0);
    stats_->assemble.ObserveNs(memory_wait_ns);
  }
}

}  // namespace ferry
