// torchvision's augmentation policies, drawing their parameters as
// torchvision.transforms.autoaugment does (magnitudes from its float32 linspace bins):
//   rand_augment(num_ops, magnitude, num_magnitude_bins, interpolation, fill)
//   trivial_augment_wide(num_magnitude_bins, interpolation, fill)
//   auto_augment(policy: imagenet | cifar10 | svhn, interpolation, fill)
//   augmix(severity, mixture_width, chain_depth, alpha, all_ops, interpolation, fill):
//     the mix in float32 and its truncation to uint8 as torchvision's; its colour ops
//     are the tensor backend's, as torchvision runs them on the tensor it converts a
//     PIL image to (its geometry is Pillow's: within a level or two of the tensor
//     backend's grid_sample).
#include <cmath>
#include <string>
#include <vector>

#include "ops/distributions.h"
#include "ops/kernels/color.h"
#include "ops/op.h"
#include "ops/policy.h"

namespace ferry {
namespace {

using P = PolicyOp;

// One op of an augmentation space: its magnitudes (bins) and whether they are signed.
struct SpaceOp {
  P op;
  bool binned, is_signed;
};

// The magnitude of bin `bin` of `op` in a space of `bins` bins for an H x W image,
// exactly as the torchvision class computes its float32 tensors.
enum class Space { kRand, kWide, kAugMix };
double Magnitude(Space space, P op, int bins, int bin, int height, int width) {
  switch (op) {
    case P::kShearX:
    case P::kShearY:
      return TorchLinspace(0.f, space == Space::kWide ? 0.99f : 0.3f, bins, bin);
    case P::kTranslateX:
      if (space == Space::kWide) return TorchLinspace(0.f, 32.f, bins, bin);
      if (space == Space::kAugMix) return TorchLinspace(0.f, float(width / 3.0), bins, bin);
      return TorchLinspace(0.f, float(150.0 / 331.0 * width), bins, bin);
    case P::kTranslateY:
      if (space == Space::kWide) return TorchLinspace(0.f, 32.f, bins, bin);
      if (space == Space::kAugMix) return TorchLinspace(0.f, float(height / 3.0), bins, bin);
      return TorchLinspace(0.f, float(150.0 / 331.0 * height), bins, bin);
    case P::kRotate: return TorchLinspace(0.f, space == Space::kWide ? 135.f : 30.f, bins, bin);
    case P::kBrightness:
    case P::kColor:
    case P::kContrast:
    case P::kSharpness: return TorchLinspace(0.f, space == Space::kWide ? 0.99f : 0.9f, bins, bin);
    case P::kPosterize: {
      // 8 - (arange(bins) / ((bins - 1) / k)).round().int(), k = 4 (6 wide); AugMix 4 - ... / 4.
      const float k = space == Space::kWide ? 6.f : 4.f;
      const float q = float(bin) / (float(bins - 1) / k);
      return (space == Space::kAugMix ? 4 : 8) - int(std::nearbyint(q));
    }
    case P::kSolarize: return TorchLinspace(255.f, 0.f, bins, bin);
    default: return 0.0;
  }
}

bool Signed(P op) {
  switch (op) {
    case P::kShearX: case P::kShearY: case P::kTranslateX: case P::kTranslateY: case P::kRotate:
    case P::kBrightness: case P::kColor: case P::kContrast: case P::kSharpness: return true;
    default: return false;
  }
}

bool Binned(P op) { return op != P::kIdentity && op != P::kAutoContrast && op != P::kEqualize && op != P::kInvert; }

const std::vector<P> kRandSpace = {P::kIdentity, P::kShearX, P::kShearY, P::kTranslateX, P::kTranslateY,
                                   P::kRotate, P::kBrightness, P::kColor, P::kContrast, P::kSharpness,
                                   P::kPosterize, P::kSolarize, P::kAutoContrast, P::kEqualize};

class RandAugment final : public Op {
 public:
  RandAugment(int num_ops, int magnitude, int bins, int interp, std::array<uint8_t, 3> fill)
      : num_ops_(num_ops), magnitude_(magnitude), bins_(bins), interp_(interp), fill_(fill) {}
  Status Apply(cv::Mat& img, SampleRng& rng) const override {
    for (int n = 0; n < num_ops_; ++n) {
      const uint64_t k = rng.Below(kRandSpace.size());
      const P op = kRandSpace[k];
      double m = Binned(op) ? Magnitude(Space::kRand, op, bins_, magnitude_, img.rows, img.cols) : 0.0;
      if (Signed(op) && rng.Below(2) == 1) m = -m;
      RecordDraw("op", double(k));
      RecordDraw("magnitude", m);
      ApplyTorchvisionOp(img, op, m, interp_, fill_);
    }
    return Status::OK();
  }

 private:
  const int num_ops_, magnitude_, bins_, interp_;
  const std::array<uint8_t, 3> fill_;
};

class TrivialAugmentWide final : public Op {
 public:
  TrivialAugmentWide(int bins, int interp, std::array<uint8_t, 3> fill) : bins_(bins), interp_(interp), fill_(fill) {}
  Status Apply(cv::Mat& img, SampleRng& rng) const override {
    const uint64_t k = rng.Below(kRandSpace.size());
    const P op = kRandSpace[k];
    double m = 0;
    if (Binned(op)) m = Magnitude(Space::kWide, op, bins_, int(rng.Below(uint64_t(bins_))), img.rows, img.cols);
    if (Signed(op) && rng.Below(2) == 1) m = -m;
    RecordDraw("op", double(k));
    RecordDraw("magnitude", m);
    ApplyTorchvisionOp(img, op, m, interp_, fill_);
    return Status::OK();
  }

 private:
  const int bins_, interp_;
  const std::array<uint8_t, 3> fill_;
};

// AutoAugment's sub-policies: (op, probability, magnitude bin or -1) twice.
struct SubPolicy {
  P op1;
  double p1;
  int m1;
  P op2;
  double p2;
  int m2;
};

const std::vector<SubPolicy>& Policy(const std::string& name) {
  static const std::vector<SubPolicy> imagenet = {
      {P::kPosterize, 0.4, 8, P::kRotate, 0.6, 9},       {P::kSolarize, 0.6, 5, P::kAutoContrast, 0.6, -1},
      {P::kEqualize, 0.8, -1, P::kEqualize, 0.6, -1},    {P::kPosterize, 0.6, 7, P::kPosterize, 0.6, 6},
      {P::kEqualize, 0.4, -1, P::kSolarize, 0.2, 4},     {P::kEqualize, 0.4, -1, P::kRotate, 0.8, 8},
      {P::kSolarize, 0.6, 3, P::kEqualize, 0.6, -1},     {P::kPosterize, 0.8, 5, P::kEqualize, 1.0, -1},
      {P::kRotate, 0.2, 3, P::kSolarize, 0.6, 8},        {P::kEqualize, 0.6, -1, P::kPosterize, 0.4, 6},
      {P::kRotate, 0.8, 8, P::kColor, 0.4, 0},           {P::kRotate, 0.4, 9, P::kEqualize, 0.6, -1},
      {P::kEqualize, 0.0, -1, P::kEqualize, 0.8, -1},    {P::kInvert, 0.6, -1, P::kEqualize, 1.0, -1},
      {P::kColor, 0.6, 4, P::kContrast, 1.0, 8},         {P::kRotate, 0.8, 8, P::kColor, 1.0, 2},
      {P::kColor, 0.8, 8, P::kSolarize, 0.8, 7},         {P::kSharpness, 0.4, 7, P::kInvert, 0.6, -1},
      {P::kShearX, 0.6, 5, P::kEqualize, 1.0, -1},       {P::kColor, 0.4, 0, P::kEqualize, 0.6, -1},
      {P::kEqualize, 0.4, -1, P::kSolarize, 0.2, 4},     {P::kSolarize, 0.6, 5, P::kAutoContrast, 0.6, -1},
      {P::kInvert, 0.6, -1, P::kEqualize, 1.0, -1},      {P::kColor, 0.6, 4, P::kContrast, 1.0, 8},
      {P::kEqualize, 0.8, -1, P::kEqualize, 0.6, -1},
  };
  static const std::vector<SubPolicy> cifar10 = {
      {P::kInvert, 0.1, -1, P::kContrast, 0.2, 6},       {P::kRotate, 0.7, 2, P::kTranslateX, 0.3, 9},
      {P::kSharpness, 0.8, 1, P::kSharpness, 0.9, 3},    {P::kShearY, 0.5, 8, P::kTranslateY, 0.7, 9},
      {P::kAutoContrast, 0.5, -1, P::kEqualize, 0.9, -1}, {P::kShearY, 0.2, 7, P::kPosterize, 0.3, 7},
      {P::kColor, 0.4, 3, P::kBrightness, 0.6, 7},       {P::kSharpness, 0.3, 9, P::kBrightness, 0.7, 9},
      {P::kEqualize, 0.6, -1, P::kEqualize, 0.5, -1},    {P::kContrast, 0.6, 7, P::kSharpness, 0.6, 5},
      {P::kColor, 0.7, 7, P::kTranslateX, 0.5, 8},       {P::kEqualize, 0.3, -1, P::kAutoContrast, 0.4, -1},
      {P::kTranslateY, 0.4, 3, P::kSharpness, 0.2, 6},   {P::kBrightness, 0.9, 6, P::kColor, 0.2, 8},
      {P::kSolarize, 0.5, 2, P::kInvert, 0.0, -1},       {P::kEqualize, 0.2, -1, P::kAutoContrast, 0.6, -1},
      {P::kEqualize, 0.2, -1, P::kEqualize, 0.6, -1},    {P::kColor, 0.9, 9, P::kEqualize, 0.6, -1},
      {P::kAutoContrast, 0.8, -1, P::kSolarize, 0.2, 8}, {P::kBrightness, 0.1, 3, P::kColor, 0.7, 0},
      {P::kSolarize, 0.4, 5, P::kAutoContrast, 0.9, -1}, {P::kTranslateY, 0.9, 9, P::kTranslateY, 0.7, 9},
      {P::kAutoContrast, 0.9, -1, P::kSolarize, 0.8, 3}, {P::kEqualize, 0.8, -1, P::kInvert, 0.1, -1},
      {P::kTranslateY, 0.7, 9, P::kAutoContrast, 0.9, -1},
  };
  static const std::vector<SubPolicy> svhn = {
      {P::kShearX, 0.9, 4, P::kInvert, 0.2, -1},         {P::kShearY, 0.9, 8, P::kInvert, 0.7, -1},
      {P::kEqualize, 0.6, -1, P::kSolarize, 0.6, 6},     {P::kInvert, 0.9, -1, P::kEqualize, 0.6, -1},
      {P::kEqualize, 0.6, -1, P::kRotate, 0.9, 3},       {P::kShearX, 0.9, 4, P::kAutoContrast, 0.8, -1},
      {P::kShearY, 0.9, 8, P::kInvert, 0.4, -1},         {P::kShearY, 0.9, 5, P::kSolarize, 0.2, 6},
      {P::kInvert, 0.9, -1, P::kAutoContrast, 0.8, -1},  {P::kEqualize, 0.6, -1, P::kRotate, 0.9, 3},
      {P::kShearX, 0.9, 4, P::kSolarize, 0.3, 3},        {P::kShearY, 0.8, 8, P::kInvert, 0.7, -1},
      {P::kEqualize, 0.9, -1, P::kTranslateY, 0.6, 6},   {P::kInvert, 0.9, -1, P::kEqualize, 0.6, -1},
      {P::kContrast, 0.3, 3, P::kRotate, 0.8, 4},        {P::kInvert, 0.8, -1, P::kTranslateY, 0.0, 2},
      {P::kShearY, 0.7, 6, P::kSolarize, 0.4, 8},        {P::kInvert, 0.6, -1, P::kRotate, 0.8, 4},
      {P::kShearY, 0.3, 7, P::kTranslateX, 0.9, 3},      {P::kShearX, 0.1, 6, P::kInvert, 0.6, -1},
      {P::kSolarize, 0.7, 2, P::kTranslateY, 0.6, 7},    {P::kShearY, 0.8, 4, P::kInvert, 0.8, -1},
      {P::kShearX, 0.7, 9, P::kTranslateY, 0.8, 3},      {P::kShearY, 0.8, 5, P::kAutoContrast, 0.7, -1},
      {P::kShearX, 0.7, 2, P::kInvert, 0.1, -1},
  };
  if (name == "cifar10") return cifar10;
  if (name == "svhn") return svhn;
  return imagenet;
}

class AutoAugment final : public Op {
 public:
  AutoAugment(const std::vector<SubPolicy>& policy, int interp, std::array<uint8_t, 3> fill)
      : policy_(policy), interp_(interp), fill_(fill) {}
  Status Apply(cv::Mat& img, SampleRng& rng) const override {
    // get_params: the sub-policy, two probabilities, two signs, all drawn first.
    const uint64_t policy = rng.Below(policy_.size());
    const SubPolicy& sp = policy_[policy];
    RecordDraw("policy", double(policy));
    const double prob[2] = {double(float(rng.Uniform())), double(float(rng.Uniform()))};
    const uint64_t sign[2] = {rng.Below(2), rng.Below(2)};
    const P ops[2] = {sp.op1, sp.op2};
    const double ps[2] = {sp.p1, sp.p2};
    const int bins[2] = {sp.m1, sp.m2};
    for (int i = 0; i < 2; ++i) {
      if (!(prob[i] <= ps[i])) continue;
      // AutoAugment's space is RandAugment's with 10 bins (and Invert).
      double m = bins[i] >= 0 ? Magnitude(Space::kRand, ops[i], 10, bins[i], img.rows, img.cols) : 0.0;
      if (Signed(ops[i]) && sign[i] == 0) m = -m;
      RecordDraw("op", double(ops[i]));
      RecordDraw("magnitude", m);
      ApplyTorchvisionOp(img, ops[i], m, interp_, fill_);
    }
    return Status::OK();
  }

 private:
  const std::vector<SubPolicy>& policy_;
  const int interp_;
  const std::array<uint8_t, 3> fill_;
};

class AugMix final : public Op {
 public:
  AugMix(int severity, int width, int depth, double alpha, bool all_ops, int interp, std::array<uint8_t, 3> fill)
      : severity_(severity), width_(width), depth_(depth), alpha_(alpha), interp_(interp), fill_(fill) {
    ops_ = {P::kAutoContrast, P::kEqualize, P::kPosterize, P::kRotate, P::kSolarize,
            P::kShearX, P::kShearY, P::kTranslateX, P::kTranslateY};
    if (all_ops) ops_.insert(ops_.end(), {P::kBrightness, P::kColor, P::kContrast, P::kSharpness});
  }

  Status Apply(cv::Mat& img, SampleRng& rng) const override {
    const int H = img.rows, W = img.cols, C = img.channels();
    // torch._sample_dirichlet gives float32 weights; the chains' weights are scaled by m[1].
    const std::vector<double> md = Dirichlet(alpha_, 2, rng);
    const float m[2] = {float(md[0]), float(md[1])};
    std::vector<float> w;
    for (double x : Dirichlet(alpha_, width_, rng)) w.push_back(float(x) * m[1]);
    RecordDraw("m0", m[0]);
    for (float x : w) RecordDraw("weight", x);
    cv::Mat src = img.isContinuous() ? img : img.clone();
    const size_t n = size_t(H) * W * C;
    std::vector<float> mix(n);
    for (size_t i = 0; i < n; ++i) mix[i] = m[0] * float(src.data[i]);
    for (int k = 0; k < width_; ++k) {
      cv::Mat aug = src.clone();
      const int depth = depth_ > 0 ? depth_ : 1 + int(rng.Below(3));
      RecordDraw("depth", depth);
      for (int d = 0; d < depth; ++d) {
        const uint64_t k = rng.Below(ops_.size());
        const P op = ops_[k];
        double mag = 0;
        if (Binned(op)) mag = Magnitude(Space::kAugMix, op, 10, int(rng.Below(uint64_t(severity_))), H, W);
        if (Signed(op) && rng.Below(2) == 1) mag = -mag;
        RecordDraw("op", double(k));
        RecordDraw("magnitude", mag);
        ApplyTorchvisionOp(aug, op, mag, interp_, fill_, /*tensor=*/true);
        if (!aug.isContinuous()) aug = aug.clone();
      }
      for (size_t i = 0; i < n; ++i) mix[i] += w[size_t(k)] * float(aug.data[i]);
    }
    cv::Mat out(H, W, src.type());
    for (size_t i = 0; i < n; ++i) out.data[i] = uint8_t(std::min(255.f, std::max(0.f, mix[i])));  // .to(uint8)
    img = out;
    return Status::OK();
  }

 private:
  const int severity_, width_, depth_;
  const double alpha_;
  const int interp_;
  const std::array<uint8_t, 3> fill_;
  std::vector<P> ops_;
};

}  // namespace

void RegisterTorchvisionPolicies() {
  RegisterOp("rand_augment", [](OpArgs& a) -> Result<std::unique_ptr<Op>> {
    const int num_ops = a.Int("num_ops", 2);
    const int magnitude = a.Int("magnitude", 9);
    const int bins = a.Int("num_magnitude_bins", 31);
    const int interp = a.Interpolation("interpolation", "nearest");
    const auto fill = a.Fill("fill", 0);
    a.Require(num_ops >= 0 && num_ops <= 16, "num_ops", "must be in [0, 16]");
    a.Require(bins >= 2 && bins <= 1000, "num_magnitude_bins", "must be in [2, 1000]");
    a.Require(magnitude >= 0 && magnitude < bins, "magnitude", "must be in [0, num_magnitude_bins)");
    return std::unique_ptr<Op>(new RandAugment(num_ops, magnitude, bins, interp, fill));
  });
  RegisterOp("trivial_augment_wide", [](OpArgs& a) -> Result<std::unique_ptr<Op>> {
    const int bins = a.Int("num_magnitude_bins", 31);
    const int interp = a.Interpolation("interpolation", "nearest");
    const auto fill = a.Fill("fill", 0);
    a.Require(bins >= 2 && bins <= 1000, "num_magnitude_bins", "must be in [2, 1000]");
    return std::unique_ptr<Op>(new TrivialAugmentWide(bins, interp, fill));
  });
  RegisterOp("auto_augment", [](OpArgs& a) -> Result<std::unique_ptr<Op>> {
    const std::string policy = a.String("policy", "imagenet");
    const int interp = a.Interpolation("interpolation", "nearest");
    const auto fill = a.Fill("fill", 0);
    a.Require(policy == "imagenet" || policy == "cifar10" || policy == "svhn", "policy",
              "must be \"imagenet\", \"cifar10\" or \"svhn\"");
    return std::unique_ptr<Op>(new AutoAugment(Policy(policy), interp, fill));
  });
  RegisterOp("augmix", [](OpArgs& a) -> Result<std::unique_ptr<Op>> {
    const int severity = a.Int("severity", 3);
    const int width = a.Int("mixture_width", 3);
    const int depth = a.Int("chain_depth", -1);
    const double alpha = a.Number("alpha", 1.0);
    const bool all_ops = a.Bool("all_ops", true);
    const int interp = a.Interpolation("interpolation", "bilinear");
    const auto fill = a.Fill("fill", 0);
    a.Require(severity >= 1 && severity <= 10, "severity", "must be in [1, 10]");
    a.Require(width >= 1 && width <= 16, "mixture_width", "must be in [1, 16]");
    a.Require(depth <= 16, "chain_depth", "must be <= 16 (<= 0: random in [1, 3])");
    a.Require(alpha > 0, "alpha", "must be > 0");
    return std::unique_ptr<Op>(new AugMix(severity, width, depth, alpha, all_ops, interp, fill));
  });
}

}  // namespace ferry
