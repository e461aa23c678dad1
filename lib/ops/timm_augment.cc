// timm's policies (timm.data.auto_augment), as DeiT-style recipes write them:
//   timm_rand_augment   timm's RandAugment: num_layers ops picked from `ops` (with
//                       replacement; weighted without replacement when `weights`), each
//                       applied with probability `prob` at `magnitude` (noised by
//                       magnitude_std: a normal, or uniform in [0, m] when infinite),
//                       clamped to [0, magnitude_max].
//   timm_augmix         timm's AugMixAugment (the basic mode): `width` chains of
//                       `depth` ops (random in [1, 3] when <= 0), mixed with Dirichlet
//                       weights and blended with the image by a Beta draw.
// Both take `config`, timm's string ("rand-m9-mstd0.5-inc1", "augmix-m5-w4-d2"), which
// sets the parameters the string names; explicit parameters win. The ops follow timm's
// level-to-argument rules and Pillow's arithmetic; hparams as timm's
// transforms_factory sets them for an image size: translate_const, translate_pct,
// fill (timm's img_mean) and interpolation ("random": bilinear or bicubic per op).
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "ops/distributions.h"
#include "ops/kernels/color.h"
#include "ops/kernels/warp.h"
#include "ops/op.h"
#include "ops/warp_ops.h"

namespace ferry {
namespace {

enum class T {
  kAutoContrast, kEqualize, kInvert, kRotate, kPosterize, kPosterizeIncreasing, kPosterizeOriginal, kSolarize,
  kSolarizeIncreasing, kSolarizeAdd, kColor, kColorIncreasing, kContrast, kContrastIncreasing, kBrightness,
  kBrightnessIncreasing, kSharpness, kSharpnessIncreasing, kShearX, kShearY, kTranslateX, kTranslateY,
  kTranslateXRel, kTranslateYRel, kDesaturate,
};

const std::map<std::string, T>& Names() {
  static const std::map<std::string, T> names = {
      {"AutoContrast", T::kAutoContrast}, {"Equalize", T::kEqualize}, {"Invert", T::kInvert},
      {"Rotate", T::kRotate}, {"Posterize", T::kPosterize}, {"PosterizeIncreasing", T::kPosterizeIncreasing},
      {"PosterizeOriginal", T::kPosterizeOriginal}, {"Solarize", T::kSolarize},
      {"SolarizeIncreasing", T::kSolarizeIncreasing}, {"SolarizeAdd", T::kSolarizeAdd}, {"Color", T::kColor},
      {"ColorIncreasing", T::kColorIncreasing}, {"Contrast", T::kContrast},
      {"ContrastIncreasing", T::kContrastIncreasing}, {"Brightness", T::kBrightness},
      {"BrightnessIncreasing", T::kBrightnessIncreasing}, {"Sharpness", T::kSharpness},
      {"SharpnessIncreasing", T::kSharpnessIncreasing}, {"ShearX", T::kShearX}, {"ShearY", T::kShearY},
      {"TranslateX", T::kTranslateX}, {"TranslateY", T::kTranslateY}, {"TranslateXRel", T::kTranslateXRel},
      {"TranslateYRel", T::kTranslateYRel}, {"Desaturate", T::kDesaturate},
  };
  return names;
}

const std::vector<std::string> kRand = {"AutoContrast", "Equalize", "Invert", "Rotate", "Posterize", "Solarize",
                                        "SolarizeAdd", "Color", "Contrast", "Brightness", "Sharpness", "ShearX",
                                        "ShearY", "TranslateXRel", "TranslateYRel"};
const std::vector<std::string> kRandIncreasing = {
    "AutoContrast", "Equalize", "Invert", "Rotate", "PosterizeIncreasing", "SolarizeIncreasing", "SolarizeAdd",
    "ColorIncreasing", "ContrastIncreasing", "BrightnessIncreasing", "SharpnessIncreasing", "ShearX", "ShearY",
    "TranslateXRel", "TranslateYRel"};
const std::vector<std::string> kAugMix = {"AutoContrast", "ColorIncreasing", "ContrastIncreasing",
                                          "BrightnessIncreasing", "SharpnessIncreasing", "Equalize", "Rotate",
                                          "PosterizeIncreasing", "SolarizeIncreasing", "ShearX", "ShearY",
                                          "TranslateXRel", "TranslateYRel"};

// One timm AugmentOp's settings (its hparams).
struct Hparams {
  double prob = 0.5, magnitude = 10, magnitude_std = 0, magnitude_max = 10;
  double translate_const = 250, translate_pct = 0.45;
  std::array<uint8_t, 3> fill{128, 128, 128};
  int interp = -1;  // -1: random choice of bilinear and bicubic, per op
};

// timm's _randomly_negate: -v when random.random() > 0.5.
double Negate(double v, SampleRng& rng) {
  const bool negated = rng.Uniform() > 0.5;
  RecordDraw("negated", negated);
  return negated ? -v : v;
}

void Enhance(cv::Mat& img, T op, double f) {
  switch (op) {
    case T::kColor: case T::kColorIncreasing: case T::kDesaturate: kernels::AdjustSaturation(img, f); return;
    case T::kContrast: case T::kContrastIncreasing: kernels::AdjustContrast(img, f); return;
    case T::kBrightness: case T::kBrightnessIncreasing: kernels::AdjustBrightness(img, f); return;
    default: kernels::AdjustSharpness(img, f); return;
  }
}

// timm's AugmentOp.__call__ for op `op`.
void ApplyTimmOp(cv::Mat& img, T op, const Hparams& h, SampleRng& rng) {
  const bool applied = !(h.prob < 1.0 && rng.Uniform() > h.prob);
  RecordDraw("applied", applied);
  if (!applied) return;
  double m = h.magnitude;
  if (h.magnitude_std > 0) {
    m = std::isinf(h.magnitude_std) ? rng.Uniform(0, m) : m + h.magnitude_std * Normal01(rng);
  }
  m = std::max(0.0, std::min(m, h.magnitude_max));
  RecordDraw("magnitude", m);
  const double level = m / 10.0;
  // _check_args_tf draws the interpolation of a geometric op when it is random.
  auto interp = [&]() { return h.interp >= 0 ? h.interp : (rng.Below(2) == 0 ? 1 : 2); };
  auto affine = [&](const std::array<double, 6>& c) {
    cv::Mat out(img.rows, img.cols, img.type());
    kernels::PilAffine(img, out, c.data(), ToKernelInterp(interp()), h.fill.data());
    img = out;
  };
  if (!img.isContinuous()) img = img.clone();
  switch (op) {
    case T::kAutoContrast: kernels::Autocontrast(img); return;
    case T::kEqualize: kernels::Equalize(img); return;
    case T::kInvert: kernels::Invert(img); return;
    case T::kRotate: {
      const double deg = Negate(level * 30.0, rng);
      img = kernels::PilRotate(img, deg, ToKernelInterp(interp()), false, nullptr, h.fill.data());
      return;
    }
    case T::kPosterize: case T::kPosterizeIncreasing: case T::kPosterizeOriginal: {
      int bits = int(level * 4);
      if (op == T::kPosterizeIncreasing) bits = 4 - bits;
      if (op == T::kPosterizeOriginal) bits += 4;
      if (bits < 8) kernels::Posterize(img, std::max(0, bits));
      return;
    }
    case T::kSolarize: case T::kSolarizeIncreasing: {
      int t = std::min(256, int(level * 256));
      if (op == T::kSolarizeIncreasing) t = 256 - t;
      kernels::Solarize(img, t);
      return;
    }
    case T::kSolarizeAdd: {
      const int add = std::min(128, int(level * 110));
      uint8_t lut[256];
      for (int i = 0; i < 256; ++i) lut[i] = uint8_t(i < 128 ? std::min(255, i + add) : i);
      for (size_t i = 0; i < img.total() * img.channels(); ++i) img.data[i] = lut[img.data[i]];
      return;
    }
    case T::kColor: case T::kContrast: case T::kBrightness: case T::kSharpness:
      Enhance(img, op, level * 1.8 + 0.1);
      return;
    case T::kColorIncreasing: case T::kContrastIncreasing: case T::kBrightnessIncreasing:
    case T::kSharpnessIncreasing:
      Enhance(img, op, std::max(0.1, 1.0 + Negate(level * 0.9, rng)));
      return;
    case T::kDesaturate: {
      const double v = std::clamp(0.5 + 0.5 * level, 0.5, 1.0);
      Enhance(img, op, std::min(1.0, std::max(0.0, 1.0 - v)));
      return;
    }
    case T::kShearX: affine({1, Negate(level * 0.3, rng), 0, 0, 1, 0}); return;
    case T::kShearY: affine({1, 0, 0, Negate(level * 0.3, rng), 1, 0}); return;
    case T::kTranslateX: affine({1, 0, Negate(level * h.translate_const, rng), 0, 1, 0}); return;
    case T::kTranslateY: affine({1, 0, 0, 0, 1, Negate(level * h.translate_const, rng)}); return;
    case T::kTranslateXRel: affine({1, 0, Negate(level * h.translate_pct, rng) * img.cols, 0, 1, 0}); return;
    case T::kTranslateYRel: affine({1, 0, 0, 0, 1, Negate(level * h.translate_pct, rng) * img.rows}); return;
  }
}

class TimmRandAugment final : public Op {
 public:
  TimmRandAugment(std::vector<T> ops, std::vector<double> weights, int layers, Hparams h)
      : ops_(std::move(ops)), weights_(std::move(weights)), layers_(layers), h_(h) {}
  Status Apply(cv::Mat& img, SampleRng& rng) const override {
    std::vector<size_t> picks;
    if (weights_.empty()) {
      for (int k = 0; k < layers_; ++k) picks.push_back(size_t(rng.Below(ops_.size())));
      for (size_t i : picks) RecordDraw("op", double(i));
    } else {  // numpy choice without replacement, with weights
      std::vector<double> w = weights_;
      for (int k = 0; k < layers_ && k < int(w.size()); ++k) {
        double total = 0;
        for (double x : w) total += x;
        double u = rng.Uniform() * total;
        size_t i = 0;
        while (i + 1 < w.size() && (w[i] == 0 || u >= w[i])) u -= w[i++];
        picks.push_back(i);
        RecordDraw("op", double(i));
        w[i] = 0;
      }
    }
    for (size_t i : picks) ApplyTimmOp(img, ops_[i], h_, rng);
    return Status::OK();
  }

 private:
  const std::vector<T> ops_;
  const std::vector<double> weights_;
  const int layers_;
  const Hparams h_;
};

class TimmAugMix final : public Op {
 public:
  TimmAugMix(std::vector<T> ops, int width, int depth, double alpha, Hparams h)
      : ops_(std::move(ops)), width_(width), depth_(depth), alpha_(alpha), h_(h) {}
  Status Apply(cv::Mat& img, SampleRng& rng) const override {
    std::vector<float> ws;
    for (double x : Dirichlet(alpha_, width_, rng)) ws.push_back(float(x));
    const float m = float(Beta(alpha_, alpha_, rng));
    for (float w : ws) RecordDraw("weight", w);
    RecordDraw("m", m);
    cv::Mat src = img.isContinuous() ? img : img.clone();
    const size_t n = src.total() * src.channels();
    std::vector<float> mixed(n, 0.f);
    for (float w : ws) {
      const int depth = depth_ > 0 ? depth_ : 1 + int(rng.Below(3));
      cv::Mat aug = src.clone();
      for (int d = 0; d < depth; ++d) ApplyTimmOp(aug, ops_[rng.Below(ops_.size())], h_, rng);
      if (!aug.isContinuous()) aug = aug.clone();
      for (size_t i = 0; i < n; ++i) mixed[i] += w * float(aug.data[i]);
    }
    cv::Mat out(src.rows, src.cols, src.type());
    for (size_t i = 0; i < n; ++i) out.data[i] = uint8_t(std::clamp(mixed[i], 0.f, 255.f));
    kernels::Blend(src, out, m);  // Image.blend(img, mixed, m)
    img = out;
    return Status::OK();
  }

 private:
  const std::vector<T> ops_;
  const int width_, depth_;
  const double alpha_;
  const Hparams h_;
};

// Reads timm's config string into `kv` (key -> value text) and returns its kind.
std::string ParseConfig(const std::string& config, std::map<std::string, std::string>* kv) {
  std::vector<std::string> parts;
  size_t start = 0;
  for (size_t i = 0; i <= config.size(); ++i) {
    if (i == config.size() || config[i] == '-') {
      parts.push_back(config.substr(start, i - start));
      start = i + 1;
    }
  }
  for (size_t i = 1; i < parts.size(); ++i) {
    const std::string& c = parts[i];
    const size_t digit = c.find_first_of("0123456789");
    if (digit == std::string::npos || digit == 0) {
      (*kv)["?" + c] = "";
      continue;
    }
    (*kv)[c.substr(0, digit)] = c.substr(digit);
  }
  return parts.empty() ? "" : parts[0];
}

Hparams ReadHparams(OpArgs& a, Hparams h) {
  h.translate_const = a.Number("translate_const", h.translate_const);
  h.translate_pct = a.Number("translate_pct", h.translate_pct);
  h.fill = a.Fill("fill", 128);
  const nlohmann::json* interp = a.Raw("interpolation");
  if (interp != nullptr && interp->is_string() && interp->get<std::string>() == "random") {
    h.interp = -1;
    a.Record("interpolation", "random");
  } else if (interp == nullptr) {
    h.interp = 2;  // timm's _DEFAULT_INTERPOLATION when hparams name one: bicubic
    a.Record("interpolation", "bicubic");
  } else {
    h.interp = a.Interpolation("interpolation", "bicubic");
  }
  return h;
}

std::vector<T> OpsArg(OpArgs& a, const std::vector<std::string>& def) {
  std::vector<std::string> names = def;
  if (const nlohmann::json* j = a.Raw("ops")) {
    names.clear();
    if (j->is_array())
      for (const auto& e : *j) names.push_back(e.is_string() ? e.get<std::string>() : "?");
    if (names.empty()) a.Fail("ops", "must be a non-empty list of timm op names");
  }
  std::vector<T> ops;
  for (const std::string& n : names) {
    auto it = Names().find(n);
    if (it == Names().end()) {
      a.Fail("ops", "names an op Ferry does not run: '" + n + "'");
      return {T::kAutoContrast};
    }
    ops.push_back(it->second);
  }
  a.Record("ops", names);
  return ops;
}

double MagnitudeStd(OpArgs& a, double def) {
  const nlohmann::json* j = a.Raw("magnitude_std");
  double v = def;
  if (j != nullptr && j->is_string() && j->get<std::string>() == "inf") v = std::numeric_limits<double>::infinity();
  else if (j != nullptr && j->is_number()) v = j->get<double>();
  else if (j != nullptr) a.Fail("magnitude_std", "must be a number or \"inf\"");
  if (v > 100) v = std::numeric_limits<double>::infinity();  // timm: mstd > 100 means uniform
  a.Require(v >= 0, "magnitude_std", "must be >= 0");
  if (std::isinf(v)) a.Record("magnitude_std", "inf");
  else a.Record("magnitude_std", v);
  return v;
}

Result<std::unique_ptr<Op>> MakeRand(OpArgs& a) {
  std::map<std::string, std::string> kv;
  const std::string config = a.String("config", "rand");
  const std::string kind = ParseConfig(config, &kv);
  a.Require(kind == "rand", "config", "must start with 'rand' (timm's RandAugment string)");
  Hparams h;
  int layers = 2;
  bool increasing = false;
  for (const auto& [k, v] : kv) {
    try {
      if (k == "m") h.magnitude = std::stoi(v);
      else if (k == "n") layers = std::stoi(v);
      else if (k == "p") h.prob = std::stod(v);
      else if (k == "mstd") h.magnitude_std = std::stod(v);
      else if (k == "mmax") h.magnitude_max = std::stoi(v);
      else if (k == "inc") increasing = true;  // timm: `if bool(val)`, and any non-empty string is true
      else a.Fail("config", "has a section Ferry does not know: '" + k + v + "'");
    } catch (const std::exception&) {
      a.Fail("config", "has a malformed section '" + k + v + "'");
    }
  }
  h.magnitude = a.Number("magnitude", h.magnitude);
  h.magnitude_std = MagnitudeStd(a, h.magnitude_std);
  h.magnitude_max = a.Number("magnitude_max", h.magnitude_max);
  h.prob = a.Number("prob", h.prob);
  layers = a.Int("num_layers", layers);
  h = ReadHparams(a, h);
  std::vector<T> ops = OpsArg(a, increasing ? kRandIncreasing : kRand);
  std::vector<double> weights = a.Numbers("weights", {});
  a.Require(weights.empty() || weights.size() == ops.size(), "weights", "must have one weight per op");
  a.Require(layers >= 0 && layers <= 16, "num_layers", "must be in [0, 16]");
  a.Require(h.prob >= 0 && h.prob <= 1, "prob", "must be in [0, 1]");
  return std::unique_ptr<Op>(new TimmRandAugment(std::move(ops), std::move(weights), layers, h));
}

Result<std::unique_ptr<Op>> MakeAugMix(OpArgs& a) {
  std::map<std::string, std::string> kv;
  const std::string config = a.String("config", "augmix");
  const std::string kind = ParseConfig(config, &kv);
  a.Require(kind == "augmix", "config", "must start with 'augmix' (timm's AugMix string)");
  Hparams h;
  h.prob = 1.0;
  h.magnitude = 3;
  h.magnitude_std = std::numeric_limits<double>::infinity();  // timm's AugMix default: uniform
  h.translate_pct = 0.3;  // as timm's transforms_factory sets it for AugMix
  int width = 3, depth = -1;
  double alpha = 1.0;
  for (const auto& [k, v] : kv) {
    try {
      if (k == "m") h.magnitude = std::stoi(v);
      else if (k == "w") width = std::stoi(v);
      else if (k == "d") depth = std::stoi(v);
      else if (k == "a") alpha = std::stod(v);
      else if (k == "mstd") h.magnitude_std = std::stod(v);
      else if (k == "b") a.Fail("config", "asks for timm's blended AugMix (timm reads any 'b' section as on), "
                                          "which Ferry does not run");
      else a.Fail("config", "has a section Ferry does not know: '" + k + v + "'");
    } catch (const std::exception&) {
      a.Fail("config", "has a malformed section '" + k + v + "'");
    }
  }
  h.magnitude = a.Number("magnitude", h.magnitude);
  h.magnitude_std = MagnitudeStd(a, h.magnitude_std);
  h.magnitude_max = a.Number("magnitude_max", h.magnitude_max);
  width = a.Int("width", width);
  depth = a.Int("depth", depth);
  alpha = a.Number("alpha", alpha);
  h = ReadHparams(a, h);
  std::vector<T> ops = OpsArg(a, kAugMix);
  a.Require(width >= 1 && width <= 16, "width", "must be in [1, 16]");
  a.Require(depth <= 16, "depth", "must be <= 16");
  a.Require(alpha > 0, "alpha", "must be > 0");
  return std::unique_ptr<Op>(new TimmAugMix(std::move(ops), width, depth, alpha, h));
}

}  // namespace

void RegisterTimmPolicies() {
  RegisterOp("timm_rand_augment", MakeRand);
  RegisterOp("timm_augmix", MakeAugMix);
}

}  // namespace ferry
