#include "consume.h"

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/hash.h"
#include "ferry/client.h"

namespace ferry::tools {

namespace {

double WallSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::vector<std::string> SplitCommas(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  for (;;) {
    const size_t comma = s.find(',', start);
    std::string part = s.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (!part.empty()) out.push_back(part);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

int RunConsume(const ConsumeArgs& a) {
  ClientOptions o;
  if (!a.workers.empty()) o.workers = SplitCommas(a.workers);
  o.dispatcher = a.dispatcher;
  o.job_name = a.job;
  o.consumer_id = a.consumer_id;
  o.job.batches_per_split = a.batches_per_split;
  o.job.ordering = a.deterministic ? Ordering::kDeterministic : Ordering::kArrival;
  o.job.mode = a.parallel_epochs ? ProcessingMode::kParallelEpochs : ProcessingMode::kDistributedEpoch;
  o.job.num_samples = a.num_samples;
  if (!a.resume.empty()) {
    std::ifstream in(a.resume);
    std::stringstream text;
    text << in.rdbuf();
    if (!in) {
      std::fprintf(stderr, "error: cannot read %s\n", a.resume.c_str());
      return 1;
    }
    o.resume_state = text.str();
  }
  o.job.dataset = a.data;
  auto spec = PipelineSpec::Parse(a.pipeline);
  if (!spec.ok()) {
    std::fprintf(stderr, "error: %s\n", spec.status().ToString().c_str());
    return 2;
  }
  o.job.pipeline = *spec;
  o.job.epochs = a.epochs;
  o.job.batch_size = a.batch_size;
  o.job.seed = a.seed;
  o.credits = a.credits;
  o.token_file = a.token_file;
  o.tls_ca = a.tls_ca;
  o.tls_cert = a.tls_cert;
  o.tls_key = a.tls_key;
  auto last_batch = ParseLastBatch(a.last_batch);
  if (!last_batch.ok()) {
    std::fprintf(stderr, "error: --last-batch: %s\n", last_batch.status().message().c_str());
    return 2;
  }
  o.job.last_batch = *last_batch;
  o.job.bad_samples = *ParseBadSamples(a.bad_samples);  // CLI checked it
  std::ofstream dump;
  if (!a.dump_indices.empty()) {
    dump.open(a.dump_indices, std::ios::app);
    if (!dump) {
      std::fprintf(stderr, "error: cannot write %s\n", a.dump_indices.c_str());
      return 1;
    }
  }
  std::ofstream digests;
  if (!a.dump_digests.empty()) {
    digests.open(a.dump_digests, std::ios::app);
    if (!digests) {
      std::fprintf(stderr, "error: cannot write %s\n", a.dump_digests.c_str());
      return 1;
    }
  }
  auto client = Client::Connect(o);
  if (!client.ok()) {
    std::fprintf(stderr, "error: %s\n", client.status().ToString().c_str());
    return 1;
  }
  const double t0 = WallSeconds();
  int64_t samples = 0, batches = 0;
  double last_draw = 0;
  const bool show = a.progress || isatty(STDERR_FILENO);
  for (;;) {
    if (show && WallSeconds() - last_draw > 0.25) {
      last_draw = WallSeconds();
      const double el = std::max(1e-9, last_draw - t0);
      std::fprintf(stderr, "\r  epoch %lld: %lld images, %.1f img/s   ", (long long)(*client)->epochs_completed(),
                   (long long)samples, samples / el);
      std::fflush(stderr);
    }
    Result<Batch> b = (*client)->Next();
    if (!b.ok()) {
      if (b.status().IsOutOfRange()) break;
      std::fprintf(stderr, "error: %s\n", b.status().ToString().c_str());
      return 1;
    }
    samples += b->valid_rows();
    ++batches;
    if (digests.is_open()) {
      Fingerprinter f;
      f.Add(std::string_view(static_cast<const char*>(b->images.data), b->images.num_bytes()));
      f.Add(std::string_view(static_cast<const char*>(b->labels.data), b->labels.num_bytes()));
      digests << b->provenance.epoch << ' ' << b->provenance.split << ' ' << b->provenance.batch_in_split << ' '
              << f.Hex() << '\n';
      digests.flush();
    }
    // Recorded as delivered when Next() returns it (the client may acknowledge its
    // split at once), before the simulated step: a consumer killed mid-step had it.
    if (dump.is_open()) {
      const int64_t* idx = b->indices.as<int64_t>();
      for (int64_t i = 0; i < b->valid_rows(); ++i) {
        if (a.dump_epochs) dump << b->provenance.epoch << ' ';
        dump << idx[i] << '\n';
      }
      dump.flush();
    }
    if (a.step_ms > 0) std::this_thread::sleep_for(std::chrono::microseconds(int64_t(a.step_ms * 1000)));
    const bool stop = a.stop_after >= 0 && batches >= a.stop_after;
    if (!a.save_state.empty() && ((a.save_after < 0 && stop) || batches == a.save_after)) {
      // Atomically: a crash mid-write must not leave half a state.
      const std::string tmp = a.save_state + ".tmp";
      std::ofstream out(tmp, std::ios::trunc);
      out << (*client)->SaveState().Serialize();
      out.close();
      if (!out || std::rename(tmp.c_str(), a.save_state.c_str()) != 0) {
        std::fprintf(stderr, "error: cannot write %s\n", a.save_state.c_str());
        return 1;
      }
      if (!stop)
        std::fprintf(stderr, "state after %lld batches (%lld samples) saved to %s\n", (long long)batches,
                     (long long)samples, a.save_state.c_str());
    }
    if (stop) {
      std::printf("stopped after %lld batches (%lld samples)%s\n", (long long)batches, (long long)samples,
                  a.save_state.empty() ? "" : ("; state saved to " + a.save_state).c_str());
      return 0;
    }
  }
  const double wall = WallSeconds() - t0;
  if (show) std::fprintf(stderr, "\n");
  const IteratorStats st = (*client)->stats();
  for (const SkippedSample& s : (*client)->TakeSkipped()) std::fprintf(stderr, "skipped\t%s\t%s\n", s.path.c_str(), s.reason.c_str());
  if (samples == 0 && st.skipped == 0) {
    std::fprintf(stderr, "error: no data received\n");
    return 1;
  }
  std::printf("consume img/s=%.1f wait_frac=%.3f samples=%lld\n", samples / wall, st.wait_seconds / wall,
              static_cast<long long>(samples));
  return 0;
}

}  // namespace

void AddConsumeOptions(CLI::App* consume, ConsumeArgs* c) {
  auto* workers_opt = consume->add_option("--workers", c->workers, "HOST:PORT[,HOST:PORT...] (point to point)");
  auto* dispatcher_opt =
      consume->add_option("--dispatcher", c->dispatcher, "HOST:PORT of ferry-dispatcher (with --job)");
  workers_opt->excludes(dispatcher_opt);
  consume->add_option("--job", c->job, "dispatcher job name to get or join")->needs(dispatcher_opt);
  consume->add_option("--consumer-id", c->consumer_id, "this consumer's name in the job (default: random)");
  consume->add_option("--batches-per-split", c->batches_per_split, "dispatcher: batches per split")
      ->check(CLI::PositiveNumber);
  consume->add_flag("--deterministic", c->deterministic, "dispatcher: yield in split order");
  consume->add_flag("--parallel-epochs", c->parallel_epochs, "dispatcher: every worker yields every epoch (no sharding)");
  consume->add_option("--num-samples", c->num_samples, "size of a synthetic: dataset");
  consume->add_option("--step-ms", c->step_ms, "simulate a training step of this many ms after each batch");
  consume->add_option("--stop-after", c->stop_after, "yield this many batches, save --save-state, exit 0");
  consume->add_option("--save-state", c->save_state, "write the iterator state here (at --stop-after or --save-after)");
  consume->add_option("--save-after", c->save_after, "save the state after this many batches and go on (a checkpoint)");
  consume->add_option("--resume", c->resume, "continue from a state saved by --save-state")->needs(dispatcher_opt);
  consume->add_option("--data", c->data, "dataset path as the workers see it");
  consume->add_option("--pipeline", c->pipeline, "imagenet-train, imagenet-eval, JSON, or a .json file");
  consume->add_option("--epochs", c->epochs, "epochs to read (<= 0: forever)");
  consume->add_option("--batch-size", c->batch_size, "samples per batch")->check(CLI::PositiveNumber);
  consume->add_option("--last-batch", c->last_batch, "keep (default), drop or pad");
  consume->add_option("--bad-samples", c->bad_samples,
                      "skip (default): a bad file leaves its batch a row short; refill: the split's next good "
                      "sample takes its row")
      ->check(CLI::IsMember({"skip", "refill"}));
  consume->add_option("--dump-indices", c->dump_indices, "append every delivered sample index to FILE");
  consume->add_flag("--dump-epochs", c->dump_epochs, "--dump-indices lines are 'epoch index'");
  consume->add_option("--dump-digests", c->dump_digests, "append 'epoch split batch hash-of-pixels' per batch to FILE");
  consume->add_option("--token-file", c->token_file, "shared token (else $FERRY_TOKEN)");
  consume->add_option("--tls-ca", c->tls_ca, "TLS: the CA that signed the servers' certificates (PEM)");
  consume->add_option("--tls-cert", c->tls_cert, "TLS: this client's certificate, for servers that require one");
  consume->add_option("--tls-key", c->tls_key, "TLS: the key of --tls-cert");
  consume->add_option("--seed", c->seed, "seed of the epoch order and the augmentation");
  consume->add_option("--credits", c->credits, "prefetch depth per worker")->check(CLI::PositiveNumber);
  consume->add_flag("--progress", c->progress, "show progress on stderr even when it is not a terminal");
}

int RunConsumeCommand(const CLI::App& app, const ConsumeArgs& c) {
  const std::string name = app.get_parent() ? app.get_parent()->get_name() + " " + app.get_name() : app.get_name();
  if (c.workers.empty() && c.dispatcher.empty()) {
    std::fprintf(stderr, "%s: give --workers or --dispatcher\n\n%s", name.c_str(), app.help().c_str());
    return 2;
  }
  if ((c.job.empty() && c.resume.empty()) && !c.dispatcher.empty()) {
    std::fprintf(stderr, "%s: --dispatcher needs --job (or --resume)\n\n%s", name.c_str(), app.help().c_str());
    return 2;
  }
  if (c.data.empty()) {
    std::fprintf(stderr, "%s: --data is required\n\n%s", name.c_str(), app.help().c_str());
    return 2;
  }
  return RunConsume(c);
}

}  // namespace ferry::tools
