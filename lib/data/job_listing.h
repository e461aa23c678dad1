// A job's dataset, as the processes that serve it open it: the dispatcher lists a new
// job's dataset once to fill in its listing facts (sample count and fingerprint), and
// every worker that serves the job opens it and checks it lists the same samples.
// Listing may take seconds on ImageNet-sized trees: callers keep it off their io
// threads.
#ifndef FERRY_DATA_JOB_LISTING_H_
#define FERRY_DATA_JOB_LISTING_H_

#include <cstdint>
#include <memory>

#include "data/data_roots.h"
#include "data/dataset.h"
#include "ferry/job.h"
#include "ferry/status.h"

namespace ferry {

// Workers hold an epoch's permutation (8 bytes a sample) of a synthetic job: its size
// is bounded.
inline constexpr int64_t kMaxSyntheticSamples = int64_t(1) << 26;

// And of a user-code job (its len(), given by the trainer).
inline constexpr int64_t kMaxUserCodeSamples = int64_t(1) << 31;

// A user-code job's listing fingerprint: its pickled code and sample count.
uint64_t UserCodeFingerprint(const JobSpec& job);

// `job` with num_samples and fingerprint filled in from its dataset's listing, read
// only inside `roots` (--data-root). A synthetic dataset keeps the num_samples it was
// given (checked against the bound).
Result<JobSpec> ListJob(JobSpec job, const DataRoots& roots = DataRoots());

// The listing facts of `job` from its open dataset: num_samples (and each mixture
// source's), and the fingerprint. Not for synthetic or user-code jobs.
void SetListing(JobSpec* job, const Dataset& dataset);

// Checks `dataset` against the job's listing facts: FailedPrecondition, naming the
// dataset, if it lists another number of samples or another fingerprint (facts left
// at 0 are not checked; synthetic datasets are not either).
Status CheckListing(const JobSpec& job, const Dataset& dataset);

}  // namespace ferry

#endif  // FERRY_DATA_JOB_LISTING_H_
