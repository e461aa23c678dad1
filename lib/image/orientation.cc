#include "image/orientation.h"

#include <opencv2/core.hpp>

namespace ferry {

cv::Rect OrientedToStored(cv::Rect r, int o, int W, int H) {
  switch (o) {
    case 2: return {W - r.x - r.width, r.y, r.width, r.height};
    case 3: return {W - r.x - r.width, H - r.y - r.height, r.width, r.height};
    case 4: return {r.x, H - r.y - r.height, r.width, r.height};
    case 5: return {r.y, r.x, r.height, r.width};
    case 6: return {r.y, H - r.x - r.width, r.height, r.width};
    case 7: return {W - r.y - r.height, H - r.x - r.width, r.height, r.width};
    case 8: return {W - r.y - r.height, r.x, r.height, r.width};
    default: return r;
  }
}

cv::Mat ApplyOrientation(const cv::Mat& m, int o) {
  cv::Mat out;
  switch (o) {
    case 2: cv::flip(m, out, 1); break;
    case 3: cv::rotate(m, out, cv::ROTATE_180); break;
    case 4: cv::flip(m, out, 0); break;
    case 5: cv::transpose(m, out); break;
    case 6: cv::rotate(m, out, cv::ROTATE_90_CLOCKWISE); break;
    case 7: cv::transpose(m, out); cv::rotate(out, out, cv::ROTATE_180); break;
    case 8: cv::rotate(m, out, cv::ROTATE_90_COUNTERCLOCKWISE); break;
    default: return m;
  }
  return out;
}

}  // namespace ferry
