// A worker's counters and its /metrics text (Prometheus exposition), apart from the
// service that counts: the service bumps WorkerCounters, and WorkerMetricsText renders
// them with the pipeline's stage figures and, in dispatcher mode, the link's.
#ifndef FERRY_WORKER_WORKER_METRICS_H_
#define FERRY_WORKER_WORKER_METRICS_H_

#include <atomic>
#include <cstdint>
#include <string>

#include "core/histogram.h"
#include "pipeline/stats.h"
#include "wire/control.h"

namespace ferry {

class BatchWindow;
class FairScheduler;
class DispatcherLink;

// Thread-safe (each a relaxed atomic): bumped on the io thread, read by /metrics.
struct WorkerCounters {
  std::atomic<int64_t> connections{0}, streams{0}, batches_sent{0}, bytes_sent{0}, bad_frames{0}, auth_failures{0};
  std::atomic<int64_t> open_connections{0};
  std::atomic<int64_t> named_streams{0};  // open streams of dispatcher jobs
  std::atomic<bool> draining{false};      // a drain has started
  Histogram send_wait;                    // each batch's wait in its stream for a credit
};

// Read on the io thread (-1: it did not answer).
struct WorkerQueues {
  int64_t batches = -1;  // produced, waiting for a credit
  int64_t credits = -1;  // granted and unspent
};

std::string WorkerMetricsText(const WorkerCounters& c, const PipelineStats& ps, const WorkerQueues& q,
                              uint64_t memory_budget_bytes, const DispatcherLink* link,
                              const BatchWindow* window = nullptr, const FairScheduler* scheduler = nullptr);

// The worker's production figures, as each heartbeat carries them (the dispatcher's
// advice on how many workers to run).
wire::WorkerLoad WorkerLoadOf(const PipelineStats& ps, const FairScheduler* scheduler = nullptr);

}  // namespace ferry

#endif  // FERRY_WORKER_WORKER_METRICS_H_
