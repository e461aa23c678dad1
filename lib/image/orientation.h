// EXIF orientation: mapping a window of the oriented image to the stored one (so a
// crop can be chosen before decoding), and applying the orientation to pixels.
#ifndef FERRY_IMAGE_ORIENTATION_H_
#define FERRY_IMAGE_ORIENTATION_H_

#include <opencv2/core.hpp>

namespace ferry {

// Maps a window of the EXIF-oriented image to the stored image (orientation 1..8).
// stored_w/stored_h are the dimensions as stored in the file.
cv::Rect OrientedToStored(cv::Rect r, int orientation, int stored_w, int stored_h);
// Applies the EXIF orientation to pixels (a copy unless orientation == 1).
cv::Mat ApplyOrientation(const cv::Mat& stored, int orientation);

}  // namespace ferry

#endif  // FERRY_IMAGE_ORIENTATION_H_
