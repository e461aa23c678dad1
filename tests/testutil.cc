#include "testutil.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <opencv2/core.hpp>
#include <opencv2/imgproc.hpp>
#include <sstream>

// The files are written with libjpeg and libpng as OpenCV's imencode writes them (the
// same bytes: ISLOW DCT and quality tables for JPEG; the Sub filter, zlib level 1 and
// Z_RLE for PNG), without linking OpenCV's imgcodecs: its 140 shared libraries (GDAL's)
// were loaded at every start of every suite, 0.35 s a test process under the sanitizers.
#include <jpeglib.h>
#include <png.h>
#include <zlib.h>

#include "core/philox.h"

namespace ferry::testing {

namespace fs = std::filesystem;

TempDir::TempDir() {
  std::string tmpl = (fs::temp_directory_path() / "ferry_test_XXXXXX").string();
  char* made = mkdtemp(tmpl.data());
  if (made == nullptr) std::abort();
  path_ = made;
}

TempDir::~TempDir() {
  std::error_code ec;
  fs::remove_all(path_, ec);
}

std::vector<uint8_t> SyntheticPixels(int width, int height, uint64_t seed, int channels) {
  SampleRng rng(seed, 0, 0, 7);
  cv::Mat img(height, width, CV_8UC3);
  const double fx = rng.Uniform(0.5, 3.0), fy = rng.Uniform(0.5, 3.0);
  const int base[3] = {int(rng.Below(256)), int(rng.Below(256)), int(rng.Below(256))};
  for (int y = 0; y < height; ++y) {
    auto* row = img.ptr<uint8_t>(y);
    for (int x = 0; x < width; ++x) {
      for (int c = 0; c < 3; ++c) {
        const double v = base[c] + 60 * std::sin(fx * x / width * 6.28 + c) +
                         60 * std::cos(fy * y / height * 6.28 - c);
        row[3 * x + c] = cv::saturate_cast<uint8_t>(v);
      }
    }
  }
  for (int k = 0; k < 6; ++k) {
    cv::circle(img, {int(rng.Below(width)), int(rng.Below(height))},
               int(rng.Below(std::max(2, std::min(width, height) / 3))) + 1,
               cv::Scalar(rng.Below(256), rng.Below(256), rng.Below(256)), -1);
  }
  cv::Mat noise(height, width, CV_8UC3);
  cv::RNG noise_rng(seed);  // not cv::randu: its thread-global RNG would make pixels vary per call
  noise_rng.fill(noise, cv::RNG::UNIFORM, 0, 12);
  img += noise;
  if (channels == 1) cv::cvtColor(img, img, cv::COLOR_BGR2GRAY);
  return std::vector<uint8_t>(img.data, img.data + img.total() * img.elemSize());
}

static cv::Mat PixelsMat(int width, int height, uint64_t seed, int channels) {
  auto px = SyntheticPixels(width, height, seed, channels);
  cv::Mat m(height, width, channels == 1 ? CV_8UC1 : CV_8UC3, px.data());
  return m.clone();
}

namespace {

[[noreturn]] void JpegFailed(j_common_ptr cinfo) {
  char message[JMSG_LENGTH_MAX];
  (*cinfo->err->format_message)(cinfo, message);
  std::fprintf(stderr, "EncodeJpeg: libjpeg: %s\n", message);
  std::abort();  // the test's own pixels: never in practice
}

void AppendPng(png_structp png, png_bytep data, png_size_t n) {
  static_cast<std::string*>(png_get_io_ptr(png))->append(reinterpret_cast<const char*>(data), n);
}

}  // namespace

std::string EncodeJpeg(int width, int height, uint64_t seed, int quality, bool gray) {
  const cv::Mat m = PixelsMat(width, height, seed, gray ? 1 : 3);  // BGR, as OpenCV's
  jpeg_compress_struct cinfo{};
  jpeg_error_mgr err{};
  cinfo.err = jpeg_std_error(&err);
  err.error_exit = JpegFailed;
  jpeg_create_compress(&cinfo);
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&cinfo, &buf, &size);
  cinfo.image_width = JDIMENSION(width);
  cinfo.image_height = JDIMENSION(height);
  cinfo.input_components = gray ? 1 : 3;
  cinfo.in_color_space = gray ? JCS_GRAYSCALE : JCS_EXT_BGR;
  jpeg_set_defaults(&cinfo);
  jpeg_set_quality(&cinfo, quality, TRUE);
  cinfo.dct_method = JDCT_ISLOW;
  jpeg_start_compress(&cinfo, TRUE);
  while (cinfo.next_scanline < cinfo.image_height) {
    JSAMPROW row = const_cast<JSAMPROW>(m.ptr<uint8_t>(int(cinfo.next_scanline)));
    jpeg_write_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_compress(&cinfo);
  jpeg_destroy_compress(&cinfo);
  std::string out(reinterpret_cast<const char*>(buf), size);
  std::free(buf);
  return out;
}

std::string EncodePng(int width, int height, uint64_t seed, int channels, int depth) {
  cv::Mat m = PixelsMat(width, height, seed, channels == 1 ? 1 : 3);
  if (channels == 4) cv::cvtColor(m, m, cv::COLOR_BGR2BGRA);
  if (depth == 16) m.convertTo(m, channels == 1 ? CV_16UC1 : (channels == 4 ? CV_16UC4 : CV_16UC3), 257.0);
  std::string out;
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png_create_info_struct(png);
  if (png == nullptr || info == nullptr || setjmp(png_jmpbuf(png))) {
    std::fprintf(stderr, "EncodePng: libpng failed\n");
    std::abort();
  }
  png_set_write_fn(png, &out, AppendPng, nullptr);
  png_set_filter(png, PNG_FILTER_TYPE_BASE, PNG_FILTER_SUB);
  png_set_compression_level(png, 1);
  png_set_compression_strategy(png, Z_RLE);
  const int color = channels == 1 ? PNG_COLOR_TYPE_GRAY : channels == 4 ? PNG_COLOR_TYPE_RGB_ALPHA : PNG_COLOR_TYPE_RGB;
  png_set_IHDR(png, info, png_uint_32(width), png_uint_32(height), depth, color, PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_write_info(png, info);
  if (channels != 1) png_set_bgr(png);
  if (depth == 16) png_set_swap(png);  // PNG's samples are big-endian
  std::vector<png_bytep> rows(static_cast<size_t>(height));
  for (int y = 0; y < height; ++y) rows[size_t(y)] = m.ptr<png_byte>(y);
  png_write_image(png, rows.data());
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  return out;
}

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(bytes.data(), std::streamsize(bytes.size()));
  if (!f) std::abort();
}

std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void MakeDirs(const std::string& path) { fs::create_directories(path); }

std::vector<std::string> MakeImageFolder(const std::string& root, int classes, int per_class,
                                         uint64_t seed) {
  std::vector<std::string> paths;
  SampleRng rng(seed, 0, 0, 8);
  for (int c = 0; c < classes; ++c) {
    const std::string dir = root + "/class_" + std::to_string(c);
    MakeDirs(dir);
    for (int j = 0; j < per_class; ++j) {
      char name[32];
      std::snprintf(name, sizeof name, "img_%04d.jpg", j);
      const int w = 64 + int(rng.Below(257)), h = 64 + int(rng.Below(257));
      WriteFile(dir + "/" + name, EncodeJpeg(w, h, seed * 1000003 + c * 1000 + j, 85));
      paths.push_back(dir + "/" + name);
    }
  }
  return paths;
}

std::string WithJpegSize(std::string jpeg, int width, int height) {
  auto byte = [&](size_t i) { return static_cast<uint8_t>(jpeg[i]); };
  size_t i = 2;  // after SOI
  while (i + 9 < jpeg.size() && byte(i) == 0xFF) {
    const uint8_t marker = byte(i + 1);
    const size_t len = size_t(byte(i + 2)) << 8 | byte(i + 3);
    const bool sof = marker >= 0xC0 && marker <= 0xCF && marker != 0xC4 && marker != 0xC8 && marker != 0xCC;
    if (sof) {  // FF Cn, length(2), precision(1), height(2), width(2)
      jpeg[i + 5] = char(height >> 8);
      jpeg[i + 6] = char(height & 0xFF);
      jpeg[i + 7] = char(width >> 8);
      jpeg[i + 8] = char(width & 0xFF);
      return jpeg;
    }
    i += 2 + len;
  }
  std::abort();
}

std::string WithPngSize(std::string png, uint32_t width, uint32_t height) {
  if (png.size() < 24 || png.compare(12, 4, "IHDR") != 0) std::abort();
  for (int k = 0; k < 4; ++k) {
    png[16 + k] = char(width >> (24 - 8 * k));
    png[20 + k] = char(height >> (24 - 8 * k));
  }
  return png;
}

std::string WithExifOrientation(const std::string& jpeg, int orientation, bool le) {
  std::string tiff;
  auto put16 = [&](uint16_t v) {
    tiff += le ? char(v & 0xFF) : char(v >> 8);
    tiff += le ? char(v >> 8) : char(v & 0xFF);
  };
  auto put32 = [&](uint32_t v) {
    put16(le ? uint16_t(v & 0xFFFF) : uint16_t(v >> 16));
    put16(le ? uint16_t(v >> 16) : uint16_t(v & 0xFFFF));
  };
  tiff += le ? "II" : "MM";
  put16(42);
  put32(8);  // IFD0 right after the header
  put16(1);  // one entry
  put16(0x0112);
  put16(3);  // SHORT
  put32(1);  // count
  put16(uint16_t(orientation));
  put16(0);  // padding of the 4-byte value field
  put32(0);  // no next IFD
  const std::string payload = std::string("Exif\0\0", 6) + tiff;
  const size_t len = payload.size() + 2;
  std::string app1 = "\xFF\xE1";
  app1 += char(len >> 8);
  app1 += char(len & 0xFF);
  app1 += payload;
  return jpeg.substr(0, 2) + app1 + jpeg.substr(2);
}

std::string TinyGif() {
  static const unsigned char kGif[] = {
      'G', 'I', 'F', '8', '9', 'a', 0x01, 0x00, 0x01, 0x00, 0x80, 0x00, 0x00, 0xFF, 0xFF,
      0xFF, 0x00, 0x00, 0x00, 0x21, 0xF9, 0x04, 0x01, 0x00, 0x00, 0x00, 0x00, 0x2C, 0x00, 0x00,
      0x00, 0x00, 0x01, 0x00, 0x01, 0x00, 0x00, 0x02, 0x02, 0x44, 0x01, 0x00, 0x3B};
  return std::string(reinterpret_cast<const char*>(kGif), sizeof kGif);
}

std::string TiffWithSize(uint32_t width, uint32_t height, bool little_endian) {
  std::string t;
  auto u16 = [&](uint16_t v) {
    if (little_endian) t += {char(v), char(v >> 8)};
    else t += {char(v >> 8), char(v)};
  };
  auto u32 = [&](uint32_t v) {
    for (int i = 0; i < 4; ++i) t += char(little_endian ? v >> (8 * i) : v >> (8 * (3 - i)));
  };
  t += little_endian ? "II" : "MM";
  u16(42);
  u32(8);
  const uint16_t kShort = 3, kLong = 4;
  const struct {
    uint16_t tag, type;
    uint32_t value;
  } entries[] = {{256, kLong, width}, {257, kLong, height}, {258, kShort, 8},  {259, kShort, 1},
                 {262, kShort, 1},    {273, kLong, 0},      {277, kShort, 1},  {278, kLong, height},
                 {279, kLong, 16}};
  const uint32_t strip = 8 + 2 + 12 * uint32_t(std::size(entries)) + 4;
  u16(uint16_t(std::size(entries)));
  for (const auto& e : entries) {
    u16(e.tag);
    u16(e.type);
    u32(1);
    const uint32_t v = e.tag == 273 ? strip : e.value;
    if (e.type == kShort) {
      u16(uint16_t(v));
      u16(0);
    } else {
      u32(v);
    }
  }
  u32(0);  // no next IFD
  t += std::string(16, '\x7f');
  return t;
}

std::string JpegSoiThenNoise(size_t n, uint64_t seed) {
  SampleRng rng(seed, 0, 0, 9);
  std::string s = "\xFF\xD8\xFF";
  for (size_t i = 0; i < n; ++i) s += char(rng.NextU32() & 0xFF);
  return s;
}

bool WaitFor(const std::function<bool()>& condition, double seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  for (;;) {
    if (condition()) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

Watchdog::Watchdog(double seconds, std::string what) {
  thread_ = std::thread([this, seconds, what = std::move(what)] {
    const auto deadline = DeadlineIn(seconds);
    MutexLock lock(&mu_);
    while (!done_) {
      if (!cv_.WaitUntil(&mu_, deadline)) break;
    }
    if (!done_) {
      std::fprintf(stderr, "watchdog: %s did not finish within %.0f s; aborting\n", what.c_str(), seconds);
      std::fflush(stderr);
      std::abort();
    }
  });
}

Watchdog::~Watchdog() {
  {
    MutexLock lock(&mu_);
    done_ = true;
    cv_.SignalAll();
  }
  thread_.join();
}

}  // namespace ferry::testing
