// random_resized_crop: torchvision.transforms.RandomResizedCrop(size, scale, ratio,
// interpolation, antialias). A crop plan: when it leads the pipeline, only its window
// is decoded (op.h). interpolation "random" is timm's RandomResizedCropAndInterpolation
// default: bilinear or bicubic, drawn per sample after the box.
#include "ops/geometry.h"
#include "ops/op.h"

namespace ferry {
namespace {

class RandomResizedCrop final : public Op {
 public:
  RandomResizedCrop(std::pair<int, int> size, std::pair<double, double> scale, std::pair<double, double> ratio,
                    int interp, bool antialias)
      : h_(size.first), w_(size.second), scale_(scale), ratio_(ratio), interp_(interp), antialias_(antialias) {}

  Result<Shape> OutputShape(const Shape& in) const override { return Shape{h_, w_, in.channels}; }

  std::optional<CropPlan> PlanCrop(int width, int height, SampleRng& rng) const override {
    const cv::Rect box = Box(width, height, rng);
    return CropPlan{box, w_, h_, Interp(rng), antialias_};
  }

  Motion motion() const override { return Motion::kWarp; }
  Status Apply(cv::Mat& img, SampleRng& rng) const override { return ApplyWarp(img, rng, nullptr); }
  Status ApplyWarp(cv::Mat& img, SampleRng& rng, Warp* warp) const override {
    const cv::Rect box = Box(img.cols, img.rows, rng);
    if (warp != nullptr) *warp = CropResizeWarp(box.x, box.y, box.width, box.height, w_, h_);
    cv::Mat out(h_, w_, img.type());
    Resample(img(box), out, Interp(rng));
    img = out;
    return Status::OK();
  }

 private:
  // get_params' (i, j, h, w), recorded as it returns them.
  cv::Rect Box(int width, int height, SampleRng& rng) const {
    const cv::Rect box = RandomResizedCropBox(width, height, scale_, ratio_, rng);
    RecordDraw("i", box.y);
    RecordDraw("j", box.x);
    RecordDraw("h", box.height);
    RecordDraw("w", box.width);
    return box;
  }
  int Interp(SampleRng& rng) const {
    if (interp_ >= 0) return interp_;
    const int mode = rng.Below(2) == 0 ? kBilinear : kBicubic;
    RecordDraw("bicubic", mode == kBicubic);
    return mode;
  }

  const int h_, w_;
  const std::pair<double, double> scale_, ratio_;
  const int interp_;
  const bool antialias_;
};

}  // namespace

void RegisterRandomResizedCrop() {
  RegisterOp("random_resized_crop", [](OpArgs& a) -> Result<std::unique_ptr<Op>> {
    const auto size = a.Size("size", {224, 224});
    const auto scale = a.Range("scale", {0.08, 1.0});
    const auto ratio = a.Range("ratio", {3.0 / 4.0, 4.0 / 3.0});
    const nlohmann::json* mode = a.Raw("interpolation");
    const bool random = mode != nullptr && mode->is_string() && mode->get<std::string>() == "random";
    const int interp = random ? -1 : a.Interpolation("interpolation", "bilinear");
    if (random) a.Record("interpolation", "random");
    const bool antialias = a.Bool("antialias", true);
    a.Require(scale.first > 0 && scale.second <= 1.0, "scale", "must satisfy 0 < min <= max <= 1");
    a.Require(ratio.first > 0, "ratio", "must satisfy 0 < min <= max");
    return std::unique_ptr<Op>(new RandomResizedCrop(size, scale, ratio, interp, antialias));
  });
}

}  // namespace ferry
