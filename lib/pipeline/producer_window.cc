// BatchProducer's sweep lanes (SetWindow): batches shared through a worker's
// BatchWindow with the producers of equal content. See producer.h and batch_window.h.
#include <algorithm>
#include <cstring>
#include <memory>
#include <utility>

#include "core/tsan.h"
#include "pipeline/producer.h"

namespace ferry {

// A sweep's lane: the batch from the window when another lane made it (or waits for
// the lane making it, holding no thread), else made here and put there.
void BatchProducer::MakeShared(uint64_t seq, std::unique_ptr<ProducedBatch> batch, int64_t memory_wait_ns) {
  const BatchPlan& p = batch->plan;
  const BatchWindow::Key key{window_content_, p.epoch, p.split, p.batch_in_split};
  ProducedBatch* raw = batch.release();
  FERRY_TSAN_RELEASE(raw);
  bool make = false;
  std::shared_ptr<const BatchWindow::Made> made = window_->Take(
      key,
      [this, seq, raw, memory_wait_ns](std::shared_ptr<const BatchWindow::Made> m) {
        FERRY_TSAN_ACQUIRE(raw);
        if (m == nullptr) {  // its maker gave up: made here after all, on the arena
          FERRY_TSAN_RELEASE(raw);
          arena_->enqueue([this, seq, raw, memory_wait_ns] {
            FERRY_TSAN_ACQUIRE(raw);
            MakeHere(seq, std::unique_ptr<ProducedBatch>(raw), memory_wait_ns);
          });
          return;
        }
        std::unique_ptr<ProducedBatch> b(raw);
        TakeMade(m, b.get());
        Finish(seq, std::move(b));
      },
      &make);
  if (made != nullptr) {
    std::unique_ptr<ProducedBatch> b(raw);
    TakeMade(made, b.get());
    Finish(seq, std::move(b));
    return;
  }
  if (!make) return;  // another lane is making it: its Put finishes this one
  std::unique_ptr<ProducedBatch> b(raw);
  std::shared_ptr<BatchWindow::Made> here;
  if (!pipeline_->has_batch_ops()) {
    // Made straight into the window's memory (nothing writes to the rows after Fill,
    // which a batch op would): no copy for the window, and the buffer the batch was
    // planned with goes back to its pool now.
    try {
      const int64_t capacity = std::max<int64_t>(b->plan.rows, int64_t(b->plan.samples.size()));
      here = BatchWindow::Made::Allocate(capacity, sample_bytes_, 0);
      b->memory = WindowMemory(here);
    } catch (const std::bad_alloc&) {
      here.reset();  // made in its own buffer, and not shared
    }
  }
  bool put = false;
  if (FillChecked(b.get(), memory_wait_ns)) {
    try {
      std::shared_ptr<BatchWindow::Made> made = here != nullptr ? std::move(here) : Snapshot(*b);
      made->rows = b->rows;
      made->valid = b->valid;
      made->skipped = b->skipped;
      made->row_targets = b->targets;
      window_->Put(key, std::move(made));
      put = true;
    } catch (const std::bad_alloc&) {
      // No copy for the window: the waiters make it themselves.
    }
  }
  if (!put) window_->Abandon(key);
  Finish(seq, std::move(b));
}

BatchMemory BatchProducer::WindowMemory(const std::shared_ptr<BatchWindow::Made>& m) {
  BatchMemory memory;
  memory.images = m->images.get();
  memory.labels = m->labels.get();
  memory.indices = m->indices.get();
  memory.targets = m->targets.get();
  memory.owner = std::shared_ptr<void>(m, m.get());
  memory.size = size_t(m->capacity) * (m->sample_bytes + 16 + 4 * size_t(m->num_classes));
  return memory;
}

std::shared_ptr<BatchWindow::Made> BatchProducer::Snapshot(const ProducedBatch& b) const {
  const int classes = b.memory.targets != nullptr && pipeline_ != nullptr ? pipeline_->num_classes() : 0;
  auto m = BatchWindow::Made::Allocate(b.rows, sample_bytes_, classes);
  const size_t rows = size_t(b.rows);
  if (rows > 0) {
    std::memcpy(m->images.get(), b.memory.images, rows * sample_bytes_);
    std::memcpy(m->labels.get(), b.memory.labels, rows * sizeof(int64_t));
    std::memcpy(m->indices.get(), b.memory.indices, rows * sizeof(int64_t));
    if (classes > 0) std::memcpy(m->targets.get(), b.memory.targets, rows * size_t(classes) * sizeof(float));
  }
  return m;
}

void BatchProducer::TakeMade(const std::shared_ptr<const BatchWindow::Made>& made, ProducedBatch* b) const {
  const BatchWindow::Made& m = *made;
  b->rows = m.rows;
  b->valid = m.valid;
  b->skipped = m.skipped;
  b->targets = m.row_targets;
  if (pipeline_ == nullptr || !pipeline_->has_batch_ops()) {
    // Nothing writes to the rows from here on (a batch op would, in Finish): the batch
    // is sent from the window's copy itself, and the buffer it was planned with goes
    // back to its pool now.
    b->memory = WindowMemory(std::const_pointer_cast<BatchWindow::Made>(made));
    return;
  }
  const size_t rows = size_t(m.rows);
  if (rows == 0) return;
  std::memcpy(b->memory.images, m.images.get(), rows * m.sample_bytes);
  std::memcpy(b->memory.labels, m.labels.get(), rows * sizeof(int64_t));
  std::memcpy(b->memory.indices, m.indices.get(), rows * sizeof(int64_t));
  if (m.targets != nullptr && b->memory.targets != nullptr)
    std::memcpy(b->memory.targets, m.targets.get(), rows * size_t(m.num_classes) * sizeof(float));
}

}  // namespace ferry
