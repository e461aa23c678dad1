// resize: torchvision.transforms.Resize(size, interpolation, max_size, antialias).
// size an int (or [n]): the shorter side becomes n; [h, w]: exactly that size. A crop
// plan (the whole image, resampled), so a leading Resize decodes at the DCT scale
// that keeps its output size, and a Resize followed by CenterCrop or RandomCrop
// decodes only the window they keep. (Also registered as resize_shorter, its name in
// the original fixed pipeline.)
//
// random_resize: the segmentation reference's RandomResize(min_size, max_size): the
// shorter side drawn uniformly from the integers [min_size, max_size], then Resize(n).
// The masks follow with nearest neighbour, as the reference resizes its target.
#include <algorithm>

#include "ops/geometry.h"
#include "ops/op.h"

namespace ferry {
namespace {

// Resamples `img` to h x w (the whole image), and says where its points went.
void ResizeWhole(cv::Mat& img, int h, int w, int interp, Warp* warp) {
  if (warp != nullptr) *warp = CropResizeWarp(0, 0, img.cols, img.rows, w, h);
  if (h == img.rows && w == img.cols) return;
  cv::Mat out(h, w, img.type());
  Resample(img, out, interp);
  img = out;
}

class Resize final : public Op {
 public:
  Resize(std::pair<int, int> size, bool shorter, int max_size, int interp, bool antialias)
      : size_(size), shorter_(shorter), max_size_(max_size), interp_(interp), antialias_(antialias) {}

  Result<Shape> OutputShape(const Shape& in) const override {
    if (!shorter_) return Shape{size_.first, size_.second, in.channels};
    if (!in.fixed()) return Shape{-1, -1, in.channels};
    const auto [h, w] = ResizedSize(in.height, in.width, size_, true, max_size_);
    return Shape{h, w, in.channels};
  }

  std::optional<CropPlan> PlanCrop(int width, int height, SampleRng&) const override {
    const auto [h, w] = ResizedSize(height, width, size_, shorter_, max_size_);
    return CropPlan{cv::Rect(0, 0, width, height), w, h, interp_, antialias_};
  }

  Motion motion() const override { return Motion::kWarp; }
  Status Apply(cv::Mat& img, SampleRng& rng) const override { return ApplyWarp(img, rng, nullptr); }
  Status ApplyWarp(cv::Mat& img, SampleRng&, Warp* warp) const override {
    const auto [h, w] = ResizedSize(img.rows, img.cols, size_, shorter_, max_size_);
    ResizeWhole(img, h, w, interp_, warp);
    return Status::OK();
  }

 private:
  const std::pair<int, int> size_;
  const bool shorter_;
  const int max_size_, interp_;
  const bool antialias_;
};

class RandomResize final : public Op {
 public:
  RandomResize(int min_size, int max_size, int interp, bool antialias)
      : min_(min_size), max_(max_size), interp_(interp), antialias_(antialias) {}

  Result<Shape> OutputShape(const Shape& in) const override { return Shape{-1, -1, in.channels}; }

  std::optional<CropPlan> PlanCrop(int width, int height, SampleRng& rng) const override {
    const auto [h, w] = ResizedSize(height, width, {Draw(rng), 0}, true, 0);
    return CropPlan{cv::Rect(0, 0, width, height), w, h, interp_, antialias_};
  }

  Motion motion() const override { return Motion::kWarp; }
  Status Apply(cv::Mat& img, SampleRng& rng) const override { return ApplyWarp(img, rng, nullptr); }
  Status ApplyWarp(cv::Mat& img, SampleRng& rng, Warp* warp) const override {
    const auto [h, w] = ResizedSize(img.rows, img.cols, {Draw(rng), 0}, true, 0);
    ResizeWhole(img, h, w, interp_, warp);
    return Status::OK();
  }

 private:
  int Draw(SampleRng& rng) const {
    const int n = min_ + int(rng.Below(uint64_t(max_ - min_ + 1)));
    RecordDraw("size", n);
    return n;
  }
  const int min_, max_, interp_;
  const bool antialias_;
};

Result<std::unique_ptr<Op>> MakeRandomResize(OpArgs& a) {
  a.Require(a.Has("min_size"), "min_size", "is required");
  const int min_size = a.Int("min_size", 1);
  const int max_size = a.Int("max_size", min_size);
  const int interp = a.Interpolation("interpolation", "bilinear");
  const bool antialias = a.Bool("antialias", true);
  a.Require(min_size >= 1 && min_size <= 16384, "min_size", "must be in [1, 16384]");
  a.Require(max_size >= min_size && max_size <= 16384, "max_size", "must be in [min_size, 16384]");
  return std::unique_ptr<Op>(new RandomResize(min_size, std::max(min_size, std::min(max_size, 16384)), interp,
                                              antialias));
}

Result<std::unique_ptr<Op>> MakeResize(OpArgs& a) {
  const nlohmann::json* raw = a.Raw("size");
  const bool shorter = raw == nullptr || raw->is_number() || (raw->is_array() && raw->size() == 1);
  auto size = a.Size("size", {256, 256});
  if (shorter) a.Record("size", size.first);
  const int max_size = a.Int("max_size", 0);
  const int interp = a.Interpolation("interpolation", "bilinear");
  const bool antialias = a.Bool("antialias", true);
  a.Require(max_size >= 0, "max_size", "must be >= 0 (0: none)");
  a.Require(max_size == 0 || shorter, "max_size", "applies only to an int size (the shorter side)");
  a.Require(max_size == 0 || max_size > size.first, "max_size", "must be larger than size");
  return std::unique_ptr<Op>(new Resize(size, shorter, max_size, interp, antialias));
}

}  // namespace

void RegisterResize() {
  RegisterOp("resize", MakeResize);
  RegisterOp("resize_shorter", MakeResize);
  RegisterOp("random_resize", MakeRandomResize);
}

}  // namespace ferry
