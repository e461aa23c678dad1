// Loader: the in-process iterator. It lists a dataset, and on a TBB arena of exactly
// `threads` threads decodes and augments samples in parallel, straight into pooled
// batch buffers, with bounded prefetch. Batches come in a deterministic order for a
// given seed (epoch permutation order), whatever the thread count.
//
// Bad files (corrupt, truncated, empty, non-image, unsupported, oversized, unreadable)
// are skipped, counted and reported through TakeSkipped(); the rest of their batch is
// still delivered (compacted; under LastBatch::kPad the batch keeps its shape with
// padding rows at the end).
#ifndef FERRY_LOADER_H_
#define FERRY_LOADER_H_

#include <cstdint>
#include <memory>
#include <string>

#include "ferry/iterator.h"
#include "ferry/job.h"
#include "pyrt/python_pool.h"  // lib/: this header is not installed

namespace ferry {

struct LoaderOptions {
  // The job: dataset (an ImageFolder root, a .tsv list, .tar shards, or a weighted
  // mixture of such: JobSpec::mixture), pipeline,
  // seed, shuffle, epochs, batch size, last-batch and bad-sample policies. Its
  // dispatcher fields (mode, ordering) have no meaning in-process; batches_per_split
  // is the size of bad_samples = kRefill's groups, as it is a dispatcher's split's.
  JobSpec job;
  int threads = 0;          // decode threads (the TBB arena's size); 0 = all cores
  int prefetch = 2;         // batches produced ahead of the consumer (>= 1)
  // A rank of a data-parallel trainer (job.num_consumers = world size > 0): this
  // loader yields rank `rank`'s batches, as many every epoch as every other rank's
  // (see "ranks" in ferry/job.h).
  int rank = 0;
  // Or static sharding of each epoch's order (not with ranks): this loader takes every
  // num_shards-th sample starting at shard_index.
  int shard_index = 0;
  int num_shards = 1;
  uint64_t first_epoch = 0;
  // Exact resume: the first `resume_batches` batches of `first_epoch` (by their
  // batch_in_epoch) were yielded before; start after them.
  int64_t resume_batches = 0;
  // User code (job.user_code): the Python processes that make its batches here.
  PythonPoolOptions python;
};

class Loader : public BatchIterator {
 public:
  static Result<std::unique_ptr<Loader>> Open(const LoaderOptions& options);
  ~Loader() override;

  Result<Batch> Next() override;
  bool WaitReady(double seconds) override;
  std::vector<SkippedSample> TakeSkipped() override;
  IteratorStats stats() const override;

  int64_t dataset_size() const;
  // Batches per epoch for this shard under the last-batch policy (before skips).
  int64_t batches_per_epoch() const;
  // Fingerprint of (listing, pipeline spec).
  uint64_t fingerprint() const;

  class Impl;

 private:
  explicit Loader(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Loads an op plugin (include/ferry/plugin.h) into this process, once: its ops may
// then be named in pipelines. InvalidArgument naming the file when it is no plugin.
Status LoadPlugin(const std::string& path);

}  // namespace ferry

#endif  // FERRY_LOADER_H_
