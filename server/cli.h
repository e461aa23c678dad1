// Shared bits of the daemons' command lines.
#ifndef FERRY_SERVER_CLI_H_
#define FERRY_SERVER_CLI_H_

#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <cctype>
#include <csignal>
#include <cstdlib>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "core/log.h"
#include "store/object_store.h"

namespace ferry {

// --log-level, the same on every daemon (see lib/core/log.h); $FERRY_LOG_LEVEL when
// the flag is not given. The flag sets $FERRY_LOG_LEVEL too, for the daemons that
// ferry-local starts.
inline void AddLogFlag(CLI::App& app) {
  app.add_option_function<std::string>(
         "--log-level",
         [](const std::string& s) {
           SetLogLevel(ParseLogLevel(s).value_or(LogLevel::kInfo));
           setenv("FERRY_LOG_LEVEL", s.c_str(), 1);
         },
         "debug (every lease and acknowledgement), info (the default), warn, error or off; else $FERRY_LOG_LEVEL")
      ->check(CLI::IsMember({"debug", "info", "warn", "warning", "error", "off"}));
  app.add_option_function<std::string>(
         "--log-format",
         [](const std::string& s) {
           SetLogJson(s == "json");
           setenv("FERRY_LOG_FORMAT", s.c_str(), 1);
         },
         "text (the default) or json (one object per line: ts, program, level, msg); else $FERRY_LOG_FORMAT")
      ->check(CLI::IsMember({"text", "json"}));
}

// --plugin PATH (repeatable; FERRY_PLUGIN: ':'-separated paths): op plugins
// (include/ferry/plugin.h) to load at start, on the dispatcher (it checks pipelines)
// and every worker alike.
inline CLI::Option* AddPluginFlag(CLI::App& app, std::vector<std::string>* paths) {
  return app.add_option("--plugin", *paths,
                        "an op plugin (a shared library, include/ferry/plugin.h) to load: its ops may then be named "
                        "in pipelines (repeatable; give the same to the dispatcher and every worker)");
}

// --data-root DIR|URL (repeatable), the folders and URL prefixes jobs may read
// (lib/data/data_roots.h), on every daemon alike. Several may also come in one value
// separated by commas, which is how FERRY_DATA_ROOT (and a config file's string)
// lists them: not colons, which a URL root holds (s3://b/, https://host:8443/p/).
inline CLI::Option* AddDataRootFlag(CLI::App& app, std::vector<std::string>* roots, const std::string& help) {
  return app
      .add_option("--data-root", *roots, help + "; several may be given comma-separated (FERRY_DATA_ROOT)")
      ->delimiter(',');
}

// Object storage (lib/store/object_store.h), the same on both daemons: the dispatcher
// lists a job's dataset, the workers read its objects. Credentials come from the
// environment only (AWS_ACCESS_KEY_ID, the shared credentials file, AWS_PROFILE): never
// a flag, which `ps` would show. Apply with ConfigureObjectStore after parsing.
inline void AddObjectStoreFlags(CLI::App& app, store::StoreOptions* o) {
  app.add_option("--s3-endpoint", o->endpoint,
                 "an S3-compatible store's URL (MinIO, Ceph, R2, GCS's interoperability endpoint), addressed "
                 "path-style; else $AWS_ENDPOINT_URL_S3 / $AWS_ENDPOINT_URL, else AWS S3");
  app.add_option("--s3-region", o->region, "the region requests are signed for; else $AWS_REGION, else us-east-1");
  app.add_option("--s3-max-attempts", o->max_attempts,
                 "tries of a request that fails with 5xx, SlowDown or a broken connection (backoff with jitter)")
      ->check(CLI::Range(1, 100));
  app.add_option("--s3-ca-file", o->ca_file, "a CA bundle to check an https endpoint against")->check(CLI::ExistingFile);
  app.add_option("--read-ahead-requests", o->read_ahead_requests,
                 "objects fetched at once ahead of decoding, per job (a request's latency times the decode rate)")
      ->check(CLI::Range(1, 1024));
  app.add_option("--cache-dir", o->cache_dir,
                 "a local folder for fetched object bytes, shared by every job here: epochs after the first read "
                 "from it, not from the store");
  app.add_option("--cache-bytes", o->cache_bytes, "the cache's size at most (least recently used entries go)")
      ->check(CLI::Range(uint64_t{1} << 20, uint64_t{1} << 50));
  app.add_option("--read-ahead-bytes", o->read_ahead_bytes,
                 "fetched bytes not yet decoded, at most, per job")
      ->check(CLI::Range(uint64_t{1} << 20, uint64_t{1} << 40));
}

inline bool ConfigureObjectStore(const store::StoreOptions& o, const char* program) {
  if (Status s = store::ObjectStore::Configure(o); !s.ok()) {
    std::fprintf(stderr, "%s: %s\n", program, s.ToString().c_str());
    return false;
  }
  return true;
}

// --tls-cert/--tls-key/--tls-ca, the same on both daemons (see lib/net/tls.h).
template <typename Files>
inline void AddTlsFlags(CLI::App& app, Files& tls) {
  app.add_option("--tls-cert", tls.cert, "PEM certificate (chain) to serve with, and to present to the dispatcher")
      ->check(CLI::ExistingFile);
  app.add_option("--tls-key", tls.key, "PEM private key of --tls-cert")->check(CLI::ExistingFile);
  app.add_option("--tls-ca", tls.ca,
                 "PEM CA that peers' certificates must be signed by: clients must present one (mutual TLS), "
                 "and the dispatcher's is checked against it")
      ->check(CLI::ExistingFile);
}

#ifndef FERRY_VERSION_STRING
#define FERRY_VERSION_STRING "unknown"
#endif

// The environment variable of a flag: --heartbeat-interval-ms is
// FERRY_HEARTBEAT_INTERVAL_MS.
inline std::string FlagEnvName(const std::string& long_name) {
  std::string env = "FERRY_";
  for (char c : long_name) env += c == '-' ? '_' : char(std::toupper(static_cast<unsigned char>(c)));
  return env;
}

// What every daemon takes besides its own flags, as operators expect (Kubernetes
// manifests set env vars, mount config files):
//   --version             the version and the commit it was built from;
//   --config FILE         flags from a file (TOML: `listen = "0.0.0.0:7000"`, or INI),
//                         one per line, named as on the command line without "--";
//   FERRY_<FLAG>          every flag from the environment (FlagEnvName).
// The command line wins over the file, which wins over the environment (CLI11's
// order). Call once every flag is added.
inline void AddOperatorFlags(CLI::App& app) {
  for (CLI::Option* opt : app.get_options()) {
    if (opt->get_lnames().empty()) continue;
    const std::string& name = opt->get_lnames().front();
    if (name == "help") continue;
    opt->envname(FlagEnvName(name));
  }
  app.set_version_flag("--version", std::string(app.get_name()) + " " + FERRY_VERSION_STRING);
  app.set_config("--config", "", "a file of flags (TOML or INI: listen = \"0.0.0.0:7000\"); command-line flags win "
                                 "over it, and it wins over FERRY_<FLAG> environment variables");
}

// Parses argv (with AddOperatorFlags); on a bad flag prints the error and the full
// usage to stderr and returns 2; on --help or --version prints to stdout and returns
// 0; otherwise returns -1.
inline int ParseOrUsage(CLI::App& app, int argc, char** argv) {
  AddOperatorFlags(app);
  for (int i = 1; i < argc; ++i) {
    // Before parsing: CLI11 would first insist on the required flags.
    if (std::string(argv[i]) == "--version") {
      std::cout << app.get_name() << " " << FERRY_VERSION_STRING << "\n";
      return 0;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::cout << app.help();
    return 0;
  } catch (const CLI::CallForVersion& v) {
    std::cout << v.what() << "\n";
    return 0;
  } catch (const CLI::ParseError& e) {
    std::cerr << app.get_name() << ": " << e.what() << "\n\n" << app.help();
    return 2;
  }
  return -1;
}

// Raises the soft limit on open files to the hard limit: a daemon holds one socket per
// peer, and 1024 (the usual soft default) is too few for a large cluster.
inline void RaiseFileLimit() {
  rlimit r{};
  if (getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur < r.rlim_max) {
    r.rlim_cur = r.rlim_max;
    setrlimit(RLIMIT_NOFILE, &r);
  }
}

// Blocks SIGTERM and SIGINT in this thread and every thread it starts afterwards, so
// that WaitForTermination() can take them synchronously.
inline void BlockTerminationSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

inline int WaitForTermination() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  int sig = 0;
  sigwait(&set, &sig);
  return sig;
}

}  // namespace ferry

#endif  // FERRY_SERVER_CLI_H_
