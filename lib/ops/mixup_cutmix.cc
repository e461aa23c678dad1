// mixup_cutmix: the batch-level MixUp and CutMix of the training recipes, producing
// soft targets float32 [B, num_classes]:
//   torchvision's reference RandomMixup / RandomCutmix (and transforms.v2 MixUp /
//   CutMix) under RandomChoice: partner "roll" (row i mixes with row i - 1), CutMix box
//   "torchvision" (half-extents int(r W), int(r H) about a uniform centre);
//   timm's Mixup: partner "flip" (row i with row B - 1 - i), box "timm" (extents
//   int(W sqrt(1 - lam)) about a uniform centre), label smoothing.
// Per batch, from the batch's stream (seed, epoch, batch key): CutMix with probability
// switch_prob when both alphas are on (only the one that is on, otherwise); then, with
// probability prob, lam ~ Beta(alpha, alpha) and the batch is mixed (CutMix: lam
// becomes 1 - the pasted box's share of the image); else lam = 1. Targets:
// lam * onehot(y) + (1 - lam) * onehot(y_partner), with on/off values
// 1 - s + s / K and s / K for label smoothing s. Only the valid rows take part: padding
// rows stay zeros, with zero targets.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "ops/distributions.h"
#include "ops/op.h"

namespace ferry {
namespace {

class MixupCutmix final : public Op {
 public:
  struct Params {
    double mixup_alpha, cutmix_alpha, switch_prob, prob, smoothing;
    int num_classes;
    bool flip_partner, timm_box;
  };
  explicit MixupCutmix(Params p) : p_(p) {}

  Stage stage() const override { return Stage::kBatch; }
  int num_classes() const override { return p_.num_classes; }

  void ApplyBatch(const BatchView& b, SampleRng& rng) const override {
    const MixPlan plan = Draw(b, rng);
    if (plan.mixed && plan.cutmix) Paste(b, plan);
    else if (plan.mixed) Mix(b, plan);
    WriteTargets(b, plan);
  }

  bool PlanBatch(const BatchView& b, SampleRng& rng, MixPlan* plan) const override {
    *plan = Draw(b, rng);
    WriteTargets(b, *plan);
    return true;
  }

 private:
  // The batch's draws: CutMix or MixUp, whether it mixes, lam, CutMix's box.
  MixPlan Draw(const BatchView& b, SampleRng& rng) const {
    const int64_t n = b.valid;
    const int H = b.shape.height, W = b.shape.width;
    MixPlan plan;
    plan.flip_partner = p_.flip_partner;
    bool cutmix = p_.cutmix_alpha > 0;
    if (p_.mixup_alpha > 0 && p_.cutmix_alpha > 0) cutmix = rng.Bernoulli(p_.switch_prob);
    double lam = 1.0;
    const bool mix = (p_.mixup_alpha > 0 || p_.cutmix_alpha > 0) && rng.Bernoulli(p_.prob);
    if (mix && n > 0) {
      const double alpha = cutmix ? p_.cutmix_alpha : p_.mixup_alpha;
      lam = Beta(alpha, alpha, rng);
      if (cutmix) {
        int x1, y1, x2, y2;
        if (p_.timm_box) {
          const double ratio = std::sqrt(1 - lam);
          const int ch = int(H * ratio), cw = int(W * ratio);
          const int cy = int(rng.Below(uint64_t(H))), cx = int(rng.Below(uint64_t(W)));
          y1 = std::clamp(cy - ch / 2, 0, H), y2 = std::clamp(cy + ch / 2, 0, H);
          x1 = std::clamp(cx - cw / 2, 0, W), x2 = std::clamp(cx + cw / 2, 0, W);
        } else {
          const int rx = int(rng.Below(uint64_t(W))), ry = int(rng.Below(uint64_t(H)));
          const double r = 0.5 * std::sqrt(1.0 - lam);
          const int rw = int(r * W), rh = int(r * H);
          x1 = std::max(rx - rw, 0), y1 = std::max(ry - rh, 0);
          x2 = std::min(rx + rw, W), y2 = std::min(ry + rh, H);
        }
        plan.x1 = x1, plan.y1 = y1, plan.x2 = x2, plan.y2 = y2;
        lam = 1.0 - double(x2 - x1) * (y2 - y1) / (double(W) * H);
      }
      plan.mixed = true;
      plan.cutmix = cutmix;
    }
    plan.lam = lam;
    RecordDraw("cutmix", cutmix);
    RecordDraw("mixed", mix);
    RecordDraw("lam", lam);
    return plan;
  }

  int64_t Partner(int64_t i, int64_t n) const { return p_.flip_partner ? n - 1 - i : (i + n - 1) % n; }

  // CutMix: each valid row takes its partner's box.
  void Paste(const BatchView& b, const MixPlan& plan) const {
    const int64_t n = b.valid;
    const int H = b.shape.height, W = b.shape.width, C = b.shape.channels;
    const size_t plane = size_t(H) * W, row = plane * C;
    const int x1 = plan.x1, y1 = plan.y1, bw = plan.x2 - plan.x1, bh = plan.y2 - plan.y1;
    if (bw <= 0 || bh <= 0 || n <= 1) return;
    // The flip pairs swap their boxes; the roll moves each box one row down, the last
    // row's (saved first) going to row 0. One box of scratch, whatever the batch.
    std::vector<float> saved(size_t(C) * bh * bw), tmp(saved.size());
    auto copy_box = [&](float* dst, const float* src, bool to_rows) {  // rows <-> a packed box
      for (int c = 0; c < C; ++c)
        for (int y = 0; y < bh; ++y) {
          float* r = (to_rows ? dst : const_cast<float*>(src)) + c * plane + size_t(y1 + y) * W + x1;
          float* p = (to_rows ? const_cast<float*>(src) : dst) + (size_t(c) * bh + y) * bw;
          if (to_rows) std::memcpy(r, p, sizeof(float) * bw);
          else std::memcpy(p, r, sizeof(float) * bw);
        }
    };
    auto row_of = [&](int64_t i) { return b.images + i * row; };
    if (p_.flip_partner) {
      for (int64_t i = 0; i < n / 2; ++i) {
        copy_box(saved.data(), row_of(i), false);
        copy_box(tmp.data(), row_of(n - 1 - i), false);
        copy_box(row_of(i), tmp.data(), true);
        copy_box(row_of(n - 1 - i), saved.data(), true);
      }
    } else {
      copy_box(saved.data(), row_of(n - 1), false);
      for (int64_t i = n - 1; i >= 1; --i) {
        copy_box(tmp.data(), row_of(i - 1), false);
        copy_box(row_of(i), tmp.data(), true);
      }
      copy_box(row_of(0), saved.data(), true);
    }
  }

  // MixUp: x_i = lam x_i + (1 - lam) x_partner, in float32 as torch computes it. Rows
  // are read before they are written: the flip pairs (i, n-1-i) go together; the roll
  // keeps the last row's original for row 0.
  void Mix(const BatchView& b, const MixPlan& plan) const {
    const int64_t n = b.valid;
    const size_t row = size_t(b.shape.height) * b.shape.width * b.shape.channels;
    const float l = float(plan.lam), m = float(1.0 - plan.lam);
    if (p_.flip_partner) {
      for (int64_t i = 0; i < n / 2; ++i) {
        float* a = b.images + i * row;
        float* z = b.images + (n - 1 - i) * row;
        for (size_t k = 0; k < row; ++k) {
          const float va = a[k], vz = z[k];
          a[k] = va * l + vz * m;
          z[k] = vz * l + va * m;
        }
      }
    } else {
      std::vector<float> saved(b.images + (n - 1) * row, b.images + n * row);
      for (int64_t i = n - 1; i >= 0; --i) {
        float* a = b.images + i * row;
        const float* prev = i > 0 ? b.images + (i - 1) * row : saved.data();
        for (size_t k = 0; k < row; ++k) a[k] = a[k] * l + prev[k] * m;
      }
    }
  }

  // lam * onehot(y) + (1 - lam) * onehot(y_partner), label smoothing's on/off values;
  // padding rows zeros.
  void WriteTargets(const BatchView& b, const MixPlan& plan) const {
    if (b.targets == nullptr) return;
    const int64_t n = b.valid;
    const int K = p_.num_classes;
    std::memset(b.targets, 0, sizeof(float) * size_t(b.rows) * K);
    const float off = float(p_.smoothing / K), on = float(1.0 - p_.smoothing + p_.smoothing / K);
    const float l = float(plan.lam), m = float(1.0 - plan.lam);
    for (int64_t i = 0; i < n; ++i) {
      float* t = b.targets + i * K;
      const int64_t y = b.labels[i], yp = b.labels[Partner(i, n)];
      for (int k = 0; k < K; ++k) {
        const float a = k == y ? on : off, z = k == yp ? on : off;
        t[k] = a * l + z * m;
      }
    }
  }

  const Params p_;
};

}  // namespace

void RegisterMixupCutmix() {
  RegisterOp("mixup_cutmix", [](OpArgs& a) -> Result<std::unique_ptr<Op>> {
    MixupCutmix::Params p;
    a.Require(a.Has("num_classes"), "num_classes", "is required");
    p.num_classes = a.Int("num_classes", 1);
    p.mixup_alpha = a.Number("mixup_alpha", 0.0);
    p.cutmix_alpha = a.Number("cutmix_alpha", 0.0);
    p.switch_prob = a.Number("switch_prob", 0.5);
    p.prob = a.Number("prob", 1.0);
    p.smoothing = a.Number("label_smoothing", 0.0);
    const std::string partner = a.String("partner", "roll");
    const std::string box = a.String("cutmix_box", "torchvision");
    p.flip_partner = partner == "flip";
    p.timm_box = box == "timm";
    a.Require(p.num_classes >= 1 && p.num_classes <= 1000000, "num_classes", "must be in [1, 1000000]");
    a.Require(p.mixup_alpha >= 0 && p.cutmix_alpha >= 0, "mixup_alpha", "and cutmix_alpha must be >= 0");
    a.Require(p.mixup_alpha > 0 || p.cutmix_alpha > 0, "mixup_alpha", "or cutmix_alpha must be > 0");
    a.Require(p.switch_prob >= 0 && p.switch_prob <= 1, "switch_prob", "must be in [0, 1]");
    a.Require(p.prob >= 0 && p.prob <= 1, "prob", "must be in [0, 1]");
    a.Require(p.smoothing >= 0 && p.smoothing < 1, "label_smoothing", "must be in [0, 1)");
    a.Require(partner == "roll" || partner == "flip", "partner", "must be \"roll\" or \"flip\"");
    a.Require(box == "torchvision" || box == "timm", "cutmix_box", "must be \"torchvision\" or \"timm\"");
    return std::unique_ptr<Op>(new MixupCutmix(p));
  });
}

}  // namespace ferry
