#include "data/job_listing.h"

#include "core/hash.h"

namespace ferry {

Result<JobSpec> ListJob(JobSpec job, const DataRoots& roots) {
  if (job.synthetic()) {
    if (job.num_samples <= 0 || job.num_samples > kMaxSyntheticSamples)
      return Status::InvalidArgument("a synthetic dataset needs num_samples in [1, 2^26]");
    FERRY_RETURN_IF_ERROR(job.CheckListed());
    return job;
  }
  if (job.user_code_job()) {
    // Only the trainer can list it (len(dataset)); the code itself is the listing.
    if (job.num_samples <= 0 || job.num_samples > kMaxUserCodeSamples)
      return Status::InvalidArgument("user code: num_samples (the dataset's len()) must be in [1, 2^31]");
    job.fingerprint = UserCodeFingerprint(job);
    FERRY_RETURN_IF_ERROR(job.CheckListed());
    return job;
  }
  FERRY_ASSIGN_OR_RETURN(std::unique_ptr<Dataset> ds, OpenDataset(job.dataset, roots));
  job.num_samples = ds->size();
  job.fingerprint = JobFingerprint(ds->fingerprint(), job.pipeline);
  FERRY_RETURN_IF_ERROR(job.CheckListed());
  return job;
}

uint64_t UserCodeFingerprint(const JobSpec& job) {
  Fingerprinter f;
  f.Add(job.user_code.payload);
  f.AddU64(uint64_t(job.num_samples));
  return f.Finish();
}

Status CheckListing(const JobSpec& job, const Dataset& dataset) {
  if (job.synthetic()) return Status::OK();
  if (job.user_code_job()) {
    if (job.num_samples != dataset.size())
      return Status::FailedPrecondition("user code: the job has " + std::to_string(job.num_samples) + " samples, not " +
                                        std::to_string(dataset.size()));
    return Status::OK();
  }
  if (job.num_samples != 0 && dataset.size() != job.num_samples)
    return Status::FailedPrecondition("this worker lists " + std::to_string(dataset.size()) + " samples in " +
                                      job.dataset + ", not the job's " + std::to_string(job.num_samples));
  if (job.fingerprint != 0 && JobFingerprint(dataset.fingerprint(), job.pipeline) != job.fingerprint)
    return Status::FailedPrecondition("this worker lists " + job.dataset +
                                      " differently from the job (fingerprint mismatch)");
  return Status::OK();
}

}  // namespace ferry
