#include "server/local_cluster.h"

#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>

namespace ferry {

std::string FindFerryBinary(const std::string& name) {
  char buf[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n > 0) {
    std::string dir(buf, size_t(n));
    dir = dir.substr(0, dir.rfind('/'));
    for (const std::string& d : {dir, dir + "/../server", dir + "/../bench"}) {
      const std::string p = d + "/" + name;
      if (access(p.c_str(), X_OK) == 0) return p;
    }
  }
  const char* path = getenv("PATH");
  std::string rest = path ? path : "";
  while (!rest.empty()) {
    const size_t colon = rest.find(':');
    const std::string d = rest.substr(0, colon);
    const std::string p = d + "/" + name;
    if (!d.empty() && access(p.c_str(), X_OK) == 0) return p;
    if (colon == std::string::npos) break;
    rest = rest.substr(colon + 1);
  }
  return name;
}

Result<std::unique_ptr<LocalCluster>> LocalCluster::Start(const LocalClusterOptions& options) {
  std::unique_ptr<LocalCluster> c(new LocalCluster());
  c->o_ = options;
  LocalClusterOptions& o = c->o_;
  if (o.dispatcher_bin.empty()) o.dispatcher_bin = FindFerryBinary("ferry-dispatcher");
  if (o.worker_bin.empty()) o.worker_bin = FindFerryBinary("ferry-worker");
  for (const std::string* b : {&o.dispatcher_bin, &o.worker_bin}) {
    if (access(b->c_str(), X_OK) != 0) return Status::NotFound("cannot find " + *b);
  }
  if (o.work_dir.empty()) {
    char tmpl[] = "/tmp/ferry-local-XXXXXX";
    if (mkdtemp(tmpl) == nullptr) return Status::Internal(std::string("mkdtemp: ") + std::strerror(errno));
    o.work_dir = tmpl;
    c->temp_dir_ = tmpl;
  }
  c->log_dir_ = o.log_dir.empty() ? o.work_dir : o.log_dir;
  mkdir(c->log_dir_.c_str(), 0755);
  std::vector<std::string> argv = {o.dispatcher_bin, "--listen", o.listen, "--work-dir", o.work_dir + "/journal"};
  if (!o.token_file.empty()) argv.insert(argv.end(), {"--token-file", o.token_file});
  argv.insert(argv.end(), o.dispatcher_args.begin(), o.dispatcher_args.end());
  FERRY_ASSIGN_OR_RETURN(c->dispatcher_proc_, c->Spawn("dispatcher", argv));
  c->dispatcher_ = c->dispatcher_proc_.address;
  for (int i = 0; i < o.workers; ++i) FERRY_RETURN_IF_ERROR(c->AddWorker().status());
  return c;
}

LocalCluster::~LocalCluster() {
  (void)Stop(10);
  if (!temp_dir_.empty() && clean_) {
    const std::string cmd = "rm -rf '" + temp_dir_ + "'";
    (void)!system(cmd.c_str());
  }
}

std::vector<std::string> LocalCluster::workers() const {
  std::vector<std::string> out;
  for (const Proc& p : workers_) {
    if (p.pid > 0) out.push_back(p.address);
  }
  return out;
}

Result<std::string> LocalCluster::AddWorker(const std::vector<std::string>& extra_args) {
  std::vector<std::string> argv = {o_.worker_bin, "--listen", "127.0.0.1:0", "--threads",
                                   std::to_string(o_.threads_per_worker), "--dispatcher", dispatcher_};
  if (!o_.token_file.empty()) argv.insert(argv.end(), {"--token-file", o_.token_file});
  argv.insert(argv.end(), o_.worker_args.begin(), o_.worker_args.end());
  argv.insert(argv.end(), extra_args.begin(), extra_args.end());
  FERRY_ASSIGN_OR_RETURN(Proc p, Spawn("worker" + std::to_string(next_worker_++), argv));
  workers_.push_back(p);
  return p.address;
}

Result<LocalCluster::Proc> LocalCluster::Spawn(const std::string& name, std::vector<std::string> argv) {
  int out[2];
  if (pipe2(out, O_CLOEXEC) != 0) return Status::Internal(std::string("pipe: ") + std::strerror(errno));
  const std::string log = log_dir_ + "/" + name + ".log";
  const int err_fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (err_fd < 0) return Status::Internal("cannot write " + log + ": " + std::strerror(errno));
  std::vector<char*> args;
  for (std::string& a : argv) args.push_back(a.data());
  args.push_back(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(out[1], STDOUT_FILENO);
    dup2(err_fd, STDERR_FILENO);
    const int null_fd = open("/dev/null", O_RDONLY);
    if (null_fd >= 0) dup2(null_fd, STDIN_FILENO);
    // Termination signals are blocked in ferry programs' threads; the child must
    // start with them unblocked (execve keeps the mask).
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  close(out[1]);
  close(err_fd);
  if (pid < 0) {
    close(out[0]);
    return Status::Internal(std::string("fork: ") + std::strerror(errno));
  }
  // Read "listening on HOST:PORT\n", for at most 20 s.
  Proc p{pid, name, ""};
  std::string text;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (text.find('\n') == std::string::npos && std::chrono::steady_clock::now() < deadline) {
    pollfd pfd{out[0], POLLIN, 0};
    if (poll(&pfd, 1, 100) <= 0) continue;
    char buf[256];
    const ssize_t n = read(out[0], buf, sizeof buf);
    if (n <= 0) break;
    text.append(buf, size_t(n));
  }
  close(out[0]);  // the daemons print nothing else on stdout
  const size_t at = text.find("listening on ");
  const size_t end = text.find('\n', at);
  if (at == std::string::npos || end == std::string::npos) {
    StopProc(p, 0);
    return Status::Unavailable(name + " did not start (see " + log + ")");
  }
  p.address = text.substr(at + 13, end - at - 13);
  return p;
}

int LocalCluster::StopProc(Proc& p, double timeout_s) {
  if (p.pid <= 0) return 0;
  if (timeout_s > 0) kill(p.pid, SIGTERM);
  int status = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(int64_t(timeout_s * 1000));
  for (;;) {
    const pid_t r = waitpid(p.pid, &status, WNOHANG);
    if (r == p.pid || r < 0) break;
    if (std::chrono::steady_clock::now() >= deadline) {
      kill(p.pid, SIGKILL);
      waitpid(p.pid, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  p.pid = -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

Status LocalCluster::Stop(double timeout_s) {
  std::string failed;
  // SIGTERM all workers at once (they drain in parallel), then wait for each.
  for (Proc& w : workers_) {
    if (w.pid > 0) kill(w.pid, SIGTERM);
  }
  for (Proc& w : workers_) {
    if (w.pid > 0 && StopProc(w, timeout_s) != 0) failed += " " + w.name;
  }
  if (dispatcher_proc_.pid > 0 && StopProc(dispatcher_proc_, timeout_s) != 0) failed += " dispatcher";
  if (!failed.empty()) clean_ = false;
  if (!failed.empty()) return Status::Internal("did not exit cleanly:" + failed + " (logs in " + log_dir_ + ")");
  return Status::OK();
}

}  // namespace ferry
