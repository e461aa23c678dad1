// Format sniffing, header parsing and decoding of the formats other than JPEG (their
// decoders: image/format_decoders.h). The header parse exists for one reason: refuse
// pixel bombs before anything allocates.
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
// Width and height from the header of a PNG, BMP, WebP, PNM, TIFF or GIF image.
Result<ImageSize> PeekImageSize(ImageFormat format, std::string_view data);

// Decodes a PNG, WebP, TIFF, BMP or PNM image (alpha dropped, 16-bit reduced to 8-bit),
// refusing more than max_pixels from its header. RGB (CV_8UC3) or gray (CV_8UC1), as
// OpenCV's imdecode gave them (format_decoders.h). GIF is unsupported, as it was.
Result<cv::Mat> DecodeImage(ImageFormat format, std::string_view data, bool gray, int64_t max_pixels);

}  // namespace ferry

#endif  // FERRY_IMAGE_IMAGE_DECODER_H_
