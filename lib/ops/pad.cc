// pad: torchvision.transforms.Pad(padding, fill, padding_mode).
#include "ops/geometry.h"
#include "ops/op.h"

namespace ferry {
namespace {

class PadOp final : public Op {
 public:
  PadOp(std::array<int, 4> padding, std::array<uint8_t, 3> fill, PadMode mode)
      : padding_(padding), fill_(fill), mode_(mode) {}

  Result<Shape> OutputShape(const Shape& in) const override {
    if (!in.fixed()) return in;
    const int w = in.width + padding_[0] + padding_[2], h = in.height + padding_[1] + padding_[3];
    if (w <= 0 || h <= 0) return Status::InvalidArgument("pad: the padding leaves no pixels");
    return Shape{h, w, in.channels};
  }

  Motion motion() const override { return Motion::kWarp; }
  Status Apply(cv::Mat& img, SampleRng& rng) const override { return ApplyWarp(img, rng, nullptr); }
  Status ApplyWarp(cv::Mat& img, SampleRng&, Warp* warp) const override {
    if (img.cols + padding_[0] + padding_[2] <= 0 || img.rows + padding_[1] + padding_[3] <= 0)
      return Status::InvalidArgument("pad: the negative padding leaves no pixels of this image");
    if (warp != nullptr) {
      const int w = img.cols + padding_[0] + padding_[2];
      *warp = CropResizeWarp(-padding_[0], -padding_[1], w, img.rows + padding_[1] + padding_[3], w,
                             img.rows + padding_[1] + padding_[3]);
    }
    img = Pad(img, padding_, fill_, mode_);
    return Status::OK();
  }

 private:
  const std::array<int, 4> padding_;
  const std::array<uint8_t, 3> fill_;
  const PadMode mode_;
};

}  // namespace

void RegisterPad() {
  RegisterOp("pad", [](OpArgs& a) -> Result<std::unique_ptr<Op>> {
    a.Require(a.Has("padding"), "padding", "is required");
    const auto padding = PaddingArg(a, "padding");
    const auto fill = a.Fill("fill", 0);
    const PadMode mode = PadModeArg(a, "padding_mode");
    return std::unique_ptr<Op>(new PadOp(padding, fill, mode));
  });
}

}  // namespace ferry
