// ferry-make-sample: builds the sample ImageFolder used by the benchmarks.
//
//   ferry-make-sample --sources DIR --out DIR [--count 3000] [--classes 8] [--seed 0]
//
// Input is a folder of photographs (bench/fetch_sample_sources.sh collects them from
// Debian packages). Output is OUT/class_KK/NNNNN.jpg, where NNNNN is the global image
// index. Each image is a random crop of one source photograph, as a training set of
// real photos would hold:
//   crop area   uniform in [20%, 100%] of the source,
//   aspect      log-uniform in [3/4, 4/3],
//   size        resized so the shorter side is uniform in [256, 600] pixels
//               (INTER_AREA when shrinking, INTER_LINEAR when enlarging),
//   flip        horizontal with probability 1/2,
//   encoding    baseline JPEG, 4:2:0, quality uniform in [75, 95].
//
// Classes follow content: the sources, sorted by name, are cut into `classes`
// contiguous runs, and class k draws only from its own run. Image j belongs to class
// j mod classes, and its source and all its random choices come from
// SampleRng(seed, 0, j, purpose), so the output is a pure function of (sources, count,
// classes, seed): reruns are byte-identical whatever the scheduling.
//
// Sources can be 4K photographs, so each is decoded once: two worker threads take
// sources one at a time (largest file first, for balance), decode it, write all the
// images planned from it and drop it. At most two decoded sources are alive at once.
//
// Idempotent: OUT/.complete records the parameters and the list of sources of the run
// that finished; a rerun that would produce the same output exits at once. Otherwise
// the class_* folders left in OUT are removed first, so no stale image survives.
#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <regex>
#include <sstream>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

#include "core/check.h"
#include "core/philox.h"
#include "ferry/status.h"

namespace ferry {
namespace {

namespace fs = std::filesystem;

constexpr char kMarkerName[] = ".complete";
constexpr int kWorkers = 2;

// SampleRng purposes, one stream per kind of choice.
constexpr uint32_t kPurposeSource = 1;
constexpr uint32_t kPurposeAugment = 2;

constexpr double kMinArea = 0.20, kMaxArea = 1.0;
constexpr double kMinAspect = 3.0 / 4.0, kMaxAspect = 4.0 / 3.0;
constexpr int kMinShortSide = 256, kMaxShortSide = 600;
constexpr int kMinQuality = 75, kMaxQuality = 95;

struct Options {
  std::string sources;
  std::string out;
  int count = 3000;
  int classes = 8;
  uint64_t seed = 0;
};

struct Source {
  std::string name;  // file name inside --sources
  uint64_t bytes = 0;
  int cls = 0;
};

// The random choices for one image, drawn once its source's size is known.
struct CropPlan {
  cv::Rect box;
  int short_side = 0;
  bool flip = false;
  int quality = 0;
};

bool HasImageExtension(const fs::path& p) {
  std::string ext = p.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
  return ext == ".jpg" || ext == ".jpeg" || ext == ".png";
}

// Lists the readable-looking images in `dir`, sorted by name (byte order, so the order
// does not depend on the locale).
Result<std::vector<Source>> ListSources(const std::string& dir) {
  std::error_code ec;
  fs::directory_iterator it(dir, ec);
  if (ec) return Status::NotFound("cannot list " + dir + ": " + ec.message());
  std::vector<Source> sources;
  for (const fs::directory_entry& entry : it) {
    if (!entry.is_regular_file(ec) || !HasImageExtension(entry.path())) continue;
    const std::string path = entry.path().string();
    if (!cv::haveImageReader(path)) {
      std::fprintf(stderr, "warning: skipping %s: not a readable image\n", path.c_str());
      continue;
    }
    sources.push_back({entry.path().filename().string(), uint64_t(entry.file_size(ec)), 0});
  }
  std::sort(sources.begin(), sources.end(),
            [](const Source& a, const Source& b) { return a.name < b.name; });
  return sources;
}

std::string ClassName(int cls, int classes) {
  const int width = std::max(2, int(std::to_string(classes - 1).size()));
  char buf[32];
  std::snprintf(buf, sizeof(buf), "class_%0*d", width, cls);
  return buf;
}

std::string ImageName(int index) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%05d.jpg", index);
  return buf;
}

// The marker's text: everything the output depends on.
std::string MarkerText(const Options& opt, const std::vector<Source>& sources) {
  std::ostringstream s;
  s << "ferry-make-sample 1\ncount=" << opt.count << "\nclasses=" << opt.classes
    << "\nseed=" << opt.seed << "\n";
  for (const Source& src : sources) s << "source=" << src.name << " " << src.bytes << "\n";
  return s.str();
}

std::string ReadSmallFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return {};
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

Status WriteFile(const fs::path& path, const uchar* data, size_t size) {
  const fs::path tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), std::streamsize(size));
    if (!out) return Status::Internal("cannot write " + tmp.string());
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) return Status::Internal("cannot rename " + tmp.string() + ": " + ec.message());
  return Status::OK();
}

// Removes the class_* folders and the marker a previous run may have left in `out`.
Status ClearPreviousOutput(const fs::path& out) {
  static const std::regex kClassDir("class_[0-9]+");
  std::error_code ec;
  fs::remove(out / kMarkerName, ec);
  std::vector<fs::path> stale;
  for (const fs::directory_entry& entry : fs::directory_iterator(out, ec)) {
    if (entry.is_directory(ec) && std::regex_match(entry.path().filename().string(), kClassDir)) {
      stale.push_back(entry.path());
    }
  }
  if (ec) return Status::Internal("cannot list " + out.string() + ": " + ec.message());
  for (const fs::path& dir : stale) {
    fs::remove_all(dir, ec);
    if (ec) return Status::Internal("cannot remove " + dir.string() + ": " + ec.message());
  }
  return Status::OK();
}

// Draws the crop of a width x height source, as torchvision's RandomResizedCrop does:
// ten tries at a box that fits, then the largest box of the nearest allowed aspect.
CropPlan PlanCrop(int width, int height, SampleRng& rng) {
  CropPlan plan;
  const double area = double(width) * height;
  int w = 0, h = 0;
  for (int attempt = 0; attempt < 10 && w == 0; ++attempt) {
    const double target = area * rng.Uniform(kMinArea, kMaxArea);
    const double aspect =
        std::exp(rng.Uniform(std::log(kMinAspect), std::log(kMaxAspect)));
    const int cw = int(std::lround(std::sqrt(target * aspect)));
    const int ch = int(std::lround(std::sqrt(target / aspect)));
    if (cw >= 1 && ch >= 1 && cw <= width && ch <= height) w = cw, h = ch;
  }
  if (w == 0) {
    const double ratio = double(width) / height;
    if (ratio < kMinAspect) {
      w = width, h = std::max(1, int(std::lround(width / kMinAspect)));
    } else if (ratio > kMaxAspect) {
      h = height, w = std::max(1, int(std::lround(height * kMaxAspect)));
    } else {
      w = width, h = height;
    }
  }
  const int x = int(rng.Below(uint64_t(width - w + 1)));
  const int y = int(rng.Below(uint64_t(height - h + 1)));
  plan.box = cv::Rect(x, y, w, h);
  plan.short_side = kMinShortSide + int(rng.Below(kMaxShortSide - kMinShortSide + 1));
  plan.flip = rng.Bernoulli(0.5);
  plan.quality = kMinQuality + int(rng.Below(kMaxQuality - kMinQuality + 1));
  return plan;
}

// Makes and writes one image. The random choices depend only on (seed, index).
Status MakeImage(const cv::Mat& source, const Options& opt, int index, const fs::path& path) {
  SampleRng rng(opt.seed, 0, uint64_t(index), kPurposeAugment);
  const CropPlan plan = PlanCrop(source.cols, source.rows, rng);
  const cv::Mat crop = source(plan.box);
  const double scale = double(plan.short_side) / std::min(crop.cols, crop.rows);
  cv::Size size(int(std::lround(crop.cols * scale)), int(std::lround(crop.rows * scale)));
  // Pin the shorter side exactly; rounding the longer one is enough.
  (crop.cols <= crop.rows ? size.width : size.height) = plan.short_side;
  cv::Mat resized;
  cv::resize(crop, resized, size, 0, 0, scale < 1.0 ? cv::INTER_AREA : cv::INTER_LINEAR);
  if (plan.flip) cv::flip(resized, resized, 1);
  std::vector<uchar> jpeg;
  const std::vector<int> params = {cv::IMWRITE_JPEG_QUALITY, plan.quality,
                                   cv::IMWRITE_JPEG_PROGRESSIVE, 0,
                                   cv::IMWRITE_JPEG_OPTIMIZE, 0};
  if (!cv::imencode(".jpg", resized, jpeg, params)) {
    return Status::Internal("cannot encode " + path.string());
  }
  return WriteFile(path, jpeg.data(), jpeg.size());
}

// Decodes one source and makes all its images. Returns how many were written; never
// throws (OpenCV's exceptions stop here, inside the worker thread).
int MakeImagesFromSource(const Options& opt, const Source& src, const std::vector<int>& items,
                         const fs::path& out) {
  const std::string path = (fs::path(opt.sources) / src.name).string();
  int made = 0;
  try {
    const cv::Mat image = cv::imread(path, cv::IMREAD_COLOR);
    if (image.empty()) {
      std::fprintf(stderr, "warning: skipping %s: cannot decode (%zu images lost)\n",
                   path.c_str(), items.size());
      return 0;
    }
    const fs::path class_dir = out / ClassName(src.cls, opt.classes);
    for (const int index : items) {
      const Status st = MakeImage(image, opt, index, class_dir / ImageName(index));
      if (!st.ok()) {
        std::fprintf(stderr, "warning: %s\n", st.ToString().c_str());
        continue;
      }
      ++made;
    }
  } catch (const cv::Exception& e) {
    std::fprintf(stderr, "warning: skipping the rest of %s: %s\n", path.c_str(), e.what());
  }
  return made;
}

Status Run(const Options& opt) {
  if (opt.count < 1) return Status::InvalidArgument("--count must be at least 1");
  if (opt.classes < 1) return Status::InvalidArgument("--classes must be at least 1");
  FERRY_ASSIGN_OR_RETURN(std::vector<Source> sources, ListSources(opt.sources));
  if (int(sources.size()) < opt.classes) {
    return Status::InvalidArgument("need at least one source per class: " +
                                   std::to_string(sources.size()) + " sources in " +
                                   opt.sources + ", " + std::to_string(opt.classes) + " classes");
  }

  const fs::path out(opt.out);
  const std::string marker = MarkerText(opt, sources);
  if (ReadSmallFile(out / kMarkerName) == marker) {
    std::printf("%s is already complete\n", opt.out.c_str());
    return Status::OK();
  }
  std::error_code ec;
  fs::create_directories(out, ec);
  if (ec) return Status::Internal("cannot create " + opt.out + ": " + ec.message());
  FERRY_RETURN_IF_ERROR(ClearPreviousOutput(out));

  // Class k owns the contiguous run of sources [first[k], first[k + 1]).
  const int n = int(sources.size());
  std::vector<int> first(opt.classes + 1);
  for (int k = 0; k <= opt.classes; ++k) first[k] = int(int64_t(k) * n / opt.classes);
  for (int k = 0; k < opt.classes; ++k) {
    FERRY_CHECK(first[k] < first[k + 1]);
    for (int s = first[k]; s < first[k + 1]; ++s) sources[s].cls = k;
    fs::create_directories(out / ClassName(k, opt.classes), ec);
    if (ec) return Status::Internal("cannot create a class folder: " + ec.message());
  }

  std::vector<std::vector<int>> per_source(n);  // image indices, ascending
  for (int j = 0; j < opt.count; ++j) {
    const int k = j % opt.classes;
    SampleRng rng(opt.seed, 0, uint64_t(j), kPurposeSource);
    const int s = first[k] + int(rng.Below(uint64_t(first[k + 1] - first[k])));
    per_source[s].push_back(j);
  }

  // Largest files first, so that neither worker is left alone with a 4K photo at the end.
  std::vector<int> order(n);
  for (int s = 0; s < n; ++s) order[s] = s;
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return sources[a].bytes > sources[b].bytes; });

  // Our two threads are the parallelism; OpenCV's own would only oversubscribe.
  cv::setNumThreads(1);
  std::atomic<int> next{0};
  std::atomic<int> made{0};
  auto worker = [&] {
    for (int i = next.fetch_add(1); i < n; i = next.fetch_add(1)) {
      const int s = order[i];
      if (per_source[s].empty()) continue;
      made += MakeImagesFromSource(opt, sources[s], per_source[s], out);
    }
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < kWorkers; ++t) threads.emplace_back(worker);
  for (std::thread& t : threads) t.join();

  const std::string marker_path = (out / kMarkerName).string();
  FERRY_RETURN_IF_ERROR(WriteFile(marker_path, reinterpret_cast<const uchar*>(marker.data()),
                                  marker.size()));
  std::printf("made %d images in %d classes at %s\n", made.load(), opt.classes,
              opt.out.c_str());
  return Status::OK();
}

}  // namespace
}  // namespace ferry

int main(int argc, char** argv) {
  ferry::Options opt;
  CLI::App app{"Builds the sample ImageFolder of random crops of photographs."};
  app.add_option("--sources", opt.sources, "folder of source photographs (JPEG/PNG)")
      ->required()
      ->check(CLI::ExistingDirectory);
  app.add_option("--out", opt.out, "output ImageFolder root")->required();
  app.add_option("--count", opt.count, "number of images")->capture_default_str();
  app.add_option("--classes", opt.classes, "number of classes")->capture_default_str();
  app.add_option("--seed", opt.seed, "random seed")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  const auto start = std::chrono::steady_clock::now();
  const ferry::Status st = ferry::Run(opt);
  if (!st.ok()) {
    std::fprintf(stderr, "ferry-make-sample: %s\n", st.ToString().c_str());
    return 1;
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::fprintf(stderr, "ferry-make-sample: %.1f s\n", seconds);
  return 0;
}
