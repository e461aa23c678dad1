// Compositions of image ops, drawing from the parent's stream in torchvision's order:
//   random_apply(p, ops)        RandomApply: all of `ops`, in order, with probability p
//   random_choice(ops, p)       RandomChoice: one of `ops`, picked with weights p
//                               (default equal)
//   random_order(ops)           RandomOrder: all of `ops` in a uniformly random order
// The nested ops are any image ops, compositions included.
#include <numeric>

#include "ops/op.h"

namespace ferry {
namespace {

using OpList = std::vector<std::unique_ptr<Op>>;

// The shape after `ops` in order; whether every op keeps the input's shape.
Result<Shape> Chain(const OpList& ops, Shape s) {
  for (const auto& op : ops) {
    FERRY_ASSIGN_OR_RETURN(s, op->OutputShape(s));
  }
  return s;
}

bool SameShape(const Shape& a, const Shape& b) {
  return a.height == b.height && a.width == b.width && a.channels == b.channels;
}

bool AllCommute(const OpList& ops) {
  for (const auto& op : ops)
    if (!op->CommutesWithHFlip()) return false;
  return true;
}

// kWarp when any nested op moves points and every one says how; kUnknown when one
// cannot say; else kNone.
Op::Motion Motions(const OpList& ops) {
  Op::Motion m = Op::Motion::kNone;
  for (const auto& op : ops) {
    if (op->motion() == Op::Motion::kUnknown) return Op::Motion::kUnknown;
    if (op->motion() == Op::Motion::kWarp) m = Op::Motion::kWarp;
  }
  return m;
}

// Applies `op`, composing its warp onto *warp (when not null).
Status ApplyOne(const Op& op, cv::Mat& img, SampleRng& rng, Warp* warp) {
  if (warp == nullptr) return op.Apply(img, rng);
  Warp m;
  FERRY_RETURN_IF_ERROR(op.ApplyWarp(img, rng, &m));
  *warp = m * *warp;
  return Status::OK();
}

Status ApplyAll(const OpList& ops, cv::Mat& img, SampleRng& rng, Warp* warp) {
  for (const auto& op : ops) FERRY_RETURN_IF_ERROR(ApplyOne(*op, img, rng, warp));
  return Status::OK();
}

class RandomApply final : public Op {
 public:
  RandomApply(double p, OpList ops) : p_(p), ops_(std::move(ops)) {}
  Result<Shape> OutputShape(const Shape& in) const override {
    FERRY_ASSIGN_OR_RETURN(Shape out, Chain(ops_, in));
    if (SameShape(out, in)) return in;
    if (out.channels != in.channels)
      return Status::InvalidArgument("random_apply: its ops change the channels, which a batch cannot vary");
    return Shape{-1, -1, in.channels};
  }
  bool CommutesWithHFlip() const override { return AllCommute(ops_); }
  Motion motion() const override { return Motions(ops_); }
  Status Apply(cv::Mat& img, SampleRng& rng) const override { return ApplyWarp(img, rng, nullptr); }
  Status ApplyWarp(cv::Mat& img, SampleRng& rng, Warp* warp) const override {
    if (warp != nullptr) *warp = IdentityWarp();
    // torchvision: `if self.p < torch.rand(1): return img`.
    const bool applied = !(p_ < rng.Uniform());
    RecordDraw("applied", applied);
    if (!applied) return Status::OK();
    return ApplyAll(ops_, img, rng, warp);
  }

 private:
  const double p_;
  const OpList ops_;
};

class RandomChoice final : public Op {
 public:
  RandomChoice(std::vector<double> weights, OpList ops) : cumulative_(std::move(weights)), ops_(std::move(ops)) {
    std::partial_sum(cumulative_.begin(), cumulative_.end(), cumulative_.begin());
  }
  Result<Shape> OutputShape(const Shape& in) const override {
    std::optional<Shape> common;
    for (const auto& op : ops_) {
      FERRY_ASSIGN_OR_RETURN(Shape s, op->OutputShape(in));
      if (common && common->channels != s.channels)
        return Status::InvalidArgument("random_choice: its ops give different channels, which a batch cannot vary");
      if (!common) common = s;
      else if (!SameShape(*common, s)) common = Shape{-1, -1, s.channels};
    }
    return *common;
  }
  bool CommutesWithHFlip() const override { return AllCommute(ops_); }
  Motion motion() const override { return Motions(ops_); }
  Status Apply(cv::Mat& img, SampleRng& rng) const override { return ApplyWarp(img, rng, nullptr); }
  Status ApplyWarp(cv::Mat& img, SampleRng& rng, Warp* warp) const override {
    if (warp != nullptr) *warp = IdentityWarp();
    // random.choices(transforms, weights=p): one uniform draw against the cumulative weights.
    const double u = rng.Uniform() * cumulative_.back();
    size_t k = 0;
    while (k + 1 < cumulative_.size() && u >= cumulative_[k]) ++k;
    RecordDraw("choice", double(k));
    return ApplyOne(*ops_[k], img, rng, warp);
  }

 private:
  std::vector<double> cumulative_;
  const OpList ops_;
};

class RandomOrder final : public Op {
 public:
  explicit RandomOrder(OpList ops) : ops_(std::move(ops)) {}
  Result<Shape> OutputShape(const Shape& in) const override {
    FERRY_ASSIGN_OR_RETURN(Shape out, Chain(ops_, in));
    for (const auto& op : ops_) {
      FERRY_ASSIGN_OR_RETURN(Shape s, op->OutputShape(in));
      if (!SameShape(s, in)) return Shape{-1, -1, out.channels};  // the order decides the size
    }
    return out;
  }
  bool CommutesWithHFlip() const override { return AllCommute(ops_); }
  Motion motion() const override { return Motions(ops_); }
  Status Apply(cv::Mat& img, SampleRng& rng) const override { return ApplyWarp(img, rng, nullptr); }
  Status ApplyWarp(cv::Mat& img, SampleRng& rng, Warp* warp) const override {
    if (warp != nullptr) *warp = IdentityWarp();
    std::vector<size_t> order(ops_.size());
    std::iota(order.begin(), order.end(), size_t{0});
    for (size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[rng.Below(i)]);  // random.shuffle
    for (size_t k : order) RecordDraw("order", double(k));
    for (size_t k : order) FERRY_RETURN_IF_ERROR(ApplyOne(*ops_[k], img, rng, warp));
    return Status::OK();
  }

 private:
  const OpList ops_;
};

}  // namespace

void RegisterCompositions() {
  RegisterOp("random_apply", [](OpArgs& a) -> Result<std::unique_ptr<Op>> {
    const double p = a.Number("p", 0.5);
    a.Require(p >= 0 && p <= 1, "p", "must be in [0, 1]");
    FERRY_ASSIGN_OR_RETURN(OpList ops, MakeNestedOps(a, "ops"));
    return std::unique_ptr<Op>(new RandomApply(p, std::move(ops)));
  });
  RegisterOp("random_choice", [](OpArgs& a) -> Result<std::unique_ptr<Op>> {
    FERRY_ASSIGN_OR_RETURN(OpList ops, MakeNestedOps(a, "ops"));
    std::vector<double> w = a.Numbers("p", std::vector<double>(ops.size(), 1.0));
    a.Require(w.size() == ops.size(), "p", "must have one weight per op");
    double total = 0;
    for (double x : w) {
      a.Require(x >= 0, "p", "weights must be >= 0");
      total += x;
    }
    a.Require(total > 0, "p", "weights must not all be 0");
    if (w.size() != ops.size() || ops.empty()) w.assign(std::max<size_t>(ops.size(), 1), 1.0);
    return std::unique_ptr<Op>(new RandomChoice(std::move(w), std::move(ops)));
  });
  RegisterOp("random_order", [](OpArgs& a) -> Result<std::unique_ptr<Op>> {
    FERRY_ASSIGN_OR_RETURN(OpList ops, MakeNestedOps(a, "ops"));
    return std::unique_ptr<Op>(new RandomOrder(std::move(ops)));
  });
}

}  // namespace ferry
