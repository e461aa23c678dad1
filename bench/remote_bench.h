// ferry-bench's remote subcommands: transport (raw TCP vs a worker's batches) and
// consume (a client reading from workers).
#ifndef FERRY_BENCH_REMOTE_BENCH_H_
#define FERRY_BENCH_REMOTE_BENCH_H_

#include <cstdint>
#include <string>

namespace ferry::bench {

struct TransportArgs {
  double seconds = 5;
  uint64_t batch_bytes = 16ull << 20;
  int credits = 4;
  std::string worker_bin;  // ferry-worker; default: next to ferry-bench
};
int RunTransport(const TransportArgs& a, const char* argv0);

struct ConsumeArgs {
  std::string workers;  // HOST:PORT[,HOST:PORT...]
  std::string dispatcher, job, consumer_id;  // or a dispatcher job
  int batches_per_split = 4;
  bool deterministic = false;
  bool parallel_epochs = false;
  int64_t num_samples = 0;  // synthetic datasets
  int64_t stop_after = -1;  // batches, then save the state and exit
  int64_t save_after = -1;  // batches, then save the state and go on (a checkpoint)
  double step_ms = 0;       // a simulated training step after each batch
  std::string save_state, resume;
  std::string data;
  std::string pipeline = "imagenet-train";
  int64_t epochs = 1;
  int batch_size = 64;
  std::string last_batch = "keep";
  std::string dump_indices;
  std::string dump_digests;  // one line per batch: epoch split batch_in_split hash-of-pixels
  std::string token_file;
  uint64_t seed = 0;
  int credits = 4;
  bool progress = false;
};
int RunConsume(const ConsumeArgs& a);

struct DispatcherLoadArgs {
  int workers = 1000;
  double seconds = 5;
  int interval_ms = 100;      // heartbeat period of each simulated worker
  std::string dispatcher_bin; // default: next to ferry-bench
};
int RunDispatcherLoad(const DispatcherLoadArgs& a);

}  // namespace ferry::bench

#endif  // FERRY_BENCH_REMOTE_BENCH_H_
