// ferry-ops-bench: Google Benchmark timings of single pipeline ops, one call each, on a
// real photo, for bench/op_bench.py to set beside torchvision's functional ops.
//
//   FERRY_SAMPLE_DATA=data/sample ferry-ops-bench [--image=PHOTO.jpg] [benchmark flags]
//
// Input: PHOTO (default: the first JPEG of $FERRY_SAMPLE_DATA, in sorted order), decoded
// once and resized (area averaging) to 224x224 RGB uint8; random_resized_crop gets a
// 400x300 resize of it, as a crop runs on a larger image. No photo, no run: a synthetic
// image would flatter the histogram ops (equalize, autocontrast), so none is made up.
//
// Benchmarks (names op_bench.py reads):
//   copy/<WxH>          cv::Mat::clone of the input: the per-iteration cost inside every
//                       image op's figure (ops may replace or rewrite their input, so each
//                       call gets a fresh copy); op_bench.py subtracts it.
//   op/<label>          MakeOp(name, params)->Apply(copy, rng), a fresh SampleRng per
//                       iteration (index = iteration), so random ops average over their
//                       draws as a pipeline's samples do.
//   normalize           kernels::WriteFloatCHW: the fused uint8 HWC -> float32 CHW write with
//                       ImageNet mean/std (ToTensor + Normalize), into one 3x224x224 buffer.
//   random_erasing      ApplyTensor(p=1) in place on that 3x224x224 float buffer (erasing
//                       writes a constant: repeating it on the same buffer costs the same).
//   mixup_cutmix/<mode> ApplyBatch on a 64x3x224x224 float batch in place, per batch
//                       (items = 64 samples). In place without a restore: MixUp keeps values
//                       in their convex hull and CutMix copies, so the cost does not drift.
// Times are process CPU time (MeasureProcessCPUTime) with OpenCV's threads off, as the
// loader runs ops (lib/pipeline/loader.cc): one core's work.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>
#include <string>
#include <vector>

#include "core/philox.h"
#include "ops/kernels/pixels.h"
#include "ops/op.h"

namespace ferry {
namespace {

constexpr int kSide = 224;
constexpr int kBatch = 64;
const float kMean[3] = {0.485f, 0.456f, 0.406f};
const float kStd[3] = {0.229f, 0.224f, 0.225f};

struct Inputs {
  cv::Mat small;  // 224x224 RGB
  cv::Mat large;  // 400x300 RGB, for random_resized_crop
};
Inputs g_in;

// The first *.jpg/*.jpeg under `dir`, walking directories and files in sorted order (so
// op_bench.py, which walks the same way, times torchvision on the same photo).
std::string FirstJpeg(const std::filesystem::path& dir) {
  std::vector<std::filesystem::path> entries;
  for (const auto& e : std::filesystem::directory_iterator(dir)) entries.push_back(e.path());
  std::sort(entries.begin(), entries.end());
  for (const auto& p : entries) {
    if (std::filesystem::is_directory(p)) {
      if (std::string s = FirstJpeg(p); !s.empty()) return s;
    } else {
      std::string ext = p.extension().string();
      std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
      if (ext == ".jpg" || ext == ".jpeg") return p.string();
    }
  }
  return "";
}

bool LoadInputs(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  cv::Mat bgr = cv::imdecode(bytes, cv::IMREAD_COLOR);
  if (bgr.empty()) return false;
  cv::Mat rgb;
  cv::cvtColor(bgr, rgb, cv::COLOR_BGR2RGB);
  cv::resize(rgb, g_in.small, {kSide, kSide}, 0, 0, cv::INTER_AREA);
  cv::resize(rgb, g_in.large, {400, 300}, 0, 0, cv::INTER_AREA);
  return true;
}

std::unique_ptr<Op> MustMakeOp(benchmark::State& state, const std::string& name, const std::string& params) {
  auto op = MakeOp(name, params);
  if (!op.ok()) {
    state.SkipWithError(op.status().ToString().c_str());
    return nullptr;
  }
  return std::move(*op);
}

void BM_Copy(benchmark::State& state, const cv::Mat* src) {
  for (auto _ : state) {
    cv::Mat img = src->clone();
    benchmark::DoNotOptimize(img.data);
  }
  state.SetItemsProcessed(state.iterations());
}

void BM_ImageOp(benchmark::State& state, std::string name, std::string params, const cv::Mat* src) {
  std::unique_ptr<Op> op = MustMakeOp(state, name, params);
  if (!op) return;
  int64_t i = 0;
  for (auto _ : state) {
    cv::Mat img = src->clone();
    SampleRng rng(0, 0, uint64_t(i++));
    const Status st = op->Apply(img, rng);
    if (!st.ok()) {
      state.SkipWithError(st.ToString().c_str());
      break;
    }
    benchmark::DoNotOptimize(img.data);
  }
  state.SetItemsProcessed(state.iterations());
}

void NormalizeInto(const cv::Mat& img, float* out) {
  float scale[3], bias[3];
  for (int c = 0; c < 3; ++c) {
    scale[c] = 1.f / (255.f * kStd[c]);
    bias[c] = -kMean[c] / kStd[c];
  }
  kernels::WriteFloatCHW(img.data, img.step, img.rows, img.cols, 3, false, scale, bias, out);
}

void BM_Normalize(benchmark::State& state) {
  std::vector<float> out(size_t(3) * kSide * kSide);
  for (auto _ : state) {
    NormalizeInto(g_in.small, out.data());
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations());
}

void BM_RandomErasing(benchmark::State& state) {
  std::unique_ptr<Op> op = MustMakeOp(state, "random_erasing", R"({"p": 1.0})");
  if (!op) return;
  std::vector<float> chw(size_t(3) * kSide * kSide);
  NormalizeInto(g_in.small, chw.data());
  const Shape shape{kSide, kSide, 3};
  int64_t i = 0;
  for (auto _ : state) {
    SampleRng rng(0, 0, uint64_t(i++));
    op->ApplyTensor(chw.data(), shape, rng);
    benchmark::DoNotOptimize(chw.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations());
}

void BM_MixupCutmix(benchmark::State& state, std::string params) {
  std::unique_ptr<Op> op = MustMakeOp(state, "mixup_cutmix", params);
  if (!op) return;
  const size_t row = size_t(3) * kSide * kSide;
  std::vector<float> images(row * kBatch);
  for (int r = 0; r < kBatch; ++r) NormalizeInto(g_in.small, images.data() + r * row);
  // Rows differ as a real batch's do (else MixUp of equal rows is the same work on
  // equal data; the cost would not change, but the output would be meaningless).
  for (int r = 0; r < kBatch; ++r) images[r * row] += float(r);
  std::vector<int64_t> labels(kBatch);
  for (int r = 0; r < kBatch; ++r) labels[r] = r % op->num_classes();
  std::vector<float> targets(size_t(kBatch) * op->num_classes());
  BatchView view;
  view.images = images.data();
  view.rows = view.valid = kBatch;
  view.shape = Shape{kSide, kSide, 3};
  view.labels = labels.data();
  view.targets = targets.data();
  view.num_classes = op->num_classes();
  int64_t i = 0;
  for (auto _ : state) {
    SampleRng rng(0, 0, uint64_t(i++), 4);
    op->ApplyBatch(view, rng);
    benchmark::DoNotOptimize(images.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * kBatch);
}

struct ImageOpCase {
  const char* label;
  const char* op;
  const char* params;
  bool large;  // on the 400x300 input
};

// The ops of the pipelines the recipes use, with the parameters op_bench.py gives
// torchvision (keep the two lists in step).
const ImageOpCase kImageOps[] = {
    {"random_resized_crop_bilinear", "random_resized_crop", R"({"size": 224, "interpolation": "bilinear"})", true},
    {"random_resized_crop_bicubic", "random_resized_crop", R"({"size": 224, "interpolation": "bicubic"})", true},
    {"hflip", "hflip", R"({"p": 1.0})", false},
    {"rand_augment", "rand_augment", R"({"num_ops": 2, "magnitude": 9})", false},
    {"trivial_augment_wide", "trivial_augment_wide", "{}", false},
    {"auto_augment", "auto_augment", R"({"policy": "imagenet"})", false},
    {"augmix", "augmix", "{}", false},
    {"color_jitter", "color_jitter", R"({"brightness": 0.4, "contrast": 0.4, "saturation": 0.4})", false},
    {"color_jitter_hue", "color_jitter", R"({"brightness": 0.4, "contrast": 0.4, "saturation": 0.4, "hue": 0.1})",
     false},
    {"gaussian_blur", "gaussian_blur", R"({"kernel_size": 5})", false},
    {"random_rotation", "random_rotation", R"({"degrees": 30, "interpolation": "bilinear"})", false},
    {"random_affine", "random_affine",
     R"({"degrees": 30, "translate": [0.1, 0.1], "scale": [0.75, 1.25], "shear": 10})", false},
    {"random_perspective", "random_perspective", R"({"p": 1.0})", false},
    {"random_equalize", "random_equalize", R"({"p": 1.0})", false},
    {"random_autocontrast", "random_autocontrast", R"({"p": 1.0})", false},
    {"random_posterize", "random_posterize", R"({"bits": 4, "p": 1.0})", false},
    {"random_solarize", "random_solarize", R"({"threshold": 128, "p": 1.0})", false},
    {"random_invert", "random_invert", R"({"p": 1.0})", false},
    {"random_adjust_sharpness", "random_adjust_sharpness", R"({"sharpness_factor": 2.0, "p": 1.0})", false},
    {"random_grayscale", "random_grayscale", R"({"p": 1.0})", false},
};

void RegisterAll() {
  benchmark::RegisterBenchmark("copy/224x224", BM_Copy, &g_in.small)->MeasureProcessCPUTime();
  benchmark::RegisterBenchmark("copy/400x300", BM_Copy, &g_in.large)->MeasureProcessCPUTime();
  for (const ImageOpCase& c : kImageOps) {
    benchmark::RegisterBenchmark((std::string("op/") + c.label).c_str(), BM_ImageOp, std::string(c.op),
                                 std::string(c.params), c.large ? &g_in.large : &g_in.small)
        ->MeasureProcessCPUTime();
  }
  benchmark::RegisterBenchmark("normalize", BM_Normalize)->MeasureProcessCPUTime();
  benchmark::RegisterBenchmark("random_erasing", BM_RandomErasing)->MeasureProcessCPUTime();
  // The recipe's RandomChoice of MixUp(0.8) and CutMix(1.0), and each alone (their costs
  // differ by an order: a blend of every value against a box copy).
  benchmark::RegisterBenchmark("mixup_cutmix/choice", BM_MixupCutmix,
                               std::string(R"({"mixup_alpha": 0.8, "cutmix_alpha": 1.0, "num_classes": 8})"))
      ->MeasureProcessCPUTime();
  benchmark::RegisterBenchmark("mixup_cutmix/mixup", BM_MixupCutmix,
                               std::string(R"({"mixup_alpha": 0.8, "num_classes": 8})"))
      ->MeasureProcessCPUTime();
  benchmark::RegisterBenchmark("mixup_cutmix/cutmix", BM_MixupCutmix,
                               std::string(R"({"cutmix_alpha": 1.0, "num_classes": 8})"))
      ->MeasureProcessCPUTime();
}

}  // namespace
}  // namespace ferry

int main(int argc, char** argv) {
  // --image=PATH is ours; the rest go to Google Benchmark.
  std::string image;
  int kept = 0;
  for (int i = 0; i < argc; ++i) {
    if (std::strncmp(argv[i], "--image=", 8) == 0) image = argv[i] + 8;
    else argv[kept++] = argv[i];
  }
  argc = kept;
  if (image.empty()) {
    const char* dir = std::getenv("FERRY_SAMPLE_DATA");
    if (dir == nullptr || !std::filesystem::is_directory(dir)) {
      std::fprintf(stderr, "ferry-ops-bench: set FERRY_SAMPLE_DATA to the sample ImageFolder (bench/setup.sh builds "
                           "it) or pass --image=PHOTO.jpg: the ops are timed on a real photo\n");
      return 2;
    }
    image = ferry::FirstJpeg(dir);
    if (image.empty()) {
      std::fprintf(stderr, "ferry-ops-bench: no JPEG under %s\n", dir);
      return 2;
    }
  }
  if (!ferry::LoadInputs(image)) {
    std::fprintf(stderr, "ferry-ops-bench: cannot decode %s\n", image.c_str());
    return 2;
  }
  cv::setNumThreads(0);  // sequential, as the loader runs ops (one core's work)
  benchmark::AddCustomContext("image", image);
  ferry::RegisterAll();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
