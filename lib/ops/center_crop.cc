// center_crop: torchvision.transforms.CenterCrop(size). A crop larger than the image
// pads it with zeros first, as torchvision does. A crop plan when it fits.
#include <algorithm>

#include "ops/geometry.h"
#include "ops/op.h"

namespace ferry {
namespace {

class CenterCrop final : public Op {
 public:
  explicit CenterCrop(std::pair<int, int> size) : h_(size.first), w_(size.second) {}

  Result<Shape> OutputShape(const Shape& in) const override { return Shape{h_, w_, in.channels}; }

  std::optional<CropPlan> PlanCrop(int width, int height, SampleRng&) const override {
    if (w_ > width || h_ > height) return std::nullopt;
    const int top = PyRound((height - h_) / 2.0), left = PyRound((width - w_) / 2.0);
    return CropPlan{cv::Rect(left, top, w_, h_), w_, h_};
  }

  Motion motion() const override { return Motion::kWarp; }
  Status Apply(cv::Mat& img, SampleRng& rng) const override { return ApplyWarp(img, rng, nullptr); }
  Status ApplyWarp(cv::Mat& img, SampleRng&, Warp* warp) const override {
    Warp m = IdentityWarp();
    if (w_ > img.cols || h_ > img.rows) {
      const int dw = std::max(0, w_ - img.cols), dh = std::max(0, h_ - img.rows);
      img = Pad(img, {dw / 2, dh / 2, (dw + 1) / 2, (dh + 1) / 2}, {0, 0, 0}, PadMode::kConstant);
      m = CropResizeWarp(-dw / 2, -dh / 2, img.cols, img.rows, img.cols, img.rows);
    }
    const int top = PyRound((img.rows - h_) / 2.0), left = PyRound((img.cols - w_) / 2.0);
    if (warp != nullptr) *warp = CropResizeWarp(left, top, w_, h_, w_, h_) * m;
    if (img.cols == w_ && img.rows == h_) return Status::OK();
    img = img(cv::Rect(left, top, w_, h_));
    return Status::OK();
  }

 private:
  const int h_, w_;
};

}  // namespace

void RegisterCenterCrop() {
  RegisterOp("center_crop", [](OpArgs& a) -> Result<std::unique_ptr<Op>> {
    return std::unique_ptr<Op>(new CenterCrop(a.Size("size", {224, 224})));
  });
}

}  // namespace ferry
