#include "worker/worker_metrics.h"

#include <map>

#include "net/http_server.h"
#include "pipeline/batch_window.h"
#include "pipeline/fair_scheduler.h"
#include "store/disk_cache.h"
#include "store/object_store.h"
#include "worker/dispatcher_link.h"

namespace ferry {

std::string WorkerMetricsText(const WorkerCounters& c, const PipelineStats& ps, const WorkerQueues& q,
                              uint64_t memory_budget_bytes, const DispatcherLink* link, const BatchWindow* window,
                              const FairScheduler* scheduler) {
  net::PromText t;
  t.One("ferry_worker_connections_total", "counter", "Connections accepted.", double(c.connections.load()));
  t.One("ferry_worker_streams_total", "counter", "Streams opened by clients.", double(c.streams.load()));
  t.One("ferry_worker_batches_sent_total", "counter", "Batches sent to clients.", double(c.batches_sent.load()));
  t.One("ferry_worker_bytes_sent_total", "counter", "Bytes of frames sent to clients (batches and stream ends).",
        double(c.bytes_sent.load()));
  t.One("ferry_worker_samples_total", "counter", "Samples decoded and augmented into batches.",
        double(ps.samples.load(std::memory_order_relaxed)));
  t.Family("ferry_worker_skipped_samples_total", "counter",
           "Samples skipped (reported to the client by path and reason), by reason.");
  for (int r = 0; r < PipelineStats::kNumReasons; ++r)
    t.Sample("ferry_worker_skipped_samples_total", {{"reason", std::string(PipelineStats::kReasonNames[size_t(r)])}},
             double(ps.skipped[size_t(r)].load(std::memory_order_relaxed)));
  t.Family("ferry_worker_stage_seconds", "histogram",
           "Time per stage: read, decode and augment per sample; assemble (waiting for batch memory, compacting) "
           "and send (waiting in the stream for the client's credit) per batch.");
  t.HistogramSamples("ferry_worker_stage_seconds", {{"stage", "read"}}, ps.read.Read());
  t.HistogramSamples("ferry_worker_stage_seconds", {{"stage", "decode"}}, ps.decode.Read());
  t.HistogramSamples("ferry_worker_stage_seconds", {{"stage", "augment"}}, ps.augment.Read());
  t.HistogramSamples("ferry_worker_stage_seconds", {{"stage", "assemble"}}, ps.assemble.Read());
  t.HistogramSamples("ferry_worker_stage_seconds", {{"stage", "send"}}, c.send_wait.Read());
  const std::map<std::string, OpCosts::Cost> ops = ps.ops.Read();
  t.Family("ferry_worker_op_seconds_total", "counter",
           "Time per pipeline step (read, decode, each op by name, output), summed over the samples timed step by "
           "step (one in " + std::to_string(PipelineStats::kOpSampling) + "): the steps' shares of a sample's time.");
  for (const auto& [name, cost] : ops) t.Sample("ferry_worker_op_seconds_total", {{"op", name}}, double(cost.ns) / 1e9);
  t.Family("ferry_worker_op_timed_samples_total", "counter", "Samples timed step by step, per step.");
  for (const auto& [name, cost] : ops) t.Sample("ferry_worker_op_timed_samples_total", {{"op", name}}, double(cost.samples));
  t.One("ferry_worker_queued_batches", "gauge",
        "Batches produced and waiting in their streams for a credit (-1: the io thread did not answer).",
        double(q.batches));
  t.One("ferry_worker_unspent_credits", "gauge",
        "Credits clients granted that no batch has used yet: batches the clients wait for.", double(q.credits));
  t.One("ferry_worker_bad_frames_total", "counter", "Malformed frames (each closed its connection).",
        double(c.bad_frames.load()));
  t.One("ferry_worker_auth_failures_total", "counter", "Handshakes refused (token or TLS).",
        double(c.auth_failures.load()));
  t.One("ferry_worker_open_connections", "gauge", "Open connections.", double(c.open_connections.load()));
  t.One("ferry_worker_named_streams", "gauge", "Open streams of dispatcher jobs.", double(c.named_streams.load()));
  t.One("ferry_worker_memory_budget_bytes", "gauge", "Batch memory the worker may reserve (--max-memory).",
        double(memory_budget_bytes));
  t.One("ferry_worker_draining", "gauge", "1 once SIGTERM started a drain.", c.draining.load() ? 1 : 0);
  if (const store::ObjectStore* os = store::ObjectStore::IfUsed()) {
    const store::StoreCounters& sc = os->counters();
    t.One("ferry_worker_object_requests_total", "counter",
          "Requests to object storage (S3, HTTP(S)): listings, reads and their retries.", double(sc.requests.load()));
    t.One("ferry_worker_object_retries_total", "counter",
          "Requests to object storage sent again (5xx, SlowDown, a reset or short body: resumed).",
          double(sc.retries.load()));
    t.One("ferry_worker_object_failures_total", "counter", "Object reads and listings that failed after their tries.",
          double(sc.failures.load()));
    t.One("ferry_worker_object_bytes_total", "counter", "Bytes received from object storage.", double(sc.bytes.load()));
    t.One("ferry_worker_object_request_seconds_total", "counter",
          "Time to the first byte of each request to object storage, summed (divide by requests: the mean latency).",
          double(sc.latency_us.load()) / 1e6);
    if (const store::DiskCache* cache = os->cache()) {
      t.One("ferry_worker_cache_hits_total", "counter", "Object reads served by the local cache (--cache-dir).",
            double(cache->hits()));
      t.One("ferry_worker_cache_misses_total", "counter", "Object reads the local cache did not hold.",
            double(cache->misses()));
      t.One("ferry_worker_cache_bytes", "gauge", "Bytes in the local cache.", double(cache->bytes()));
    }
  }
  if (window != nullptr) {
    const BatchWindow::Counters w = window->counters();
    t.One("ferry_worker_shared_batches_made_total", "counter",
          "Batches of sweeps (jobs shared every batch) made here and kept for the other trainers.", double(w.made));
    t.One("ferry_worker_shared_batches_served_total", "counter",
          "Batches of sweeps served to a trainer from what another trainer's lane made (no decoding).",
          double(w.served));
    t.One("ferry_worker_shared_batches_evicted_total", "counter",
          "Batches of sweeps dropped from the window (--share-window) before every trainer took them.",
          double(w.evicted));
    t.One("ferry_worker_share_window_bytes", "gauge", "Bytes of made batches the window holds.", double(w.bytes));
  }
  if (scheduler != nullptr) {
    const std::map<std::string, FairScheduler::FlowStats> flows = scheduler->Stats();
    t.Family("ferry_worker_job_busy_seconds_total", "counter",
             "Decode-thread time each job's batches took here (its share, against its weight: jobs share the "
             "threads in proportion to their weights).");
    for (const auto& [name, f] : flows)
      t.Sample("ferry_worker_job_busy_seconds_total", {{"ferry_job", name}}, double(f.busy_ns) / 1e9);
    t.Family("ferry_worker_job_weight", "gauge", "Each job's weight (JobSpec::weight) among the jobs here.");
    for (const auto& [name, f] : flows) t.Sample("ferry_worker_job_weight", {{"ferry_job", name}}, f.weight);
  }
  if (link != nullptr) {
    t.One("ferry_worker_registered", "gauge", "1 while registered with the dispatcher.", link->registered() ? 1 : 0);
    t.One("ferry_worker_leases_held", "gauge", "Splits leased to this worker, by the last heartbeat reply.",
          double(link->held()));
    t.One("ferry_worker_heartbeats_total", "counter", "Heartbeats answered by the dispatcher.",
          double(link->heartbeats()));
    t.One("ferry_worker_jobs_known", "gauge", "Jobs whose facts this worker holds (finished ones are forgotten).",
          double(link->jobs_known()));
    t.One("ferry_worker_heartbeat_bytes", "gauge", "Bytes of the last heartbeat sent to the dispatcher.",
          double(link->heartbeat_bytes()));
  }
  return t.str();
}

wire::WorkerLoad WorkerLoadOf(const PipelineStats& ps, const FairScheduler* scheduler) {
  const Histogram::Snapshot r = ps.read.Read(), d = ps.decode.Read(), a = ps.augment.Read();
  wire::WorkerLoad load{ps.samples.load(std::memory_order_relaxed), ps.BusyNs(), int64_t(r.sum * 1e9),
                        int64_t(d.sum * 1e9), int64_t(a.sum * 1e9), {}};
  for (const auto& [name, c] : ps.ops.Read()) {
    if (load.ops.size() < wire::WorkerLoad::kMaxOpCosts) load.ops.push_back({name.substr(0, 64), c.ns, c.samples});
  }
  if (scheduler != nullptr) {
    for (const auto& [name, f] : scheduler->Stats()) {
      if (load.jobs.size() < wire::WorkerLoad::kMaxJobs) load.jobs.push_back({name.substr(0, 256), f.busy_ns});
    }
  }
  return load;
}

}  // namespace ferry
