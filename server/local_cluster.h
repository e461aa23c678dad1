// LocalCluster: a ferry-dispatcher and N ferry-workers as child processes on loopback,
// for `ferry-local` and the cluster benchmarks. Each child's stderr goes to a log file
// in the log directory; its "listening on HOST:PORT" line gives its address. Stop()
// drains the workers (SIGTERM), then stops the dispatcher; a child that does not exit
// in time is killed. The destructor stops whatever is still running.
#ifndef FERRY_SERVER_LOCAL_CLUSTER_H_
#define FERRY_SERVER_LOCAL_CLUSTER_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "ferry/status.h"

namespace ferry {

struct LocalClusterOptions {
  int workers = 2;
  int threads_per_worker = 1;
  std::string dispatcher_bin;  // default: found next to this program (FindFerryBinary)
  std::string worker_bin;
  std::string listen = "127.0.0.1:0";  // the dispatcher's
  std::string work_dir;        // the dispatcher's journal; default: a fresh temporary folder
  std::string log_dir;         // children's stderr; default: the work dir (removed after
                               // a clean stop when it is a temporary folder)
  std::string token_file;
  std::vector<std::string> dispatcher_args, worker_args;  // extra flags
};

class LocalCluster {
 public:
  static Result<std::unique_ptr<LocalCluster>> Start(const LocalClusterOptions& options);
  ~LocalCluster();

  const std::string& dispatcher() const { return dispatcher_; }
  std::vector<std::string> workers() const;
  const std::string& log_dir() const { return log_dir_; }

  // Starts one more worker (elasticity); returns its address.
  Result<std::string> AddWorker(const std::vector<std::string>& extra_args = {});
  // SIGTERM every worker (they drain), then the dispatcher; waits up to `timeout_s`
  // for each, then kills. Returns OK if all exited 0.
  Status Stop(double timeout_s = 30);

 private:
  struct Proc {
    pid_t pid = -1;
    std::string name, address;
  };
  LocalCluster() = default;
  Result<Proc> Spawn(const std::string& name, std::vector<std::string> argv);
  static int StopProc(Proc& p, double timeout_s);

  LocalClusterOptions o_;
  std::string dispatcher_, log_dir_, temp_dir_;
  Proc dispatcher_proc_;
  std::vector<Proc> workers_;
  int next_worker_ = 0;
  bool clean_ = true;  // every child exited 0: the temporary folder (logs) may go
};

// The path of a Ferry program: next to the running executable, in ../server or
// ../bench beside it (a build tree), or on PATH.
std::string FindFerryBinary(const std::string& name);

}  // namespace ferry

#endif  // FERRY_SERVER_LOCAL_CLUSTER_H_
