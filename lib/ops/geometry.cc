#include "ops/geometry.h"

#include <algorithm>

#include <opencv2/imgproc.hpp>

#include "ops/kernels/resample.h"

namespace ferry {

void Resample(const cv::Mat& src, cv::Mat& dst, int interp) {
  if (src.cols == dst.cols && src.rows == dst.rows) {
    src.copyTo(dst);
    return;
  }
  kernels::PilResize(src, dst,
                     interp == kNearest   ? kernels::Interp::kNearest
                     : interp == kBicubic ? kernels::Interp::kBicubic
                                          : kernels::Interp::kBilinear);
}

void ResampleFused(const cv::Mat& src, cv::Mat& dst, int interp) {
  if (interp != kBilinear || (src.cols == dst.cols && src.rows == dst.rows)) return Resample(src, dst, interp);
  const bool near = src.cols <= 3 * dst.cols && src.rows <= 3 * dst.rows;
  cv::resize(src, dst, dst.size(), 0, 0, near ? cv::INTER_LINEAR : cv::INTER_AREA);
}

cv::Rect RandomResizedCropBox(int width, int height, std::pair<double, double> scale,
                              std::pair<double, double> ratio, SampleRng& rng) {
  const double area = double(width) * height;
  const double log_lo = std::log(ratio.first), log_hi = std::log(ratio.second);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target_area = area * rng.Uniform(scale.first, scale.second);
    const double aspect = std::exp(rng.Uniform(log_lo, log_hi));
    const int w = PyRound(std::sqrt(target_area * aspect));
    const int h = PyRound(std::sqrt(target_area / aspect));
    if (w > 0 && w <= width && h > 0 && h <= height) {
      const int i = int(rng.Below(uint64_t(height - h + 1)));
      const int j = int(rng.Below(uint64_t(width - w + 1)));
      return {j, i, w, h};
    }
  }
  const double in_ratio = double(width) / height;
  int w, h;
  if (in_ratio < ratio.first) {
    w = width;
    h = PyRound(w / ratio.first);
  } else if (in_ratio > ratio.second) {
    h = height;
    w = PyRound(h * ratio.second);
  } else {
    w = width;
    h = height;
  }
  w = std::clamp(w, 1, width);
  h = std::clamp(h, 1, height);
  return {(width - w) / 2, (height - h) / 2, w, h};
}

CropPlan ComposeCropPlans(const CropPlan& first, const CropPlan& crop, int w, int h) {
  const double sx = double(first.window.width) / first.out_w, sy = double(first.window.height) / first.out_h;
  const cv::Rect& c = crop.window;
  int x0 = first.window.x + PyRound(c.x * sx), x1 = first.window.x + PyRound((c.x + c.width) * sx);
  int y0 = first.window.y + PyRound(c.y * sy), y1 = first.window.y + PyRound((c.y + c.height) * sy);
  x0 = std::clamp(x0, 0, w - 1);
  y0 = std::clamp(y0, 0, h - 1);
  x1 = std::clamp(x1, x0 + 1, w);
  y1 = std::clamp(y1, y0 + 1, h);
  CropPlan out = first;
  out.window = {x0, y0, x1 - x0, y1 - y0};
  out.out_w = crop.out_w;
  out.out_h = crop.out_h;
  out.canvas_w = crop.canvas_w, out.canvas_h = crop.canvas_h;
  out.canvas_x = crop.canvas_x, out.canvas_y = crop.canvas_y;
  out.fill = crop.fill;
  return out;
}

std::pair<int, int> ResizedSize(int height, int width, std::pair<int, int> size, bool shorter, int max_size) {
  if (!shorter) return size;
  const bool w_short = width <= height;
  const int s = w_short ? width : height, l = w_short ? height : width;
  int new_short = size.first;
  int new_long = int(double(new_short) * l / s);  // Python's int(short * long / short)
  if (max_size > 0 && new_long > max_size) {
    new_short = int(double(max_size) * new_short / new_long);
    new_long = max_size;
  }
  new_short = std::max(new_short, 1);
  new_long = std::max(new_long, 1);
  return w_short ? std::pair<int, int>{new_long, new_short} : std::pair<int, int>{new_short, new_long};
}

cv::Mat Pad(const cv::Mat& img, const std::array<int, 4>& p, const std::array<uint8_t, 3>& fill, PadMode mode) {
  // Negative padding crops first (as torchvision's F.pad).
  const int cl = std::max(0, -p[0]), ct = std::max(0, -p[1]), cr = std::max(0, -p[2]), cb = std::max(0, -p[3]);
  cv::Mat src = img;
  if (cl || ct || cr || cb) {
    const int w = std::max(0, img.cols - cl - cr), h = std::max(0, img.rows - ct - cb);
    src = img(cv::Rect(std::min(cl, img.cols), std::min(ct, img.rows), w, h));
  }
  int border = cv::BORDER_CONSTANT;
  switch (mode) {
    case PadMode::kConstant: border = cv::BORDER_CONSTANT; break;
    case PadMode::kEdge: border = cv::BORDER_REPLICATE; break;
    case PadMode::kReflect: border = cv::BORDER_REFLECT_101; break;    // numpy "reflect"
    case PadMode::kSymmetric: border = cv::BORDER_REFLECT; break;      // numpy "symmetric"
  }
  cv::Mat out;
  cv::copyMakeBorder(src, out, std::max(0, p[1]), std::max(0, p[3]), std::max(0, p[0]), std::max(0, p[2]), border,
                     cv::Scalar(fill[0], fill[1], fill[2]));
  return out;
}

std::array<int, 4> PaddingArg(OpArgs& args, const char* key) {
  std::array<int, 4> p{0, 0, 0, 0};
  const nlohmann::json* j = args.Raw(key);
  if (j != nullptr) {
    std::vector<int> v;
    auto integer = [](const nlohmann::json& e) { return e.is_number_integer() ? WholeInt(e) : std::nullopt; };
    if (std::optional<int> one = integer(*j)) {
      v.push_back(*one);
    } else if (j->is_array()) {
      for (const auto& e : *j) {
        const std::optional<int> x = integer(e);
        if (!x) {
          v.clear();
          break;
        }
        v.push_back(*x);
      }
    }
    if (v.size() == 1) p = {v[0], v[0], v[0], v[0]};
    else if (v.size() == 2) p = {v[0], v[1], v[0], v[1]};
    else if (v.size() == 4) p = {v[0], v[1], v[2], v[3]};
    else args.Fail(key, "must be an int, [left/right, top/bottom] or [left, top, right, bottom]");
    for (int x : p) args.Require(std::abs(x) <= 4096, key, "must be within [-4096, 4096]");
  }
  args.Record(key, {p[0], p[1], p[2], p[3]});
  return p;
}

PadMode PadModeArg(OpArgs& args, const char* key) {
  const std::string m = args.String(key, "constant");
  if (m == "constant") return PadMode::kConstant;
  if (m == "edge") return PadMode::kEdge;
  if (m == "reflect") return PadMode::kReflect;
  if (m == "symmetric") return PadMode::kSymmetric;
  args.Fail(key, "must be \"constant\", \"edge\", \"reflect\" or \"symmetric\"");
  return PadMode::kConstant;
}

}  // namespace ferry
