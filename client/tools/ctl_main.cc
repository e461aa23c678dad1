// ferry-ctl: an operator's view of a Ferry cluster, through the dispatcher's control
// plane (authenticated as a tool: it may read, and drain a worker).
//
//   ferry-ctl status --dispatcher HOST:PORT [--json] [--token-file F] [--tls-ca F ...]
//   ferry-ctl drain WORKER --dispatcher HOST:PORT [--json] [...]
//
// status prints the dispatcher's jobs (consumers, epoch, splits pending/leased/done)
// and workers (address, state, leases held, time since the last heartbeat, jobs it
// cannot serve), as tables or as JSON for scripts. drain takes a worker (its id or
// address) out of service: it takes no new leases at once, serves the splits it holds
// until their consumers acknowledge them, then leaves and exits (as on SIGTERM); the
// status after it is printed. Exits 1 when the dispatcher cannot be reached or
// refuses (an unknown worker), 2 on a bad flag.
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "net/auth.h"
#include "net/control_channel.h"
#include "net/tls.h"
#include "server/cli.h"
#include "wire/control.h"

namespace {

using ferry::wire::ClusterStatusMsg;

std::string Epoch(const ferry::wire::JobSummaryMsg& j) {
  if (j.epochs <= 0) return std::to_string(j.first_open) + "/-";
  return std::to_string(std::min<int64_t>(int64_t(j.first_open), j.epochs)) + "/" + std::to_string(j.epochs);
}

void PrintTables(const std::string& dispatcher, const ClusterStatusMsg& m) {
  std::printf("dispatcher %s  state %s  journal %s\n\n", dispatcher.c_str(), m.state_id.c_str(),
              m.journal_writable ? "writable" : "NOT WRITABLE (changes refused)");
  std::printf("JOBS (%zu)\n", m.jobs.size());
  std::printf("%-20s %-8s %-9s %-9s %-24s %s\n", "NAME", "SAMPLES", "CONSUMERS", "EPOCH", "SPLITS PEND/LEASED/DONE",
              "DATASET");
  for (const auto& j : m.jobs) {
    const std::string consumers = std::to_string(j.consumers.size()) + (j.ranks > 0 ? "/" + std::to_string(j.ranks) : "");
    const std::string splits = j.finished ? std::string("finished")
                                          : std::to_string(j.pending) + "/" + std::to_string(j.leased) + "/" +
                                                std::to_string(j.done) + " of " + std::to_string(j.splits_per_epoch);
    std::printf("%-20s %-8lld %-9s %-9s %-24s %s\n", j.name.c_str(), (long long)j.num_samples, consumers.c_str(),
                Epoch(j).c_str(), splits.c_str(), j.dataset.c_str());
    if (j.thread_share >= 0 || j.weight != 1 || j.priority != 0) {
      std::printf("  weight %g, priority %d", j.weight, j.priority);
      if (j.thread_share >= 0) std::printf("; share of its workers' decode threads %.0f%%", 100 * j.thread_share);
      std::printf("\n");
    }
    if (!j.limited_by.empty()) {
      std::printf("  input wait %.0f%%, demand %.0f samples/s", 100 * j.input_wait, j.demand);
      if (j.recommended_workers > 0) std::printf(", recommended workers %lld", (long long)j.recommended_workers);
      std::printf("; limited by %s\n", j.limited_by.c_str());
    }
  }
  std::printf("\nWORKERS (%zu)\n", m.workers.size());
  std::printf("%-32s %-22s %-9s %-7s %-8s %-10s %-10s %s\n", "ID", "ADDRESS", "STATE", "LEASES", "SILENT", "SAMPLES/S",
              "CAPACITY", "NOTES");
  for (const auto& w : m.workers) {
    std::string notes;
    if (!w.serves_job.empty()) notes += "serves only " + w.serves_consumer + " of " + w.serves_job + "; ";
    for (const auto& [job, reason] : w.unfit_jobs) notes += "cannot serve " + job + ": " + reason + "; ";
    char silent[32];
    std::snprintf(silent, sizeof silent, "%.1fs", double(w.silent_ms) / 1000.0);
    std::printf("%-32s %-22s %-9s %-7u %-8s %-10.0f %-10.0f %s\n", w.id.c_str(), w.address.c_str(),
                w.draining ? "draining" : "serving", w.leases, silent, w.samples_per_second, w.capacity, notes.c_str());
  }
}

nlohmann::json ToJson(const std::string& dispatcher, const ClusterStatusMsg& m) {
  nlohmann::json j;
  j["dispatcher"] = dispatcher;
  j["state_id"] = m.state_id;
  j["journal_writable"] = m.journal_writable;
  j["jobs"] = nlohmann::json::array();
  for (const auto& x : m.jobs) {
    j["jobs"].push_back({{"name", x.name},
                         {"dataset", x.dataset},
                         {"num_samples", x.num_samples},
                         {"consumers", x.consumers},
                         {"ranks", x.ranks},
                         {"epoch", x.first_open},
                         {"epochs", x.epochs},
                         {"splits_per_epoch", x.splits_per_epoch},
                         {"splits", {{"pending", x.pending}, {"leased", x.leased}, {"done", x.done}}},
                         {"finished", x.finished},
                         {"input_wait", x.input_wait},
                         {"demand_samples_per_second", x.demand},
                         {"recommended_workers", x.recommended_workers},
                         {"limited_by", x.limited_by},
                         {"weight", x.weight},
                         {"priority", x.priority},
                         {"thread_share", x.thread_share}});
  }
  j["workers"] = nlohmann::json::array();
  for (const auto& w : m.workers) {
    j["workers"].push_back({{"id", w.id},
                            {"address", w.address},
                            {"state", w.draining ? "draining" : "serving"},
                            {"leases", w.leases},
                            {"silent_ms", w.silent_ms},
                            {"serves_job", w.serves_job},
                            {"serves_consumer", w.serves_consumer},
                            {"unfit_jobs", w.unfit_jobs},
                            {"samples_per_second", w.samples_per_second},
                            {"capacity_samples_per_second", w.capacity}});
  }
  return j;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ferry-ctl: the state of a Ferry cluster, from its dispatcher", "ferry-ctl"};
  app.require_subcommand(1);
  std::string dispatcher, token_file;
  ferry::net::TlsFiles tls;
  bool json = false;
  double timeout_s = 10;
  auto* status = app.add_subcommand("status", "jobs and workers, as tables (or --json)");
  auto* drain = app.add_subcommand("drain", "drain a worker: no new leases; it finishes what it holds, then exits");
  std::string worker;
  drain->add_option("worker", worker, "the worker's id or address (as ferry-ctl status shows)")->required();
  for (CLI::App* sub : {status, drain}) {
    sub->add_option("--dispatcher", dispatcher, "HOST:PORT of ferry-dispatcher")->required()->envname("FERRY_DISPATCHER");
    sub->add_option("--token-file", token_file, "file holding the shared token (else $FERRY_TOKEN)");
    sub->add_option("--tls-ca", tls.ca, "PEM CA the dispatcher's certificate must be signed by (TLS)")
        ->check(CLI::ExistingFile);
    sub->add_option("--tls-cert", tls.cert, "PEM certificate to present (mutual TLS)")->check(CLI::ExistingFile);
    sub->add_option("--tls-key", tls.key, "PEM private key of --tls-cert")->check(CLI::ExistingFile);
    sub->add_option("--timeout", timeout_s, "seconds to wait for the dispatcher")->check(CLI::PositiveNumber);
  }
  status->add_flag("--json", json, "one JSON object, for scripts");
  drain->add_flag("--json", json, "the status after the drain as one JSON object");
  if (int rc = ferry::ParseOrUsage(app, argc, argv); rc >= 0) return rc;

  auto token = ferry::net::LoadToken(token_file);
  if (!token.ok()) {
    std::fprintf(stderr, "ferry-ctl: %s\n", token.status().ToString().c_str());
    return 2;
  }
  std::shared_ptr<ferry::net::TlsContext> context;
  if (tls.enabled()) {
    auto c = ferry::net::ClientTlsContext(tls);
    if (!c.ok()) {
      std::fprintf(stderr, "ferry-ctl: %s\n", c.status().ToString().c_str());
      return 2;
    }
    context = *c;
  }
  ferry::net::ControlChannel ch(dispatcher, *token, ferry::wire::Role::kTool, "ferry-ctl",
                                std::chrono::milliseconds(int64_t(timeout_s * 1000)), context);
  auto reply = ch.Call(drain->parsed() ? ferry::wire::EncodeDrainWorker(worker) : ferry::wire::EncodeGetClusterStatus());
  auto m = reply.ok() ? ferry::wire::DecodeClusterStatus(*reply) : ferry::Result<ClusterStatusMsg>(reply.status());
  if (!m.ok()) {
    std::fprintf(stderr, "ferry-ctl: dispatcher %s: %s\n", dispatcher.c_str(), m.status().ToString().c_str());
    return 1;
  }
  if (drain->parsed() && !json) std::printf("draining %s: no new leases; it exits once its splits are acknowledged\n\n", worker.c_str());
  if (json) std::cout << ToJson(dispatcher, *m).dump(2) << "\n";
  else PrintTables(dispatcher, *m);
  return 0;
}
