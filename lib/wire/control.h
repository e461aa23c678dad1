// The control plane's codec (schemas/control.capnp): plain structs <-> frames, for
// workers and clients talking to the dispatcher. The dispatcher's logic
// (lib/dispatch/dispatcher.h) takes and returns these structs, so the service that
// carries them only maps frames to calls.
#ifndef FERRY_WIRE_CONTROL_H_
#define FERRY_WIRE_CONTROL_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ferry/job.h"
#include "ferry/split_id.h"
#include "ferry/status.h"
#include "wire/message.h"

namespace ferry::wire {

// A job with its dispatcher name.
struct NamedJob {
  std::string name;
  JobSpec job;
  // job.pipeline's JSON (PipelineSpec::ToJson), when whoever sends the job made it once
  // already: a dispatcher names each job in every heartbeat reply, and the JSON would
  // otherwise be made again each time (a quarter of its CPU at 4,000 workers). Not a
  // field of its own on the wire.
  std::shared_ptr<const std::string> pipeline_json = {};
  // The dispatcher's digest of `job` (0: none). A worker reports it back (HeartbeatMsg::
  // have_jobs) and is then sent the job's name only (HeartbeatOkMsg::same_jobs): a
  // fleet's heartbeat replies restated every job's whole spec each time.
  uint64_t digest = 0;
  bool operator==(const NamedJob& o) const { return name == o.name && job == o.job; }
};


struct LeaseMsg {
  std::string job;
  uint64_t epoch = 0;
  int64_t split = 0;
  std::string consumer;
  bool operator==(const LeaseMsg& o) const = default;
};

struct RegisterWorkerMsg {
  std::string worker_id;
  std::string address;  // where clients reach its data plane
  // Hybrid: serves only this consumer of this job (both empty: everyone).
  std::string serves_job = {}, serves_consumer = {};
};

struct GetWorkersMsg {
  std::string job, consumer_id;  // who asks; empty: anyone
};

// Cumulative load figures for the dispatcher's advice (schemas/control.capnp).
struct ConsumerLoad {
  int64_t wait_ns = 0, elapsed_ns = 0, samples = 0;
  bool operator==(const ConsumerLoad&) const = default;
};
// One pipeline step's sampled cost on a worker: its name ("read", "decode", an op's
// name, "output"), nanoseconds summed over the samples that were timed, and how many.
struct OpCost {
  std::string name;
  int64_t ns = 0, samples = 0;
  bool operator==(const OpCost&) const = default;
};
// A job's decode-thread time on a worker (its flow in the fair scheduler), cumulative.
struct JobBusy {
  std::string name;
  int64_t ns = 0;
  bool operator==(const JobBusy&) const = default;
};
struct WorkerLoad {
  int64_t samples = 0, busy_ns = 0, read_ns = 0, decode_ns = 0, augment_ns = 0;
  std::vector<OpCost> ops;  // cumulative, at most kMaxOpCosts
  static constexpr size_t kMaxOpCosts = 256;
  std::vector<JobBusy> jobs{};  // at most kMaxJobs
  static constexpr size_t kMaxJobs = 4096;
  bool operator==(const WorkerLoad&) const = default;
};

struct HeartbeatMsg {
  std::string worker_id;
  bool draining = false;
  bool want_leases = true;
  bool leaving = false;
  std::vector<std::string> want_jobs;
  std::map<std::string, std::string> unfit_jobs;  // job -> why this worker cannot serve it
  WorkerLoad load = {};
  std::map<std::string, uint64_t> have_jobs = {};  // job -> the digest it came with
};

struct HeartbeatOkMsg {
  std::vector<LeaseMsg> leases;  // every split the worker holds, the new ones first
  std::vector<NamedJob> jobs;
  bool known = true;
  uint32_t new_leases = 0;
  bool idle = false;
  bool drain = false;
  std::vector<std::string> gone_jobs = {};  // unfit jobs reported that the dispatcher no longer has
  std::vector<std::string> same_jobs = {};  // as `jobs`, by name: the worker has them (have_jobs)
};

struct GetOrCreateJobMsg {
  NamedJob job;
  std::string consumer_id;
  // The consumer starts from nothing (it has no saved state to restore): a rank of a
  // job that rank has read part of is refused, as a restarted trainer that forgot its
  // checkpoint would otherwise take unequal steps.
  bool fresh = false;
};

struct AckSplitsMsg {
  std::string job, consumer_id;
  std::vector<SplitId> splits;
  ConsumerLoad load = {};
};

struct GetJobStatusMsg {
  std::string job, consumer_id;
  uint64_t epoch = 0;
  ConsumerLoad load = {};
};

struct JobStatusMsg {
  uint64_t first_open = 0;
  bool finished = false;
  std::vector<int64_t> my_splits;  // of the epoch asked about, in order
  bool epoch_fully_assigned = false;
};

struct RestoreConsumerMsg {
  std::string job, consumer_id;
  uint64_t first_open = 0;
  std::vector<SplitId> done;
};

OutFrame EncodeRegisterWorker(const RegisterWorkerMsg& m);
OutFrame EncodeRegisterWorkerOk(uint32_t heartbeat_interval_ms);
OutFrame EncodeHeartbeat(const HeartbeatMsg& m);
OutFrame EncodeHeartbeatOk(const HeartbeatOkMsg& m);
OutFrame EncodeGetOrCreateJob(const GetOrCreateJobMsg& m);
OutFrame EncodeJobInfo(const NamedJob& job);
OutFrame EncodeGetWorkers(const GetWorkersMsg& m = {});
OutFrame EncodeWorkerList(const std::vector<std::string>& addresses);
OutFrame EncodeAckSplits(const AckSplitsMsg& m);
// A set of splits (sorted, distinct, >= 0) packed as runs of equal steps: varints
// (gap from the previous run's last split + 1, step - 1, count - 1). A rank's splits (every
// W-th) are one run an epoch, a shared consumer's a few bytes a split at worst, so a
// control reply holds millions where a List(Int64) held 131K. Returns nullopt if
// `splits` is not sorted, distinct and >= 0 (the sender then uses the plain list).
std::optional<std::string> PackSplitSet(const std::vector<int64_t>& splits);
// The inverse. Refuses (InvalidArgument) malformed bytes, and more than `max_count`
// splits or a split past `max_split` (a few bytes must not unpack into gigabytes).
Result<std::vector<int64_t>> UnpackSplitSet(const void* data, size_t size, size_t max_count, int64_t max_split);

OutFrame EncodeGetJobStatus(const GetJobStatusMsg& m);
OutFrame EncodeJobStatus(const JobStatusMsg& m);
OutFrame EncodeRestoreConsumer(const RestoreConsumerMsg& m);
OutFrame EncodeReportWorker(const std::string& address);
// ferry-ctl drain: a worker by id or address.
OutFrame EncodeDrainWorker(const std::string& worker);

// ferry-ctl status (schemas/control.capnp: ClusterStatus).
struct WorkerStatusMsg {
  std::string id, address;
  bool draining = false;
  uint32_t leases = 0;
  int64_t silent_ms = 0;
  std::string serves_job, serves_consumer;
  std::map<std::string, std::string> unfit_jobs;
  double samples_per_second = 0, capacity = 0;
};
struct JobSummaryMsg {
  std::string name, dataset;
  int64_t num_samples = 0;
  std::vector<std::string> consumers;
  uint64_t first_open = 0;
  int64_t epochs = 0, splits_per_epoch = 0, pending = 0, leased = 0, done = 0;
  bool finished = false;
  int64_t ranks = 0;
  double input_wait = 0, demand = 0;
  int64_t recommended_workers = 0;
  std::string limited_by;
  // The job's share of its workers' decode-thread time over the last window (-1: not
  // known), against its weight and priority.
  double thread_share = -1, weight = 1;
  int32_t priority = 0;
};
struct ClusterStatusMsg {
  std::string state_id;
  bool journal_writable = true;
  std::vector<WorkerStatusMsg> workers;
  std::vector<JobSummaryMsg> jobs;
};
OutFrame EncodeGetClusterStatus();
OutFrame EncodeClusterStatus(const ClusterStatusMsg& m);

Result<RegisterWorkerMsg> DecodeRegisterWorker(const InFrame& f);
Result<uint32_t> DecodeRegisterWorkerOk(const InFrame& f);
Result<HeartbeatMsg> DecodeHeartbeat(const InFrame& f);
Result<HeartbeatOkMsg> DecodeHeartbeatOk(const InFrame& f);
Result<GetOrCreateJobMsg> DecodeGetOrCreateJob(const InFrame& f);
Result<NamedJob> DecodeJobInfo(const InFrame& f);
Status DecodeGetWorkers(const InFrame& f);
Result<GetWorkersMsg> DecodeGetWorkersMsg(const InFrame& f);
Result<std::vector<std::string>> DecodeWorkerList(const InFrame& f);
Result<AckSplitsMsg> DecodeAckSplits(const InFrame& f);
Result<GetJobStatusMsg> DecodeGetJobStatus(const InFrame& f);
Result<JobStatusMsg> DecodeJobStatus(const InFrame& f);
Result<RestoreConsumerMsg> DecodeRestoreConsumer(const InFrame& f);
Result<std::string> DecodeReportWorker(const InFrame& f);
Result<std::string> DecodeDrainWorker(const InFrame& f);
Status DecodeGetClusterStatus(const InFrame& f);
Result<ClusterStatusMsg> DecodeClusterStatus(const InFrame& f);

}  // namespace ferry::wire

#endif  // FERRY_WIRE_CONTROL_H_
