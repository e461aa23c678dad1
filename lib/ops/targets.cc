#include "ops/targets.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include <opencv2/imgproc.hpp>

namespace ferry {

Warp IdentityWarp() { return Warp::eye(); }

Warp CropResizeWarp(double x0, double y0, double w, double h, int out_w, int out_h) {
  const double sx = out_w / w, sy = out_h / h;
  return Warp(sx, 0, -x0 * sx, 0, sy, -y0 * sy, 0, 0, 1);
}

Warp HFlipWarp(int width) { return Warp(-1, 0, width, 0, 1, 0, 0, 0, 1); }
Warp VFlipWarp(int height) { return Warp(1, 0, 0, 0, -1, height, 0, 0, 1); }

Warp FromPilAffine(const double c[6]) {
  return Warp(c[0], c[1], c[2], c[3], c[4], c[5], 0, 0, 1).inv();
}

Warp FromPilPerspective(const double c[8]) {
  return Warp(c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7], 1).inv();
}

namespace {

// m applied to (x, y); false when the point maps to infinity or behind (w <= 0).
bool MapPoint(const Warp& m, double x, double y, cv::Point2d* out) {
  const double w = m(2, 0) * x + m(2, 1) * y + m(2, 2);
  if (!(w > 1e-12)) return false;
  out->x = (m(0, 0) * x + m(0, 1) * y + m(0, 2)) / w;
  out->y = (m(1, 0) * x + m(1, 1) * y + m(1, 2)) / w;
  return std::isfinite(out->x) && std::isfinite(out->y);
}

// The bounding box of a box's four corners under m; an empty box when a corner does
// not map.
std::array<double, 4> MapBox(const Warp& m, const std::array<double, 4>& b) {
  const double xs[4] = {b[0], b[2], b[2], b[0]}, ys[4] = {b[1], b[1], b[3], b[3]};
  std::array<double, 4> r = {std::numeric_limits<double>::infinity(), std::numeric_limits<double>::infinity(),
                             -std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity()};
  for (int k = 0; k < 4; ++k) {
    cv::Point2d p;
    if (!MapPoint(m, xs[k], ys[k], &p)) return {0, 0, 0, 0};
    r[0] = std::min(r[0], p.x), r[1] = std::min(r[1], p.y);
    r[2] = std::max(r[2], p.x), r[3] = std::max(r[3], p.y);
  }
  return r;
}

// Sutherland-Hodgman: the part of a convex polygon inside [0, w] x [0, h].
std::vector<cv::Point2d> ClipToRect(const std::vector<cv::Point2d>& poly, double w, double h) {
  std::vector<cv::Point2d> cur = poly, next;
  // Each edge as (axis, bound, keep the side below the bound).
  const struct {
    int axis;
    double bound;
    bool below;
  } edges[4] = {{0, 0, false}, {0, w, true}, {1, 0, false}, {1, h, true}};
  for (const auto& e : edges) {
    next.clear();
    auto coord = [&](const cv::Point2d& p) { return e.axis == 0 ? p.x : p.y; };
    auto inside = [&](const cv::Point2d& p) { return e.below ? coord(p) <= e.bound : coord(p) >= e.bound; };
    for (size_t i = 0; i < cur.size(); ++i) {
      const cv::Point2d& a = cur[i];
      const cv::Point2d& b = cur[(i + 1) % cur.size()];
      const bool ia = inside(a), ib = inside(b);
      if (ia) next.push_back(a);
      if (ia != ib) {
        const double t = (e.bound - coord(a)) / (coord(b) - coord(a));
        next.push_back(a + t * (b - a));
      }
    }
    cur.swap(next);
    if (cur.empty()) break;
  }
  return cur;
}

// A point to OpenCV's drawing coordinates: pixel centres at integers, 8 fraction bits.
constexpr int kShift = 8;
cv::Point ToDrawing(const cv::Point2d& p) {
  const double s = 1 << kShift;
  const double lim = 1 << 20;  // keeps far-off points inside int range; fillPoly clips
  return cv::Point(int(std::lround(std::clamp(p.x - 0.5, -lim, lim) * s)),
                   int(std::lround(std::clamp(p.y - 0.5, -lim, lim) * s)));
}

// dst(y, x) for x, y in `region`: src at the point inv maps the pixel's centre to,
// nearest neighbour; `outside` where it falls off src. With `binary`, nonzero -> 1.
void WarpNearest(const cv::Mat& src, const Warp& inv, cv::Mat& dst, const cv::Rect& region, uint8_t outside,
                 bool binary) {
  for (int y = region.y; y < region.y + region.height; ++y) {
    uint8_t* row = dst.ptr<uint8_t>(y);
    for (int x = region.x; x < region.x + region.width; ++x) {
      cv::Point2d p;
      uint8_t v = outside;
      if (MapPoint(inv, x + 0.5, y + 0.5, &p)) {
        const double fx = std::floor(p.x), fy = std::floor(p.y);
        if (fx >= 0 && fy >= 0 && fx < src.cols && fy < src.rows) {
          v = src.at<uint8_t>(int(fy), int(fx));
          if (binary) v = v != 0;
        }
      }
      row[x] = v;
    }
  }
}

}  // namespace

Status ValidateTargets(const SampleTargets& t, int width, int height) {
  const size_t n = t.boxes.size();
  auto count = [n](const char* field, size_t got) -> Status {
    if (got == n) return Status::OK();
    return Status::InvalidArgument("targets: " + std::to_string(n) + " boxes but " + std::to_string(got) + " " +
                                   field + ": give one per box");
  };
  FERRY_RETURN_IF_ERROR(count("labels", t.labels.size()));
  if (!t.iscrowd.empty()) FERRY_RETURN_IF_ERROR(count("iscrowd values", t.iscrowd.size()));
  if (!t.area.empty()) FERRY_RETURN_IF_ERROR(count("areas", t.area.size()));
  if (!t.masks.empty()) FERRY_RETURN_IF_ERROR(count("masks", t.masks.size()));
  for (size_t i = 0; i < n; ++i) {
    const auto& b = t.boxes[i];
    for (float v : b)
      if (!std::isfinite(v)) return Status::InvalidArgument("targets: box " + std::to_string(i) + " is not finite");
    if (b[2] < b[0] || b[3] < b[1])
      return Status::InvalidArgument("targets: box " + std::to_string(i) + " has x2 < x1 or y2 < y1 (XYXY)");
  }
  for (size_t i = 0; i < t.masks.size(); ++i) {
    const InstanceMask& m = t.masks[i];
    if (!m.raster.empty() && (m.raster.type() != CV_8UC1 || m.raster.cols != width || m.raster.rows != height))
      return Status::InvalidArgument("targets: the mask of box " + std::to_string(i) + " is not a " +
                                     std::to_string(width) + "x" + std::to_string(height) + " uint8 image");
    for (const auto& poly : m.polygons)
      for (const cv::Point2f& p : poly)
        if (!std::isfinite(p.x) || !std::isfinite(p.y))
          return Status::InvalidArgument("targets: the polygon of box " + std::to_string(i) + " is not finite");
  }
  if (!t.semantic.empty() && (t.semantic.type() != CV_8UC1 || t.semantic.cols != width || t.semantic.rows != height))
    return Status::InvalidArgument("targets: the semantic mask is " + std::to_string(t.semantic.cols) + "x" +
                                   std::to_string(t.semantic.rows) + ", not the image's " + std::to_string(width) +
                                   "x" + std::to_string(height) + " (or not one uint8 channel)");
  return Status::OK();
}

TargetTracker::TargetTracker(SampleTargets* t, int width, int height)
    : t_(t), w_(width), h_(height), total_(Warp::eye()) {
  visible_ = {{0, 0}, {double(width), 0}, {double(width), double(height)}, {0, double(height)}};
  boxes_.reserve(t->boxes.size());
  for (const auto& b : t->boxes) boxes_.push_back({b[0], b[1], b[2], b[3]});
  dropped_.assign(boxes_.size(), 0);
}

std::vector<std::array<double, 4>> TargetTracker::LiveBoxes(std::vector<size_t>* ids) const {
  std::vector<std::array<double, 4>> out;
  ids->clear();
  for (size_t i = 0; i < boxes_.size(); ++i) {
    if (dropped_[i]) continue;
    out.push_back(boxes_[i]);
    ids->push_back(i);
  }
  return out;
}

void TargetTracker::Move(const Warp& m, int out_w, int out_h) {
  total_ = m * total_;
  for (auto& b : boxes_) {
    b = MapBox(m, b);
    b[0] = std::clamp(b[0], 0.0, double(out_w)), b[2] = std::clamp(b[2], 0.0, double(out_w));
    b[1] = std::clamp(b[1], 0.0, double(out_h)), b[3] = std::clamp(b[3], 0.0, double(out_h));
  }
  std::vector<cv::Point2d> moved;
  moved.reserve(visible_.size());
  for (const cv::Point2d& p : visible_) {
    cv::Point2d q;
    if (MapPoint(m, p.x, p.y, &q)) moved.push_back(q);
  }
  visible_ = moved.size() >= 3 ? ClipToRect(moved, out_w, out_h) : std::vector<cv::Point2d>{};
  w_ = out_w, h_ = out_h;
}

void TargetTracker::Finish(const TargetRules& rules) {
  SampleTargets& t = *t_;
  const size_t n = boxes_.size();
  // Where the output still shows the decoded image.
  cv::Mat visible;
  if (!t.masks.empty() || !t.semantic.empty()) {
    visible = cv::Mat::zeros(h_, w_, CV_8UC1);
    if (visible_.size() >= 3) {
      std::vector<cv::Point> poly;
      for (const cv::Point2d& p : visible_) poly.push_back(ToDrawing(p));
      cv::fillConvexPoly(visible, poly, cv::Scalar(1), cv::LINE_8, kShift);
    }
  }
  const Warp inv = total_.inv();
  // Every instance's mask at the output size (the dropped ones are left out below).
  cv::Mat planes;
  if (!t.masks.empty()) {
    planes = cv::Mat::zeros(int(n) * h_, w_, CV_8UC1);
    for (size_t i = 0; i < n; ++i) {
      const InstanceMask& src = t.masks[i];
      cv::Mat plane = planes.rowRange(int(i) * h_, int(i + 1) * h_);
      if (!src.polygons.empty()) {
        std::vector<std::vector<cv::Point>> polys;
        for (const auto& poly : src.polygons) {
          std::vector<cv::Point> mapped;
          for (const cv::Point2f& p : poly) {
            cv::Point2d q;
            if (MapPoint(total_, p.x, p.y, &q)) mapped.push_back(ToDrawing(q));
          }
          if (mapped.size() >= 3) polys.push_back(std::move(mapped));
        }
        if (!polys.empty()) cv::fillPoly(plane, polys, cv::Scalar(1), cv::LINE_8, kShift);
      }
      if (!src.raster.empty()) {
        // Only where the raster's nonzero pixels can land.
        const cv::Rect nz = cv::boundingRect(src.raster);
        if (nz.area() > 0) {
          const auto r = MapBox(total_, {double(nz.x), double(nz.y), double(nz.x + nz.width), double(nz.y + nz.height)});
          const int x0 = std::max(0, int(std::floor(r[0]))), y0 = std::max(0, int(std::floor(r[1])));
          const int x1 = std::min(w_, int(std::ceil(r[2]))), y1 = std::min(h_, int(std::ceil(r[3])));
          if (x1 > x0 && y1 > y0) {
            cv::Mat warped = cv::Mat::zeros(h_, w_, CV_8UC1);
            WarpNearest(src.raster, inv, warped, cv::Rect(x0, y0, x1 - x0, y1 - y0), 0, true);
            cv::max(plane, warped, plane);
          }
        }
      }
      cv::min(plane, visible, plane);
      if (rules.boxes_from_masks && (!src.polygons.empty() || !src.raster.empty())) {
        const cv::Rect r = cv::boundingRect(plane);
        boxes_[i] = {double(r.x), double(r.y), double(r.x + r.width), double(r.y + r.height)};
      }
    }
  }
  // Sanitize.
  std::vector<size_t> keep;
  for (size_t i = 0; i < n; ++i) {
    if (dropped_[i]) continue;
    const auto& b = boxes_[i];
    const double bw = b[2] - b[0], bh = b[3] - b[1];
    if (!(bw >= rules.min_size && bh >= rules.min_size && bw * bh >= rules.min_area)) continue;
    if (rules.min_visibility > 0) {
      const auto& s = t.boxes[i];
      const auto whole = MapBox(total_, {s[0], s[1], s[2], s[3]});
      const double all = (whole[2] - whole[0]) * (whole[3] - whole[1]);
      if (!(all > 0) || bw * bh < rules.min_visibility * all) continue;
    }
    keep.push_back(i);
  }
  if (!t.masks.empty()) {
    cv::Mat out(int(keep.size()) * h_, w_, CV_8UC1);
    for (size_t k = 0; k < keep.size(); ++k)
      planes.rowRange(int(keep[k]) * h_, int(keep[k] + 1) * h_).copyTo(out.rowRange(int(k) * h_, int(k + 1) * h_));
    t.instance_masks = out;
  }
  if (!t.semantic.empty()) {
    cv::Mat out(h_, w_, CV_8UC1);
    WarpNearest(t.semantic, inv, out, cv::Rect(0, 0, w_, h_), t.semantic_fill, false);
    out.setTo(cv::Scalar(t.semantic_fill), visible == 0);
    t.semantic = out;
  }
  // The kept boxes and their fields, in order.
  std::vector<std::array<float, 4>> boxes;
  std::vector<int64_t> labels;
  std::vector<uint8_t> iscrowd;
  std::vector<float> area;
  for (size_t i : keep) {
    const auto& b = boxes_[i];
    boxes.push_back({float(b[0]), float(b[1]), float(b[2]), float(b[3])});
    labels.push_back(t.labels[i]);
    if (!t.iscrowd.empty()) iscrowd.push_back(t.iscrowd[i]);
    if (!t.area.empty()) area.push_back(t.area[i]);
  }
  t.boxes = std::move(boxes);
  t.labels = std::move(labels);
  t.iscrowd = std::move(iscrowd);
  t.area = std::move(area);
  t.masks.clear();
}

}  // namespace ferry
