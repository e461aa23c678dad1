// ferry-local: a dispatcher and N workers on loopback, for one machine.
//   ferry-local --workers N [--threads-per-worker T] [-- COMMAND ARGS...]
// With a command: starts the cluster, runs COMMAND with every "{dispatcher}" in its
// arguments replaced by the dispatcher's address (also in $FERRY_DISPATCHER), then
// stops the cluster (the workers drain) and exits with the command's status. Without:
// prints the addresses and runs until SIGINT/SIGTERM, then stops the cluster.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/log.h"
#include "server/cli.h"
#include "server/local_cluster.h"

int main(int argc, char** argv) {
  ferry::LogProgramName() = "ferry-local";
  ferry::LocalClusterOptions o;
  std::vector<std::string> command;
  CLI::App app{"ferry-local: a ferry-dispatcher and N ferry-workers on loopback", "ferry-local"};
  app.add_option("--workers", o.workers, "number of workers")->check(CLI::Range(1, 256));
  app.add_option("--threads-per-worker", o.threads_per_worker, "decode threads of each worker")
      ->check(CLI::Range(1, 1024));
  app.add_option("--listen", o.listen, "the dispatcher's HOST:PORT (default: a free loopback port)");
  app.add_option("--work-dir", o.work_dir, "the dispatcher's journal and the logs (default: a temporary folder)");
  ferry::AddLogFlag(app);
  app.add_option("--token-file", o.token_file, "shared token file for every daemon");
  app.add_option("--worker-arg", o.worker_args, "an extra flag for every worker (repeatable)");
  std::vector<std::string> data_roots;
  ferry::AddDataRootFlag(
      app, &data_roots,
      "a folder jobs may read (repeatable): passed to the dispatcher and every worker (see SECURITY.md)");
  std::vector<std::string> plugins;
  ferry::AddPluginFlag(app, &plugins);
  app.add_option("command", command, "a command to run against the cluster (after --)");
  app.positionals_at_end();
  if (int rc = ferry::ParseOrUsage(app, argc, argv); rc >= 0) return rc;

  for (const std::string& root : data_roots) {
    for (auto* args : {&o.dispatcher_args, &o.worker_args}) {
      args->push_back("--data-root");
      args->push_back(root);
    }
  }
  for (const std::string& plugin : plugins) {
    for (auto* args : {&o.dispatcher_args, &o.worker_args}) {
      args->push_back("--plugin");
      args->push_back(plugin);
    }
  }
  ferry::BlockTerminationSignals();
  auto cluster = ferry::LocalCluster::Start(o);
  if (!cluster.ok()) {
    std::fprintf(stderr, "ferry-local: %s\n", cluster.status().ToString().c_str());
    return 1;
  }
  std::string list;
  for (const std::string& w : (*cluster)->workers()) list += (list.empty() ? "" : ",") + w;
  std::fprintf(stderr, "ferry-local: dispatcher %s, %d worker(s) %s; logs in %s\n", (*cluster)->dispatcher().c_str(),
               o.workers, list.c_str(), (*cluster)->log_dir().c_str());
  std::printf("dispatcher on %s\n", (*cluster)->dispatcher().c_str());
  std::fflush(stdout);

  int rc = 0;
  if (command.empty()) {
    const int sig = ferry::WaitForTermination();
    ferry::Log("signal %d: stopping the cluster", sig);
  } else {
    std::vector<std::string> args;
    for (std::string a : command) {
      for (size_t at; (at = a.find("{dispatcher}")) != std::string::npos;)
        a.replace(at, 12, (*cluster)->dispatcher());
      args.push_back(a);
    }
    setenv("FERRY_DISPATCHER", (*cluster)->dispatcher().c_str(), 1);
    std::vector<char*> cargs;
    for (std::string& a : args) cargs.push_back(a.data());
    cargs.push_back(nullptr);
    const pid_t pid = fork();
    if (pid == 0) {
      sigset_t none;
      sigemptyset(&none);
      sigprocmask(SIG_SETMASK, &none, nullptr);
      execvp(cargs[0], cargs.data());
      std::fprintf(stderr, "ferry-local: cannot run %s\n", cargs[0]);
      _exit(127);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  const ferry::Status s = (*cluster)->Stop(30);
  if (!s.ok()) {
    std::fprintf(stderr, "ferry-local: %s\n", s.ToString().c_str());
    if (rc == 0) rc = 1;
  }
  return rc;
}
