// ferry-bench's cluster benchmarks, each against a baseline measured in the same run:
//
//   sharding: dynamic sharding (a dispatcher job: leased splits, acks, dedup) against
//     static sharding (point to point, worker i of N), the same workers serving both,
//     rounds alternating. Reports dynamic img/s ÷ static img/s.
//   scale: N synthetic-cost workers (each batch takes --synthetic-cost-us on a worker,
//     no decoding) against one such worker: aggregate ÷ (N × single).
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "cluster_bench.h"
#include "cpu_time.h"
#include "ferry/client.h"
#include "server/local_cluster.h"

namespace ferry::bench {

namespace {

struct RunResult {
  int64_t samples = 0, batches = 0;
  double seconds = 0;
  Status status;
};

// Reads from the client until the end, or for `seconds` after `warmup_s` (when > 0).
RunResult Drain(BatchIterator& it, double warmup_s = 0, double seconds = 0) {
  RunResult r;
  const double start = WallSeconds();
  double t0 = warmup_s > 0 ? -1 : start;
  for (;;) {
    const double now = WallSeconds();
    if (t0 < 0 && now - start >= warmup_s) t0 = now;
    if (seconds > 0 && t0 >= 0 && now - t0 >= seconds) break;
    Result<Batch> b = it.Next();
    if (!b.ok()) {
      if (!b.status().IsOutOfRange()) r.status = b.status();
      break;
    }
    if (t0 >= 0) {
      r.samples += b->valid_rows();
      ++r.batches;
    }
  }
  r.seconds = WallSeconds() - (t0 < 0 ? start : t0);
  return r;
}

}  // namespace

int RunSharding(const ShardingArgs& a) {
  LocalClusterOptions lo;
  lo.workers = a.workers;
  lo.threads_per_worker = a.threads_per_worker;
  auto cluster = LocalCluster::Start(lo);
  if (!cluster.ok()) {
    std::fprintf(stderr, "error: %s\n", cluster.status().ToString().c_str());
    return 1;
  }
  auto spec = PipelineSpec::Parse(a.pipeline);
  if (!spec.ok()) {
    std::fprintf(stderr, "error: %s\n", spec.status().ToString().c_str());
    return 2;
  }
  ClientOptions base;
  base.job.dataset = a.data;
  base.job.pipeline = *spec;
  base.job.batch_size = a.batch_size;
  base.job.epochs = a.epochs;
  base.job.seed = 1;
  base.job.last_batch = LastBatch::kDrop;
  base.job.batches_per_split = a.batches_per_split;
  RunResult total_static, total_dynamic;
  // Round 0 warms up (page cache, TBB threads, first listing) and is not counted.
  for (int round = 0; round <= a.rounds; ++round) {
    for (bool dynamic : {false, true}) {
      ClientOptions o = base;
      if (dynamic) {
        o.dispatcher = (*cluster)->dispatcher();
        o.job_name = "sharding-" + std::to_string(round);
      } else {
        o.workers = (*cluster)->workers();
      }
      auto client = Client::Connect(o);
      if (!client.ok()) {
        std::fprintf(stderr, "error: %s\n", client.status().ToString().c_str());
        return 1;
      }
      const RunResult r = Drain(**client);
      if (!r.status.ok()) {
        std::fprintf(stderr, "error: %s\n", r.status.ToString().c_str());
        return 1;
      }
      std::printf("round %d %-7s %8.1f img/s (%lld images in %.2f s)%s\n", round, dynamic ? "dynamic" : "static",
                  r.samples / r.seconds, (long long)r.samples, r.seconds, round == 0 ? " warm-up" : "");
      std::fflush(stdout);
      if (round == 0) continue;
      RunResult& t = dynamic ? total_dynamic : total_static;
      t.samples += r.samples;
      t.seconds += r.seconds;
    }
  }
  const double s = total_static.samples / total_static.seconds, d = total_dynamic.samples / total_dynamic.seconds;
  std::printf("sharding workers=%d static_img/s=%.1f dynamic_img/s=%.1f ratio=%.3f\n", a.workers, s, d, d / s);
  return (*cluster)->Stop(30).ok() ? 0 : 1;
}

int RunScale(const ScaleArgs& a) {
  // 8x8 grey uint8 samples: the bytes are not what is measured.
  const char* kSpec = R"({"decode":"gray","ops":[{"op":"random_resized_crop","size":8}],"output":{"dtype":"uint8","layout":"NHWC"}})";
  auto spec = PipelineSpec::FromJson(kSpec);
  if (!spec.ok()) {
    std::fprintf(stderr, "error: %s\n", spec.status().ToString().c_str());
    return 1;
  }
  auto measure = [&](int workers, double* batches_per_s) -> bool {
    LocalClusterOptions lo;
    lo.workers = workers;
    lo.threads_per_worker = 1;
    lo.worker_args = {"--synthetic-cost-us", std::to_string(a.synthetic_cost_us), "--drain-timeout", "1"};
    auto cluster = LocalCluster::Start(lo);
    if (!cluster.ok()) {
      std::fprintf(stderr, "error: %s\n", cluster.status().ToString().c_str());
      return false;
    }
    ClientOptions o;
    o.dispatcher = (*cluster)->dispatcher();
    o.job_name = "scale";
    o.job.dataset = "synthetic:";
    o.job.num_samples = int64_t(1) << 20;  // 32768 batches: more than a run takes
    o.job.pipeline = *spec;
    o.job.batch_size = a.batch_size;
    o.job.epochs = 1;
    o.job.batches_per_split = 4;
    auto client = Client::Connect(o);
    if (!client.ok()) {
      std::fprintf(stderr, "error: %s\n", client.status().ToString().c_str());
      return false;
    }
    // Warm up until every worker has streamed (each got its first leases), then time.
    const RunResult r = Drain(**client, a.warmup_s, a.seconds);
    if (!r.status.ok()) {
      std::fprintf(stderr, "error: %s\n", r.status.ToString().c_str());
      return false;
    }
    *batches_per_s = r.batches / r.seconds;
    std::printf("%2d worker(s): %8.1f batches/s (%lld batches in %.2f s)\n", workers, *batches_per_s,
                (long long)r.batches, r.seconds);
    std::fflush(stdout);
    client->reset();
    (void)(*cluster)->Stop(10);
    return true;
  };
  double single = 0, aggregate = 0;
  if (!measure(1, &single) || !measure(a.workers, &aggregate)) return 1;
  std::printf("scale workers=%d cost_us=%lld single_batches/s=%.1f aggregate_batches/s=%.1f efficiency=%.3f\n",
              a.workers, (long long)a.synthetic_cost_us, single, aggregate, aggregate / (a.workers * single));
  return 0;
}

}  // namespace ferry::bench
