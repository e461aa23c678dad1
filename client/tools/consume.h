// The consume tool: a complete client that reads a job and reports what it got. It is
// `ferry-consume` (built with the daemons, not the benchmarks), and `ferry-bench
// consume` too. The chaos and cluster tests drive it as a real process, and the
// README's main job is one of its runs.
//
//   ferry-consume (--workers HOST:PORT[,...] | --dispatcher HOST:PORT --job NAME)
//       --data DIR [--pipeline P] [--epochs E] [--batch-size B] [--last-batch keep|drop|pad]
//       [--dump-indices FILE [--dump-epochs]] [--dump-digests FILE] [--token-file F]
//       [--stop-after K --save-state F] [--save-after K --save-state F] [--resume F]
//       [--deterministic] [--parallel-epochs] [--step-ms MS] [--progress]
//   last line: consume img/s=<x> wait_frac=<y> samples=<n>
#ifndef FERRY_CLIENT_TOOLS_CONSUME_H_
#define FERRY_CLIENT_TOOLS_CONSUME_H_

#include <cstdint>
#include <string>

namespace CLI {
class App;
}

namespace ferry::tools {

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
  std::string bad_samples = "skip";
  std::string dump_indices;
  bool dump_epochs = false;  // dump "epoch index" lines
  std::string dump_digests;  // one line per batch: epoch split batch_in_split hash-of-pixels
  std::string token_file;
  std::string tls_ca, tls_cert, tls_key;
  uint64_t seed = 0;
  int credits = 4;
  bool progress = false;
};

// Declares the tool's flags on `app`, writing into `*args`.
void AddConsumeOptions(CLI::App* app, ConsumeArgs* args);
// Checks what the flags cannot (one of --workers and --dispatcher, ...); prints usage
// and returns 2 if wrong, else runs. Returns the process's exit code.
int RunConsumeCommand(const CLI::App& app, const ConsumeArgs& args);

}  // namespace ferry::tools

#endif  // FERRY_CLIENT_TOOLS_CONSUME_H_
