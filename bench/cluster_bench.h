// ferry-bench's cluster benchmarks (cluster_bench.cc): dynamic vs static sharding, and
// scaling over N synthetic-cost workers. Both start a LocalCluster of real processes.
#ifndef FERRY_BENCH_CLUSTER_BENCH_H_
#define FERRY_BENCH_CLUSTER_BENCH_H_

#include <cstdint>
#include <string>
#include <vector>

namespace ferry::bench {

struct ShardingArgs {
  std::string data;
  std::string pipeline = "imagenet-train";
  int workers = 2;
  int threads_per_worker = 1;
  int batch_size = 64;
  int batches_per_split = 4;
  int64_t epochs = 2;
  int rounds = 6;
};
int RunSharding(const ShardingArgs& a);

struct ScaleArgs {
  int workers = 32;
  int64_t synthetic_cost_us = 20000;
  int batch_size = 32;
  double seconds = 5;
  double warmup_s = 2;
};
int RunScale(const ScaleArgs& a);

struct AdviseArgs {
  std::vector<double> rates = {75, 125, 175};  // batches/s the trainer needs
  int64_t synthetic_cost_us = 20000;           // each worker: 1 thread, 50 batches/s
  int batch_size = 32;
  int max_workers = 6;
  double seconds = 8;
  double warmup_s = 3;
};
int RunAdvise(const AdviseArgs& a);

}  // namespace ferry::bench

#endif  // FERRY_BENCH_CLUSTER_BENCH_H_
