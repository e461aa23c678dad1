// Decoders of the image formats other than JPEG (libjpeg-turbo's, image/jpeg_decoder.h),
// each through its own library: libpng, libwebp, libtiff; BMP and PNM, too simple to
// need one, by hand. They replace OpenCV's imgcodecs module, whose Debian build drags
// in GDAL, GDCM, OpenEXR and a hundred more libraries that Ferry never calls (a wheel
// that carried them would weigh 180 MB): Ferry links OpenCV's core and imgproc only.
//
// Each gives what OpenCV 4.6's imdecode gave Ferry before (IMREAD_COLOR, then BGR to RGB;
// or IMREAD_GRAYSCALE): 8-bit RGB (CV_8UC3) or gray (CV_8UC1), alpha dropped (not
// composited), 16-bit samples reduced to their high byte, gray made from colour with
// ITU-R 601 weights. tests/image/format_decoders_test.cc compares every one with
// imdecode, byte for byte, over the variants of each format.
//
// Errors: DataLoss for a corrupt or unsupported image (naming the format and why),
// ResourceExhausted for one of more than `max_pixels` pixels, refused from its header
// before anything is allocated. Thread-safe: no global state (libtiff's error handlers
// are per handle; libpng's per read).
#ifndef FERRY_IMAGE_FORMAT_DECODERS_H_
#define FERRY_IMAGE_FORMAT_DECODERS_H_

#include <cstdint>
#include <string_view>

#include <opencv2/core.hpp>

#include "ferry/status.h"

namespace ferry {

Result<cv::Mat> DecodePng(std::string_view data, bool gray, int64_t max_pixels);
Result<cv::Mat> DecodeWebp(std::string_view data, bool gray, int64_t max_pixels);
Result<cv::Mat> DecodeTiff(std::string_view data, bool gray, int64_t max_pixels);
Result<cv::Mat> DecodeBmp(std::string_view data, bool gray, int64_t max_pixels);
Result<cv::Mat> DecodePnm(std::string_view data, bool gray, int64_t max_pixels);

namespace internal {
inline uint32_t Le32(const unsigned char* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}
inline uint16_t Le16(const unsigned char* p) { return uint16_t(p[0] | p[1] << 8); }
// ResourceExhausted when width x height exceeds max_pixels (or is not positive: DataLoss).
Status CheckPixels(const char* format, int64_t width, int64_t height, int64_t max_pixels);
// RGB (or BGR, `bgr`) to gray as cv::cvtColor does (15-bit fixed point), which
// OpenCV's WebP reader uses.
cv::Mat ToGray(const cv::Mat& color, bool bgr);
// BGR to gray as OpenCV's own BMP, PNM and TIFF readers do (imgcodecs' utils: 14-bit fixed
// point, 0.299/0.587/0.114, rounded), which differs from cvtColor's in the last bit of
// about one sample in a hundred.
cv::Mat ToGray14(const cv::Mat& bgr);
}  // namespace internal

}  // namespace ferry

#endif  // FERRY_IMAGE_FORMAT_DECODERS_H_
