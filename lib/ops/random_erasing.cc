// random_erasing: torchvision.transforms.RandomErasing(p, scale, ratio, value) on one
// sample's float32 tensor, after ToTensor/Normalize as torchvision runs it. value: a
// number, one per channel, "random" (a standard normal per erased value, torchvision's
// value="random" and timm's mode="pixel") or "random_channel" (one normal per channel,
// timm's mode="rand"). max_count > 1: timm's count of boxes (drawn in [1, max_count],
// each of 1/count of the area). Draws as torchvision's get_params: per box up to 10
// tries of (area, log ratio); the values (when random), then the top row and left
// column; no box when every try misses (the image unchanged).
#include <cmath>
#include <numbers>
#include <string>

#include "ops/op.h"

namespace ferry {
namespace {

// A standard normal from the sample's stream (Box-Muller; both values used).
class Normals {
 public:
  explicit Normals(SampleRng& rng) : rng_(rng) {}
  float Next() {
    if (have_) {
      have_ = false;
      return spare_;
    }
    double u1 = rng_.Uniform();
    while (u1 <= 0) u1 = rng_.Uniform();
    const double u2 = rng_.Uniform();
    const double r = std::sqrt(-2.0 * std::log(u1));
    spare_ = float(r * std::sin(2 * std::numbers::pi * u2));
    have_ = true;
    return float(r * std::cos(2 * std::numbers::pi * u2));
  }

 private:
  SampleRng& rng_;
  bool have_ = false;
  float spare_ = 0;
};

class RandomErasing final : public Op {
 public:
  enum class Value { kConstant, kRandomPixel, kRandomChannel };
  RandomErasing(double p, std::pair<double, double> scale, std::pair<double, double> ratio, Value kind,
                std::vector<float> values, int max_count)
      : p_(p), scale_(scale), ratio_(ratio), kind_(kind), values_(std::move(values)), max_count_(max_count) {}

  Stage stage() const override { return Stage::kTensor; }

  void ApplyTensor(float* chw, const Shape& s, SampleRng& rng) const override {
    const size_t plane = size_t(s.height) * s.width;
    for (const ErasePlan& e : Draw(s, rng)) {
      const bool per_pixel = e.fill.size() != size_t(s.channels);
      for (int c = 0; c < s.channels; ++c) {
        for (int y = 0; y < e.height; ++y) {
          float* row = chw + c * plane + size_t(e.top + y) * s.width + e.left;
          for (int x = 0; x < e.width; ++x)
            row[x] = per_pixel ? e.fill[(size_t(c) * e.height + y) * e.width + x] : e.fill[size_t(c)];
        }
      }
    }
  }

  bool PlanTensor(const Shape& s, SampleRng& rng, std::vector<ErasePlan>* erases) const override {
    *erases = Draw(s, rng);
    return true;
  }

 private:
  // The boxes, drawn as torchvision's get_params draws them (see above), with their
  // fills: C values, or C x h x w for value "random".
  std::vector<ErasePlan> Draw(const Shape& s, SampleRng& rng) const {
    std::vector<ErasePlan> boxes;
    const bool applied = rng.Bernoulli(p_);
    RecordDraw("applied", applied);
    if (!applied) return boxes;
    const int count = max_count_ <= 1 ? 1 : 1 + int(rng.Below(uint64_t(max_count_)));
    const double area = double(s.height) * s.width;
    const double log_lo = std::log(ratio_.first), log_hi = std::log(ratio_.second);
    Normals normal(rng);
    for (int k = 0; k < count; ++k) {
      for (int attempt = 0; attempt < 10; ++attempt) {
        const double erase_area = area * rng.Uniform(scale_.first, scale_.second) / count;
        const double aspect = std::exp(rng.Uniform(log_lo, log_hi));
        const int h = int(std::nearbyint(std::sqrt(erase_area * aspect)));
        const int w = int(std::nearbyint(std::sqrt(erase_area / aspect)));
        if (!(h < s.height && w < s.width)) continue;
        ErasePlan e;
        e.height = h, e.width = w;
        // torchvision draws the random values before the position.
        if (kind_ == Value::kRandomPixel) {
          e.fill.resize(size_t(s.channels) * h * w);
          for (float& v : e.fill) v = normal.Next();
        } else if (kind_ == Value::kRandomChannel) {
          for (int c = 0; c < s.channels; ++c) e.fill.push_back(normal.Next());
        } else {
          for (int c = 0; c < s.channels; ++c) e.fill.push_back(values_.size() == 1 ? values_[0] : values_[size_t(c)]);
        }
        e.top = int(rng.Below(uint64_t(s.height - h + 1)));
        e.left = int(rng.Below(uint64_t(s.width - w + 1)));
        RecordDraw("i", e.top);
        RecordDraw("j", e.left);
        RecordDraw("h", h);
        RecordDraw("w", w);
        boxes.push_back(std::move(e));
        break;
      }
    }
    return boxes;
  }

  const double p_;
  const std::pair<double, double> scale_, ratio_;
  const Value kind_;
  const std::vector<float> values_;
  const int max_count_;
};

}  // namespace

void RegisterRandomErasing() {
  RegisterOp("random_erasing", [](OpArgs& a) -> Result<std::unique_ptr<Op>> {
    const double p = a.Number("p", 0.5);
    const auto scale = a.Range("scale", {0.02, 0.33});
    const auto ratio = a.Range("ratio", {0.3, 3.3});
    RandomErasing::Value kind = RandomErasing::Value::kConstant;
    std::vector<float> values{0.f};
    const nlohmann::json* v = a.Raw("value");
    if (v != nullptr && v->is_string()) {
      const std::string s = v->get<std::string>();
      if (s == "random") kind = RandomErasing::Value::kRandomPixel;
      else if (s == "random_channel") kind = RandomErasing::Value::kRandomChannel;
      else a.Fail("value", "must be a number, a list of numbers, \"random\" or \"random_channel\"");
      a.Record("value", s);
    } else {
      std::vector<double> d = a.Numbers("value", {0.0});
      a.Require(d.size() == 1 || d.size() == 3, "value", "must have 1 or 3 numbers");
      values.assign(d.begin(), d.end());
      if (values.empty()) values = {0.f};
    }
    const int max_count = a.Int("max_count", 1);
    a.Require(p >= 0 && p <= 1, "p", "must be in [0, 1]");
    a.Require(scale.first > 0 && scale.second <= 1, "scale", "must lie in (0, 1]");
    a.Require(ratio.first > 0, "ratio", "must be > 0");
    a.Require(max_count >= 1 && max_count <= 64, "max_count", "must be in [1, 64]");
    return std::unique_ptr<Op>(new RandomErasing(p, scale, ratio, kind, values, max_count));
  });
}

}  // namespace ferry
