// Google Benchmark microbenchmarks of the per-sample work: decode (full, ROI,
// DCT-scaled), each op, and the whole sample as the pipeline runs it.
// Inputs: the first JPEGs of $FERRY_SAMPLE_DATA (the sample ImageFolder) when set,
// synthetic 500x375 JPEGs otherwise.
#include <benchmark/benchmark.h>
#include <turbojpeg.h>

#include <cstdlib>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>
#include <string>
#include <vector>

#include "core/philox.h"
#include "data/dataset.h"
#include "ferry/loader.h"
#include "image/jpeg_decoder.h"
#include "ops/geometry.h"
#include "ops/kernels/pixels.h"
#include "ops/pipeline.h"

namespace ferry {
namespace {

const std::vector<std::string>& Corpus() {
  static const std::vector<std::string> corpus = [] {
    std::vector<std::string> out;
    if (const char* dir = std::getenv("FERRY_SAMPLE_DATA")) {
      auto ds = OpenDataset(dir);
      if (ds.ok()) {
        for (int64_t i = 0; i < std::min<int64_t>(64, (*ds)->size()); ++i) {
          std::string b;
          if ((*ds)->ReadSample(i * ((*ds)->size() / 64), &b).ok()) out.push_back(b);
        }
      }
    }
    if (out.empty()) {
      for (int i = 0; i < 16; ++i) {
        cv::Mat m(375, 500, CV_8UC3);
        cv::randu(m, 0, 255);
        cv::GaussianBlur(m, m, {9, 9}, 3);
        std::vector<uint8_t> enc;
        cv::imencode(".jpg", m, enc, {cv::IMWRITE_JPEG_QUALITY, 85});
        out.emplace_back(enc.begin(), enc.end());
      }
    }
    return out;
  }();
  return corpus;
}

void BM_TurboJpegFullDecode(benchmark::State& state) {
  tjhandle h = tjInitDecompress();
  std::vector<unsigned char> px;
  size_t i = 0;
  for (auto _ : state) {
    const std::string& b = Corpus()[i++ % Corpus().size()];
    int w, hh, ss, cs;
    tjDecompressHeader3(h, (const unsigned char*)b.data(), b.size(), &w, &hh, &ss, &cs);
    px.resize(size_t(w) * hh * 3);
    tjDecompress2(h, (const unsigned char*)b.data(), b.size(), px.data(), w, 0, hh, TJPF_RGB, 0);
    benchmark::DoNotOptimize(px.data());
  }
  tjDestroy(h);
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_TurboJpegFullDecode);

// mode 0: full decode at scale 1; 1: ROI (an RRC window) at scale 1;
// 2: ROI at the DCT scale the pipeline picks for a 224 output.
void BM_JpegDecoder(benchmark::State& state) {
  JpegDecoder dec;
  const int mode = int(state.range(0));
  int64_t i = 0;
  for (auto _ : state) {
    const std::string& b = Corpus()[size_t(i) % Corpus().size()];
    auto info = dec.ReadHeader(b, PipelineSpec().max_pixels);
    if (!info.ok()) state.SkipWithError(info.status().ToString().c_str());
    SampleRng rng(0, 0, uint64_t(i++));
    cv::Rect box = mode == 0 ? cv::Rect(0, 0, info->width, info->height)
                             : RandomResizedCropBox(info->width, info->height, {0.08, 1.0}, {0.75, 4.0 / 3}, rng);
    const int min = mode == 2 ? 224 : 100000;
    auto m = dec.DecodeRegion(box, min, min, false, nullptr);
    benchmark::DoNotOptimize(m);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_JpegDecoder)->Arg(0)->Arg(1)->Arg(2);

void BM_ResizeToUint8HWC(benchmark::State& state) {
  cv::Mat src(int(state.range(0)), int(state.range(0)) * 4 / 3, CV_8UC3);
  cv::randu(src, 0, 255);
  std::vector<uint8_t> out(3 * 224 * 224);
  for (auto _ : state) {
    kernels::ResizeToUint8HWC(src, 224, 224, false, out.data());
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_ResizeToUint8HWC)->Arg(240)->Arg(440);

// cv::resize, the general path (area averaging beyond 2x): for comparison.
void BM_ResizeOpenCV(benchmark::State& state) {
  cv::Mat src(int(state.range(0)), int(state.range(0)), CV_8UC3), dst(224, 224, CV_8UC3);
  cv::randu(src, 0, 255);
  for (auto _ : state) {
    kernels::ResizeInto(src, dst);
    benchmark::DoNotOptimize(dst.data);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_ResizeOpenCV)->Arg(240)->Arg(440)->Arg(1000);

void BM_HFlip(benchmark::State& state) {
  cv::Mat img(224, 224, CV_8UC3);
  cv::randu(img, 0, 255);
  for (auto _ : state) {
    kernels::HFlipInPlace(img);
    benchmark::DoNotOptimize(img.data);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_HFlip);

void BM_ColorJitter(benchmark::State& state) {
  cv::Mat img(224, 224, CV_8UC3);
  cv::randu(img, 0, 255);
  auto op = MakeOp("color_jitter", R"({"brightness":0.4,"contrast":0.4,"saturation":0.4})");
  if (!op.ok()) state.SkipWithError(op.status().ToString().c_str());
  int64_t i = 0;
  for (auto _ : state) {
    SampleRng rng(0, 0, uint64_t(i++));
    (void)(*op)->Apply(img, rng);
    benchmark::DoNotOptimize(img.data);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_ColorJitter);

void BM_NormalizeToFloatCHW(benchmark::State& state) {
  cv::Mat img(224, 224, CV_8UC3);
  cv::randu(img, 0, 255);
  // As in a batch: each sample lands in a different place of a large buffer.
  const int rows = 64;
  std::vector<float, std::allocator<float>> out(size_t(rows) * 3 * 224 * 224 + 16);
  float* base = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(out.data()) + 63) & ~uintptr_t(63));
  const float scale[3] = {1 / (255 * 0.229f), 1 / (255 * 0.224f), 1 / (255 * 0.225f)};
  const float bias[3] = {-0.485f / 0.229f, -0.456f / 0.224f, -0.406f / 0.225f};
  int64_t i = 0;
  for (auto _ : state) {
    kernels::WriteFloatCHW(img.data, img.step, 224, 224, 3, (i & 1) != 0, scale, bias,
                           base + size_t(i % rows) * 3 * 224 * 224);
    ++i;
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_NormalizeToFloatCHW);

// The whole per-sample unit of the pipeline (decode + augment + write into a batch row).
void BM_ProcessSample(benchmark::State& state) {
  const PipelineSpec spec = state.range(0) == 0 ? PipelineSpec::ImagenetTrain() : PipelineSpec::ImagenetEval();
  const std::shared_ptr<const Pipeline> proc_ptr = *Pipeline::Compile(spec);
  const Pipeline& proc = *proc_ptr;
  const size_t sample_bytes = proc.sample_bytes();
  const int rows = 64;
  std::vector<uint8_t> batch(sample_bytes * rows + 64);
  uint8_t* base = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(batch.data()) + 63) & ~uintptr_t(63));
  int64_t i = 0;
  for (auto _ : state) {
    const std::string& b = Corpus()[size_t(i) % Corpus().size()];
    Status st = proc.Process(b, 0, 0, i, base + size_t(i % rows) * sample_bytes);
    if (!st.ok()) state.SkipWithError(st.ToString().c_str());
    ++i;
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_ProcessSample)->Arg(0)->Arg(1);

// Batch assembly: the in-process loader end to end (plan, fill, emit, hand-over), per
// batch of 32 at one thread, so the per-batch overhead shows against 32x the
// per-sample cost of BM_ProcessSample/0.
void BM_LoaderBatch(benchmark::State& state) {
  const char* dir = std::getenv("FERRY_SAMPLE_DATA");
  if (dir == nullptr) {
    state.SkipWithError("set FERRY_SAMPLE_DATA");
    return;
  }
  LoaderOptions o;
  o.job.dataset = dir;
  o.job.batch_size = 32;
  o.threads = 1;
  o.job.epochs = 0;
  auto loader = Loader::Open(o);
  if (!loader.ok()) {
    state.SkipWithError(loader.status().ToString().c_str());
    return;
  }
  for (auto _ : state) {
    auto b = (*loader)->Next();
    benchmark::DoNotOptimize(b);
  }
  state.SetItemsProcessed(state.iterations() * 32);
}
BENCHMARK(BM_LoaderBatch)->UseRealTime();

}  // namespace
}  // namespace ferry

BENCHMARK_MAIN();
