#include "data/job_listing.h"

#include "core/hash.h"
#include "data/mixture.h"

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
  std::unique_ptr<Dataset> ds;
  if (job.mixed()) {
    std::vector<std::shared_ptr<const Dataset>> parts;
    for (size_t k = 0; k < job.mixture.size(); ++k) {
      const std::string& data = job.mixture[k].dataset;
      const std::string which = "mixture source " + std::to_string(k) + " (" + data.substr(0, 256) + ")";
      Result<std::unique_ptr<Dataset>> part = OpenDataset(data, roots);
      if (!part.ok()) return Status(part.status().code(), which + ": " + part.status().message());
      if ((*part)->size() == 0) return Status::InvalidArgument(which + " has no samples");
      parts.push_back(std::move(*part));
    }
    ds = MakeMixtureDataset(std::move(parts));
  } else {
    FERRY_ASSIGN_OR_RETURN(ds, OpenDataset(job.dataset, roots));
  }
  SetListing(&job, *ds);
  FERRY_RETURN_IF_ERROR(job.CheckListed());
  return job;
}

void SetListing(JobSpec* job, const Dataset& dataset) {
  job->num_samples = dataset.size();
  const std::vector<int64_t> parts = dataset.part_sizes();
  for (size_t k = 0; k < job->mixture.size() && k < parts.size(); ++k) job->mixture[k].num_samples = parts[k];
  job->fingerprint = JobFingerprint(dataset.fingerprint(), job->pipeline);
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
  const std::vector<int64_t> parts = dataset.part_sizes();
  if (job.mixed() && parts.size() != job.mixture.size())
    return Status::FailedPrecondition("this worker opened " + std::to_string(parts.size()) + " sources for a mixture of " +
                                      std::to_string(job.mixture.size()));
  for (size_t k = 0; k < job.mixture.size(); ++k)
    if (job.mixture[k].num_samples != 0 && job.mixture[k].num_samples != parts[k])
      return Status::FailedPrecondition("this worker lists " + std::to_string(parts[k]) + " samples in mixture source " +
                                        job.mixture[k].dataset + ", not the job's " +
                                        std::to_string(job.mixture[k].num_samples));
  if (job.fingerprint != 0 && JobFingerprint(dataset.fingerprint(), job.pipeline) != job.fingerprint)
    return Status::FailedPrecondition("this worker lists " + job.dataset +
                                      " differently from the job (fingerprint mismatch)");
  return Status::OK();
}

}  // namespace ferry
