#include "image/image_decoder.h"

#include <cstring>
#include <string>

#include "image/format_decoders.h"

namespace ferry {

namespace {
using internal::Le16;
using internal::Le32;
uint32_t Be32(const unsigned char* p) { return uint32_t(p[3]) | uint32_t(p[2]) << 8 | uint32_t(p[1]) << 16 | uint32_t(p[0]) << 24; }
uint32_t Le24(const unsigned char* p) { return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16; }

Result<ImageSize> Truncated(ImageFormat f) {
  return Status::DataLoss("corrupt " + std::string(ImageFormatName(f)) + ": header truncated");
}
}  // namespace

std::string_view ImageFormatName(ImageFormat f) {
  switch (f) {
    case ImageFormat::kJpeg: return "JPEG";
    case ImageFormat::kPng: return "PNG";
    case ImageFormat::kBmp: return "BMP";
    case ImageFormat::kWebp: return "WebP";
    case ImageFormat::kPnm: return "PNM";
    case ImageFormat::kTiff: return "TIFF";
    case ImageFormat::kGif: return "GIF";
    case ImageFormat::kUnknown: break;
  }
  return "unknown";
}

ImageFormat SniffFormat(std::string_view d) {
  const auto* p = reinterpret_cast<const unsigned char*>(d.data());
  const size_t n = d.size();
  if (n >= 3 && p[0] == 0xFF && p[1] == 0xD8 && p[2] == 0xFF) return ImageFormat::kJpeg;
  if (n >= 8 && std::memcmp(p, "\x89PNG\r\n\x1a\n", 8) == 0) return ImageFormat::kPng;
  if (n >= 2 && p[0] == 'B' && p[1] == 'M') return ImageFormat::kBmp;
  if (n >= 12 && std::memcmp(p, "RIFF", 4) == 0 && std::memcmp(p + 8, "WEBP", 4) == 0) return ImageFormat::kWebp;
  if (n >= 2 && p[0] == 'P' && p[1] >= '1' && p[1] <= '6') return ImageFormat::kPnm;
  if (n >= 4 && (std::memcmp(p, "II*\0", 4) == 0 || std::memcmp(p, "MM\0*", 4) == 0)) return ImageFormat::kTiff;
  if (n >= 6 && (std::memcmp(p, "GIF87a", 6) == 0 || std::memcmp(p, "GIF89a", 6) == 0)) return ImageFormat::kGif;
  return ImageFormat::kUnknown;
}

Result<ImageSize> PeekImageSize(ImageFormat f, std::string_view d) {
  const auto* p = reinterpret_cast<const unsigned char*>(d.data());
  const size_t n = d.size();
  ImageSize s;
  switch (f) {
    case ImageFormat::kPng:
      if (n < 24 || std::memcmp(p + 12, "IHDR", 4) != 0) return Truncated(f);
      s.width = int(std::min<uint32_t>(Be32(p + 16), INT32_MAX));
      s.height = int(std::min<uint32_t>(Be32(p + 20), INT32_MAX));
      return s;
    case ImageFormat::kBmp: {
      if (n < 26) return Truncated(f);
      const uint32_t hdr = Le32(p + 14);
      if (hdr == 12) {  // OS/2 BITMAPCOREHEADER
        s.width = Le16(p + 18);
        s.height = Le16(p + 20);
      } else {
        const int32_t w = int32_t(Le32(p + 18)), h = int32_t(Le32(p + 22));
        s.width = w < 0 ? (w == INT32_MIN ? INT32_MAX : -w) : w;
        s.height = h < 0 ? (h == INT32_MIN ? INT32_MAX : -h) : h;
      }
      return s;
    }
    case ImageFormat::kWebp: {
      if (n < 30) return Truncated(f);
      if (std::memcmp(p + 12, "VP8X", 4) == 0) {
        s.width = int(Le24(p + 24) + 1);
        s.height = int(Le24(p + 27) + 1);
      } else if (std::memcmp(p + 12, "VP8L", 4) == 0) {
        const uint32_t b = Le32(p + 21);
        s.width = int((b & 0x3FFF) + 1);
        s.height = int(((b >> 14) & 0x3FFF) + 1);
      } else if (std::memcmp(p + 12, "VP8 ", 4) == 0) {
        s.width = Le16(p + 26) & 0x3FFF;
        s.height = Le16(p + 28) & 0x3FFF;
      } else {
        return Status::DataLoss("corrupt WebP: unknown chunk");
      }
      return s;
    }
    case ImageFormat::kPnm: {
      // "P6 <ws> width <ws> height ..." with optional # comments.
      size_t i = 2;
      long vals[2] = {0, 0};
      for (int k = 0; k < 2; ++k) {
        for (;;) {
          while (i < n && std::isspace(static_cast<unsigned char>(d[i]))) ++i;
          if (i < n && d[i] == '#') {
            while (i < n && d[i] != '\n') ++i;
            continue;
          }
          break;
        }
        if (i >= n || !std::isdigit(static_cast<unsigned char>(d[i]))) return Truncated(f);
        long v = 0;
        while (i < n && std::isdigit(static_cast<unsigned char>(d[i])) && v < (1L << 40)) v = v * 10 + (d[i++] - '0');
        vals[k] = v;
      }
      s.width = int(std::min<long>(vals[0], INT32_MAX));
      s.height = int(std::min<long>(vals[1], INT32_MAX));
      return s;
    }
    case ImageFormat::kTiff: {
      // The first IFD (the page imdecode reads): ImageWidth (256) and ImageLength
      // (257), each a SHORT or a LONG. OpenCV allocates from them before it reads a
      // pixel, so a 16-byte TIFF can ask for gigabytes per decode thread.
      const bool le = p[0] == 'I';
      auto u16 = [&](size_t at) { return le ? Le16(p + at) : uint16_t(p[at] << 8 | p[at + 1]); };
      auto u32 = [&](size_t at) { return le ? Le32(p + at) : Be32(p + at); };
      if (n < 8) return Truncated(f);
      const uint32_t ifd = u32(4);
      if (ifd < 8 || uint64_t(ifd) + 2 > n) return Truncated(f);
      const uint16_t entries = u16(ifd);
      uint64_t width = 0, height = 0;
      for (uint32_t i = 0; i < entries; ++i) {
        const size_t at = size_t(ifd) + 2 + 12 * size_t(i);
        if (at + 12 > n) return Truncated(f);
        const uint16_t tag = u16(at), type = u16(at + 2);
        if (tag != 256 && tag != 257) continue;
        const uint64_t v = type == 3 ? u16(at + 8) : type == 4 ? u32(at + 8) : 0;
        if (v == 0) return Status::DataLoss("corrupt TIFF: image size of type " + std::to_string(type));
        (tag == 256 ? width : height) = v;
      }
      if (width == 0 || height == 0) return Status::DataLoss("corrupt TIFF: no image size in its first IFD");
      s.width = int(std::min<uint64_t>(width, INT32_MAX));
      s.height = int(std::min<uint64_t>(height, INT32_MAX));
      return s;
    }
    case ImageFormat::kGif:
      // The logical screen; no frame may be larger.
      if (n < 10) return Truncated(f);
      s.width = Le16(p + 6);
      s.height = Le16(p + 8);
      return s;
    default:
      return s;
  }
}

Result<cv::Mat> DecodeImage(ImageFormat f, std::string_view d, bool gray, int64_t max_pixels) {
  FERRY_ASSIGN_OR_RETURN(ImageSize size, PeekImageSize(f, d));
  if (int64_t(size.width) * size.height > max_pixels) {
    return Status::ResourceExhausted("image too large: " + std::to_string(size.width) + "x" +
                                     std::to_string(size.height) + " exceeds the limit of " +
                                     std::to_string(max_pixels) + " pixels");
  }
  try {
    switch (f) {
      case ImageFormat::kPng: return DecodePng(d, gray, max_pixels);
      case ImageFormat::kWebp: return DecodeWebp(d, gray, max_pixels);
      case ImageFormat::kTiff: return DecodeTiff(d, gray, max_pixels);
      case ImageFormat::kBmp: return DecodeBmp(d, gray, max_pixels);
      case ImageFormat::kPnm: return DecodePnm(d, gray, max_pixels);
      default: break;
    }
  } catch (const cv::Exception& e) {
    return Status::DataLoss("corrupt " + std::string(ImageFormatName(f)) + ": " + e.msg);
  } catch (const std::bad_alloc&) {
    return Status::ResourceExhausted("out of memory decoding " + std::string(ImageFormatName(f)));
  }
  return Status::DataLoss("unsupported " + std::string(ImageFormatName(f)) + " image");
}

}  // namespace ferry
