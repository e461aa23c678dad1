// BatchWindow: the batches a worker made lately, for the producers of equal content
// (a sweep's lanes: JobSpec::sharing every, JobSpec::ContentKey). The first producer
// to ask for (content, epoch, split, batch) makes it and puts a copy of its rows here;
// a producer that asks while it is being made waits for it without holding a thread
// (its callback runs when the maker puts it, or gives up); one that asks later copies
// it. Bounded in bytes: the least recently put batches go first, and a producer whose
// batch has gone makes it again (content is deterministic: the same bytes).
//
// What is kept is what BatchProducer::Fill made (rows, before the batch ops, which
// every producer applies itself): pixels, labels, indices, soft targets, the skipped
// samples and the per-row targets. Thread-safe.
#ifndef FERRY_PIPELINE_BATCH_WINDOW_H_
#define FERRY_PIPELINE_BATCH_WINDOW_H_

#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include "core/mutex.h"
#include "core/thread_annotations.h"
#include "ferry/iterator.h"
#include "ops/targets.h"

namespace ferry {

class BatchWindow {
 public:
  struct Key {
    uint64_t content = 0;
    uint64_t epoch = 0;
    int64_t split = 0;
    int64_t batch = 0;
    auto operator<=>(const Key&) const = default;
  };

  // A made batch's rows: its tensors (room for `capacity` rows, `rows` of them made)
  // and what goes with them.
  struct Made {
    int64_t rows = 0, valid = 0;
    int64_t capacity = 0;
    size_t sample_bytes = 0;
    int num_classes = 0;                 // soft targets per row; 0: none
    std::unique_ptr<uint8_t[]> images;   // capacity * sample_bytes (not zeroed)
    std::unique_ptr<int64_t[]> labels, indices;  // capacity
    std::unique_ptr<float[]> targets;    // capacity * num_classes, or null
    std::vector<SkippedSample> skipped;
    std::vector<SampleTargets> row_targets;
    static std::shared_ptr<Made> Allocate(int64_t capacity, size_t sample_bytes, int num_classes);
    uint64_t bytes() const {
      return uint64_t(capacity) * (sample_bytes + 16 + 4 * uint64_t(num_classes)) +
             row_targets.size() * sizeof(SampleTargets) + 64;
    }
  };

  // Called once with the batch, or with null when its maker gave up (a read that
  // failed, a stop): the waiter then makes it itself.
  using Waiter = std::function<void(std::shared_ptr<const Made>)>;

  struct Counters {
    uint64_t made = 0;      // batches put
    uint64_t served = 0;    // taken from the window (copied, or waited for)
    uint64_t abandoned = 0; // makers that gave up (their waiters made the batch)
    uint64_t evicted = 0;
    uint64_t bytes = 0;     // held now
  };

  explicit BatchWindow(uint64_t max_bytes) : max_bytes_(max_bytes) {}
  BatchWindow(const BatchWindow&) = delete;
  BatchWindow& operator=(const BatchWindow&) = delete;

  // The batch, when it is here. Otherwise: when another producer is making it,
  // `waiter` is kept and *make is false (it will be called); when nobody is, the
  // caller is to make it (*make true) and must Put or Abandon it.
  std::shared_ptr<const Made> Take(const Key& key, Waiter waiter, bool* make) LOCKS_EXCLUDED(mu_);
  // The maker's batch: its waiters get it (on this thread), and it is kept while the
  // window has room.
  void Put(const Key& key, std::shared_ptr<const Made> made) LOCKS_EXCLUDED(mu_);
  // The maker could not make it: its waiters are told to make it themselves.
  void Abandon(const Key& key) LOCKS_EXCLUDED(mu_);

  Counters counters() const LOCKS_EXCLUDED(mu_);
  uint64_t max_bytes() const { return max_bytes_; }

 private:
  struct Entry {
    std::shared_ptr<const Made> made;  // null while being made
    std::vector<Waiter> waiters;
    std::list<Key>::iterator lru;      // valid when made
  };

  const uint64_t max_bytes_;
  mutable Mutex mu_;
  std::map<Key, Entry> entries_ GUARDED_BY(mu_);
  std::list<Key> lru_ GUARDED_BY(mu_);  // made entries, oldest first
  Counters counters_ GUARDED_BY(mu_);
};

}  // namespace ferry

#endif  // FERRY_PIPELINE_BATCH_WINDOW_H_
