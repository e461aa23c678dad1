// An example consumer to copy: reads one epoch from N ferry-workers and prints the
// throughput and how long each Next() waited.
//
//   ferry-consume-example --workers HOST:PORT[,HOST:PORT...] --data DIR
//       [--pipeline imagenet-train] [--batch-size 64] [--token-file F]
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "ferry/client.h"

namespace {

std::vector<std::string> Split(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    const size_t comma = s.find(',', start);
    const std::string part = s.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (!part.empty()) out.push_back(part);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

int Usage(const char* argv0) {
  std::fprintf(stderr,
               "usage: %s --workers HOST:PORT[,HOST:PORT...] --data DIR [--pipeline NAME|JSON]\n"
               "          [--batch-size B] [--token-file F]\n",
               argv0);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  ferry::ClientOptions o;
  o.job.batch_size = 64;
  std::string pipeline = "imagenet-train";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) return Usage(argv[0]);
    const std::string v = argv[++i];
    if (a == "--workers") o.workers = Split(v);
    else if (a == "--data") o.job.dataset = v;
    else if (a == "--pipeline") pipeline = v;
    else if (a == "--batch-size") o.job.batch_size = std::atoi(v.c_str());
    else if (a == "--token-file") o.token_file = v;
    else return Usage(argv[0]);
  }
  if (o.workers.empty() || o.job.dataset.empty()) return Usage(argv[0]);
  auto spec = ferry::PipelineSpec::Parse(pipeline);
  if (!spec.ok()) {
    std::fprintf(stderr, "%s\n", spec.status().ToString().c_str());
    return 2;
  }
  o.job.pipeline = *spec;

  auto client = ferry::Client::Connect(o);
  if (!client.ok()) {
    std::fprintf(stderr, "%s\n", client.status().ToString().c_str());
    return 1;
  }
  const auto t0 = std::chrono::steady_clock::now();
  int64_t batches = 0, samples = 0;
  for (;;) {
    ferry::Result<ferry::Batch> b = (*client)->Next();
    if (!b.ok()) {
      if (b.status().IsOutOfRange()) break;
      std::fprintf(stderr, "error: %s\n", b.status().ToString().c_str());
      return 1;
    }
    // A trainer would hand b->images (a view into the received buffer) to the GPU here.
    ++batches;
    samples += b->valid_rows();
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const ferry::IteratorStats st = (*client)->stats();
  for (const auto& s : (*client)->TakeSkipped()) std::fprintf(stderr, "skipped %s: %s\n", s.path.c_str(), s.reason.c_str());
  std::printf("%lld batches, %lld images in %.2f s: %.1f img/s, waited %.2f ms per batch (%.0f%% of the time)\n",
              (long long)batches, (long long)samples, secs, samples / secs,
              batches ? 1000.0 * st.wait_seconds / batches : 0.0, 100.0 * st.wait_seconds / secs);
  return 0;
}
