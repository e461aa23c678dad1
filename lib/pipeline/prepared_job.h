// PreparedJob: a job compiled once where it runs (a worker, the in-process Loader).
//
// Its checks are made in one place and once: the spec (JobSpec::Validate), the
// pipeline compiled with its targets, the batch's bytes (CompileJob), and, once its
// data is open, that the data gives what the job asks (CheckDataset). And it says how
// the job's batches are made, its batch source, which the producer, the Loader and the
// worker ask instead of looking at what kind of dataset they hold:
//
//   kDecode            samples read (files on disk or objects in a bucket: the sources
//                      of data/source.h) and decoded, the pipeline run on each (a
//                      mixture's: its sources opened each, and each sample's source's
//                      pipeline run on it)
//   kDecodeThenPython  the same, then the job's Python steps on the rows it made
//                      (UserCodeSpec::input)
//   kUserCode          the trainer's own Dataset makes each batch in Python processes;
//                      no pipeline, no bytes read by Ferry
//   kSynthetic         nothing read: rows filled with a pattern (benchmarks)
//
// Thread safety: immutable once prepared; share it (a worker's streams of one job do).
#ifndef FERRY_PIPELINE_PREPARED_JOB_H_
#define FERRY_PIPELINE_PREPARED_JOB_H_

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "data/dataset.h"
#include "ferry/job.h"
#include "ferry/status.h"
#include "ops/pipeline.h"

namespace ferry {

enum class BatchSource { kDecode, kDecodeThenPython, kUserCode, kSynthetic };
std::string_view BatchSourceName(BatchSource source);

// Where a process opens a job's data: a worker's dataset cache and Python processes,
// the in-process Loader's own. A source whose function is unset is refused, saying how
// to allow it.
struct DataOpeners {
  std::function<Result<std::shared_ptr<const Dataset>>(const std::string& spec)> dataset;
  // A whole user-code Dataset, once its code loaded (pyrt's OpenUserCode).
  std::function<Result<std::shared_ptr<const Dataset>>(const JobSpec&)> user_code;
  // The job's Python steps after the pipeline: their code loads here.
  std::function<Status(const JobSpec&)> check_user_code;
  bool allow_synthetic = false;
};

// A worker started without --allow-synthetic, asked for a synthetic: job.
Status SyntheticRefused();

class PreparedJob {
 public:
  // Every check of `job` that needs no data, once (CompileJob).
  static Result<std::shared_ptr<const PreparedJob>> Prepare(const JobSpec& job);

  const JobSpec& spec() const { return spec_; }
  BatchSource source() const { return source_; }
  bool runs_python() const { return source_ == BatchSource::kUserCode || source_ == BatchSource::kDecodeThenPython; }
  // The compiled pipeline (for kUserCode, the job's empty one: its output shape is
  // what a batch frame of Python's batches names).
  const std::shared_ptr<const Pipeline>& pipeline() const { return pipeline_; }
  // The pipeline a producer runs on each sample: null when batches are Python's.
  std::shared_ptr<const Pipeline> sample_pipeline() const {
    return source_ == BatchSource::kUserCode ? nullptr : pipeline_;
  }
  // A mixture's pipeline for each source (Dataset::Part() of an index picks one);
  // empty for any other job. sample_pipeline() is the job's: the one that runs batch
  // ops, and the shape every source's rows have.
  const std::vector<std::shared_ptr<const Pipeline>>& source_pipelines() const { return source_pipelines_; }
  // Bytes of one row's image, and the label width: 0 when batches are Python's.
  size_t sample_bytes() const { return source_ == BatchSource::kUserCode ? 0 : pipeline_->sample_bytes(); }
  int num_classes() const { return source_ == BatchSource::kUserCode ? 0 : pipeline_->num_classes(); }

  // Opens the job's data by its batch source through `openers` (a decoded job: its
  // Python steps, if any, are loaded first, so that an import error refuses the job
  // before a listing is paid for).
  Result<std::shared_ptr<const Dataset>> OpenData(const DataOpeners& openers) const;
  // The open data gives what the job asks: the targets it names (annotations), and a
  // dataset of the job's batch source.
  Status CheckData(const Dataset& dataset) const;

 private:
  Result<std::shared_ptr<const Dataset>> OpenMixture(const DataOpeners& openers) const;
  PreparedJob(JobSpec spec, BatchSource source, std::shared_ptr<const Pipeline> pipeline,
              std::vector<std::shared_ptr<const Pipeline>> source_pipelines)
      : spec_(std::move(spec)),
        source_(source),
        pipeline_(std::move(pipeline)),
        source_pipelines_(std::move(source_pipelines)) {}

  const JobSpec spec_;
  const BatchSource source_;
  const std::shared_ptr<const Pipeline> pipeline_;
  const std::vector<std::shared_ptr<const Pipeline>> source_pipelines_;
};

}  // namespace ferry

#endif  // FERRY_PIPELINE_PREPARED_JOB_H_
