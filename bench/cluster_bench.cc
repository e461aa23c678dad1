// ferry-bench's cluster benchmarks, each against a baseline measured in the same run:
//
//   sharding: dynamic sharding (a dispatcher job: leased splits, acks, dedup) against
//     static sharding (point to point, worker i of N), the same workers serving both,
//     rounds alternating. Reports dynamic img/s ÷ static img/s.
//   scale: N synthetic-cost workers (each batch takes --synthetic-cost-us on a worker,
//     no decoding) against one such worker: aggregate ÷ (N × single).
//   advise: the dispatcher's worker-count advice against a sweep. A trainer that needs
//     a known rate (it computes 1/rate seconds per batch) reads from 1, 2, ...
//     synthetic-cost workers; at each count, its input wait and the dispatcher's
//     ferry_job_recommended_workers. The sweep's answer is the fewest workers that
//     bring the input wait under 10%; the advice should be within one of it, from any
//     point of the sweep.
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "cluster_bench.h"
#include "cpu_time.h"
#include "ferry/client.h"
#include "net/control_channel.h"
#include "server/local_cluster.h"
#include "wire/control.h"

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

// A local cluster of `workers` synthetic-cost workers (one thread each), and a job of
// 8x8 grey samples on it: the bytes are not what is measured.
Result<std::unique_ptr<LocalCluster>> SyntheticCluster(int workers, int64_t cost_us) {
  LocalClusterOptions lo;
  lo.workers = workers;
  lo.threads_per_worker = 1;
  lo.worker_args = {"--allow-synthetic", "--synthetic-cost-us", std::to_string(cost_us), "--drain-timeout", "1"};
  return LocalCluster::Start(lo);
}

ClientOptions SyntheticJob(const std::string& dispatcher, const std::string& name, int batch_size,
                           int64_t batches_per_split, int64_t samples) {
  const char* kSpec = R"({"decode":"gray","ops":[{"op":"random_resized_crop","size":8}],"output":{"dtype":"uint8","layout":"NHWC"}})";
  ClientOptions o;
  o.dispatcher = dispatcher;
  o.job_name = name;
  o.job.dataset = "synthetic:";
  o.job.num_samples = samples;
  o.job.pipeline = *PipelineSpec::FromJson(kSpec);
  o.job.batch_size = batch_size;
  o.job.epochs = 1;
  o.job.batches_per_split = batches_per_split;
  return o;
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
  auto measure = [&](int workers, double* batches_per_s) -> bool {
    auto cluster = SyntheticCluster(workers, a.synthetic_cost_us);
    if (!cluster.ok()) {
      std::fprintf(stderr, "error: %s\n", cluster.status().ToString().c_str());
      return false;
    }
    // 32768 batches: more than a run takes.
    ClientOptions o = SyntheticJob((*cluster)->dispatcher(), "scale", a.batch_size, 4, int64_t(1) << 20);
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

int RunAdvise(const AdviseArgs& a) {
  const double per_worker = 1e6 / double(a.synthetic_cost_us);  // batches/s of one worker
  int failures = 0;
  std::printf("advise: each worker %.1f batches/s (1 thread, %lld us per batch of %d); the trainer computes 1/rate per batch\n",
              per_worker, (long long)a.synthetic_cost_us, a.batch_size);
  std::printf("%-10s %-8s %-11s %-12s %-12s %s\n", "NEED b/s", "WORKERS", "INPUT WAIT", "GOT b/s", "RECOMMENDED",
              "LIMITED BY");
  for (const double rate : a.rates) {
    int sweep = 0;  // the fewest workers with the input wait under 10%
    std::vector<int64_t> advice;
    for (int workers = 1; workers <= a.max_workers; ++workers) {
      auto cluster = SyntheticCluster(workers, a.synthetic_cost_us);
      if (!cluster.ok()) {
        std::fprintf(stderr, "error: %s\n", cluster.status().ToString().c_str());
        return 1;
      }
      // More samples than a run takes.
      ClientOptions o = SyntheticJob((*cluster)->dispatcher(), "advise", a.batch_size, 2, int64_t(1) << 22);
      auto client = Client::Connect(o);
      if (!client.ok()) {
        std::fprintf(stderr, "error: %s\n", client.status().ToString().c_str());
        return 1;
      }
      // The trainer: 1/rate of work per batch (a sleep: the machine's cores stay free
      // for the workers).
      const auto step = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
          std::chrono::duration<double>(1.0 / rate));
      double wait0 = 0, t0 = 0;
      int64_t batches = 0;
      const double start = WallSeconds();
      bool timing = false;
      for (;;) {
        const double now = WallSeconds();
        if (!timing && now - start >= a.warmup_s) {
          timing = true;
          t0 = now;
          wait0 = (*client)->stats().wait_seconds;
          batches = 0;
        }
        if (timing && now - t0 >= a.seconds) break;
        Result<Batch> b = (*client)->Next();
        if (!b.ok()) {
          std::fprintf(stderr, "error: %s\n", b.status().ToString().c_str());
          return 1;
        }
        ++batches;
        std::this_thread::sleep_for(step);
      }
      const double wall = WallSeconds() - t0;
      const double wait = ((*client)->stats().wait_seconds - wait0) / wall;
      // The dispatcher's advice, as ferry-ctl status reads it.
      net::ControlChannel ch((*cluster)->dispatcher(), "", wire::Role::kTool, "ferry-bench advise",
                             std::chrono::seconds(5), nullptr);
      int64_t recommended = 0;
      std::string limited;
      if (auto r = ch.Call(wire::EncodeGetClusterStatus()); r.ok()) {
        if (auto m = wire::DecodeClusterStatus(*r); m.ok()) {
          for (const auto& j : m->jobs) {
            if (j.name != "advise") continue;
            recommended = j.recommended_workers;
            limited = j.limited_by;
          }
        }
      }
      advice.push_back(recommended);
      std::printf("%-10.0f %-8d %-11.1f %-12.1f %-12lld %s\n", rate, workers, 100 * wait, batches / wall,
                  (long long)recommended, limited.c_str());
      std::fflush(stdout);
      client->reset();
      (void)(*cluster)->Stop(10);
      if (wait < 0.10) {
        sweep = workers;
        break;
      }
    }
    bool within = sweep > 0;
    for (int64_t r : advice) within = within && r > 0 && std::abs(r - sweep) <= 1;
    std::printf("advise need_batches/s=%.0f sweep_workers=%d advice=", rate, sweep);
    for (size_t i = 0; i < advice.size(); ++i) std::printf("%s%lld", i ? "," : "", (long long)advice[i]);
    std::printf(" within_one=%s\n", within ? "yes" : "NO");
    std::fflush(stdout);
    if (!within) ++failures;
  }
  return failures == 0 ? 0 : 3;
}

}  // namespace ferry::bench
