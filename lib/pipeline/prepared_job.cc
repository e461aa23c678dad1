#include "pipeline/prepared_job.h"

#include <utility>

#include "data/mixture.h"
#include "pipeline/targets_batch.h"
#include "pyrt/python_pool.h"

namespace ferry {

std::string_view BatchSourceName(BatchSource source) {
  switch (source) {
    case BatchSource::kDecode:
      return "decode";
    case BatchSource::kDecodeThenPython:
      return "decode, then Python";
    case BatchSource::kUserCode:
      return "user code";
    case BatchSource::kSynthetic:
      return "synthetic";
  }
  return "?";
}

Status SyntheticRefused() {
  return Status(StatusCode::kPermissionDenied,
                "this worker serves no synthetic: datasets (benchmarks start it with --allow-synthetic)");
}

Result<std::shared_ptr<const PreparedJob>> PreparedJob::Prepare(const JobSpec& job) {
  FERRY_ASSIGN_OR_RETURN(std::shared_ptr<const Pipeline> pipeline, CompileJob(job));
  FERRY_ASSIGN_OR_RETURN(std::vector<std::shared_ptr<const Pipeline>> sources, CompileSourcePipelines(job, pipeline));
  const BatchSource source = job.synthetic()       ? BatchSource::kSynthetic
                             : job.user_code_job() ? BatchSource::kUserCode
                             : job.has_user_code() ? BatchSource::kDecodeThenPython
                                                   : BatchSource::kDecode;
  return std::shared_ptr<const PreparedJob>(new PreparedJob(job, source, std::move(pipeline), std::move(sources)));
}

Result<std::shared_ptr<const Dataset>> PreparedJob::OpenData(const DataOpeners& openers) const {
  switch (source_) {
    case BatchSource::kSynthetic:
      if (!openers.allow_synthetic) return SyntheticRefused();
      return std::shared_ptr<const Dataset>(MakeSyntheticDataset(spec_.num_samples));
    case BatchSource::kUserCode:
      if (!openers.user_code) return UserCodeRefused();
      return openers.user_code(spec_);
    case BatchSource::kDecodeThenPython:
      if (!openers.check_user_code) return UserCodeRefused();
      FERRY_RETURN_IF_ERROR(openers.check_user_code(spec_));
      [[fallthrough]];
    case BatchSource::kDecode:
      if (!openers.dataset) return Status::Unimplemented("this process opens no datasets");
      if (spec_.mixed()) return OpenMixture(openers);
      return openers.dataset(spec_.dataset);
  }
  return Status::Internal("unknown batch source");
}

Result<std::shared_ptr<const Dataset>> PreparedJob::OpenMixture(const DataOpeners& openers) const {
  std::vector<std::shared_ptr<const Dataset>> parts;
  for (size_t k = 0; k < spec_.mixture.size(); ++k) {
    const std::string& data = spec_.mixture[k].dataset;
    Result<std::shared_ptr<const Dataset>> ds = openers.dataset(data);
    if (!ds.ok())
      return Status(ds.status().code(),
                    "mixture source " + std::to_string(k) + " (" + data.substr(0, 256) + "): " + ds.status().message());
    if ((*ds)->size() == 0)
      return Status::InvalidArgument("mixture source " + std::to_string(k) + " (" + data.substr(0, 256) +
                                     ") has no samples");
    parts.push_back(std::move(*ds));
  }
  return std::shared_ptr<const Dataset>(MakeMixtureDataset(std::move(parts)));
}

Status PreparedJob::CheckData(const Dataset& dataset) const {
  // Data the job decodes has bytes; Python's and synthetic samples have none.
  const bool reads = source_ == BatchSource::kDecode || source_ == BatchSource::kDecodeThenPython;
  if (reads != (dataset.sample_reads() != SampleReads::kNone))
    return Status::Internal("job " + spec_.dataset + " (" + std::string(BatchSourceName(source_)) +
                            ") was given a dataset of kind " + std::string(dataset.kind()));
  return CheckTargetSource(spec_.targets, dataset);
}

}  // namespace ferry
