// WebP through libwebp. OpenCV 4.6's WebPDecoder decodes into BGR (BGRA when the
// bitstream has alpha, then drops it) and makes gray from that with cvtColor: libwebp's
// RGB output mode drops alpha the same way (it is not premultiplied), so colour is
// decoded straight into RGB and gray from BGR as OpenCV does.
#include <webp/decode.h>

#include <string>

#include <opencv2/imgproc.hpp>

#include "image/format_decoders.h"

namespace ferry {

Result<cv::Mat> DecodeWebp(std::string_view data, bool gray, int64_t max_pixels) {
  const auto* p = reinterpret_cast<const uint8_t*>(data.data());
  WebPBitstreamFeatures f;
  if (const VP8StatusCode s = WebPGetFeatures(p, data.size(), &f); s != VP8_STATUS_OK)
    return Status::DataLoss("corrupt WebP: header not read (libwebp status " + std::to_string(int(s)) + ")");
  if (f.has_animation) return Status::DataLoss("unsupported WebP: animated");
  FERRY_RETURN_IF_ERROR(internal::CheckPixels("WebP", f.width, f.height, max_pixels));
  cv::Mat color(f.height, f.width, CV_8UC3);
  const size_t bytes = color.step * size_t(color.rows);
  const uint8_t* ok = gray ? WebPDecodeBGRInto(p, data.size(), color.data, bytes, int(color.step))
                           : WebPDecodeRGBInto(p, data.size(), color.data, bytes, int(color.step));
  if (ok == nullptr) return Status::DataLoss("corrupt WebP: the image does not decode");
  return gray ? internal::ToGray(color, /*bgr=*/true) : color;
}

}  // namespace ferry
