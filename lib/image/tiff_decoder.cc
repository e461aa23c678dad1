// TIFF through libtiff, from memory (TIFFClientOpenExt), with its errors kept per
// handle (TIFFOpenOptions: no process-wide handler, no stderr) and its allocations
// bounded. The first directory (page), read through libtiff's RGBA interface, as OpenCV
// 4.6's TiffDecoder does for 8-bit images: every photometric interpretation, bit depth
// and layout libtiff knows becomes 8-bit RGBA, oriented top-left.
#include <tiffio.h>

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <string>

#include <opencv2/imgproc.hpp>

#include "image/format_decoders.h"

namespace ferry {

namespace {

struct TiffSource {
  const char* data;
  toff_t size;
  toff_t pos = 0;
  char error[200] = "";
};

tmsize_t Read(thandle_t h, void* out, tmsize_t n) {
  auto* s = static_cast<TiffSource*>(h);
  if (n <= 0 || s->pos >= s->size) return 0;
  const tmsize_t got = tmsize_t(std::min<toff_t>(toff_t(n), s->size - s->pos));
  std::memcpy(out, s->data + s->pos, size_t(got));
  s->pos += toff_t(got);
  return got;
}
tmsize_t Write(thandle_t, void*, tmsize_t) { return 0; }
toff_t Seek(thandle_t h, toff_t off, int whence) {
  auto* s = static_cast<TiffSource*>(h);
  const toff_t base = whence == SEEK_CUR ? s->pos : whence == SEEK_END ? s->size : 0;
  if (off > ~toff_t(0) - base) return toff_t(-1);
  s->pos = base + off;
  return s->pos;
}
int Close(thandle_t) { return 0; }
toff_t Size(thandle_t h) { return static_cast<TiffSource*>(h)->size; }
int Map(thandle_t, void**, toff_t*) { return 0; }
void Unmap(thandle_t, void*, toff_t) {}

int OnError(TIFF*, void* user, const char* module, const char* fmt, va_list ap) {
  auto* s = static_cast<TiffSource*>(user);
  if (s->error[0] == '\0') {  // the first error says what went wrong
    const int n = std::snprintf(s->error, sizeof s->error, "%s: ", module != nullptr ? module : "libtiff");
    if (n > 0 && size_t(n) < sizeof s->error) std::vsnprintf(s->error + n, sizeof s->error - size_t(n), fmt, ap);
  }
  return 1;  // handled: nothing goes to stderr
}
int OnWarning(TIFF*, void*, const char*, const char*, va_list) { return 1; }

struct TiffHandle {
  TIFFOpenOptions* options = TIFFOpenOptionsAlloc();
  TIFF* tiff = nullptr;
  ~TiffHandle() {
    if (tiff != nullptr) TIFFClose(tiff);
    if (options != nullptr) TIFFOpenOptionsFree(options);
  }
};

}  // namespace

Result<cv::Mat> DecodeTiff(std::string_view data, bool gray, int64_t max_pixels) {
  TiffSource src{data.data(), toff_t(data.size())};
  TiffHandle h;
  if (h.options == nullptr) return Status::ResourceExhausted("out of memory decoding TIFF");
  TIFFOpenOptionsSetErrorHandlerExtR(h.options, OnError, &src);
  TIFFOpenOptionsSetWarningHandlerExtR(h.options, OnWarning, &src);
  // No single allocation of libtiff's beyond the image's own RGBA raster (which is ours).
  TIFFOpenOptionsSetMaxSingleMemAlloc(h.options, tmsize_t(256) << 20);
  h.tiff = TIFFClientOpenExt("memory", "rm", &src, Read, Write, Seek, Close, Size, Map, Unmap, h.options);
  if (h.tiff == nullptr) return Status::DataLoss(std::string("corrupt TIFF: ") + src.error);
  uint32_t width = 0, height = 0;
  if (!TIFFGetField(h.tiff, TIFFTAG_IMAGEWIDTH, &width) || !TIFFGetField(h.tiff, TIFFTAG_IMAGELENGTH, &height))
    return Status::DataLoss("corrupt TIFF: no image size");
  FERRY_RETURN_IF_ERROR(internal::CheckPixels("TIFF", width, height, max_pixels));
  char why[1024] = "";
  if (!TIFFRGBAImageOK(h.tiff, why)) return Status::DataLoss(std::string("unsupported TIFF: ") + why);
  cv::Mat rgba;
  try {
    rgba.create(int(height), int(width), CV_8UC4);
  } catch (const cv::Exception&) {
    return Status::ResourceExhausted("out of memory decoding TIFF");
  }
  // ABGR words: in memory R, G, B, A on a little-endian machine (the only kind Ferry
  // builds for; checked below).
  static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "TIFF RGBA words read as bytes R, G, B, A");
  if (!TIFFReadRGBAImageOriented(h.tiff, width, height, reinterpret_cast<uint32_t*>(rgba.data), ORIENTATION_TOPLEFT, 0))
    return Status::DataLoss(std::string("corrupt TIFF: ") + (src.error[0] != '\0' ? src.error : "the image does not decode"));
  cv::Mat out;
  if (gray) {  // through BGR, with OpenCV's TIFF reader's own gray weights
    cv::cvtColor(rgba, out, cv::COLOR_RGBA2BGR);
    return internal::ToGray14(out);
  }
  cv::cvtColor(rgba, out, cv::COLOR_RGBA2RGB);
  return out;
}

}  // namespace ferry
