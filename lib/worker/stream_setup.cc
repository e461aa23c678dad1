#include "worker/stream_setup.h"

#include "core/hash.h"
#include "data/job_listing.h"
#include "ops/pipeline.h"

namespace ferry {

Result<std::shared_ptr<const PreparedJob>> PrepareInlineStream(const wire::OpenStreamMsg& m) {
  FERRY_ASSIGN_OR_RETURN(std::shared_ptr<const PreparedJob> prepared, PreparedJob::Prepare(m.job));
  if (m.num_shards == 0 || m.shard_index >= m.num_shards)
    return Status::InvalidArgument("shard_index must be in [0, num_shards)");
  if (m.job.ranked() && m.rank >= uint32_t(m.job.num_consumers))
    return Status::InvalidArgument("rank must be in [0, num_consumers)");
  return prepared;
}

Result<StreamSource> InlineStream(const wire::OpenStreamMsg& m, std::shared_ptr<const PreparedJob> prepared,
                                  std::shared_ptr<const Dataset> dataset) {
  FERRY_RETURN_IF_ERROR(CheckListing(m.job, *dataset));
  StreamSource s;
  s.prepared = std::move(prepared);
  s.job = m.job;
  if (m.job.synthetic()) s.job.num_samples = dataset->size();
  else SetListing(&s.job, *dataset);
  FERRY_RETURN_IF_ERROR(s.job.CheckListed());
  s.dataset = std::move(dataset);
  const Shard shard{int(m.shard_index), int(m.num_shards), m.first_epoch};
  if (m.job.ranked()) {
    // This rank's batches of each epoch, shared among the client's workers.
    s.plan = std::make_unique<RankPlan>(s.job, m.rank, shard);
  } else {
    s.plan = std::make_unique<StaticShardPlan>(s.dataset->size(), s.job, shard);
  }
  if (m.resume_epoch > m.first_epoch || m.resume_batches_done > 0)
    s.plan = std::make_unique<ResumePlan>(std::move(s.plan), m.resume_epoch, m.resume_batches_done);
  s.last_epoch = m.job.epochs > 0 ? int64_t(m.first_epoch) + m.job.epochs - 1 : -1;
  return s;
}

StreamSource NamedStream(const WorkerJob& job, const std::shared_ptr<SplitFeed>& feed, const std::string& worker_id) {
  StreamSource s;
  s.prepared = job.prepared;
  s.dataset = job.dataset;
  s.tokenizer = job.tokenizer;
  s.job = job.spec;
  if (job.spec.mode == ProcessingMode::kParallelEpochs) {
    // Every epoch, by itself: its order and augmentation drawn from the job's seed
    // mixed with the worker's id (so that workers differ, and a worker given a fixed
    // --worker-id repeats itself).
    Fingerprinter f;
    f.AddU64(job.spec.seed);
    f.Add(worker_id);
    s.job.seed = f.Finish();
    // The job's epochs, from its first (a job that goes on from an earlier run's epoch
    // starts there; before one meaning of `epochs`, this stream started at epoch 0).
    s.plan = std::make_unique<StaticShardPlan>(job.dataset->size(), s.job, Shard{0, 1, job.spec.first_epoch});
    s.last_epoch = job.spec.epochs > 0 ? int64_t(job.spec.end_epoch()) - 1 : -1;
    return s;
  }
  s.splits = true;
  s.plan = std::make_unique<SplitPlan>(job.spec, feed, feed->Attach());
  return s;
}

}  // namespace ferry
