// The geometry of torchvision's detection presets (references/detection/transforms.py
// and presets.py: hflip, ssd, ssdlite, multiscale, lsj), each moving boxes and masks
// (op.h: motion), with parameters drawn as the reference draws them:
//   random_iou_crop(min_scale, max_scale, min_aspect_ratio, max_aspect_ratio,
//                   sampler_options, trials)       SSD's RandomIoUCrop: it reads the
//                   boxes, and drops those whose centre leaves the crop
//   random_zoom_out(fill, side_range, p)           RandomZoomOut: the image on a larger
//                                                  canvas of `fill`
//   scale_jitter(target_size, scale_range, interpolation)
//                                                  ScaleJitter (LSJ): target_size is
//                                                  [width, height], as torchvision's
//   fixed_size_crop(size, fill)                    FixedSizeCrop (LSJ): a random crop
//                                                  to at most size, padded right and
//                                                  bottom to exactly size
//   random_shortest_size(min_size, max_size, interpolation)
//                                                  RandomShortestSize (multiscale)
//   letterbox(size, fill, scaleup)                 YOLO's letterbox: the image scaled to
//                                                  fit size, centred on a `fill` canvas
// The resizes are Ferry's Resample (Pillow's kernels, as the other ops); the
// reference runs them on tensors, so pixels differ by resampling, not geometry.
#include <algorithm>
#include <cmath>

#include "ops/geometry.h"
#include "ops/op.h"

namespace ferry {
namespace {

cv::Mat Resized(const cv::Mat& img, int w, int h, int interp) {
  if (w == img.cols && h == img.rows) return img;
  cv::Mat out(h, w, img.type());
  Resample(img, out, interp);
  return out;
}

double BoxIoU(const std::array<double, 4>& a, const std::array<double, 4>& b) {
  const double ix = std::max(0.0, std::min(a[2], b[2]) - std::max(a[0], b[0]));
  const double iy = std::max(0.0, std::min(a[3], b[3]) - std::max(a[1], b[1]));
  const double inter = ix * iy;
  const double uni = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter;
  return uni > 0 ? inter / uni : 0;
}

class RandomIoUCrop final : public Op {
 public:
  struct Params {
    double min_scale, max_scale, min_aspect, max_aspect;
    std::vector<double> options;
    int trials;
  };
  explicit RandomIoUCrop(Params p) : p_(std::move(p)) {}

  Result<Shape> OutputShape(const Shape& in) const override { return Shape{-1, -1, in.channels}; }
  Motion motion() const override { return Motion::kWarp; }
  bool ReadsBoxes() const override { return true; }
  Status Apply(cv::Mat&, SampleRng&) const override {
    return Status::InvalidArgument(
        "random_iou_crop chooses its crop by the sample's boxes: use it in a job with targets");
  }
  Status ApplyWithBoxes(cv::Mat& img, SampleRng& rng, Warp* warp, const std::vector<std::array<double, 4>>& boxes,
                        std::vector<uint8_t>* keep) const override {
    *warp = IdentityWarp();
    const int w = img.cols, h = img.rows;
    // The reference loops until an option lets the image be (>= 1) or a trial fits; a
    // bound keeps a sample without boxes from drawing forever (it draws the "as is"
    // option 1 time in len(options) anyway).
    for (int round = 0; round < 10000; ++round) {
      const double min_iou = p_.options[rng.Below(p_.options.size())];
      RecordDraw("min_iou", min_iou);
      if (min_iou >= 1.0) return Status::OK();
      for (int t = 0; t < p_.trials; ++t) {
        const double sw = p_.min_scale + (p_.max_scale - p_.min_scale) * rng.Uniform();
        const double sh = p_.min_scale + (p_.max_scale - p_.min_scale) * rng.Uniform();
        const int new_w = int(w * sw), new_h = int(h * sh);
        if (new_h <= 0) continue;
        const double aspect = double(new_w) / new_h;
        if (!(p_.min_aspect <= aspect && aspect <= p_.max_aspect)) continue;
        const int left = int((w - new_w) * rng.Uniform()), top = int((h - new_h) * rng.Uniform());
        const int right = left + new_w, bottom = top + new_h;
        if (left == right || top == bottom) continue;
        std::vector<uint8_t> within(boxes.size());
        bool any = false;
        double best = 0;
        const std::array<double, 4> crop = {double(left), double(top), double(right), double(bottom)};
        for (size_t i = 0; i < boxes.size(); ++i) {
          const double cx = 0.5 * (boxes[i][0] + boxes[i][2]), cy = 0.5 * (boxes[i][1] + boxes[i][3]);
          within[i] = left < cx && cx < right && top < cy && cy < bottom;
          if (within[i]) {
            any = true;
            best = std::max(best, BoxIoU(boxes[i], crop));
          }
        }
        if (!any || best < min_iou) continue;
        RecordDraw("left", left);
        RecordDraw("top", top);
        RecordDraw("width", new_w);
        RecordDraw("height", new_h);
        for (size_t i = 0; i < boxes.size(); ++i)
          if (!within[i]) (*keep)[i] = 0;
        img = img(cv::Rect(left, top, new_w, new_h));
        *warp = CropResizeWarp(left, top, new_w, new_h, new_w, new_h);
        return Status::OK();
      }
    }
    return Status::OK();
  }

 private:
  const Params p_;
};

class RandomZoomOut final : public Op {
 public:
  RandomZoomOut(std::array<uint8_t, 3> fill, std::pair<double, double> side, double p) : fill_(fill), side_(side), p_(p) {}
  Result<Shape> OutputShape(const Shape& in) const override { return Shape{-1, -1, in.channels}; }
  Motion motion() const override { return Motion::kWarp; }
  Status Apply(cv::Mat& img, SampleRng& rng) const override { return ApplyWarp(img, rng, nullptr); }
  Status ApplyWarp(cv::Mat& img, SampleRng& rng, Warp* warp) const override {
    if (warp != nullptr) *warp = IdentityWarp();
    // torchvision: `if torch.rand(1) >= self.p: return`.
    const bool applied = rng.Uniform() < p_;
    RecordDraw("applied", applied);
    if (!applied) return Status::OK();
    const double r = side_.first + rng.Uniform() * (side_.second - side_.first);
    const int cw = int(img.cols * r), ch = int(img.rows * r);
    const int left = int((cw - img.cols) * rng.Uniform()), top = int((ch - img.rows) * rng.Uniform());
    const int right = cw - (left + img.cols), bottom = ch - (top + img.rows);
    RecordDraw("left", left);
    RecordDraw("top", top);
    img = Pad(img, {left, top, right, bottom}, fill_, PadMode::kConstant);
    if (warp != nullptr) *warp = CropResizeWarp(-left, -top, cw, ch, cw, ch);
    return Status::OK();
  }

 private:
  const std::array<uint8_t, 3> fill_;
  const std::pair<double, double> side_;
  const double p_;
};

// A resize to a drawn size (ScaleJitter, RandomShortestSize): the op's warp, and a
// resize plan, so that a crop after it (fixed_size_crop) decodes only the window it
// keeps, at the DCT scale the output needs. Subclasses draw the size.
class DrawnResize : public Op {
 public:
  explicit DrawnResize(int interp) : interp_(interp) {}
  Result<Shape> OutputShape(const Shape& in) const override { return Shape{-1, -1, in.channels}; }
  Motion motion() const override { return Motion::kWarp; }
  Status Apply(cv::Mat& img, SampleRng& rng) const override { return ApplyWarp(img, rng, nullptr); }
  Status ApplyWarp(cv::Mat& img, SampleRng& rng, Warp* warp) const override {
    const auto [w, h] = Draw(img.cols, img.rows, rng);
    if (warp != nullptr) *warp = CropResizeWarp(0, 0, img.cols, img.rows, w, h);
    img = Resized(img, w, h, interp_);
    return Status::OK();
  }
  std::optional<CropPlan> PlanCrop(int width, int height, SampleRng& rng) const override {
    const auto [w, h] = Draw(width, height, rng);
    return CropPlan{cv::Rect(0, 0, width, height), w, h, interp_, true};
  }

 protected:
  // The output (width, height) for a width x height input, drawn from `rng`.
  virtual std::pair<int, int> Draw(int width, int height, SampleRng& rng) const = 0;

 private:
  const int interp_;
};

class ScaleJitter final : public DrawnResize {
 public:
  ScaleJitter(std::pair<int, int> target_wh, std::pair<double, double> scale, int interp)
      : DrawnResize(interp), tw_(target_wh.first), th_(target_wh.second), scale_(scale) {}

 protected:
  std::pair<int, int> Draw(int width, int height, SampleRng& rng) const override {
    const double s = scale_.first + rng.Uniform() * (scale_.second - scale_.first);
    RecordDraw("scale", s);
    const double r = std::min(double(th_) / height, double(tw_) / width) * s;
    return {std::max(1, int(width * r)), std::max(1, int(height * r))};
  }

 private:
  const int tw_, th_;
  const std::pair<double, double> scale_;
};

class FixedSizeCrop final : public Op {
 public:
  FixedSizeCrop(std::pair<int, int> size, std::array<uint8_t, 3> fill) : h_(size.first), w_(size.second), fill_(fill) {}
  Result<Shape> OutputShape(const Shape& in) const override { return Shape{h_, w_, in.channels}; }
  Motion motion() const override { return Motion::kWarp; }
  Status Apply(cv::Mat& img, SampleRng& rng) const override { return ApplyWarp(img, rng, nullptr); }
  Status ApplyWarp(cv::Mat& img, SampleRng& rng, Warp* warp) const override {
    const cv::Rect window = Window(img.cols, img.rows, rng);
    const int left = window.x, top = window.y, nw = window.width, nh = window.height;
    cv::Mat out = img(window);
    if (nw < w_ || nh < h_) out = Pad(out, {0, 0, w_ - nw, h_ - nh}, fill_, PadMode::kConstant);
    img = out;
    if (warp != nullptr) *warp = CropResizeWarp(left, top, w_, h_, w_, h_);
    return Status::OK();
  }
  // A crop plan with padding (the window, then the fill right and below it).
  std::optional<CropPlan> PlanCrop(int width, int height, SampleRng& rng) const override {
    const cv::Rect window = Window(width, height, rng);
    CropPlan p{window, window.width, window.height};
    p.canvas_w = w_, p.canvas_h = h_;
    p.fill = fill_;
    return p;
  }

 private:
  cv::Rect Window(int width, int height, SampleRng& rng) const {
    const int nh = std::min(height, h_), nw = std::min(width, w_);
    int top = 0, left = 0;
    if (nh != height || nw != width) {
      // One draw for both offsets, as the reference's _get_params.
      const double r = rng.Uniform();
      top = int(std::max(height - h_, 0) * r);
      left = int(std::max(width - w_, 0) * r);
      RecordDraw("top", top);
      RecordDraw("left", left);
    }
    return {left, top, nw, nh};
  }

  const int h_, w_;
  const std::array<uint8_t, 3> fill_;
};

class RandomShortestSize final : public DrawnResize {
 public:
  RandomShortestSize(std::vector<int> min_sizes, int max_size, int interp)
      : DrawnResize(interp), min_sizes_(std::move(min_sizes)), max_size_(max_size) {}

 protected:
  std::pair<int, int> Draw(int width, int height, SampleRng& rng) const override {
    const int m = min_sizes_[rng.Below(min_sizes_.size())];
    RecordDraw("min_size", m);
    const double r = std::min(double(m) / std::min(height, width), double(max_size_) / std::max(height, width));
    return {std::max(1, int(width * r)), std::max(1, int(height * r))};
  }

 private:
  const std::vector<int> min_sizes_;
  const int max_size_;
};

class Letterbox final : public Op {
 public:
  Letterbox(std::pair<int, int> size, std::array<uint8_t, 3> fill, bool scaleup, int interp)
      : h_(size.first), w_(size.second), fill_(fill), scaleup_(scaleup), interp_(interp) {}
  Result<Shape> OutputShape(const Shape& in) const override { return Shape{h_, w_, in.channels}; }
  Motion motion() const override { return Motion::kWarp; }
  Status Apply(cv::Mat& img, SampleRng& rng) const override { return ApplyWarp(img, rng, nullptr); }
  Status ApplyWarp(cv::Mat& img, SampleRng&, Warp* warp) const override {
    const auto [w, h] = Fit(img.cols, img.rows);
    const int left = (w_ - w) / 2, top = (h_ - h) / 2;
    if (warp != nullptr) *warp = CropResizeWarp(-left * double(img.cols) / w, -top * double(img.rows) / h,
                                                double(img.cols) * w_ / w, double(img.rows) * h_ / h, w_, h_);
    img = Pad(Resized(img, w, h, interp_), {left, top, w_ - w - left, h_ - h - top}, fill_, PadMode::kConstant);
    return Status::OK();
  }
  std::optional<CropPlan> PlanCrop(int width, int height, SampleRng&) const override {
    const auto [w, h] = Fit(width, height);
    CropPlan p{cv::Rect(0, 0, width, height), w, h, interp_, true};
    p.canvas_w = w_, p.canvas_h = h_, p.canvas_x = (w_ - w) / 2, p.canvas_y = (h_ - h) / 2;
    p.fill = fill_;
    return p;
  }

 private:
  std::pair<int, int> Fit(int width, int height) const {
    double r = std::min(double(h_) / height, double(w_) / width);
    if (!scaleup_) r = std::min(r, 1.0);
    return {std::clamp(PyRound(width * r), 1, w_), std::clamp(PyRound(height * r), 1, h_)};
  }

  const int h_, w_;
  const std::array<uint8_t, 3> fill_;
  const bool scaleup_;
  const int interp_;
};

}  // namespace

void RegisterDetectionOps() {
  RegisterOp("random_iou_crop", [](OpArgs& a) -> Result<std::unique_ptr<Op>> {
    RandomIoUCrop::Params p;
    p.min_scale = a.Number("min_scale", 0.3);
    p.max_scale = a.Number("max_scale", 1.0);
    p.min_aspect = a.Number("min_aspect_ratio", 0.5);
    p.max_aspect = a.Number("max_aspect_ratio", 2.0);
    p.options = a.Numbers("sampler_options", {0.0, 0.1, 0.3, 0.5, 0.7, 0.9, 1.0});
    p.trials = a.Int("trials", 40);
    a.Require(p.min_scale > 0 && p.min_scale <= p.max_scale && p.max_scale <= 1, "max_scale",
              "needs 0 < min_scale <= max_scale <= 1");
    a.Require(p.min_aspect > 0 && p.min_aspect <= p.max_aspect, "max_aspect_ratio",
              "needs 0 < min_aspect_ratio <= max_aspect_ratio");
    a.Require(!p.options.empty() && p.options.size() <= 64, "sampler_options", "must hold 1 to 64 values");
    a.Require(p.trials >= 1 && p.trials <= 1000, "trials", "must be in [1, 1000]");
    if (p.options.empty()) p.options = {1.0};
    return std::unique_ptr<Op>(new RandomIoUCrop(std::move(p)));
  });
  RegisterOp("random_zoom_out", [](OpArgs& a) -> Result<std::unique_ptr<Op>> {
    const auto fill = a.Fill("fill", 0);
    const auto side = a.Range("side_range", {1.0, 4.0});
    const double p = a.Number("p", 0.5);
    a.Require(side.first >= 1.0 && side.second <= 16.0, "side_range", "must satisfy 1 <= min <= max <= 16");
    a.Require(p >= 0 && p <= 1, "p", "must be in [0, 1]");
    return std::unique_ptr<Op>(new RandomZoomOut(fill, side, p));
  });
  RegisterOp("scale_jitter", [](OpArgs& a) -> Result<std::unique_ptr<Op>> {
    a.Require(a.Has("target_size"), "target_size", "is required ([width, height], as torchvision's)");
    const auto wh = a.Size("target_size", {1024, 1024});
    const auto scale = a.Range("scale_range", {0.1, 2.0});
    const int interp = a.Interpolation("interpolation", "bilinear");
    a.Require(scale.first > 0 && scale.second <= 16, "scale_range", "must satisfy 0 < min <= max <= 16");
    return std::unique_ptr<Op>(new ScaleJitter(wh, scale, interp));
  });
  RegisterOp("fixed_size_crop", [](OpArgs& a) -> Result<std::unique_ptr<Op>> {
    a.Require(a.Has("size"), "size", "is required");
    const auto size = a.Size("size", {1024, 1024});
    const auto fill = a.Fill("fill", 0);
    return std::unique_ptr<Op>(new FixedSizeCrop(size, fill));
  });
  RegisterOp("random_shortest_size", [](OpArgs& a) -> Result<std::unique_ptr<Op>> {
    std::vector<int> sizes;
    const nlohmann::json* raw = a.Raw("min_size");
    if (raw != nullptr && raw->is_number_integer()) {
      sizes = {raw->get<int>()};
    } else if (raw != nullptr && raw->is_array() && !raw->empty()) {
      for (const auto& v : *raw) sizes.push_back(v.is_number_integer() ? v.get<int>() : 0);
    } else {
      a.Fail("min_size", "is required: an integer or a list of them");
    }
    for (int s : sizes) a.Require(s > 0 && s <= 16384, "min_size", "must be in [1, 16384]");
    if (sizes.empty()) sizes = {1};
    a.Record("min_size", sizes);
    const int max_size = a.Int("max_size", 1333);
    const int interp = a.Interpolation("interpolation", "bilinear");
    a.Require(max_size > 0 && max_size <= 16384, "max_size", "must be in [1, 16384]");
    return std::unique_ptr<Op>(new RandomShortestSize(std::move(sizes), max_size, interp));
  });
  RegisterOp("letterbox", [](OpArgs& a) -> Result<std::unique_ptr<Op>> {
    const auto size = a.Size("size", {640, 640});
    const auto fill = a.Fill("fill", 114);
    const bool scaleup = a.Bool("scaleup", true);
    const int interp = a.Interpolation("interpolation", "bilinear");
    return std::unique_ptr<Op>(new Letterbox(size, fill, scaleup, interp));
  });
}

}  // namespace ferry
