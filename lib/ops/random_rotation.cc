// random_rotation: torchvision.transforms.RandomRotation(degrees, interpolation,
// expand, center, fill), on Pillow's rotate (kernels/warp.h).
// random_affine: RandomAffine(degrees, translate, scale, shear, interpolation, fill,
// center), on Pillow's AFFINE transform with torchvision's inverse matrix.
// random_perspective: RandomPerspective(distortion_scale, p, interpolation, fill).
// Parameters are drawn as torchvision's get_params draws them.
// affine and perspective: the functional F.affine(angle, translate, scale, shear) and
// F.perspective(startpoints, endpoints) with fixed parameters.
#include <algorithm>
#include <cmath>

#include "ops/geometry.h"
#include "ops/kernels/warp.h"
#include "ops/op.h"
#include "ops/warp_ops.h"

namespace ferry {

cv::Mat AffinePil(const cv::Mat& img, double angle, double tx, double ty, double scale, double shear_x,
                  double shear_y, int interp, const std::array<uint8_t, 3>& fill, const double* center,
                  double inverse[6]) {
  const double cx = center ? center[0] : img.cols * 0.5, cy = center ? center[1] : img.rows * 0.5;
  const std::array<double, 6> m = kernels::InverseAffineMatrix(cx, cy, angle, tx, ty, scale, shear_x, shear_y);
  if (inverse != nullptr) std::copy(m.begin(), m.end(), inverse);
  cv::Mat out(img.rows, img.cols, img.type());
  kernels::PilAffine(img, out, m.data(), ToKernelInterp(interp), fill.data());
  return out;
}

namespace {

std::optional<std::array<double, 2>> CenterArg(OpArgs& a) {
  const nlohmann::json* c = a.Raw("center");
  if (c == nullptr) {
    a.Record("center", nullptr);
    return std::nullopt;
  }
  if (!c->is_array() || c->size() != 2 || !(*c)[0].is_number() || !(*c)[1].is_number()) {
    a.Fail("center", "must be [x, y] or null");
    return std::nullopt;
  }
  std::array<double, 2> v{(*c)[0].get<double>(), (*c)[1].get<double>()};
  a.Record("center", {v[0], v[1]});
  return v;
}

class RandomRotation final : public Op {
 public:
  RandomRotation(std::pair<double, double> degrees, int interp, bool expand, std::optional<std::array<double, 2>> c,
                 std::array<uint8_t, 3> fill)
      : degrees_(degrees), interp_(interp), expand_(expand), center_(c), fill_(fill) {}

  Result<Shape> OutputShape(const Shape& in) const override {
    if (!expand_) return in;
    if (degrees_.first != degrees_.second || !in.fixed()) return Shape{-1, -1, in.channels};  // it varies
    // A fixed angle of a fixed size: Pillow's expanded box, by the kernel itself.
    const cv::Mat probe(in.height, in.width, CV_8UC1, cv::Scalar(0));
    const cv::Mat r = kernels::PilRotate(probe, degrees_.first, kernels::Interp::kNearest, true,
                                         center_ ? center_->data() : nullptr, nullptr);
    return Shape{r.rows, r.cols, in.channels};
  }

  Motion motion() const override { return Motion::kWarp; }
  Status Apply(cv::Mat& img, SampleRng& rng) const override { return ApplyWarp(img, rng, nullptr); }
  Status ApplyWarp(cv::Mat& img, SampleRng& rng, Warp* warp) const override {
    const double angle = rng.Uniform(degrees_.first, degrees_.second);
    RecordDraw("angle", angle);
    double inverse[6];
    img = kernels::PilRotate(img, angle, ToKernelInterp(interp_), expand_, center_ ? center_->data() : nullptr,
                             fill_.data(), inverse);
    if (warp != nullptr) *warp = FromPilAffine(inverse);
    return Status::OK();
  }

 private:
  const std::pair<double, double> degrees_;
  const int interp_;
  const bool expand_;
  const std::optional<std::array<double, 2>> center_;
  const std::array<uint8_t, 3> fill_;
};

class RandomAffine final : public Op {
 public:
  struct Params {
    std::pair<double, double> degrees;
    std::optional<std::pair<double, double>> translate, scale;
    std::vector<double> shear;  // empty, [x_lo, x_hi] or [x_lo, x_hi, y_lo, y_hi]
    std::optional<std::array<double, 2>> fixed_translate;  // F.affine's translate (pixels)
    int interp;
    std::array<uint8_t, 3> fill;
    std::optional<std::array<double, 2>> center;
  };
  explicit RandomAffine(Params p) : p_(std::move(p)) {}

  Motion motion() const override { return Motion::kWarp; }
  Status Apply(cv::Mat& img, SampleRng& rng) const override { return ApplyWarp(img, rng, nullptr); }
  Status ApplyWarp(cv::Mat& img, SampleRng& rng, Warp* warp) const override {
    const double angle = rng.Uniform(p_.degrees.first, p_.degrees.second);
    double tx = 0, ty = 0;
    if (p_.fixed_translate) {
      tx = (*p_.fixed_translate)[0];
      ty = (*p_.fixed_translate)[1];
    } else if (p_.translate) {
      const double max_dx = p_.translate->first * img.cols, max_dy = p_.translate->second * img.rows;
      tx = PyRound(rng.Uniform(-max_dx, max_dx));
      ty = PyRound(rng.Uniform(-max_dy, max_dy));
    }
    const double scale = p_.scale ? rng.Uniform(p_.scale->first, p_.scale->second) : 1.0;
    double sx = 0, sy = 0;
    if (p_.shear.size() >= 2) sx = rng.Uniform(p_.shear[0], p_.shear[1]);
    if (p_.shear.size() == 4) sy = rng.Uniform(p_.shear[2], p_.shear[3]);
    RecordDraw("angle", angle);
    RecordDraw("tx", tx);
    RecordDraw("ty", ty);
    RecordDraw("scale", scale);
    RecordDraw("shear_x", sx);
    RecordDraw("shear_y", sy);
    double inverse[6];
    img = AffinePil(img, angle, tx, ty, scale, sx, sy, p_.interp, p_.fill, p_.center ? p_.center->data() : nullptr,
                    inverse);
    if (warp != nullptr) *warp = FromPilAffine(inverse);
    return Status::OK();
  }

 private:
  const Params p_;
};

class RandomPerspective final : public Op {
 public:
  RandomPerspective(double distortion, double p, int interp, std::array<uint8_t, 3> fill)
      : distortion_(distortion), p_(p), interp_(interp), fill_(fill) {}

  Motion motion() const override { return Motion::kWarp; }
  Status Apply(cv::Mat& img, SampleRng& rng) const override { return ApplyWarp(img, rng, nullptr); }
  Status ApplyWarp(cv::Mat& img, SampleRng& rng, Warp* warp) const override {
    if (warp != nullptr) *warp = IdentityWarp();
    const bool applied = rng.Bernoulli(p_);
    RecordDraw("applied", applied);
    if (!applied) return Status::OK();
    const int w = img.cols, h = img.rows, hw = w / 2, hh = h / 2;
    const int dx = int(distortion_ * hw), dy = int(distortion_ * hh);
    auto randint = [&rng](int lo, int hi) { return double(lo + int(rng.Below(uint64_t(hi - lo)))); };
    const cv::Point2d tl(randint(0, dx + 1), randint(0, dy + 1));
    const cv::Point2d tr(randint(w - dx - 1, w), randint(0, dy + 1));
    const cv::Point2d br(randint(w - dx - 1, w), randint(h - dy - 1, h));
    const cv::Point2d bl(randint(0, dx + 1), randint(h - dy - 1, h));
    const char* names[8] = {"tl_x", "tl_y", "tr_x", "tr_y", "br_x", "br_y", "bl_x", "bl_y"};
    const cv::Point2d corners[4] = {tl, tr, br, bl};
    for (int k = 0; k < 4; ++k) {
      RecordDraw(names[2 * k], corners[k].x);
      RecordDraw(names[2 * k + 1], corners[k].y);
    }
    const std::array<cv::Point2d, 4> start = {cv::Point2d(0, 0), cv::Point2d(w - 1, 0), cv::Point2d(w - 1, h - 1),
                                              cv::Point2d(0, h - 1)};
    const std::array<double, 8> c = kernels::PerspectiveCoeffs(start, {tl, tr, br, bl});
    for (double v : c) {
      if (!std::isfinite(v)) return Status::OK();  // a degenerate draw (torchvision would raise): unchanged
    }
    cv::Mat out(h, w, img.type());
    kernels::PilPerspective(img, out, c.data(), ToKernelInterp(interp_), fill_.data());
    img = out;
    if (warp != nullptr) *warp = FromPilPerspective(c.data());
    return Status::OK();
  }

 private:
  const double distortion_, p_;
  const int interp_;
  const std::array<uint8_t, 3> fill_;
};

class Perspective final : public Op {
 public:
  Perspective(std::array<double, 8> coeffs, int interp, std::array<uint8_t, 3> fill)
      : coeffs_(coeffs), interp_(interp), fill_(fill) {}
  Motion motion() const override { return Motion::kWarp; }
  Status Apply(cv::Mat& img, SampleRng& rng) const override { return ApplyWarp(img, rng, nullptr); }
  Status ApplyWarp(cv::Mat& img, SampleRng&, Warp* warp) const override {
    cv::Mat out(img.rows, img.cols, img.type());
    kernels::PilPerspective(img, out, coeffs_.data(), ToKernelInterp(interp_), fill_.data());
    img = out;
    if (warp != nullptr) *warp = FromPilPerspective(coeffs_.data());
    return Status::OK();
  }

 private:
  const std::array<double, 8> coeffs_;
  const int interp_;
  const std::array<uint8_t, 3> fill_;
};

std::array<cv::Point2d, 4> Corners(OpArgs& a, const char* key) {
  std::array<cv::Point2d, 4> pts{};
  const nlohmann::json* j = a.Raw(key);
  bool ok = j != nullptr && j->is_array() && j->size() == 4;
  for (size_t k = 0; ok && k < 4; ++k) {
    const nlohmann::json& p = (*j)[k];
    ok = p.is_array() && p.size() == 2 && p[0].is_number() && p[1].is_number();
    if (ok) pts[k] = {p[0].get<double>(), p[1].get<double>()};
  }
  if (!ok) a.Fail(key, "must be four [x, y] points: top-left, top-right, bottom-right, bottom-left");
  a.Record(key, {{pts[0].x, pts[0].y}, {pts[1].x, pts[1].y}, {pts[2].x, pts[2].y}, {pts[3].x, pts[3].y}});
  return pts;
}

}  // namespace

void RegisterWarps() {
  RegisterOp("affine", [](OpArgs& a) -> Result<std::unique_ptr<Op>> {
    // F.affine with fixed parameters: random_affine with every range collapsed.
    RandomAffine::Params p;
    const double angle = a.Number("angle", 0);
    p.degrees = {angle, angle};
    const std::vector<double> t = a.Numbers("translate", {0, 0});
    const double scale = a.Number("scale", 1);
    const std::vector<double> shear = a.Numbers("shear", {0, 0});
    a.Require(t.size() == 2, "translate", "must be [tx, ty] pixels");
    a.Require(scale > 0, "scale", "must be > 0");
    a.Require(shear.size() == 1 || shear.size() == 2, "shear", "must be a number or [x, y] degrees");
    p.fixed_translate = {t.size() == 2 ? t[0] : 0, t.size() == 2 ? t[1] : 0};
    p.scale = std::pair<double, double>{scale, scale};
    const double sx = shear.empty() ? 0 : shear[0], sy = shear.size() == 2 ? shear[1] : 0;
    p.shear = {sx, sx, sy, sy};
    p.interp = a.Interpolation("interpolation", "nearest");
    p.fill = a.Fill("fill", 0);
    p.center = CenterArg(a);
    return std::unique_ptr<Op>(new RandomAffine(std::move(p)));
  });
  RegisterOp("perspective", [](OpArgs& a) -> Result<std::unique_ptr<Op>> {
    const auto start = Corners(a, "startpoints");
    const auto end = Corners(a, "endpoints");
    const int interp = a.Interpolation("interpolation", "bilinear");
    const auto fill = a.Fill("fill", 0);
    const std::array<double, 8> c = kernels::PerspectiveCoeffs(start, end);
    for (double v : c) a.Require(std::isfinite(v), "endpoints", "make a degenerate quadrilateral");
    return std::unique_ptr<Op>(new Perspective(c, interp, fill));
  });
  RegisterOp("random_rotation", [](OpArgs& a) -> Result<std::unique_ptr<Op>> {
    const double zero = 0;
    a.Require(a.Has("degrees"), "degrees", "is required");
    const auto degrees = a.Range("degrees", {0, 0}, &zero);
    const int interp = a.Interpolation("interpolation", "nearest");
    const bool expand = a.Bool("expand", false);
    const auto center = CenterArg(a);
    const auto fill = a.Fill("fill", 0);
    return std::unique_ptr<Op>(new RandomRotation(degrees, interp, expand, center, fill));
  });
  RegisterOp("random_affine", [](OpArgs& a) -> Result<std::unique_ptr<Op>> {
    const double zero = 0;
    RandomAffine::Params p;
    a.Require(a.Has("degrees"), "degrees", "is required");
    p.degrees = a.Range("degrees", {0, 0}, &zero);
    if (a.Has("translate")) {
      p.translate = a.Range("translate", {0, 0});
      // [tx, ty] fractions, not a range: both in [0, 1].
      a.Require(p.translate->first >= 0 && p.translate->first <= 1 && p.translate->second >= 0 &&
                    p.translate->second <= 1,
                "translate", "must be [fx, fy] with both in [0, 1]");
    } else {
      a.Record("translate", nullptr);
    }
    if (a.Has("scale")) {
      p.scale = a.Range("scale", {1, 1});
      a.Require(p.scale->first > 0, "scale", "must be > 0");
    } else {
      a.Record("scale", nullptr);
    }
    if (a.Has("shear")) {
      const nlohmann::json* s = a.Raw("shear");
      if (s->is_number()) p.shear = {-std::abs(s->get<double>()), std::abs(s->get<double>())};
      else if (s->is_array() && (s->size() == 2 || s->size() == 4))
        for (const auto& e : *s) p.shear.push_back(e.is_number() ? e.get<double>() : 0);
      else a.Fail("shear", "must be a number, [x_min, x_max] or [x_min, x_max, y_min, y_max]");
      a.Record("shear", p.shear);
    } else {
      a.Record("shear", nullptr);
    }
    p.interp = a.Interpolation("interpolation", "nearest");
    p.fill = a.Fill("fill", 0);
    p.center = CenterArg(a);
    return std::unique_ptr<Op>(new RandomAffine(std::move(p)));
  });
  RegisterOp("random_perspective", [](OpArgs& a) -> Result<std::unique_ptr<Op>> {
    const double d = a.Number("distortion_scale", 0.5);
    const double p = a.Number("p", 0.5);
    const int interp = a.Interpolation("interpolation", "bilinear");
    const auto fill = a.Fill("fill", 0);
    a.Require(d >= 0 && d <= 1, "distortion_scale", "must be in [0, 1]");
    a.Require(p >= 0 && p <= 1, "p", "must be in [0, 1]");
    return std::unique_ptr<Op>(new RandomPerspective(d, p, interp, fill));
  });
}

}  // namespace ferry
