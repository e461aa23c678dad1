// ferry-bench: throughput tools. Each subcommand prints one machine-readable summary
// as its last stdout line (see README.md and BENCHMARKS.md).
//
//   ferry-bench pipeline --data DIR [--pipeline P] [--threads N] [--seconds S] [--batch-size B]
//       last line: pipeline img/s=<x> img_per_cpu_s=<y> threads=<N>
//   ferry-bench pipeline --data DIR --epochs E [--errors FILE]
//       last line: samples=<delivered> skipped=<n>
//   ferry-bench decode-baseline --data DIR [--seconds S]
//       a bare full-size tjDecompress2 loop over the same files (one thread)
//       last line: decode img/s=<x> img_per_cpu_s=<y>
//   ferry-bench list --data DIR      prints `index<TAB>label<TAB>path` per sample
//   ferry-bench transport [--seconds S] [--batch-bytes N] [--workers K] [--pin] [--tls DIR]
//       K raw loopback TCP streams into one thread against K ferry-workers serving
//       ready-made batches to one client (fan-in)
//       last line: transport workers=<K> pinned=<0|1> tls=<0|1> ferry_GB/s=<x> raw_GB/s=<y> ratio=<x/y> client_cpu_per_GB=<s> ...
//   ferry-bench consume (--workers HOST:PORT[,...] | --dispatcher HOST:PORT --job NAME)
//       --data DIR [--pipeline P] [--epochs E] [--batch-size B] [--last-batch keep|drop|pad]
//       [--dump-indices FILE] [--token-file F] [--stop-after K --save-state F] [--resume F]
//       last line: consume img/s=<x> wait_frac=<y> samples=<n>
//   ferry-bench sharding --data DIR [--workers 2] [--epochs 2] [--rounds 3]
//       last line: sharding workers=<N> static_img/s=<x> dynamic_img/s=<y> ratio=<y/x>
//   ferry-bench advise [--rates 75 125 175] [--synthetic-cost-us 20000] [--max-workers 6]
//       per rate, a sweep of 1.. workers: input wait and the dispatcher's advice; last
//       line per rate: advise need_batches/s=<r> sweep_workers=<k> advice=<a,...> within_one=yes|NO
//   ferry-bench scale [--workers 32] [--synthetic-cost-us 20000] [--seconds 5]
//       last line: scale workers=<N> ... single_batches/s=<x> aggregate_batches/s=<y> efficiency=<y/(N x)>
//   ferry-bench dispatcher-load [--workers 1000[,4000,...]] [--jobs 1] [--seconds S] [--interval-ms 100] [--load-threads 1]
//       a line per count: dispatcher workers=<N> jobs=<J> ... handled=<%> p50_ms=<a> p99_ms=<b> cpu_us_per_heartbeat=<c>
//       kib_per_worker=<w> kib_per_job=<j> journal_kib=<k> journal_kib_max=<m>
#include <turbojpeg.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>
#include <thread>
#include <iostream>
#include <string>
#include <vector>

#include "cpu_time.h"
#include "cluster_bench.h"
#include "consume.h"
#include "remote_bench.h"
#include "server/dispatcher_load.h"
#include "data/dataset.h"
#include "ferry/loader.h"

namespace ferry::bench {
namespace {

struct PipelineArgs {
  std::string data;
  std::string pipeline = "imagenet-train";
  int threads = 0;
  double seconds = 10;
  double warmup = 2;
  int batch_size = 64;
  int64_t epochs = 0;
  std::string errors;
  std::string last_batch = "keep";
  std::string bad_samples = "skip";
  uint64_t seed = 0;
  int prefetch = 2;
  bool progress = false;
  std::vector<std::string> targets;  // JobSpec::targets
  std::string tokenizer;             // the "tokens" target's SentencePiece model
  int token_length = 64;
};

void DrawProgress(double done_frac, double rate, int64_t samples) {
  const int width = 30;
  const int filled = int(done_frac * width + 0.5);
  std::fprintf(stderr, "\r[%.*s%*s] %3d%%  %8.1f img/s  %lld images", filled,
               "##############################", width - filled, "", int(done_frac * 100 + 0.5), rate,
               static_cast<long long>(samples));
  std::fflush(stderr);
}

int RunPipeline(const PipelineArgs& a) {
  LoaderOptions o;
  o.job.dataset = a.data;
  auto spec = PipelineSpec::Parse(a.pipeline);
  if (!spec.ok()) {
    std::cerr << "error: " << spec.status().ToString() << "\n";
    return 2;
  }
  o.job.pipeline = *spec;
  o.job.batch_size = a.batch_size;
  o.threads = a.threads;
  o.job.seed = a.seed;
  o.prefetch = a.prefetch;
  auto last_batch = ParseLastBatch(a.last_batch);
  if (!last_batch.ok()) {
    std::cerr << "error: --last-batch: " << last_batch.status().message() << "\n";
    return 2;
  }
  o.job.last_batch = *last_batch;
  o.job.bad_samples = *ParseBadSamples(a.bad_samples);  // CLI checked it
  o.job.targets = a.targets;
  if (!a.tokenizer.empty()) o.job.tokenizer = {a.tokenizer, a.token_length};
  const bool timed = a.epochs <= 0;
  o.job.epochs = timed ? 0 : a.epochs;  // 0 = forever, until the timed window ends
  auto loader_or = Loader::Open(o);
  if (!loader_or.ok()) {
    std::cerr << "error: " << loader_or.status().ToString() << "\n";
    return 1;
  }
  Loader& loader = **loader_or;
  const int threads = a.threads > 0 ? a.threads : int(std::thread::hardware_concurrency());
  std::ofstream errors;
  if (!a.errors.empty()) {
    errors.open(a.errors);
    if (!errors) {
      std::cerr << "error: cannot write " << a.errors << "\n";
      return 1;
    }
  }
  const bool show = a.progress || isatty(STDERR_FILENO);
  const int64_t total = timed ? 0 : loader.batches_per_epoch() * a.epochs;
  double t_start = WallSeconds(), cpu_start = ProcessCpuSeconds();
  bool measuring = !timed || a.warmup <= 0;
  int64_t samples = 0, batches = 0, skipped = 0, boxes = 0;
  double last_draw = 0;
  for (;;) {
    Result<Batch> b = loader.Next();
    if (!b.ok()) {
      if (b.status().IsOutOfRange()) break;
      std::cerr << "error: " << b.status().ToString() << "\n";
      return 1;
    }
    for (const SkippedSample& s : loader.TakeSkipped()) {
      ++skipped;
      if (errors.is_open()) errors << s.path << '\t' << s.reason << '\n';
    }
    const double now = WallSeconds();
    if (!measuring) {
      if (now - t_start >= a.warmup) {
        measuring = true;
        t_start = now;
        cpu_start = ProcessCpuSeconds();
      }
      continue;
    }
    samples += b->valid_rows();
    ++batches;
    if (const BatchField* f = b->field("boxes"); f != nullptr) boxes += f->values.shape[0];
    const double elapsed = now - t_start;
    if (show && now - last_draw > 0.2) {
      last_draw = now;
      DrawProgress(timed ? std::min(1.0, elapsed / a.seconds) : double(batches) / std::max<int64_t>(total, 1),
                   samples / std::max(elapsed, 1e-9), samples);
    }
    if (timed && elapsed >= a.seconds) break;
  }
  for (const SkippedSample& s : loader.TakeSkipped()) {
    ++skipped;
    if (errors.is_open()) errors << s.path << '\t' << s.reason << '\n';
  }
  const double wall = WallSeconds() - t_start, cpu = ProcessCpuSeconds() - cpu_start;
  if (show) {
    DrawProgress(1.0, samples / std::max(wall, 1e-9), samples);
    std::fprintf(stderr, "\n");
  }
  if (timed) {
    std::printf("pipeline img/s=%.1f img_per_cpu_s=%.1f threads=%d\n", samples / wall, samples / cpu, threads);
  } else {
    const IteratorStats st = loader.stats();
    std::printf("epochs=%lld batches=%lld img/s=%.1f img_per_cpu_s=%.1f wait_s=%.2f\n",
                static_cast<long long>(a.epochs), static_cast<long long>(batches), samples / wall,
                samples / cpu, st.wait_seconds);
    std::printf("samples=%lld skipped=%lld\n", static_cast<long long>(samples), static_cast<long long>(skipped));
    if (!a.targets.empty()) std::printf("boxes=%lld\n", static_cast<long long>(boxes));
  }
  return 0;
}

int RunDecodeBaseline(const std::string& data, double seconds) {
  auto ds_or = OpenDataset(data);
  if (!ds_or.ok()) {
    std::cerr << "error: " << ds_or.status().ToString() << "\n";
    return 1;
  }
  const Dataset& ds = **ds_or;
  if (ds.size() == 0) {
    std::cerr << "error: empty dataset\n";
    return 1;
  }
  std::string bytes;
  std::vector<unsigned char> pixels;
  tjhandle handle = tjInitDecompress();
  int64_t images = 0, failed = 0;
  const double t0 = WallSeconds(), c0 = ProcessCpuSeconds();
  double elapsed = 0;
  for (int64_t i = 0; elapsed < seconds; i = (i + 1) % ds.size()) {
    if (!ds.ReadSample(i, &bytes).ok()) {
      ++failed;
      continue;
    }
    int w = 0, h = 0, subsamp = 0, cs = 0;
    const auto* src = reinterpret_cast<const unsigned char*>(bytes.data());
    if (tjDecompressHeader3(handle, src, static_cast<unsigned long>(bytes.size()), &w, &h, &subsamp, &cs) != 0 ||
        w <= 0 || h <= 0) {
      // After one failed header the handle fails on every later file (2.1.5): recreate.
      tjDestroy(handle);
      handle = tjInitDecompress();
      ++failed;
      continue;
    }
    pixels.resize(size_t(w) * h * 3);
    if (tjDecompress2(handle, src, static_cast<unsigned long>(bytes.size()), pixels.data(), w, 0, h, TJPF_RGB,
                      0) != 0) {
      ++failed;
    } else {
      ++images;
    }
    if ((images & 15) == 0) elapsed = WallSeconds() - t0;
  }
  tjDestroy(handle);
  const double wall = WallSeconds() - t0, cpu = ProcessCpuSeconds() - c0;
  if (failed) std::fprintf(stderr, "decode-baseline: %lld files failed\n", static_cast<long long>(failed));
  std::printf("decode img/s=%.1f img_per_cpu_s=%.1f\n", images / wall, images / cpu);
  return 0;
}

int RunList(const std::string& data) {
  auto ds_or = OpenDataset(data);
  if (!ds_or.ok()) {
    std::cerr << "error: " << ds_or.status().ToString() << "\n";
    return 1;
  }
  const Dataset& ds = **ds_or;
  for (int64_t i = 0; i < ds.size(); ++i) std::printf("%lld\t%d\t%s\n", static_cast<long long>(i), ds.Label(i), ds.Path(i).c_str());
  for (const ListingIssue& issue : ds.listing_issues()) std::fprintf(stderr, "skipped\t%s\t%s\n", issue.path.c_str(), issue.reason.c_str());
  return 0;
}

}  // namespace
}  // namespace ferry::bench

int main(int argc, char** argv) {
  using namespace ferry::bench;
  CLI::App app{"ferry-bench: Ferry's throughput tools"};
  app.require_subcommand(1);

  PipelineArgs p;
  auto* pipeline = app.add_subcommand("pipeline", "run the in-process loader and report throughput");
  pipeline->add_option("--data", p.data, "dataset: ImageFolder root, .tsv list, .tar shards, or a JSON spec ({\"format\": \"coco\", ...})")->required();
  pipeline->add_option("--pipeline", p.pipeline, "imagenet-train, imagenet-eval, JSON, or a .json file");
  pipeline->add_option("--threads", p.threads, "decode threads (0 = all cores)")->check(CLI::NonNegativeNumber);
  pipeline->add_option("--seconds", p.seconds, "length of the timed window")->check(CLI::PositiveNumber);
  pipeline->add_option("--warmup", p.warmup, "seconds of warm-up before the timed window");
  pipeline->add_option("--batch-size", p.batch_size, "samples per batch")->check(CLI::PositiveNumber);
  pipeline->add_option("--epochs", p.epochs, "run exactly this many epochs instead of a timed window");
  pipeline->add_option("--errors", p.errors, "write `path<TAB>reason` per skipped file here");
  pipeline->add_option("--last-batch", p.last_batch, "drop, pad or keep (default keep)");
  pipeline->add_option("--bad-samples", p.bad_samples, "skip (default) or refill")
      ->check(CLI::IsMember({"skip", "refill"}));
  pipeline->add_option("--seed", p.seed, "seed of the epoch order and the augmentation");
  pipeline->add_option("--prefetch", p.prefetch, "batches in flight")->check(CLI::PositiveNumber);
  pipeline->add_flag("--progress", p.progress, "draw a progress bar on stderr even when it is not a terminal");
  pipeline->add_option("--targets", p.targets,
                       "fields to carry besides the images (comma-separated: boxes, labels, masks, semantic, "
                       "image_id, text, meta, tokens, ...); --data then names a source with annotations, e.g. "
                       "'{\"format\": \"coco\", \"annotations\": ..., \"images\": ...}'")
      ->delimiter(',');
  pipeline->add_option("--tokenizer", p.tokenizer, "a SentencePiece .model file (the \"tokens\" target)");
  pipeline->add_option("--token-length", p.token_length, "ids per caption, cut or padded (with --tokenizer)")
      ->check(CLI::Range(1, ferry::TokenizerSpec::kMaxLength));

  std::string decode_data;
  double decode_seconds = 10;
  auto* decode = app.add_subcommand("decode-baseline", "bare full-size tjDecompress2 loop, one thread");
  decode->add_option("--data", decode_data, "dataset")->required();
  decode->add_option("--seconds", decode_seconds, "length of the timed window")->check(CLI::PositiveNumber);

  std::string list_data;
  auto* list = app.add_subcommand("list", "print the dataset listing: index, label, path");
  list->add_option("--data", list_data, "dataset")->required();

  TransportArgs t;
  auto* transport = app.add_subcommand("transport", "loopback throughput: raw TCP against a worker's batches");
  transport->add_option("--seconds", t.seconds, "timed window of each measurement")->check(CLI::PositiveNumber);
  transport->add_option("--batch-bytes", t.batch_bytes, "bytes per batch")->check(CLI::Range(uint64_t{4096}, uint64_t{1} << 31));
  transport->add_option("--credits", t.credits, "client credits (prefetch depth)")->check(CLI::PositiveNumber);
  transport->add_option("--workers", t.workers, "workers (and raw TCP streams) feeding the one client")
      ->check(CLI::Range(1, 64));
  transport->add_flag("--pin", t.pin, "receiver on one CPU, every sender on another (as between hosts)");
  transport->add_option("--worker-bin", t.worker_bin, "the ferry-worker executable");
  transport->add_option("--tls", t.tls_dir,
                        "mutual TLS on the streams, with the certificates in DIR (tests/tls/make_certs.sh DIR)")
      ->check(CLI::ExistingDirectory);

  ferry::tools::ConsumeArgs c;
  auto* consume = app.add_subcommand("consume", "read from ferry-workers and report throughput (as ferry-consume)");
  ferry::tools::AddConsumeOptions(consume, &c);

  ShardingArgs sh;
  auto* sharding = app.add_subcommand("sharding", "dynamic (dispatcher) vs static sharding over the same local workers");
  sharding->add_option("--data", sh.data, "dataset")->required();
  sharding->add_option("--pipeline", sh.pipeline, "imagenet-train, imagenet-eval, JSON, or a .json file");
  sharding->add_option("--workers", sh.workers, "local workers")->check(CLI::Range(1, 64));
  sharding->add_option("--threads-per-worker", sh.threads_per_worker, "decode threads per worker")
      ->check(CLI::PositiveNumber);
  sharding->add_option("--batch-size", sh.batch_size, "samples per batch")->check(CLI::PositiveNumber);
  sharding->add_option("--batches-per-split", sh.batches_per_split, "dynamic: batches per split")
      ->check(CLI::PositiveNumber);
  sharding->add_option("--epochs", sh.epochs, "epochs per run")->check(CLI::PositiveNumber);
  sharding->add_option("--rounds", sh.rounds, "alternating static/dynamic rounds")->check(CLI::PositiveNumber);

  ScaleArgs sc;
  auto* scale = app.add_subcommand("scale", "N synthetic-cost workers vs one: aggregate / (N x single)");
  scale->add_option("--workers", sc.workers, "workers in the scaled run")->check(CLI::Range(1, 256));
  scale->add_option("--synthetic-cost-us", sc.synthetic_cost_us, "worker time per batch")->check(CLI::PositiveNumber);
  scale->add_option("--batch-size", sc.batch_size, "samples per batch")->check(CLI::PositiveNumber);
  scale->add_option("--seconds", sc.seconds, "timed window per run")->check(CLI::PositiveNumber);
  scale->add_option("--warmup", sc.warmup_s, "seconds before timing")->check(CLI::NonNegativeNumber);
  AdviseArgs ad;
  auto* advise = app.add_subcommand(
      "advise", "the dispatcher's worker-count advice against a sweep of synthetic-cost workers (exit 3: off by more than one)");
  advise->add_option("--rates", ad.rates, "batches/s the trainer needs, one sweep each")->check(CLI::PositiveNumber);
  advise->add_option("--synthetic-cost-us", ad.synthetic_cost_us, "worker time per batch")->check(CLI::PositiveNumber);
  advise->add_option("--batch-size", ad.batch_size, "samples per batch")->check(CLI::PositiveNumber);
  advise->add_option("--max-workers", ad.max_workers, "the sweep's last point")->check(CLI::Range(1, 64));
  advise->add_option("--seconds", ad.seconds, "timed window per point")->check(CLI::PositiveNumber);
  advise->add_option("--warmup", ad.warmup_s, "seconds before timing")->check(CLI::NonNegativeNumber);

  DispatcherLoadArgs dl;
  auto* dload = app.add_subcommand("dispatcher-load", "N simulated workers heartbeating and leasing against ferry-dispatcher");
  AddDispatcherLoadOptions(dload, &dl);

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::cout << (app.get_subcommands().empty() ? app.help() : app.get_subcommands().front()->help());
    return 0;
  } catch (const CLI::ParseError& e) {
    std::cerr << "ferry-bench: " << e.what() << "\n\n" << app.help("", CLI::AppFormatMode::All);
    return 2;
  }
  if (transport->parsed()) return RunTransport(t, argv[0]);
  if (consume->parsed()) return ferry::tools::RunConsumeCommand(*consume, c);
  if (dload->parsed()) return RunDispatcherLoad(dl);
  if (sharding->parsed()) return RunSharding(sh);
  if (scale->parsed()) return RunScale(sc);
  if (advise->parsed()) return RunAdvise(ad);
  if (pipeline->parsed()) return RunPipeline(p);
  if (decode->parsed()) return RunDecodeBaseline(decode_data, decode_seconds);
  if (list->parsed()) return RunList(list_data);
  return 2;
}
