// Ferry's decoders of PNG, WebP, TIFF, BMP and PNM (lib/image/format_decoders.h) against
// OpenCV 4.6's imdecode, which they replace: every variant of each format, colour
// (imdecode's IMREAD_COLOR, BGR to RGB) and gray (IMREAD_GRAYSCALE), must give the same
// bytes. The files are made by imencode, by libpng and libwebp directly (palettes, low
// bit depths, transparency, interlacing, alpha), and by hand (BMP's and PNM's rarer
// forms). Then every prefix of every file (a file cut short) must give an error or an
// image, never a crash (the sanitizer builds run this too), and headers that ask for
// too many pixels are refused before anything is allocated.
#include <gtest/gtest.h>
#include <png.h>
#include <webp/encode.h>
#include <zlib.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

#include "image/format_decoders.h"
#include "image/image_decoder.h"
#include "testutil.h"

namespace ferry {
namespace {

struct Sample {
  std::string name;
  std::string bytes;
};

cv::Mat Pixels(int w, int h, int channels, int depth, uint64_t seed) {
  cv::Mat m(h, w, CV_MAKETYPE(depth, channels));
  cv::RNG rng(seed);
  rng.fill(m, cv::RNG::UNIFORM, 0, depth == CV_16U ? 65536 : 256);
  return m;
}

std::string Encode(const char* ext, const cv::Mat& m, const std::vector<int>& params = {}) {
  std::vector<uint8_t> buf;
  EXPECT_TRUE(cv::imencode(ext, m, buf, params)) << ext;
  return std::string(buf.begin(), buf.end());
}

void AppendToString(png_structp png, png_bytep data, png_size_t n) {
  static_cast<std::string*>(png_get_io_ptr(png))->append(reinterpret_cast<const char*>(data), n);
}

// A PNG written by libpng: any colour type and depth, a palette, a tRNS, Adam7.
std::string LibpngFile(int w, int h, int color, int depth, bool interlaced, bool trns, uint64_t seed) {
  std::string out;
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png_create_info_struct(png);
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, &info);
    ADD_FAILURE() << "libpng could not write the test file";
    return "";
  }
  png_set_write_fn(png, &out, AppendToString, nullptr);
  png_set_IHDR(png, info, png_uint_32(w), png_uint_32(h), depth, color,
               interlaced ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
               PNG_FILTER_TYPE_DEFAULT);
  cv::RNG rng(seed);
  const int entries = color == PNG_COLOR_TYPE_PALETTE ? 1 << depth : 0;
  std::vector<png_color> palette(static_cast<size_t>(entries));
  for (png_color& c : palette) c = {uint8_t(rng.uniform(0, 256)), uint8_t(rng.uniform(0, 256)), uint8_t(rng.uniform(0, 256))};
  if (entries > 0) png_set_PLTE(png, info, palette.data(), entries);
  std::vector<png_byte> alphas(static_cast<size_t>(std::max(entries, 1)));
  for (png_byte& a : alphas) a = png_byte(rng.uniform(0, 256));
  png_color_16 trans_color{};
  trans_color.gray = trans_color.red = png_uint_16(rng.uniform(0, 1 << std::min(depth, 16)));
  if (trns) png_set_tRNS(png, info, alphas.data(), entries > 0 ? entries / 2 : 0, &trans_color);
  png_write_info(png, info);
  const int channels = color == PNG_COLOR_TYPE_RGB ? 3 : color == PNG_COLOR_TYPE_RGB_ALPHA ? 4 :
                       color == PNG_COLOR_TYPE_GRAY_ALPHA ? 2 : 1;
  const size_t row_bytes = (size_t(w) * size_t(channels) * size_t(depth) + 7) / 8;
  std::vector<png_byte> rows(row_bytes * size_t(h));
  for (png_byte& b : rows) b = png_byte(rng.uniform(0, 256));
  if (entries > 0 && depth == 8)
    for (png_byte& b : rows) b = png_byte(b % entries);
  std::vector<png_bytep> pointers(static_cast<size_t>(h));
  for (int y = 0; y < h; ++y) pointers[size_t(y)] = rows.data() + size_t(y) * row_bytes;
  png_write_image(png, pointers.data());
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  return out;
}

std::string LibwebpFile(const cv::Mat& bgra, bool lossless) {
  uint8_t* out = nullptr;
  const size_t n = lossless ? WebPEncodeLosslessBGRA(bgra.data, bgra.cols, bgra.rows, int(bgra.step), &out)
                            : WebPEncodeBGRA(bgra.data, bgra.cols, bgra.rows, int(bgra.step), 80, &out);
  std::string s(reinterpret_cast<const char*>(out), n);
  WebPFree(out);
  return s;
}

void Put16(std::string* s, uint16_t v) { s->append({char(v & 255), char(v >> 8)}); }
void Put32(std::string* s, uint32_t v) {
  for (int i = 0; i < 4; ++i) s->push_back(char((v >> (8 * i)) & 255));
}

// A BMP with a 40-byte header (or the OS/2 12-byte one), `pixels` as its rows are
// stored, a palette of `colors` entries, and bit fields for BITFIELDS files.
std::string BmpFile(int w, int h, int bits, uint32_t compression, const std::string& pixels, int colors,
                    bool os2 = false, const std::vector<uint32_t>& masks = {}) {
  std::string info, palette;
  cv::RNG rng(uint64_t(w * 131 + bits));
  for (int i = 0; i < colors; ++i) {
    for (int k = 0; k < 3; ++k) palette.push_back(char(rng.uniform(0, 256)));
    if (!os2) palette.push_back(0);
  }
  if (os2) {
    Put32(&info, 12);
    Put16(&info, uint16_t(w));
    Put16(&info, uint16_t(h));
    Put16(&info, 1);
    Put16(&info, uint16_t(bits));
  } else {
    Put32(&info, 40);
    Put32(&info, uint32_t(w));
    Put32(&info, uint32_t(h));
    Put16(&info, 1);
    Put16(&info, uint16_t(bits));
    Put32(&info, compression);
    Put32(&info, uint32_t(pixels.size()));
    Put32(&info, 2835);
    Put32(&info, 2835);
    Put32(&info, uint32_t(colors));
    Put32(&info, 0);
    for (uint32_t m : masks) Put32(&info, m);
  }
  std::string file = "BM";
  const uint32_t offset = uint32_t(14 + info.size() + palette.size());
  Put32(&file, uint32_t(offset + pixels.size()));
  Put32(&file, 0);
  Put32(&file, offset);
  return file + info + palette + pixels;
}

std::string RandomRows(int w, int h, int bits, uint64_t seed) {
  const size_t stride = ((size_t(w) * size_t(bits) + 31) / 32) * 4;
  std::string s(stride * size_t(h), '\0');
  cv::RNG rng(seed);
  for (char& c : s) c = char(rng.uniform(0, 256));
  return s;
}

std::vector<Sample> Samples() {
  std::vector<Sample> all;
  // PNG: imencode's, then libpng's own variants.
  for (int ch : {1, 3, 4})
    for (int depth : {CV_8U, CV_16U}) all.push_back({"png c" + std::to_string(ch) + " d" + std::to_string(depth), Encode(".png", Pixels(97, 83, ch, depth, 1))});
  for (int depth : {1, 2, 4, 8})
    for (bool trns : {false, true})
      all.push_back({"png palette " + std::to_string(depth) + (trns ? " trns" : ""),
                     LibpngFile(89, 67, PNG_COLOR_TYPE_PALETTE, depth, false, trns, uint64_t(depth))});
  for (int depth : {1, 2, 4, 8, 16})
    all.push_back({"png gray " + std::to_string(depth), LibpngFile(91, 69, PNG_COLOR_TYPE_GRAY, depth, false, depth == 8, 7)});
  for (int depth : {8, 16}) {
    all.push_back({"png gray+alpha " + std::to_string(depth), LibpngFile(21, 13, PNG_COLOR_TYPE_GRAY_ALPHA, depth, false, false, 3)});
    all.push_back({"png rgb trns " + std::to_string(depth), LibpngFile(21, 13, PNG_COLOR_TYPE_RGB, depth, false, true, 4)});
    all.push_back({"png rgba interlaced " + std::to_string(depth), LibpngFile(33, 27, PNG_COLOR_TYPE_RGB_ALPHA, depth, true, false, 5)});
  }
  all.push_back({"png palette interlaced", LibpngFile(40, 30, PNG_COLOR_TYPE_PALETTE, 4, true, true, 6)});
  // WebP: lossy and lossless, with and without alpha.
  all.push_back({"webp lossy", Encode(".webp", Pixels(91, 79, 3, CV_8U, 2), {cv::IMWRITE_WEBP_QUALITY, 75})});
  all.push_back({"webp lossless", Encode(".webp", Pixels(91, 79, 3, CV_8U, 3), {cv::IMWRITE_WEBP_QUALITY, 101})});
  all.push_back({"webp lossy alpha", LibwebpFile(Pixels(85, 72, 4, CV_8U, 4), false)});
  all.push_back({"webp lossless alpha", LibwebpFile(Pixels(85, 72, 4, CV_8U, 5), true)});
  // TIFF: 8-bit gray, RGB and RGBA; 16-bit gray and RGB.
  for (int ch : {1, 3, 4}) all.push_back({"tiff c" + std::to_string(ch), Encode(".tiff", Pixels(87, 68, ch, CV_8U, 8))});
  for (int ch : {1, 3}) all.push_back({"tiff 16-bit c" + std::to_string(ch), Encode(".tiff", Pixels(87, 68, ch, CV_16U, 9))});
  // BMP: imencode's (24-bit, 8-bit gray palette), then by hand.
  all.push_back({"bmp 24", Encode(".bmp", Pixels(73, 61, 3, CV_8U, 10))});
  all.push_back({"bmp 8 gray", Encode(".bmp", Pixels(73, 61, 1, CV_8U, 11))});
  for (int bits : {1, 4, 8}) all.push_back({"bmp palette " + std::to_string(bits), BmpFile(79, 57, bits, 0, RandomRows(79, 57, bits, uint64_t(bits)), 1 << bits)});
  all.push_back({"bmp short palette", BmpFile(79, 57, 8, 0, RandomRows(79, 57, 8, 12), 10)});
  all.push_back({"bmp 16 555", BmpFile(79, 57, 16, 0, RandomRows(79, 57, 16, 13), 0)});
  all.push_back({"bmp 16 565", BmpFile(79, 57, 16, 3, RandomRows(79, 57, 16, 14), 0, false, {0xF800, 0x7E0, 0x1F})});
  all.push_back({"bmp 32", BmpFile(79, 57, 32, 0, RandomRows(79, 57, 32, 15), 0)});
  all.push_back({"bmp top-down", BmpFile(79, -57, 24, 0, RandomRows(79, 57, 24, 16), 0)});
  all.push_back({"bmp os/2", BmpFile(79, 57, 8, 0, RandomRows(79, 57, 8, 17), 256, true)});
  {  // RLE8: runs, literals, an end of line, a delta, the end of the bitmap
    const std::string rle = std::string("\x05\x03\x00\x03\x07\x08\x09\x00\x00\x00", 10) +  // 5 x 3, then 7 8 9 (padded)
                            std::string("\x00\x00", 2) +                                 // end of line
                            std::string("\x04\x02\x00\x02\x03\x01\x02\x06", 8) +        // 4 x 2, delta (3, 1), 2 x 6
                            std::string("\x00\x01", 2);                                  // end of bitmap
    all.push_back({"bmp rle8", BmpFile(12, 5, 8, 1, rle, 16)});
    // (OpenCV's reader reads ahead in blocks: a real file's padding after the end.)
    const std::string rle4 = std::string("\x06\x12\x00\x05\x34\x56\x70\x00\x00\x00\x03\x9a\x00\x01", 14) +
                             std::string(64, '\0');
    all.push_back({"bmp rle4", BmpFile(12, 4, 4, 2, rle4, 16)});
  }
  // PNM: imencode's (raw 8- and 16-bit), then by hand.
  all.push_back({"pgm", Encode(".pgm", Pixels(77, 59, 1, CV_8U, 18))});
  all.push_back({"ppm", Encode(".ppm", Pixels(77, 59, 3, CV_8U, 19))});
  all.push_back({"pgm 16", Encode(".pgm", Pixels(77, 59, 1, CV_16U, 20))});
  all.push_back({"ppm 16", Encode(".ppm", Pixels(77, 59, 3, CV_16U, 21))});
  all.push_back({"pgm plain", Encode(".pgm", Pixels(77, 59, 1, CV_8U, 22), {cv::IMWRITE_PXM_BINARY, 0})});
  all.push_back({"ppm plain", Encode(".ppm", Pixels(77, 59, 3, CV_8U, 23), {cv::IMWRITE_PXM_BINARY, 0})});
  all.push_back({"pbm plain", "P1\n# a comment\n5 3\n1 0 1 0 1\n0 1 0 1 0\n1 1 0 0 1\n"});
  all.push_back({"pbm raw", std::string("P4\n10 2\n\xA5\x40\x3C\x80", 12)});
  all.push_back({"pgm maxval 100", "P2 3 2 100\n0 50 100\n200 99 1\n"});
  return all;
}

cv::Mat OpenCv(const std::string& bytes, bool gray) {
  const cv::Mat raw(1, int(bytes.size()), CV_8UC1, const_cast<char*>(bytes.data()));
  cv::Mat m = cv::imdecode(raw, gray ? cv::IMREAD_GRAYSCALE : cv::IMREAD_COLOR);
  if (!m.empty() && !gray) cv::cvtColor(m, m, cv::COLOR_BGR2RGB);
  return m;
}

TEST(FormatDecodersTest, EveryVariantDecodesAsOpenCVDecodesIt) {
  for (const Sample& s : Samples()) {
    ASSERT_FALSE(s.bytes.empty()) << s.name;
    for (bool gray : {false, true}) {
      const std::string what = s.name + (gray ? " (gray)" : " (colour)");
      const cv::Mat want = OpenCv(s.bytes, gray);
      ASSERT_FALSE(want.empty()) << what << ": imdecode could not read the test file";
      Result<cv::Mat> got = DecodeImage(SniffFormat(s.bytes), s.bytes, gray, int64_t(1) << 26);
      ASSERT_TRUE(got.ok()) << what << ": " << got.status().ToString();
      ASSERT_EQ(got->type(), want.type()) << what;
      ASSERT_EQ(got->size(), want.size()) << what;
      const double diff = cv::norm(*got, want, cv::NORM_INF);
      cv::Mat differ = *got != want;
      EXPECT_EQ(diff, 0) << what << ": " << cv::countNonZero(differ.reshape(1)) << " samples differ";
    }
  }
}

TEST(FormatDecodersTest, EveryPrefixOfEveryFileIsAnErrorOrAnImage) {
  for (const Sample& s : Samples()) {
    const ImageFormat f = SniffFormat(s.bytes);
    for (size_t n = 0; n < s.bytes.size(); n += std::max<size_t>(1, s.bytes.size() / 300)) {
      Result<cv::Mat> got = DecodeImage(f, std::string_view(s.bytes).substr(0, n), false, int64_t(1) << 26);
      if (got.ok()) {
        EXPECT_FALSE(got->empty()) << s.name << " cut at " << n;
      } else {
        EXPECT_TRUE(got.status().code() == StatusCode::kDataLoss ||
                    got.status().code() == StatusCode::kResourceExhausted)
            << s.name << " cut at " << n << ": " << got.status().ToString();
      }
    }
  }
}

TEST(FormatDecodersTest, TooManyPixelsAreRefusedFromTheHeader) {
  // Headers that claim 60000 x 60000 with next to no data behind them.
  std::string png = LibpngFile(8, 8, PNG_COLOR_TYPE_RGB, 8, false, false, 1);
  for (int at : {16, 20}) {  // IHDR's width and height, big-endian
    png[size_t(at)] = char(0), png[size_t(at) + 1] = char(0), png[size_t(at) + 2] = char(0xEA), png[size_t(at) + 3] = char(0x60);
  }
  const uLong crc = crc32(0, reinterpret_cast<const Bytef*>(png.data() + 12), 17);  // "IHDR" and its 13 bytes
  for (int k = 0; k < 4; ++k) png[size_t(29 + k)] = char((crc >> (24 - 8 * k)) & 255);
  Result<cv::Mat> r = DecodePng(png, false, int64_t(1) << 26);
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted) << r.status().ToString();
  r = DecodeBmp(BmpFile(60000, 60000, 24, 0, "", 0), false, int64_t(1) << 26);
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted) << r.status().ToString();
  r = DecodePnm("P6 60000 60000 255\n", false, int64_t(1) << 26);
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted) << r.status().ToString();
  r = DecodeBmp(BmpFile(0, 5, 24, 0, "", 0), false, int64_t(1) << 26);
  EXPECT_EQ(r.status().code(), StatusCode::kDataLoss) << "a zero width";
}

// testutil's EncodeJpeg and EncodePng (libjpeg and libpng: no imgcodecs in the other
// suites) write the bytes OpenCV's imencode writes for the same pixels, so the files
// every suite makes are the ones they were made with before.
TEST(FormatDecodersTest, TheSuitesEncodersWriteWhatOpenCVWrites) {
  for (const auto& [w, h] : std::vector<std::pair<int, int>>{{64, 48}, {113, 77}, {320, 241}}) {
    for (bool gray : {false, true}) {
      for (int quality : {75, 85, 90, 95}) {
        const uint64_t seed = uint64_t(w * 131 + quality);
        const std::vector<uint8_t> px = testing::SyntheticPixels(w, h, seed, gray ? 1 : 3);
        const cv::Mat m(h, w, gray ? CV_8UC1 : CV_8UC3, const_cast<uint8_t*>(px.data()));
        EXPECT_EQ(testing::EncodeJpeg(w, h, seed, quality, gray), Encode(".jpg", m, {cv::IMWRITE_JPEG_QUALITY, quality}))
            << w << "x" << h << " gray " << gray << " quality " << quality;
      }
    }
    for (int channels : {1, 3, 4}) {
      for (int depth : {8, 16}) {
        const uint64_t seed = uint64_t(w * 7 + channels);
        const std::vector<uint8_t> px = testing::SyntheticPixels(w, h, seed, channels == 1 ? 1 : 3);
        cv::Mat m = cv::Mat(h, w, channels == 1 ? CV_8UC1 : CV_8UC3, const_cast<uint8_t*>(px.data())).clone();
        if (channels == 4) cv::cvtColor(m, m, cv::COLOR_BGR2BGRA);
        if (depth == 16) m.convertTo(m, CV_MAKETYPE(CV_16U, channels), 257.0);
        EXPECT_EQ(testing::EncodePng(w, h, seed, channels, depth), Encode(".png", m))
            << w << "x" << h << " channels " << channels << " depth " << depth;
      }
    }
  }
}

}  // namespace
}  // namespace ferry
