// Format sniffing and header parsing for the non-JPEG formats OpenCV decodes.
// The header parse exists for one reason: refuse pixel bombs before OpenCV allocates.
#ifndef FERRY_IMAGE_IMAGE_DECODER_H_
#define FERRY_IMAGE_IMAGE_DECODER_H_

#include <string_view>

#include <opencv2/core.hpp>

#include "ferry/status.h"

namespace ferry {

enum class ImageFormat { kUnknown, kJpeg, kPng, kBmp, kWebp, kPnm, kTiff, kGif };

std::string_view ImageFormatName(ImageFormat f);
// From the first bytes (magic numbers), not from the file name.
ImageFormat SniffFormat(std::string_view data);

struct ImageSize {
  int width = 0;
  int height = 0;
};
// Width and height from the header of a PNG, BMP, WebP or PNM image; {0,0} when the
// format's header is not parsed here (TIFF), in which case OpenCV's own limit applies.
Result<ImageSize> PeekImageSize(ImageFormat format, std::string_view data);

// Decodes a non-JPEG image with OpenCV (alpha dropped, 16-bit reduced to 8-bit, EXIF
// orientation applied), refusing more than max_pixels. RGB (CV_8UC3) or gray (CV_8UC1).
Result<cv::Mat> DecodeWithOpenCV(ImageFormat format, std::string_view data, bool gray, int64_t max_pixels);

}  // namespace ferry

#endif  // FERRY_IMAGE_IMAGE_DECODER_H_
