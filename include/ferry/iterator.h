// BatchIterator: the iteration API every Ferry source shares, so that a trainer
// switches between the in-process Loader and the remote Client by configuration.
//
//   std::unique_ptr<ferry::BatchIterator> it = ...;   // Loader::Open or a Client
//   for (;;) {
//     ferry::Result<ferry::Batch> b = it->Next();
//     if (!b.ok()) { if (b.status().IsOutOfRange()) break; /* error */ }
//     use(b->images, b->labels, b->valid_rows());
//   }
#ifndef FERRY_ITERATOR_H_
#define FERRY_ITERATOR_H_

#include <cstdint>
#include <string>
#include <vector>

#include "ferry/batch.h"
#include "ferry/status.h"

namespace ferry {

// A sample that was left out, with the reason (reported, never silently dropped).
struct SkippedSample {
  int64_t index = -1;  // global sample index, or -1 for listing-time problems
  std::string path;
  std::string reason;
};

struct IteratorStats {
  int64_t batches = 0;
  int64_t samples = 0;         // valid rows yielded
  int64_t skipped = 0;         // bad files left out (including listing problems)
  double wait_seconds = 0;     // total time Next() and WaitReady() spent waiting for a batch
};

class BatchIterator {
 public:
  virtual ~BatchIterator() = default;
  // The next batch, or OutOfRange once every epoch is done, or another error.
  // Blocks until a batch is ready. Not thread-safe: one consumer thread.
  virtual Result<Batch> Next() = 0;
  // Waits up to `seconds` until Next() would return without waiting (a batch, the end,
  // or an error is there); true if so. For callers that must stay responsive (the
  // Python binding checks for Ctrl-C between waits).
  virtual bool WaitReady(double seconds) {
    (void)seconds;
    return true;
  }
  // Drains and returns the skipped samples reported since the last call.
  virtual std::vector<SkippedSample> TakeSkipped() = 0;
  virtual IteratorStats stats() const = 0;
};

}  // namespace ferry

#endif  // FERRY_ITERATOR_H_
