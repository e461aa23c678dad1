// color_jitter: torchvision.transforms.ColorJitter(brightness, contrast, saturation,
// hue). Each factor is a number v ([max(0, 1 - v), 1 + v]; hue: [-v, v]) or a range
// [min, max]; a factor whose range is the identity (1, or hue 0) is off. As
// torchvision draws: a random order of the four adjustments, then one uniform factor
// for each that is on, applied in that order.
//
// Without hue it keeps the original pipeline's draws (an order of the three) and
// kernels (kernels/pixels.h: blends rounded to nearest, within half a level of
// Pillow's truncating ones); hue is Pillow's own HSV round trip (kernels/color.h).
//
// random_photometric_distort: the detection reference's RandomPhotometricDistort (the
// "ssd" preset; transforms.v2's of the same name): seven uniform draws; brightness
// with probability p; contrast before or after (one draw, even odds) saturation and hue,
// each with probability p; then, with probability p, the channels in a random order.
// The reference permutes a PIL image through a float tensor and back (x / 255, then
// * 255 truncated), which moves some levels down by one: the same table here.
#include <algorithm>
#include <array>

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

class PhotometricDistort final : public Op {
 public:
  using Range = std::pair<double, double>;
  PhotometricDistort(Range b, Range c, Range s, Range h, double p) : b_(b), c_(c), s_(s), h_(h), p_(p) {}

  bool CommutesWithHFlip() const override { return true; }

  Status Apply(cv::Mat& img, SampleRng& rng) const override {
    double r[7];
    for (double& x : r) x = rng.Uniform();
    cv::Mat dense = img.isContinuous() ? img : img.clone();
    const int pixels = dense.rows * dense.cols, channels = dense.channels();
    auto adjust = [&](int which, const Range& range, const char* name) {
      const float f = float(rng.Uniform(range.first, range.second));
      RecordDraw(name, f);
      kernels::JitterFactors one;
      one.order[0] = which;
      one.order[1] = one.order[2] = -1;
      (which == 0 ? one.brightness : which == 1 ? one.contrast : one.saturation) = f;
      kernels::ApplyJitter(dense.data, pixels, channels, one);
    };
    if (r[0] < p_) adjust(0, b_, "brightness");
    const bool contrast_before = r[1] < 0.5;
    RecordDraw("contrast_before", contrast_before ? 1 : 0);
    if (contrast_before && r[2] < p_) adjust(1, c_, "contrast");
    if (r[3] < p_) adjust(2, s_, "saturation");
    if (r[4] < p_) {
      const double h = rng.Uniform(h_.first, h_.second);
      RecordDraw("hue", h);
      kernels::AdjustHue(dense, h);
    }
    if (!contrast_before && r[5] < p_) adjust(1, c_, "contrast");
    if (r[6] < p_) {
      int perm[3] = {0, 1, 2};
      for (int i = channels - 1; i > 0; --i) std::swap(perm[i], perm[rng.Below(uint64_t(i) + 1)]);
      RecordDraw("permutation", perm[0] * 100 + perm[1] * 10 + perm[2]);
      static const std::array<uint8_t, 256> kRoundTrip = [] {
        std::array<uint8_t, 256> t{};
        for (int k = 0; k < 256; ++k) t[size_t(k)] = uint8_t(float(k) / 255.0f * 255.0f);  // truncated, as .byte()
        return t;
      }();
      uint8_t* p = dense.data;
      for (int i = 0; i < pixels; ++i, p += channels) {
        uint8_t v[3];
        for (int c = 0; c < channels; ++c) v[c] = p[perm[c]];
        for (int c = 0; c < channels; ++c) p[c] = kRoundTrip[v[c]];
      }
    }
    img = dense;
    return Status::OK();
  }

 private:
  const Range b_, c_, s_, h_;
  const double p_;
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
  RegisterOp("random_photometric_distort", [](OpArgs& a) -> Result<std::unique_ptr<Op>> {
    auto range = [&a](const char* key, PhotometricDistort::Range def, bool hue) {
      PhotometricDistort::Range r = a.Range(key, def);
      if (hue) a.Require(r.first >= -0.5 && r.second <= 0.5, key, "must lie in [-0.5, 0.5]");
      else a.Require(r.first >= 0, key, "must not go below 0");
      return r;
    };
    const auto b = range("brightness", {0.875, 1.125}, false);
    const auto c = range("contrast", {0.5, 1.5}, false);
    const auto s = range("saturation", {0.5, 1.5}, false);
    const auto h = range("hue", {-0.05, 0.05}, true);
    const double p = a.Number("p", 0.5);
    a.Require(p >= 0 && p <= 1, "p", "must be in [0, 1]");
    return std::unique_ptr<Op>(new PhotometricDistort(b, c, s, h, p));
  });
}

}  // namespace ferry
