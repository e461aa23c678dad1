// BMP and PNM, read by hand: both are headers and rows of samples, and no library
// Debian ships for them is smaller than this file. What each gives matches OpenCV 4.6's
// BmpDecoder and PxMDecoder (checked against imdecode in format_decoders_test.cc):
//   BMP: Windows (40 to 124-byte headers) and OS/2 (12-byte) headers; 1, 4 and 8 bits
//        through a palette (entries past the palette's end are black), RLE8 and RLE4
//        (pixels a run skips take the palette's first colour); 16 bits as 5-5-5, or
//        5-6-5 when its bit fields say so (the low bits of each 8-bit sample zero); 24
//        bits; 32 bits (the fourth byte ignored); bottom-up or top-down rows.
//   PNM: P1 to P6, plain or raw; plain samples clamped to the header's maximum and, when
//        8-bit, scaled to 0..255; raw ones as they are; 16-bit samples (a maximum above
//        255) reduced to their high byte.
// Every read is checked against the data's end: a file cut short is DataLoss.
#include <algorithm>
#include <array>
#include <cctype>
#include <cstring>
#include <string>

#include <opencv2/imgproc.hpp>

#include "image/format_decoders.h"

namespace ferry {

namespace {

using internal::Le16;
using internal::Le32;

Status Cut(const char* format) { return Status::DataLoss(std::string("corrupt ") + format + ": the data ends inside the image"); }

// A BGR image as the decoders build it; gray or RGB out.
cv::Mat Finish(cv::Mat bgr, bool gray) {
  if (gray) return internal::ToGray14(bgr);
  cv::cvtColor(bgr, bgr, cv::COLOR_BGR2RGB);
  return bgr;
}

// Runs of RLE8 (bits 8) or RLE4 (bits 4) into `bgr`, bottom row first (rows_up) or
// top row first. Skipped pixels keep the palette's first colour, with which `bgr` is
// filled first.
Status DecodeRle(const unsigned char* p, size_t n, int bits, const std::array<cv::Vec3b, 256>& palette,
                 bool rows_up, cv::Mat* bgr) {
  bgr->setTo(cv::Scalar(palette[0][0], palette[0][1], palette[0][2]));
  const int w = bgr->cols, h = bgr->rows;
  int x = 0, row = 0;  // row counts from the first row stored
  auto put = [&](uint8_t index) {
    if (x < w && row < h) bgr->at<cv::Vec3b>(rows_up ? h - 1 - row : row, x) = palette[index];
    ++x;
  };
  size_t i = 0;
  while (row < h) {
    if (i + 2 > n) return Status::OK();  // no end-of-bitmap mark: what was there is the image
    const uint8_t count = p[i], value = p[i + 1];
    i += 2;
    if (count > 0) {  // a run of `count` pixels
      for (int k = 0; k < count; ++k) put(bits == 8 ? value : (k % 2 == 0 ? value >> 4 : value & 15));
    } else if (value == 0) {  // end of line
      x = 0;
      ++row;
    } else if (value == 1) {  // end of bitmap
      break;
    } else if (value == 2) {  // delta: right and up (down the stored order)
      if (i + 2 > n) return Cut("BMP");
      x += p[i];
      row += p[i + 1];
      i += 2;
    } else {  // `value` literal pixels, padded to a 16-bit boundary
      const size_t bytes = bits == 8 ? value : (size_t(value) + 1) / 2;
      if (i + bytes > n) return Cut("BMP");
      for (int k = 0; k < value; ++k) put(bits == 8 ? p[i + size_t(k)] : (k % 2 == 0 ? p[i + size_t(k) / 2] >> 4 : p[i + size_t(k) / 2] & 15));
      i += (bytes + 1) & ~size_t(1);
    }
  }
  return Status::OK();
}

// Reads a PNM number: skips whitespace and '#' comments (to the end of their line).
bool PnmNumber(const unsigned char* p, size_t n, size_t* at, uint64_t* out) {
  size_t i = *at;
  for (;;) {
    while (i < n && std::isspace(p[i])) ++i;
    if (i < n && p[i] == '#') {
      while (i < n && p[i] != '\n' && p[i] != '\r') ++i;
      continue;
    }
    break;
  }
  if (i >= n || !std::isdigit(p[i])) return false;
  uint64_t v = 0;
  while (i < n && std::isdigit(p[i])) v = std::min<uint64_t>(v * 10 + (p[i++] - '0'), uint64_t(1) << 40);
  *at = i;
  *out = v;
  return true;
}

}  // namespace

Result<cv::Mat> DecodeBmp(std::string_view data, bool gray, int64_t max_pixels) {
  const auto* p = reinterpret_cast<const unsigned char*>(data.data());
  const size_t n = data.size();
  if (n < 26 || p[0] != 'B' || p[1] != 'M') return Cut("BMP");
  const uint32_t offset = Le32(p + 10), header = Le32(p + 14);
  int64_t width = 0, height = 0;
  int bits = 0;
  uint32_t compression = 0, colors = 0;
  size_t palette_at = 14 + size_t(header), entry = 4;
  uint32_t green_mask = 0;
  if (header == 12) {  // OS/2
    width = Le16(p + 18), height = int16_t(Le16(p + 20)), bits = Le16(p + 24);
    entry = 3;
  } else if (header >= 40 && header <= 124) {
    if (n < 14 + size_t(header)) return Cut("BMP");
    width = int32_t(Le32(p + 18)), height = int32_t(Le32(p + 22)), bits = Le16(p + 28);
    compression = Le32(p + 30), colors = Le32(p + 46);
    if (compression == 3) {  // bit fields: after a 40-byte header, or inside a longer one
      if (n < 14 + 40 + 12) return Cut("BMP");
      green_mask = Le32(p + 14 + 40 + 4);
      if (header == 40) palette_at += 12;
    }
  } else {
    return Status::DataLoss("unsupported BMP: a " + std::to_string(header) + "-byte header");
  }
  const bool rows_up = height > 0;
  height = std::abs(height);
  FERRY_RETURN_IF_ERROR(internal::CheckPixels("BMP", width, height, max_pixels));
  const bool rle = (compression == 1 && bits == 8) || (compression == 2 && bits == 4);
  if (!(compression == 0 || rle || (compression == 3 && (bits == 16 || bits == 32))) ||
      !(bits == 1 || bits == 4 || bits == 8 || bits == 16 || bits == 24 || bits == 32))
    return Status::DataLoss("unsupported BMP: " + std::to_string(bits) + " bits, compression " +
                            std::to_string(compression));
  std::array<cv::Vec3b, 256> palette{};  // B, G, R; black past the file's entries
  if (bits <= 8) {
    const size_t count = std::min<size_t>(colors != 0 ? colors : size_t(1) << bits, 256);
    for (size_t k = 0; k < count; ++k) {
      const size_t at = palette_at + k * entry;
      if (at + 3 > n || at + 3 > offset) break;
      palette[k] = cv::Vec3b(p[at], p[at + 1], p[at + 2]);
    }
  }
  if (offset >= n) return Cut("BMP");
  cv::Mat bgr(int(height), int(width), CV_8UC3);
  if (rle) {
    FERRY_RETURN_IF_ERROR(DecodeRle(p + offset, n - offset, bits, palette, rows_up, &bgr));
    return Finish(bgr, gray);
  }
  const size_t stride = ((size_t(width) * size_t(bits) + 31) / 32) * 4;
  if (offset + stride * size_t(height) > n) return Cut("BMP");
  const bool six_five_five = bits == 16 && compression == 3 && green_mask == 0x7E0;
  for (int64_t y = 0; y < height; ++y) {
    const unsigned char* row = p + offset + stride * size_t(rows_up ? height - 1 - y : y);
    auto* out = bgr.ptr<cv::Vec3b>(int(y));
    for (int64_t x = 0; x < width; ++x) {
      switch (bits) {
        case 1: out[x] = palette[(row[x / 8] >> (7 - x % 8)) & 1]; break;
        case 4: out[x] = palette[x % 2 == 0 ? row[x / 2] >> 4 : row[x / 2] & 15]; break;
        case 8: out[x] = palette[row[x]]; break;
        case 16: {
          const uint16_t v = Le16(row + 2 * x);
          out[x] = six_five_five ? cv::Vec3b(uint8_t(v << 3), uint8_t((v >> 3) & ~3), uint8_t((v >> 8) & ~7))
                                 : cv::Vec3b(uint8_t(v << 3), uint8_t((v >> 2) & ~7), uint8_t((v >> 7) & ~7));
          break;
        }
        case 24: out[x] = cv::Vec3b(row[3 * x], row[3 * x + 1], row[3 * x + 2]); break;
        default: out[x] = cv::Vec3b(row[4 * x], row[4 * x + 1], row[4 * x + 2]); break;
      }
    }
  }
  return Finish(bgr, gray);
}

Result<cv::Mat> DecodePnm(std::string_view data, bool gray, int64_t max_pixels) {
  const auto* p = reinterpret_cast<const unsigned char*>(data.data());
  const size_t n = data.size();
  if (n < 3 || p[0] != 'P' || p[1] < '1' || p[1] > '6') return Status::DataLoss("corrupt PNM: no magic");
  const int kind = p[1] - '0';
  const bool plain = kind <= 3, bitmap = kind == 1 || kind == 4;
  const int channels = kind == 3 || kind == 6 ? 3 : 1;
  size_t at = 2;
  uint64_t width = 0, height = 0, maxval = 1;
  if (!PnmNumber(p, n, &at, &width) || !PnmNumber(p, n, &at, &height) || (!bitmap && !PnmNumber(p, n, &at, &maxval)))
    return Status::DataLoss("corrupt PNM: header cut short");
  if (maxval == 0 || maxval > 65535) return Status::DataLoss("corrupt PNM: maximum value " + std::to_string(maxval));
  FERRY_RETURN_IF_ERROR(internal::CheckPixels("PNM", int64_t(std::min<uint64_t>(width, INT32_MAX)),
                                              int64_t(std::min<uint64_t>(height, INT32_MAX)), max_pixels));
  if (!plain) ++at;  // the one whitespace byte before the samples
  const bool wide = maxval > 255;
  cv::Mat bgr(int(height), int(width), CV_8UC3);
  const size_t row_bytes = bitmap ? (width + 7) / 8 : width * size_t(channels) * (wide ? 2 : 1);
  if (!plain && (at > n || (n - at) / std::max<size_t>(row_bytes, 1) < height)) return Cut("PNM");
  // As OpenCV's reader: plain samples are clamped to the maximum, and 8-bit ones scaled
  // to 0..255 (rounded down); raw samples are taken as they are; 16-bit ones keep their
  // high byte.
  auto sample = [&](uint64_t v) -> uint8_t {
    if (plain) v = std::min(v, maxval);
    if (wide) return uint8_t(v >> 8);
    return uint8_t(plain && maxval != 255 ? v * 255 / maxval : v);
  };
  for (uint64_t y = 0; y < height; ++y) {
    auto* out = bgr.ptr<cv::Vec3b>(int(y));
    const unsigned char* row = p + at + (plain ? 0 : y * row_bytes);
    for (uint64_t x = 0; x < width; ++x) {
      uint8_t c[3];
      for (int k = 0; k < channels; ++k) {
        if (bitmap && !plain) {
          c[k] = ((row[x / 8] >> (7 - x % 8)) & 1) ? 0 : 255;
        } else if (plain) {
          uint64_t v = 0;
          if (bitmap) {  // plain bitmaps: single digits, spaces optional
            while (at < n && (std::isspace(p[at]) || p[at] == '#')) {
              if (p[at] == '#') while (at < n && p[at] != '\n') ++at;
              else ++at;
            }
            if (at >= n || (p[at] != '0' && p[at] != '1')) return Cut("PNM");
            c[k] = p[at++] == '1' ? 0 : 255;
            continue;
          }
          if (!PnmNumber(p, n, &at, &v)) return Cut("PNM");
          c[k] = sample(v);
        } else if (wide) {
          const size_t i = (x * size_t(channels) + size_t(k)) * 2;
          c[k] = sample(uint64_t(row[i]) << 8 | row[i + 1]);
        } else {
          c[k] = sample(row[x * size_t(channels) + size_t(k)]);
        }
      }
      out[x] = channels == 3 ? cv::Vec3b(c[2], c[1], c[0]) : cv::Vec3b(c[0], c[0], c[0]);
    }
  }
  if (gray && channels == 1) {  // gray samples stay as they are
    cv::Mat g;
    cv::extractChannel(bgr, g, 0);
    return g;
  }
  return Finish(bgr, gray);
}

namespace internal {

Status CheckPixels(const char* format, int64_t width, int64_t height, int64_t max_pixels) {
  if (width <= 0 || height <= 0)
    return Status::DataLoss(std::string("corrupt ") + format + ": image size " + std::to_string(width) + "x" +
                            std::to_string(height));
  if (width > INT32_MAX / 4 || height > INT32_MAX / 4 || width * height > max_pixels)
    return Status::ResourceExhausted("image too large: " + std::to_string(width) + "x" + std::to_string(height) +
                                     " exceeds the limit of " + std::to_string(max_pixels) + " pixels");
  return Status::OK();
}

cv::Mat ToGray14(const cv::Mat& bgr) {
  constexpr int kShift = 14;
  constexpr int kR = int(0.299 * (1 << kShift) + 0.5), kG = int(0.587 * (1 << kShift) + 0.5);
  constexpr int kB = (1 << kShift) - kR - kG;
  cv::Mat g(bgr.rows, bgr.cols, CV_8UC1);
  for (int y = 0; y < bgr.rows; ++y) {
    const auto* in = bgr.ptr<cv::Vec3b>(y);
    auto* out = g.ptr<uint8_t>(y);
    for (int x = 0; x < bgr.cols; ++x)
      out[x] = uint8_t((in[x][0] * kB + in[x][1] * kG + in[x][2] * kR + (1 << (kShift - 1))) >> kShift);
  }
  return g;
}

cv::Mat ToGray(const cv::Mat& color, bool bgr) {
  cv::Mat g;
  cv::cvtColor(color, g, bgr ? cv::COLOR_BGR2GRAY : cv::COLOR_RGB2GRAY);
  return g;
}

}  // namespace internal

}  // namespace ferry
