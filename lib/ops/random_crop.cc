// random_crop: torchvision.transforms.RandomCrop(size, padding, pad_if_needed, fill,
// padding_mode). Without padding it is a crop plan (the window alone is decoded).
// An image smaller than the crop, without pad_if_needed, is an error for that sample
// (torchvision raises), reported like a bad file. pad_if_smaller: the segmentation
// reference's RandomCrop, which pads a short side on the right or below (its
// pad_if_smaller; the masks there hold 255, "no source pixel") rather than on both.
#include <algorithm>
#include <string>

#include "ops/geometry.h"
#include "ops/op.h"

namespace ferry {
namespace {

class RandomCrop final : public Op {
 public:
  RandomCrop(std::pair<int, int> size, std::array<int, 4> padding, bool pad_if_needed, bool pad_if_smaller,
             std::array<uint8_t, 3> fill, PadMode mode)
      : h_(size.first),
        w_(size.second),
        padding_(padding),
        pad_if_needed_(pad_if_needed),
        pad_if_smaller_(pad_if_smaller),
        fill_(fill),
        mode_(mode) {}

  Result<Shape> OutputShape(const Shape& in) const override { return Shape{h_, w_, in.channels}; }

  std::optional<CropPlan> PlanCrop(int width, int height, SampleRng& rng) const override {
    if (padding_ != std::array<int, 4>{0, 0, 0, 0} || w_ > width || h_ > height) return std::nullopt;
    return CropPlan{Box(width, height, rng), w_, h_};
  }

  Motion motion() const override { return Motion::kWarp; }
  Status Apply(cv::Mat& img, SampleRng& rng) const override { return ApplyWarp(img, rng, nullptr); }
  Status ApplyWarp(cv::Mat& img, SampleRng& rng, Warp* warp) const override {
    // Padding is a shift of the points by (left, top).
    double dx = 0, dy = 0;
    if (padding_ != std::array<int, 4>{0, 0, 0, 0}) {
      img = Pad(img, padding_, fill_, mode_);
      dx += padding_[0], dy += padding_[1];
    }
    if (pad_if_needed_ && img.cols < w_) {
      dx += w_ - img.cols;
      img = Pad(img, {w_ - img.cols, 0, w_ - img.cols, 0}, fill_, mode_);
    }
    if (pad_if_needed_ && img.rows < h_) {
      dy += h_ - img.rows;
      img = Pad(img, {0, h_ - img.rows, 0, h_ - img.rows}, fill_, mode_);
    }
    if (pad_if_smaller_ && (img.cols < w_ || img.rows < h_))  // right and below: the points stay
      img = Pad(img, {0, 0, std::max(0, w_ - img.cols), std::max(0, h_ - img.rows)}, fill_, PadMode::kConstant);
    if (img.cols < w_ || img.rows < h_)
      return Status::InvalidArgument("random_crop: the image (" + std::to_string(img.cols) + "x" +
                                     std::to_string(img.rows) + ") is smaller than the crop (" + std::to_string(w_) +
                                     "x" + std::to_string(h_) + "); set pad_if_needed");
    const cv::Rect box = Box(img.cols, img.rows, rng);
    if (warp != nullptr) *warp = CropResizeWarp(box.x - dx, box.y - dy, w_, h_, w_, h_);
    img = img(box);
    return Status::OK();
  }

 private:
  // get_params: the whole image (no draw) when it is exactly the crop's size; else the
  // top row, then the left column, uniform.
  cv::Rect Box(int width, int height, SampleRng& rng) const {
    if (width == w_ && height == h_) return {0, 0, w_, h_};
    const int i = int(rng.Below(uint64_t(height - h_ + 1)));
    const int j = int(rng.Below(uint64_t(width - w_ + 1)));
    RecordDraw("i", i);
    RecordDraw("j", j);
    return {j, i, w_, h_};
  }

  const int h_, w_;
  const std::array<int, 4> padding_;
  const bool pad_if_needed_, pad_if_smaller_;
  const std::array<uint8_t, 3> fill_;
  const PadMode mode_;
};

}  // namespace

void RegisterRandomCrop() {
  RegisterOp("random_crop", [](OpArgs& a) -> Result<std::unique_ptr<Op>> {
    const auto size = a.Size("size", {224, 224});
    const auto padding = PaddingArg(a, "padding");
    const bool pad_if_needed = a.Bool("pad_if_needed", false);
    const bool pad_if_smaller = a.Bool("pad_if_smaller", false);
    const auto fill = a.Fill("fill", 0);
    const PadMode mode = PadModeArg(a, "padding_mode");
    a.Require(!(pad_if_needed && pad_if_smaller), "pad_if_smaller", "and pad_if_needed pad differently: give one");
    return std::unique_ptr<Op>(new RandomCrop(size, padding, pad_if_needed, pad_if_smaller, fill, mode));
  });
}

}  // namespace ferry
