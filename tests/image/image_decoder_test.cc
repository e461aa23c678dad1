// Tests of lib/image/image_decoder.h: SniffFormat, PeekImageSize (on encoded files,
// hand-made and truncated headers) and DecodeImage, directly and through
// SampleProcessor, with the pixel limit for the non-JPEG formats.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

#include "ferry/pipeline_spec.h"
#include "image/image_decoder.h"
#include "image/image_test_util.h"
#include "image/jpeg_decoder.h"
#include "testutil.h"

namespace ferry {
namespace {

using testing::Contains;
using testing::EncodeJpeg;
using testing::EncodePng;
using testing::kDefaultMaxPixels;
using testing::SameBytes;
using testing::TinyGif;
using testing::SampleBytes;
using testing::SampleProcessor;
using testing::Uint8Spec;
using testing::WithExifOrientation;
using testing::WithPngSize;

std::string_view View(const std::vector<uint8_t>& v) {
  return std::string_view(reinterpret_cast<const char*>(v.data()), v.size());
}

// ================================================================ sniffing and header peeks

TEST(SniffFormatTest, EachMagic) {
  EXPECT_EQ(SniffFormat(EncodeJpeg(8, 8, 1)), ImageFormat::kJpeg);
  EXPECT_EQ(SniffFormat(EncodePng(8, 8, 1)), ImageFormat::kPng);
  EXPECT_EQ(SniffFormat(std::string("\xFF\xD8\xFF\xE0", 4)), ImageFormat::kJpeg);
  EXPECT_EQ(SniffFormat("\x89PNG\r\n\x1a\n...."), ImageFormat::kPng);
  EXPECT_EQ(SniffFormat("BM\x36\x00"), ImageFormat::kBmp);
  EXPECT_EQ(SniffFormat(std::string("RIFF\x10\0\0\0WEBPVP8X", 16)), ImageFormat::kWebp);
  for (const char* pnm : {"P1\n", "P2\n", "P3\n", "P4\n", "P5\n", "P6\n"}) {
    EXPECT_EQ(SniffFormat(pnm), ImageFormat::kPnm) << pnm;
  }
  EXPECT_EQ(SniffFormat(std::string("II*\0\x08\0\0\0", 8)), ImageFormat::kTiff);
  EXPECT_EQ(SniffFormat(std::string("MM\0*\0\0\0\x08", 8)), ImageFormat::kTiff);
  EXPECT_EQ(SniffFormat("GIF87a...."), ImageFormat::kGif);
  EXPECT_EQ(SniffFormat(TinyGif()), ImageFormat::kGif);

  // Not images, or too short to tell.
  for (const std::string& s :
       {std::string(), std::string("\xFF\xD8", 2), std::string("hello world"), std::string("P7\n"),
        std::string("P0"), std::string("RIFF\x10\0\0\0WAVEfmt ", 16), std::string("GIF90a"),
        std::string("\x89PNG\r\n\x1a", 7), std::string("<html>"), std::string("II+\0", 4)}) {
    EXPECT_EQ(SniffFormat(s), ImageFormat::kUnknown) << s;
  }
  EXPECT_EQ(ImageFormatName(ImageFormat::kGif), "GIF");
  EXPECT_EQ(ImageFormatName(ImageFormat::kUnknown), "unknown");
}

TEST(PeekImageSizeTest, EncodedFiles) {
  const cv::Mat img(37, 53, CV_8UC3, cv::Scalar(10, 200, 30));
  for (const char* ext : {".png", ".bmp", ".ppm", ".tiff"}) {
    std::vector<uint8_t> buf;
    ASSERT_TRUE(cv::imencode(ext, img, buf)) << ext;
    const ImageFormat f = SniffFormat(View(buf));
    ASSERT_NE(f, ImageFormat::kUnknown) << ext;
    Result<ImageSize> s = PeekImageSize(f, View(buf));
    ASSERT_TRUE(s.ok()) << ext << ": " << s.status().ToString();
    EXPECT_EQ(s->width, 53) << ext;
    EXPECT_EQ(s->height, 37) << ext;
  }
  std::vector<uint8_t> pgm;
  ASSERT_TRUE(cv::imencode(".pgm", cv::Mat(37, 53, CV_8UC1, cv::Scalar(9)), pgm));
  Result<ImageSize> s = PeekImageSize(ImageFormat::kPnm, View(pgm));
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->width, 53);
  EXPECT_EQ(s->height, 37);
  // TIFF: the first IFD's ImageWidth and ImageLength, in either byte order.
  for (bool le : {true, false}) {
    s = PeekImageSize(ImageFormat::kTiff, testing::TiffWithSize(100000, 70000, le));
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    EXPECT_EQ(s->width, 100000);
    EXPECT_EQ(s->height, 70000);
  }
  EXPECT_FALSE(PeekImageSize(ImageFormat::kTiff, std::string("II*\0\x08\0\0\0", 8)).ok()) << "no IFD";
  EXPECT_FALSE(PeekImageSize(ImageFormat::kTiff, std::string("II*\0\x08\0\0\0\0\0", 10)).ok()) << "no size";
  // GIF: the logical screen.
  s = PeekImageSize(ImageFormat::kGif, testing::TinyGif());
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->width, 1);
}

TEST(PeekImageSizeTest, HandMadeHeaders) {
  // WebP extended (VP8X): 24-bit width-1 and height-1 at offsets 24 and 27.
  std::string vp8x("RIFF\x16\0\0\0WEBPVP8X\x0a\0\0\0\x10\0\0\0", 24);
  vp8x += std::string("\x1f\x03\x00", 3);  // width 800
  vp8x += std::string("\x57\x02\x00", 3);  // height 600
  ASSERT_EQ(SniffFormat(vp8x), ImageFormat::kWebp);
  Result<ImageSize> s = PeekImageSize(ImageFormat::kWebp, vp8x);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->width, 800);
  EXPECT_EQ(s->height, 600);
  // The largest VP8X size: 2^24 x 2^24.
  std::string vp8x_max = vp8x.substr(0, 24) + std::string(6, '\xFF');
  s = PeekImageSize(ImageFormat::kWebp, vp8x_max);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->width, 1 << 24);
  EXPECT_EQ(s->height, 1 << 24);

  // WebP lossless (VP8L): signature 0x2f, then 14 bits width-1, 14 bits height-1.
  const uint32_t bits = (300 - 1) | (200 - 1) << 14;
  std::string vp8l("RIFF\x16\0\0\0WEBPVP8L\x0a\0\0\0\x2f", 21);
  for (int k = 0; k < 4; ++k) vp8l += char(bits >> (8 * k));
  vp8l += std::string(5, '\0');
  s = PeekImageSize(ImageFormat::kWebp, vp8l);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->width, 300);
  EXPECT_EQ(s->height, 200);

  // WebP lossy (VP8): frame tag, start code 9d 01 2a, then 14-bit width and height.
  std::string vp8("RIFF\x16\0\0\0WEBPVP8 \x0a\0\0\0\x00\x00\x00\x9d\x01\x2a", 26);
  vp8 += std::string("\x40\x01\xf0\x00", 4);  // 320 x 240
  s = PeekImageSize(ImageFormat::kWebp, vp8);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->width, 320);
  EXPECT_EQ(s->height, 240);

  std::string unknown_chunk = vp8;
  unknown_chunk.replace(12, 4, "ALPH");
  EXPECT_EQ(PeekImageSize(ImageFormat::kWebp, unknown_chunk).status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(PeekImageSize(ImageFormat::kWebp, vp8.substr(0, 20)).status().code(), StatusCode::kDataLoss);

  // PNM with comments and odd whitespace.
  s = PeekImageSize(ImageFormat::kPnm, "P6\n# a comment\n 640\t# another\n480\n255\n");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->width, 640);
  EXPECT_EQ(s->height, 480);
  s = PeekImageSize(ImageFormat::kPnm, "P5 99999999999999 7 255 ");
  ASSERT_TRUE(s.ok());
  EXPECT_GT(int64_t(s->width) * s->height, kDefaultMaxPixels);  // saturates, does not wrap
  EXPECT_EQ(PeekImageSize(ImageFormat::kPnm, "P6\n# only a comment").status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(PeekImageSize(ImageFormat::kPnm, "P6 12").status().code(), StatusCode::kDataLoss);

  // BMP: a bottom-up (positive height) and a top-down (negative height) header.
  std::vector<uint8_t> bmp;
  ASSERT_TRUE(cv::imencode(".bmp", cv::Mat(5, 7, CV_8UC3, cv::Scalar::all(0)), bmp));
  std::string top_down(bmp.begin(), bmp.end());
  const int32_t neg = -5;
  std::memcpy(&top_down[22], &neg, 4);  // little-endian host
  s = PeekImageSize(ImageFormat::kBmp, top_down);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->width, 7);
  EXPECT_EQ(s->height, 5);

  // PNG: the IHDR size, and a truncated header.
  const std::string png = WithPngSize(EncodePng(4, 4, 1), 70000, 3);
  s = PeekImageSize(ImageFormat::kPng, png);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->width, 70000);
  EXPECT_EQ(s->height, 3);
  EXPECT_EQ(PeekImageSize(ImageFormat::kPng, png.substr(0, 20)).status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(PeekImageSize(ImageFormat::kBmp, "BM").status().code(), StatusCode::kDataLoss);
}

// ================================================================ the pixel limit

TEST(PixelLimitTest, HugeHeadersOfOtherFormats) {
  // IHDR patched (CRC left stale: the size check comes before any decoding).
  const std::string png = WithPngSize(EncodePng(16, 16, 11), 70000, 70000);
  Result<cv::Mat> decoded = DecodeImage(ImageFormat::kPng, png, false, kDefaultMaxPixels);
  EXPECT_EQ(decoded.status().code(), StatusCode::kResourceExhausted) << decoded.status().ToString();
  EXPECT_TRUE(Contains(decoded.status().message(), "70000x70000"));

  std::string vp8x("RIFF\x16\0\0\0WEBPVP8X\x0a\0\0\0\x10\0\0\0", 24);
  vp8x += std::string("\xFF\x3F\x00\xFF\x3F\x00", 6);  // 16384 x 16384
  const std::string pnm = "P6\n100000 100000\n255\n" + std::string(64, '\0');
  SampleProcessor proc(PipelineSpec::ImagenetTrain());
  std::vector<uint8_t> out(proc.sample_bytes());
  for (const std::string& bomb : {png, vp8x, pnm}) {
    const auto t0 = std::chrono::steady_clock::now();
    const Status s = proc.Process(bomb, 0, 0, 0, out.data());
    EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << ImageFormatName(SniffFormat(bomb)) << ": " << s.ToString();
    EXPECT_TRUE(Contains(s.message(), "too large")) << s.ToString();
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 1.0);
  }
}

// ================================================================ hostile bytes

// Every prefix of each kind of header, in a heap block of exactly that size, so that
// ASan reports any read past the end.
TEST(HostileBytesTest, EveryPrefixOfEveryHeader) {
  std::vector<uint8_t> bmp, ppm;
  ASSERT_TRUE(cv::imencode(".bmp", cv::Mat(5, 7, CV_8UC3, cv::Scalar::all(9)), bmp));
  ASSERT_TRUE(cv::imencode(".ppm", cv::Mat(5, 7, CV_8UC3, cv::Scalar::all(9)), ppm));
  std::string vp8x("RIFF\x16\0\0\0WEBPVP8X\x0a\0\0\0\x10\0\0\0\x1f\x03\x00\x57\x02\x00", 30);
  const std::string small_jpeg = EncodeJpeg(16, 12, 30);
  const std::string exif_jpeg = WithExifOrientation(small_jpeg, 6, true);
  const std::string inputs[] = {EncodePng(8, 8, 30), std::string(bmp.begin(), bmp.end()),
                                std::string(ppm.begin(), ppm.end()), vp8x, TinyGif(), small_jpeg, exif_jpeg};
  SampleProcessor proc(Uint8Spec(8));
  std::vector<uint8_t> out(proc.sample_bytes());
  JpegDecoder dec;
  for (const std::string& full : inputs) {
    const size_t limit = SniffFormat(full) == ImageFormat::kJpeg ? full.size() : std::min<size_t>(full.size(), 80);
    for (size_t n = 0; n <= limit; ++n) {
      std::unique_ptr<char[]> exact(new char[std::max<size_t>(n, 1)]);
      std::memcpy(exact.get(), full.data(), n);
      const std::string_view bytes(exact.get(), n);
      const ImageFormat f = SniffFormat(bytes);
      if (f != ImageFormat::kJpeg) {
        // Our header parse; the pixels are OpenCV's business (and it is noisy on stderr).
        if (f != ImageFormat::kUnknown) (void)PeekImageSize(f, bytes);
        continue;
      }
      const Status s = proc.Process(bytes, 0, 0, 0, out.data());
      if (n < full.size()) {
        EXPECT_FALSE(s.ok()) << "prefix " << n;
      } else {
        EXPECT_TRUE(s.ok()) << s.ToString();
      }
      // The same prefix with an end marker appended: header parsing must cope too.
      std::unique_ptr<char[]> with_eoi(new char[n + 2]);
      std::memcpy(with_eoi.get(), full.data(), n);
      with_eoi[n] = '\xFF';
      with_eoi[n + 1] = '\xD9';
      Result<JpegInfo> info = dec.ReadHeader(std::string_view(with_eoi.get(), n + 2), kDefaultMaxPixels);
      if (info.ok()) {
        Result<cv::Mat> px = dec.DecodeFull(false);
        EXPECT_TRUE(px.ok() || px.status().code() == StatusCode::kDataLoss) << px.status().ToString();
      } else {
        EXPECT_EQ(info.status().code(), StatusCode::kDataLoss) << info.status().ToString();
      }
    }
  }
  // The Exif payload, cut everywhere.
  const std::string payload = exif_jpeg.substr(6, (size_t(uint8_t(exif_jpeg[4])) << 8 | uint8_t(exif_jpeg[5])) - 2);
  for (size_t n = 0; n <= payload.size(); ++n) {
    std::unique_ptr<uint8_t[]> exact(new uint8_t[std::max<size_t>(n, 1)]);
    std::memcpy(exact.get(), payload.data(), n);
    const int o = ParseExifOrientation(exact.get(), n);
    EXPECT_EQ(o, n >= 28 ? 6 : 1) << n;  // the 12-byte IFD entry ends at byte 28
  }
}

// ================================================================ other formats

TEST(OtherFormatsTest, SixteenBitAndAlphaPngMatchEightBitRgb) {
  PipelineSpec spec = Uint8Spec(32);
  SampleProcessor proc(spec);
  std::vector<uint8_t> ref(SampleBytes(spec)), out(SampleBytes(spec));
  ASSERT_TRUE(proc.Process(EncodePng(100, 70, 16, 3, 8), 0, 0, 0, ref.data()).ok());
  const std::vector<std::pair<int, int>> variants = {{3, 16}, {4, 8}, {4, 16}};
  for (const auto& [channels, depth] : variants) {
    const Status s = proc.Process(EncodePng(100, 70, 16, channels, depth), 0, 0, 0, out.data());
    ASSERT_TRUE(s.ok()) << channels << "ch " << depth << "bit: " << s.ToString();
    int max_diff = 0;
    for (size_t i = 0; i < out.size(); ++i) max_diff = std::max(max_diff, std::abs(int(out[i]) - int(ref[i])));
    EXPECT_LE(max_diff, 1) << channels << "ch " << depth << "bit";
  }
  // Gray PNGs, 8- and 16-bit, give three equal channels under an RGB spec.
  for (int depth : {8, 16}) {
    ASSERT_TRUE(proc.Process(EncodePng(50, 60, 17, 1, depth), 0, 0, 0, out.data()).ok()) << depth;
    for (size_t i = 0; i < out.size(); i += 3) {
      ASSERT_EQ(out[i], out[i + 1]);
      ASSERT_EQ(out[i], out[i + 2]);
    }
  }
}

TEST(OtherFormatsTest, BmpPnmTiffDecodeLikeOpenCV) {
  const cv::Mat bgr = [] {
    auto px = testing::SyntheticPixels(90, 70, 18);
    return cv::Mat(70, 90, CV_8UC3, px.data()).clone();
  }();
  cv::Mat rgb;
  cv::cvtColor(bgr, rgb, cv::COLOR_BGR2RGB);
  for (const char* ext : {".bmp", ".ppm", ".tiff", ".png"}) {
    std::vector<uint8_t> buf;
    ASSERT_TRUE(cv::imencode(ext, bgr, buf)) << ext;
    const std::string bytes(buf.begin(), buf.end());
    Result<cv::Mat> img = DecodeImage(SniffFormat(bytes), bytes, false, kDefaultMaxPixels);
    ASSERT_TRUE(img.ok()) << ext << ": " << img.status().ToString();
    EXPECT_TRUE(SameBytes(*img, rgb)) << ext;  // lossless formats, RGB order
    PipelineSpec spec = Uint8Spec(30);
    SampleProcessor proc(spec);
    std::vector<uint8_t> out(SampleBytes(spec));
    EXPECT_TRUE(proc.Process(bytes, 0, 0, 0, out.data()).ok()) << ext;
  }
}

}  // namespace
}  // namespace ferry
