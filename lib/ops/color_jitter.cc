// color_jitter: torchvision.transforms.ColorJitter(brightness, contrast, saturation,
// hue). Each factor is a number v ([max(0, 1 - v), 1 + v]; hue: [-v, v]) or a range
// [min, max]; a factor whose range is the identity (1, or hue 0) is off. As
// torchvision draws: a random order of the four adjustments, then one uniform factor
// for each that is on, applied in that order.
//
// Without hue it keeps the original pipeline's draws (an order of the three) and
// kernels (kernels/pixels.h: blends rounded to nearest, within half a level of
// Pillow's truncating ones); hue is Pillow's own HSV round trip (kernels/color.h).
#include <algorithm>

#include "ops/kernels/color.h"
#include "ops/kernels/pixels.h"
#include "ops/op.h"

namespace ferry {
namespace {

class ColorJitter final : public Op {
 public:
  using Range = std::pair<double, double>;
  ColorJitter(Range b, Range c, Range s, Range h) : b_(b), c_(c), s_(s), h_(h) {}

  bool CommutesWithHFlip() const override { return true; }

  Status Apply(cv::Mat& img, SampleRng& rng) const override {
    const bool hue = On(h_, 0.0);
    const int n = hue ? 4 : 3;
    int order[4] = {0, 1, 2, 3};
    for (int i = n - 1; i > 0; --i) std::swap(order[i], order[rng.Below(uint64_t(i) + 1)]);
    auto draw = [&rng](const Range& r, double identity) {
      return On(r, identity) ? rng.Uniform(r.first, r.second) : identity;
    };
    kernels::JitterFactors f;
    f.brightness = float(draw(b_, 1.0));
    f.contrast = float(draw(c_, 1.0));
    f.saturation = float(draw(s_, 1.0));
    const double hue_factor = draw(h_, 0.0);
    static const char* kOrder[4] = {"order0", "order1", "order2", "order3"};
    for (int k = 0; k < n; ++k) RecordDraw(kOrder[k], order[k]);
    if (On(b_, 1.0)) RecordDraw("brightness", f.brightness);
    if (On(c_, 1.0)) RecordDraw("contrast", f.contrast);
    if (On(s_, 1.0)) RecordDraw("saturation", f.saturation);
    if (hue) RecordDraw("hue", hue_factor);
    const int pixels = img.rows * img.cols, channels = img.channels();
    cv::Mat dense = img.isContinuous() ? img : img.clone();
    for (int k = 0; k < n; ++k) {
      if (order[k] == 3) {
        kernels::AdjustHue(dense, hue_factor);
      } else {
        kernels::JitterFactors one;
        one.order[0] = order[k];
        one.brightness = f.brightness;
        one.contrast = f.contrast;
        one.saturation = f.saturation;
        one.order[1] = one.order[2] = -1;
        kernels::ApplyJitter(dense.data, pixels, channels, one);
      }
    }
    img = dense;
    return Status::OK();
  }

 private:
  static bool On(const Range& r, double identity) { return !(r.first == identity && r.second == identity); }
  const Range b_, c_, s_, h_;
};

ColorJitter::Range Factor(OpArgs& a, const char* key, bool hue) {
  const nlohmann::json* raw = a.Raw(key);
  ColorJitter::Range r = hue ? ColorJitter::Range{0, 0} : ColorJitter::Range{1, 1};
  if (raw != nullptr && raw->is_number()) {
    const double v = raw->get<double>();
    a.Require(v >= 0, key, "must be >= 0");
    r = hue ? ColorJitter::Range{-v, v} : ColorJitter::Range{std::max(0.0, 1.0 - v), 1.0 + v};
  } else if (raw != nullptr) {
    r = a.Range(key, r);
  }
  if (hue) a.Require(r.first >= -0.5 && r.second <= 0.5, key, "must lie in [-0.5, 0.5]");
  else a.Require(r.first >= 0, key, "must not go below 0");
  a.Record(key, {r.first, r.second});
  return r;
}

}  // namespace

void RegisterColorJitter() {
  RegisterOp("color_jitter", [](OpArgs& a) -> Result<std::unique_ptr<Op>> {
    const auto b = Factor(a, "brightness", false);
    const auto c = Factor(a, "contrast", false);
    const auto s = Factor(a, "saturation", false);
    const auto h = Factor(a, "hue", true);
    return std::unique_ptr<Op>(new ColorJitter(b, c, s, h));
  });
}

}  // namespace ferry
