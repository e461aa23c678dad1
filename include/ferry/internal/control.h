// The control plane's codec (schemas/control.capnp): plain structs <-> frames, for
// workers and clients talking to the dispatcher. Implemented in lib/wire.
#ifndef FERRY_INTERNAL_CONTROL_H_
#define FERRY_INTERNAL_CONTROL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "ferry/internal/frame.h"
#include "ferry/internal/wire.h"

namespace ferry::internal {

struct JobConfigMsg {
  std::string name, dataset, pipeline_json;
  uint64_t seed = 0;
  bool shuffle = true;
  int64_t epochs = 1;
  int32_t batch_size = 0;
  uint8_t last_batch = 2;  // ferry::LastBatch: 0 drop, 1 pad, 2 keep
  uint8_t mode = 0;        // 0 distributed_epoch, 1 parallel_epochs
  uint8_t ordering = 0;    // 0 arrival, 1 deterministic
  int32_t batches_per_split = 4;
  int64_t num_samples = 0;
  uint64_t fingerprint = 0;
};

struct LeaseMsg {
  std::string job;
  uint64_t epoch = 0;
  int64_t split = 0;
  std::string consumer;
};

struct HeartbeatMsg {
  std::string worker_id;
  bool draining = false;
  bool want_leases = true;
  bool leaving = false;
  std::vector<std::string> want_jobs;
};

struct HeartbeatOkMsg {
  std::vector<LeaseMsg> leases;  // every split the worker holds, the new ones first
  std::vector<JobConfigMsg> jobs;
  bool known = true;
  uint32_t new_leases = 0;
  bool idle = false;
};

struct JobStatusMsg {
  uint64_t first_open = 0;
  bool finished = false;
  std::vector<int64_t> my_splits;
  bool epoch_fully_assigned = false;
};

struct AckSplitsMsg {
  std::string job, consumer_id;
  std::vector<std::pair<uint64_t, int64_t>> splits;  // (epoch, split)
};

OutFrame EncodeRegisterWorker(const std::string& worker_id, const std::string& address);
OutFrame EncodeRegisterWorkerOk(uint32_t heartbeat_interval_ms);
OutFrame EncodeHeartbeat(const HeartbeatMsg& m);
OutFrame EncodeHeartbeatOk(const HeartbeatOkMsg& m);
OutFrame EncodeGetOrCreateJob(const JobConfigMsg& c, const std::string& consumer_id);
OutFrame EncodeJobInfo(const JobConfigMsg& c);
OutFrame EncodeGetWorkers();
OutFrame EncodeWorkerList(const std::vector<std::string>& addresses);
OutFrame EncodeAckSplits(const AckSplitsMsg& m);
OutFrame EncodeGetJobStatus(const std::string& job, const std::string& consumer_id, uint64_t epoch);
OutFrame EncodeJobStatus(const JobStatusMsg& m);

Result<std::pair<std::string, std::string>> DecodeRegisterWorker(const InFrame& f);  // (id, address)
Result<uint32_t> DecodeRegisterWorkerOk(const InFrame& f);
Result<HeartbeatMsg> DecodeHeartbeat(const InFrame& f);
Result<HeartbeatOkMsg> DecodeHeartbeatOk(const InFrame& f);
Result<std::pair<JobConfigMsg, std::string>> DecodeGetOrCreateJob(const InFrame& f);  // (config, consumer)
Result<JobConfigMsg> DecodeJobInfo(const InFrame& f);
Status DecodeGetWorkers(const InFrame& f);
Result<std::vector<std::string>> DecodeWorkerList(const InFrame& f);
Result<AckSplitsMsg> DecodeAckSplits(const InFrame& f);
struct GetJobStatusMsg {
  std::string job, consumer_id;
  uint64_t epoch = 0;
};
Result<GetJobStatusMsg> DecodeGetJobStatus(const InFrame& f);
Result<JobStatusMsg> DecodeJobStatus(const InFrame& f);
struct RestoreConsumerMsg {
  std::string job, consumer_id;
  uint64_t first_open = 0;
  std::vector<std::pair<uint64_t, int64_t>> done;  // (epoch, split)
};
OutFrame EncodeRestoreConsumer(const RestoreConsumerMsg& m);
Result<RestoreConsumerMsg> DecodeRestoreConsumer(const InFrame& f);
OutFrame EncodeReportWorker(const std::string& address);
Result<std::string> DecodeReportWorker(const InFrame& f);

}  // namespace ferry::internal

#endif  // FERRY_INTERNAL_CONTROL_H_
