// Stream set-up on a worker: what an OpenStream asks for, turned into what the
// producer runs (dataset, pipeline, seed, batch plans). No sockets: the session
// (server/worker_service.cc) calls these and starts a BatchProducer on the result.
//
//   point to point   the job inline: the stream's static shard of every epoch, from
//                    first_epoch, resumed after what the client already yielded; the
//                    client's fingerprint (when it gives one) checked.
//   dispatcher job   distributed_epoch: the splits leased to this worker for the
//                    stream's consumer (a SplitFeed); parallel_epochs: every epoch,
//                    with augmentation drawn from the job's seed and this worker's id.
#ifndef FERRY_WORKER_STREAM_SETUP_H_
#define FERRY_WORKER_STREAM_SETUP_H_

#include <cstdint>
#include <memory>
#include <string>

#include "data/dataset.h"
#include "ferry/job.h"
#include "ferry/status.h"
#include "pipeline/prepared_job.h"
#include "pipeline/producer.h"
#include "pipeline/split_plan.h"
#include "wire/codec.h"
#include "worker/job_source.h"

namespace ferry {

struct StreamSource {
  std::shared_ptr<const PreparedJob> prepared;  // the job, compiled once
  std::shared_ptr<const Dataset> dataset;
  std::shared_ptr<const Tokenizer> tokenizer;  // the job's "tokens" target's, or null
  JobSpec job;      // batch size, pipeline; `seed` is the augmentation's seed
  std::unique_ptr<PlanSource> plan;
  int64_t last_epoch = -1;  // the last epoch the stream yields; -1: forever
  bool splits = false;      // it serves leased splits (no EndOfEpoch frames)
};

// Checks an inline OpenStream before its dataset is listed, and compiles its job (once:
// the stream keeps it).
Result<std::shared_ptr<const PreparedJob>> PrepareInlineStream(const wire::OpenStreamMsg& m);

// Point to point, once the dataset is open. FailedPrecondition if it does not list
// what the client expects.
Result<StreamSource> InlineStream(const wire::OpenStreamMsg& m, std::shared_ptr<const PreparedJob> prepared,
                                  std::shared_ptr<const Dataset> dataset);

// A dispatcher job. `feed` is the stream's (job, consumer) feed; the stream takes it
// over (SplitFeed::Attach). REQUIRES: job.status.ok().
StreamSource NamedStream(const WorkerJob& job, const std::shared_ptr<SplitFeed>& feed, const std::string& worker_id);

}  // namespace ferry

#endif  // FERRY_WORKER_STREAM_SETUP_H_
