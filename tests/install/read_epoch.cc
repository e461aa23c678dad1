// Reads one epoch from the ferry-workers named on the command line with an installed
// Ferry's client, and checks that every sample index in [0, N) arrived exactly once.
//   read_epoch --workers HOST:PORT[,HOST:PORT] --data DIR --samples N
// Prints "read_epoch: N samples, each exactly once" and exits 0, or says what is
// wrong and exits 1.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "ferry/client.h"

int main(int argc, char** argv) {
  ferry::ClientOptions o;
  long long samples = -1;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--workers") {
      for (size_t at = 0; at <= value.size();) {
        const size_t comma = value.find(',', at);
        o.workers.push_back(value.substr(at, comma == std::string::npos ? std::string::npos : comma - at));
        if (comma == std::string::npos) break;
        at = comma + 1;
      }
    } else if (flag == "--data") {
      o.job.dataset = value;
    } else if (flag == "--samples") {
      samples = std::atoll(value.c_str());
    }
  }
  if (o.workers.empty() || o.job.dataset.empty() || samples <= 0) {
    std::fprintf(stderr, "usage: %s --workers HOST:PORT[,...] --data DIR --samples N\n", argv[0]);
    return 2;
  }
  // Resize(64) + CenterCrop(64), uint8 NHWC: a pipeline is a list of ops (JSON params).
  o.job.pipeline = ferry::PipelineSpec{};
  o.job.pipeline.Add("resize", R"({"size": 64})").Add("center_crop", R"({"size": 64})");
  o.job.pipeline.output = ferry::PipelineSpec::Output::kUint8NHWC;
  o.job.batch_size = 64;
  o.job.epochs = 1;
  auto client = ferry::Client::Connect(o);
  if (!client.ok()) {
    std::fprintf(stderr, "read_epoch: %s\n", client.status().ToString().c_str());
    return 1;
  }
  std::vector<int> seen(size_t(samples), 0);
  long long total = 0;
  for (;;) {
    ferry::Result<ferry::Batch> b = (*client)->Next();
    if (!b.ok()) {
      if (b.status().IsOutOfRange()) break;
      std::fprintf(stderr, "read_epoch: %s\n", b.status().ToString().c_str());
      return 1;
    }
    const int64_t* index = b->indices.as<int64_t>();
    for (int64_t r = 0; r < b->valid_rows(); ++r) {
      if (index[r] < 0 || index[r] >= samples) {
        std::fprintf(stderr, "read_epoch: index %lld out of range\n", (long long)index[r]);
        return 1;
      }
      ++seen[size_t(index[r])];
      ++total;
    }
  }
  for (long long i = 0; i < samples; ++i) {
    if (seen[size_t(i)] != 1) {
      std::fprintf(stderr, "read_epoch: sample %lld arrived %d times\n", i, seen[size_t(i)]);
      return 1;
    }
  }
  std::printf("read_epoch: %lld samples, each exactly once\n", total);
  return 0;
}
