// Tests of the image layer: the pipeline spec, format sniffing and header peeks, the
// ROI/DCT-scaled JPEG decoder (against OpenCV's decode of the same bytes), EXIF
// orientation, the pixel-bomb limit, hostile bytes, the augmentation ops (against
// torchvision's formulas and OpenCV's resize) and SampleProcessor's determinism.
// Every image here is a real encoded file (libjpeg-turbo / libpng through OpenCV, or
// libjpeg's compressor for CMYK).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include <jpeglib.h>

#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

#include "core/philox.h"
#include "ferry/pipeline_spec.h"
#include "image/augment.h"
#include "image/image_decoder.h"
#include "image/jpeg_decoder.h"
#include "image/ops.h"
#include "testutil.h"

namespace ferry {
namespace {

using testing::EncodeJpeg;
using testing::EncodePng;
using testing::JpegSoiThenNoise;
using testing::TempDir;
using testing::TinyGif;
using testing::WithExifOrientation;
using testing::WithJpegSize;
using testing::WithPngSize;
using testing::WriteFile;

constexpr int64_t kDefaultMaxPixels = 100'000'000;

bool Contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

std::string_view View(const std::vector<uint8_t>& v) {
  return std::string_view(reinterpret_cast<const char*>(v.data()), v.size());
}

// OpenCV's decode of the same bytes, as RGB.
cv::Mat CvDecodeRgb(const std::string& bytes) {
  cv::Mat buf(1, int(bytes.size()), CV_8UC1, const_cast<char*>(bytes.data()));
  cv::Mat bgr = cv::imdecode(buf, cv::IMREAD_COLOR | cv::IMREAD_IGNORE_ORIENTATION);
  cv::Mat rgb;
  if (!bgr.empty()) cv::cvtColor(bgr, rgb, cv::COLOR_BGR2RGB);
  return rgb;
}

double MeanAbsDiff(const cv::Mat& a, const cv::Mat& b) {
  EXPECT_EQ(a.size(), b.size());
  EXPECT_EQ(a.type(), b.type());
  if (a.size() != b.size() || a.type() != b.type()) return 1e9;
  cv::Mat d;
  cv::absdiff(a, b, d);
  const cv::Scalar s = cv::mean(d);
  double sum = 0;
  for (int c = 0; c < a.channels(); ++c) sum += s[c];
  return sum / a.channels();
}

double MaxAbsDiff(const cv::Mat& a, const cv::Mat& b) {
  EXPECT_EQ(a.size(), b.size());
  EXPECT_EQ(a.type(), b.type());
  if (a.size() != b.size() || a.type() != b.type()) return 1e9;
  cv::Mat d;
  cv::absdiff(a, b, d);
  double mx = 0;
  cv::minMaxLoc(d.reshape(1), nullptr, &mx);
  return mx;
}

bool SameBytes(const cv::Mat& a, const cv::Mat& b) {
  return a.size() == b.size() && a.type() == b.type() && MaxAbsDiff(a, b) == 0;
}

// EXIF orientation applied by definition, pixel by pixel (independent of ops.cc):
// output pixel (x, y) of the displayed image reads stored pixel (sx, sy).
cv::Mat ReferenceOrient(const cv::Mat& stored, int o) {
  const int W = stored.cols, H = stored.rows;
  const bool swap = o >= 5;
  cv::Mat out(swap ? W : H, swap ? H : W, stored.type());
  const size_t px = stored.elemSize();
  for (int y = 0; y < out.rows; ++y) {
    for (int x = 0; x < out.cols; ++x) {
      int sx = x, sy = y;
      switch (o) {
        case 2: sx = W - 1 - x; break;                      // mirror left-right
        case 3: sx = W - 1 - x, sy = H - 1 - y; break;      // rotate 180
        case 4: sy = H - 1 - y; break;                      // mirror top-bottom
        case 5: sx = y, sy = x; break;                      // transpose
        case 6: sx = y, sy = H - 1 - x; break;              // rotate 90 clockwise
        case 7: sx = W - 1 - y, sy = H - 1 - x; break;      // transverse
        case 8: sx = W - 1 - y, sy = x; break;              // rotate 90 counter-clockwise
        default: break;
      }
      std::memcpy(out.ptr(y) + x * px, stored.ptr(sy) + sx * px, px);
    }
  }
  return out;
}

// Offset of the first byte of entropy-coded data (after the first SOS header).
size_t ScanDataOffset(const std::string& jpeg) {
  for (size_t i = 2; i + 3 < jpeg.size();) {
    if (uint8_t(jpeg[i]) != 0xFF) return 0;
    const uint8_t marker = uint8_t(jpeg[i + 1]);
    const size_t len = size_t(uint8_t(jpeg[i + 2])) << 8 | uint8_t(jpeg[i + 3]);
    if (marker == 0xDA) return i + 2 + len;
    i += 2 + len;
  }
  return 0;
}

PipelineSpec Uint8Spec(int size, PipelineSpec::Geometry g = PipelineSpec::Geometry::kResizeCenterCrop) {
  PipelineSpec s;
  s.geometry = g;
  s.size = size;
  s.resize_shorter = size;
  s.output = PipelineSpec::Output::kUint8NHWC;
  return s;
}

// ================================================================ PipelineSpec

TEST(PipelineSpecTest, PresetsValidate) {
  EXPECT_TRUE(PipelineSpec::ImagenetTrain().Validate().ok());
  EXPECT_TRUE(PipelineSpec::ImagenetEval().Validate().ok());
  const PipelineSpec train = PipelineSpec::ImagenetTrain();
  EXPECT_EQ(train.geometry, PipelineSpec::Geometry::kRandomResizedCrop);
  EXPECT_EQ(train.size, 224);
  EXPECT_EQ(train.output, PipelineSpec::Output::kFloat32NCHW);
  EXPECT_EQ(train.sample_bytes(), size_t(3 * 224 * 224 * 4));
  const PipelineSpec eval = PipelineSpec::ImagenetEval();
  EXPECT_EQ(eval.geometry, PipelineSpec::Geometry::kResizeCenterCrop);
  EXPECT_EQ(eval.resize_shorter, 256);
  EXPECT_EQ(eval.hflip_p, 0.0);
  EXPECT_NE(train.Fingerprint(), eval.Fingerprint());
}

TEST(PipelineSpecTest, JsonRoundTrip) {
  PipelineSpec gray = Uint8Spec(48);
  gray.color = PipelineSpec::Color::kGray;
  gray.resize_shorter = 60;
  gray.max_pixels = 12345;
  gray.roi_decode = false;
  PipelineSpec jitter = PipelineSpec::ImagenetTrain();
  jitter.brightness = 0.4;
  jitter.contrast = 0.3;
  jitter.saturation = 0.2;
  jitter.scale_min = 0.25;
  jitter.ratio_max = 2.0;
  PipelineSpec unnormalized = PipelineSpec::ImagenetEval();
  unnormalized.normalize = false;
  for (const PipelineSpec& s :
       {PipelineSpec::ImagenetTrain(), PipelineSpec::ImagenetEval(), gray, jitter, unnormalized}) {
    const std::string json = s.ToJson();
    Result<PipelineSpec> back = PipelineSpec::FromJson(json);
    ASSERT_TRUE(back.ok()) << back.status().ToString() << "\n" << json;
    EXPECT_EQ(back->ToJson(), json);
    EXPECT_EQ(back->Fingerprint(), s.Fingerprint());
    EXPECT_EQ(back->sample_bytes(), s.sample_bytes());
  }
  EXPECT_NE(gray.Fingerprint(), Uint8Spec(48).Fingerprint());
}

TEST(PipelineSpecTest, ParseNamesJsonAndFiles) {
  Result<PipelineSpec> train = PipelineSpec::Parse("imagenet-train");
  ASSERT_TRUE(train.ok());
  EXPECT_EQ(train->ToJson(), PipelineSpec::ImagenetTrain().ToJson());
  Result<PipelineSpec> eval = PipelineSpec::Parse("imagenet-eval");
  ASSERT_TRUE(eval.ok());
  EXPECT_EQ(eval->ToJson(), PipelineSpec::ImagenetEval().ToJson());

  const std::string json =
      R"({"decode": "gray", "ops": [{"op": "center_crop", "size": 64}, {"op": "resize_shorter", "size": 72},
          {"op": "hflip", "p": 0.25}], "output": {"dtype": "uint8", "layout": "NHWC"}})";
  Result<PipelineSpec> inline_spec = PipelineSpec::Parse(json);
  ASSERT_TRUE(inline_spec.ok()) << inline_spec.status().ToString();
  EXPECT_EQ(inline_spec->color, PipelineSpec::Color::kGray);
  EXPECT_EQ(inline_spec->geometry, PipelineSpec::Geometry::kResizeCenterCrop);
  EXPECT_EQ(inline_spec->size, 64);  // the op order in the JSON does not matter
  EXPECT_EQ(inline_spec->resize_shorter, 72);
  EXPECT_EQ(inline_spec->hflip_p, 0.25);
  EXPECT_EQ(inline_spec->channels(), 1);
  EXPECT_EQ(inline_spec->sample_bytes(), size_t(64 * 64));

  // center_crop alone: resize_shorter defaults to the crop size.
  Result<PipelineSpec> crop_only = PipelineSpec::Parse(R"({"ops": [{"op": "center_crop", "size": 40}]})");
  ASSERT_TRUE(crop_only.ok()) << crop_only.status().ToString();
  EXPECT_EQ(crop_only->resize_shorter, 40);
  EXPECT_EQ(crop_only->output, PipelineSpec::Output::kUint8NHWC);

  TempDir tmp;
  WriteFile(tmp / "spec.json", json);
  Result<PipelineSpec> from_file = PipelineSpec::Parse(tmp / "spec.json");
  ASSERT_TRUE(from_file.ok()) << from_file.status().ToString();
  EXPECT_EQ(from_file->ToJson(), inline_spec->ToJson());

  EXPECT_EQ(PipelineSpec::Parse(tmp / "missing.json").status().code(), StatusCode::kNotFound);
  const Status unknown = PipelineSpec::Parse("imagenet-tran").status();
  EXPECT_EQ(unknown.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(unknown.message(), "imagenet-tran")) << unknown.ToString();
  EXPECT_EQ(PipelineSpec::Parse("").status().code(), StatusCode::kInvalidArgument);
}

TEST(PipelineSpecTest, ClearErrors) {
  struct Case {
    const char* json;
    const char* message_part;
  } cases[] = {
      {R"({"ops": [{"op": "blur", "sigma": 2}]})", "unknown op 'blur'"},
      {R"({"ops": [{"op": "center_crop", "size": 8}], "colour": "rgb"})", "unknown key 'colour'"},
      {R"({"ops": [{"op": "random_resized_crop", "size": 8}, {"op": "center_crop", "size": 8}]})", "not both"},
      {R"({"ops": [{"op": "random_resized_crop", "size": 8}, {"op": "resize_shorter", "size": 8}]})",
       "not both"},
      {R"({"ops": [{"op": "resize_shorter", "size": 256}]})", "needs random_resized_crop or center_crop"},
      {R"({"ops": []})", "needs random_resized_crop or center_crop"},
      {R"({"decode": "rgb"})", "'ops' must be a list"},
      {R"({"ops": [{"op": "center_crop", "size": 8}], "output": {"dtype": "uint8", "layout": "NCHW"}})",
       "output must be"},
      {R"({"ops": [{"op": "center_crop", "size": 8}], "output": {"dtype": "float16"}})", "output must be"},
      {R"({"ops": [{"op": "center_crop", "size": 8}, {"op": "normalize", "mean": [0, 0, 0], "std": [1, 1, 1]}],
           "output": {"dtype": "uint8", "layout": "NHWC"}})",
       "normalize needs float32"},
      {R"({"ops": [{"op": "center_crop", "size": 8}, {"op": "normalize", "mean": [0, 0], "std": [1, 1, 1]}]})",
       "3 numbers"},
      {R"({"ops": [{"op": "center_crop", "size": 8}, {"op": "normalize", "mean": [0, 0, 0], "std": [1, 0, 1]}]})",
       "std must be > 0"},
      {R"({"ops": [{"op": "random_resized_crop", "size": 8, "scale": [0.5, 0.1]}]})", "scale"},
      {R"({"ops": [{"op": "random_resized_crop", "size": 8, "scale": [0.5]}]})", "[min, max]"},
      {R"({"ops": [{"op": "random_resized_crop", "size": 8, "ratio": [0, 1]}]})", "ratio"},
      {R"({"ops": [{"op": "center_crop", "size": 0}]})", "size must be"},
      {R"({"ops": [{"op": "center_crop", "size": 8}, {"op": "hflip", "p": 2}]})", "hflip"},
      {R"({"ops": [{"op": "center_crop", "size": 8}, {"op": "color_jitter", "brightness": -1}]})", "jitter"},
      {R"({"ops": [{"op": "center_crop", "size": 8}], "max_pixels": 0})", "max_pixels"},
      {R"({"decode": "cmyk", "ops": [{"op": "center_crop", "size": 8}]})", "decode must be"},
      {R"({"ops": [{"size": 8}]})", "needs an \"op\""},
      {R"([1, 2])", "expected a JSON object"},
      {R"({"ops": [{"op": "center_crop", "size": "big"}]})", "pipeline spec"},  // JSON type error
      {R"({"ops": [)", "pipeline spec"},                                          // JSON syntax error
  };
  for (const Case& c : cases) {
    const Status s = PipelineSpec::FromJson(c.json).status();
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << c.json << " -> " << s.ToString();
    EXPECT_TRUE(Contains(s.message(), c.message_part)) << c.json << " -> " << s.ToString();
  }
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
  for (const char* ext : {".png", ".bmp", ".ppm"}) {
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
  // TIFF's header is not parsed here: {0, 0}, and OpenCV's own limit applies.
  s = PeekImageSize(ImageFormat::kTiff, std::string("II*\0\x08\0\0\0", 8));
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->width, 0);
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

// ================================================================ JpegDecoder

TEST(JpegDecoderTest, HeaderOfARealJpeg) {
  JpegDecoder dec;
  const std::string jpeg = EncodeJpeg(320, 240, 3);
  Result<JpegInfo> info = dec.ReadHeader(jpeg, kDefaultMaxPixels);
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->width, 320);
  EXPECT_EQ(info->height, 240);
  EXPECT_EQ(info->components, 3);
  EXPECT_EQ(info->orientation, 1);
  EXPECT_FALSE(info->cmyk);

  const std::string gray = EncodeJpeg(33, 17, 4, 90, /*gray=*/true);
  info = dec.ReadHeader(gray, kDefaultMaxPixels);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->width, 33);
  EXPECT_EQ(info->height, 17);
  EXPECT_EQ(info->components, 1);
}

TEST(JpegDecoderTest, FullDecodeMatchesOpenCV) {
  JpegDecoder dec;
  const std::vector<std::tuple<int, int, int>> cases = {{320, 240, 90}, {97, 131, 75}, {640, 48, 95}, {1, 1, 90}};
  for (const auto& [w, h, q] : cases) {
    const std::string jpeg = EncodeJpeg(w, h, uint64_t(w * h), q);
    ASSERT_TRUE(dec.ReadHeader(jpeg, kDefaultMaxPixels).ok());
    Result<cv::Mat> full = dec.DecodeFull(false);
    ASSERT_TRUE(full.ok()) << full.status().ToString();
    EXPECT_EQ(full->type(), CV_8UC3);
    EXPECT_EQ(full->cols, w);
    EXPECT_EQ(full->rows, h);
    EXPECT_LT(MeanAbsDiff(*full, CvDecodeRgb(jpeg)), 2.0) << w << "x" << h;
  }
}

// An RGB JPEG written with libjpeg's compressor, with the luma sampling factors
// h_samp x v_samp (chroma 1x1): 1x1 is 4:4:4, 2x1 4:2:2, 2x2 4:2:0, 1x2 4:4:0.
std::string EncodeJpegSampling(const cv::Mat& rgb, int h_samp, int v_samp, int quality = 90) {
  jpeg_compress_struct c;
  jpeg_error_mgr err;
  c.err = jpeg_std_error(&err);
  jpeg_create_compress(&c);
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&c, &buf, &size);
  c.image_width = JDIMENSION(rgb.cols);
  c.image_height = JDIMENSION(rgb.rows);
  c.input_components = 3;
  c.in_color_space = JCS_RGB;
  jpeg_set_defaults(&c);
  jpeg_set_quality(&c, quality, TRUE);
  c.comp_info[0].h_samp_factor = h_samp;
  c.comp_info[0].v_samp_factor = v_samp;
  jpeg_start_compress(&c, TRUE);
  while (c.next_scanline < c.image_height) {
    JSAMPROW row = const_cast<uint8_t*>(rgb.ptr<uint8_t>(int(c.next_scanline)));
    jpeg_write_scanlines(&c, &row, 1);
  }
  jpeg_finish_compress(&c);
  std::string out(reinterpret_cast<const char*>(buf), size);
  jpeg_destroy_compress(&c);
  std::free(buf);
  return out;
}

TEST(JpegDecoderTest, RegionAtScaleOneEqualsWindowOfFullDecode) {
  // Chroma upsampling at the window's edges, row skipping and column cropping must
  // all give the pixels a full decode gives, whatever the subsampling.
  auto px = testing::SyntheticPixels(320, 240, 5);
  const cv::Mat rgb = cv::Mat(240, 320, CV_8UC3, px.data()).clone();
  const std::vector<std::pair<int, int>> samplings = {{2, 2}, {2, 1}, {1, 1}, {1, 2}};
  for (const auto& [h_samp, v_samp] : samplings) {
    const std::string jpeg = EncodeJpegSampling(rgb, h_samp, v_samp);
    JpegDecoder dec;
    ASSERT_TRUE(dec.ReadHeader(jpeg, kDefaultMaxPixels).ok());
    Result<cv::Mat> full_or = dec.DecodeFull(false);
    ASSERT_TRUE(full_or.ok());
    const cv::Mat full = full_or->clone();  // the view is only valid until the next call
    EXPECT_LT(MeanAbsDiff(full, rgb), 6.0);
    SampleRng rng(5, 0, 0);
    std::vector<cv::Rect> rects = {{0, 0, 320, 240},   {37, 23, 150, 100}, {0, 200, 320, 40}, {319, 239, 1, 1},
                                   {16, 16, 16, 16},   {1, 0, 17, 240},    {300, 5, 20, 7},   {0, 0, 1, 240},
                                   {15, 15, 2, 2},     {304, 0, 16, 240},  {8, 8, 8, 8}};
    for (int k = 0; k < 40; ++k) {
      const int w = 1 + int(rng.Below(320)), h = 1 + int(rng.Below(240));
      rects.push_back({int(rng.Below(uint64_t(320 - w + 1))), int(rng.Below(uint64_t(240 - h + 1))), w, h});
    }
    for (const cv::Rect& r : rects) {
      ASSERT_TRUE(dec.ReadHeader(jpeg, kDefaultMaxPixels).ok());
      double scale = 0;
      Result<cv::Mat> region = dec.DecodeRegion(r, r.width, r.height, false, &scale);
      ASSERT_TRUE(region.ok()) << region.status().ToString();
      EXPECT_EQ(scale, 1.0);
      ASSERT_EQ(region->size(), r.size());
      EXPECT_EQ(MaxAbsDiff(*region, full(r)), 0.0) << r << " sampling " << h_samp << "x" << v_samp;
    }
  }
}

TEST(JpegDecoderTest, DctScaledRegionIsCloseToAreaResize) {
  JpegDecoder dec;
  const std::string jpeg = EncodeJpeg(640, 480, 6);
  ASSERT_TRUE(dec.ReadHeader(jpeg, kDefaultMaxPixels).ok());
  const cv::Mat full = dec.DecodeFull(false)->clone();

  struct Case {
    cv::Rect rect;
    int min;
    int num;          // the DCT scale is num/8
    cv::Rect scaled;  // the window in the scaled image
  } cases[] = {
      {{100, 40, 400, 400}, 100, 2, {25, 10, 100, 100}},  // 400 * 2/8 = 100 >= 100
      {{100, 40, 400, 400}, 101, 4, {50, 20, 200, 200}},  // 2/8 would leave 100 < 101
      {{0, 0, 640, 480}, 60, 1, {0, 0, 80, 60}},
      {{8, 8, 240, 160}, 120, 8, {8, 8, 240, 160}},       // 4/8 leaves 80 rows < 120
      {{64, 32, 320, 320}, 80, 2, {16, 8, 80, 80}},
      {{101, 43, 203, 77}, 30, 4, {50, 21, 102, 39}},     // [50.5, 152) x [21.5, 60): outwards
  };
  for (const Case& c : cases) {
    ASSERT_TRUE(dec.ReadHeader(jpeg, kDefaultMaxPixels).ok());
    double scale = 0;
    Result<cv::Mat> region_or = dec.DecodeRegion(c.rect, c.min, c.min, false, &scale);
    ASSERT_TRUE(region_or.ok()) << region_or.status().ToString();
    const cv::Mat region = region_or->clone();
    EXPECT_EQ(scale, c.num / 8.0) << c.rect;
    ASSERT_EQ(region.size(), c.scaled.size()) << c.rect;
    cv::Mat reference;
    cv::resize(full(c.rect), reference, c.scaled.size(), 0, 0, cv::INTER_AREA);
    EXPECT_LT(MeanAbsDiff(region, reference), 6.0) << c.rect;
    // Exactly the window of the whole image decoded at the same scale.
    ASSERT_TRUE(dec.ReadHeader(jpeg, kDefaultMaxPixels).ok());
    Result<cv::Mat> whole = dec.DecodeRegion({0, 0, 640, 480}, 80 * c.num, 60 * c.num, false, &scale);
    ASSERT_TRUE(whole.ok());
    ASSERT_EQ(whole->size(), cv::Size(80 * c.num, 60 * c.num));
    EXPECT_EQ(MaxAbsDiff(region, (*whole)(c.scaled)), 0.0) << c.rect;
  }
}

TEST(JpegDecoderTest, GrayscaleJpegDecodesToEqualRgbChannels) {
  JpegDecoder dec;
  const std::string jpeg = EncodeJpeg(120, 90, 7, 90, /*gray=*/true);
  ASSERT_TRUE(dec.ReadHeader(jpeg, kDefaultMaxPixels).ok());
  Result<cv::Mat> rgb = dec.DecodeFull(false);
  ASSERT_TRUE(rgb.ok()) << rgb.status().ToString();
  ASSERT_EQ(rgb->type(), CV_8UC3);
  std::vector<cv::Mat> planes;
  cv::split(*rgb, planes);
  EXPECT_TRUE(SameBytes(planes[0], planes[1]));
  EXPECT_TRUE(SameBytes(planes[0], planes[2]));
  double lo = 0, hi = 0;
  cv::minMaxLoc(planes[0], &lo, &hi);
  EXPECT_LT(lo + 40, hi);  // not a flat image

  const cv::Mat red = planes[0].clone();
  ASSERT_TRUE(dec.ReadHeader(jpeg, kDefaultMaxPixels).ok());
  Result<cv::Mat> gray = dec.DecodeFull(true);
  ASSERT_TRUE(gray.ok());
  ASSERT_EQ(gray->type(), CV_8UC1);
  EXPECT_TRUE(SameBytes(*gray, red));

  // The whole pipeline: 3 equal channels.
  SampleProcessor proc(Uint8Spec(32));
  std::vector<uint8_t> out(proc.spec().sample_bytes());
  ASSERT_TRUE(proc.Process(jpeg, 0, 0, 0, out.data()).ok());
  for (size_t i = 0; i < out.size(); i += 3) {
    ASSERT_EQ(out[i], out[i + 1]);
    ASSERT_EQ(out[i], out[i + 2]);
  }
}

// A w x h CMYK JPEG written with libjpeg's compressor. `cmyk` holds the values as
// written to the file: with `adobe`, Adobe's inverted convention (255 = no ink), as
// Photoshop writes them; without, plain ink amounts.
std::string EncodeCmykJpeg(const std::vector<uint8_t>& cmyk, int w, int h, bool adobe) {
  jpeg_compress_struct c;
  jpeg_error_mgr err;
  c.err = jpeg_std_error(&err);
  jpeg_create_compress(&c);
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&c, &buf, &size);
  c.image_width = JDIMENSION(w);
  c.image_height = JDIMENSION(h);
  c.input_components = 4;
  c.in_color_space = JCS_CMYK;
  jpeg_set_defaults(&c);
  jpeg_set_colorspace(&c, JCS_CMYK);
  c.write_Adobe_marker = adobe ? TRUE : FALSE;
  jpeg_set_quality(&c, 95, TRUE);
  jpeg_start_compress(&c, TRUE);
  while (c.next_scanline < c.image_height) {
    JSAMPROW row = const_cast<uint8_t*>(&cmyk[size_t(c.next_scanline) * w * 4]);
    jpeg_write_scanlines(&c, &row, 1);
  }
  jpeg_finish_compress(&c);
  std::string out(reinterpret_cast<const char*>(buf), size);
  jpeg_destroy_compress(&c);
  std::free(buf);
  return out;
}

TEST(JpegDecoderTest, CmykJpegAdobeAndPlain) {
  // Four 32x32 quadrants: red, green, blue, mid gray (through K only).
  const int w = 64, h = 64;
  struct Patch {
    uint8_t ink[4];  // plain CMYK ink amounts
    cv::Vec3b rgb;
  } patches[4] = {{{0, 255, 255, 0}, {255, 0, 0}},
                  {{255, 0, 255, 0}, {0, 255, 0}},
                  {{255, 255, 0, 0}, {0, 0, 255}},
                  {{0, 0, 0, 127}, {128, 128, 128}}};
  auto quadrant = [](int x, int y) { return (y >= 32 ? 2 : 0) + (x >= 32 ? 1 : 0); };
  for (bool adobe : {true, false}) {
    std::vector<uint8_t> cmyk(size_t(w) * h * 4);
    for (int y = 0; y < h; ++y) {
      for (int x = 0; x < w; ++x) {
        for (int k = 0; k < 4; ++k) {
          const uint8_t ink = patches[quadrant(x, y)].ink[k];
          cmyk[(size_t(y) * w + x) * 4 + k] = adobe ? uint8_t(255 - ink) : ink;
        }
      }
    }
    const std::string jpeg = EncodeCmykJpeg(cmyk, w, h, adobe);
    JpegDecoder dec;
    Result<JpegInfo> info = dec.ReadHeader(jpeg, kDefaultMaxPixels);
    ASSERT_TRUE(info.ok()) << info.status().ToString();
    EXPECT_TRUE(info->cmyk);
    EXPECT_EQ(info->components, 4);
    Result<cv::Mat> rgb_or = dec.DecodeFull(false);
    ASSERT_TRUE(rgb_or.ok()) << rgb_or.status().ToString();
    const cv::Mat rgb = rgb_or->clone();
    ASSERT_EQ(rgb.type(), CV_8UC3);
    ASSERT_EQ(rgb.size(), cv::Size(w, h));
    for (int q = 0; q < 4; ++q) {
      const cv::Rect inner((q % 2) * 32 + 8, (q / 2) * 32 + 8, 16, 16);
      const cv::Scalar mean = cv::mean(rgb(inner));
      for (int c = 0; c < 3; ++c) {
        EXPECT_NEAR(mean[c], patches[q].rgb[c], 6.0) << "adobe=" << adobe << " quadrant " << q << " channel " << c;
      }
    }
    // OpenCV reads Adobe CMYK JPEGs the same way.
    if (adobe) {
      EXPECT_LT(MeanAbsDiff(rgb, CvDecodeRgb(jpeg)), 2.0);
    }

    // A region (not on an iMCU boundary) equals the same window of the full decode.
    const cv::Rect r(13, 21, 40, 30);
    ASSERT_TRUE(dec.ReadHeader(jpeg, kDefaultMaxPixels).ok());
    Result<cv::Mat> region = dec.DecodeRegion(r, r.width, r.height, false, nullptr);
    ASSERT_TRUE(region.ok()) << region.status().ToString();
    EXPECT_LE(MaxAbsDiff(*region, rgb(r)), 1.0);
    // And as gray.
    ASSERT_TRUE(dec.ReadHeader(jpeg, kDefaultMaxPixels).ok());
    Result<cv::Mat> gray = dec.DecodeRegion(r, r.width, r.height, true, nullptr);
    ASSERT_TRUE(gray.ok());
    EXPECT_EQ(gray->type(), CV_8UC1);
    cv::Mat expected_gray;
    cv::cvtColor(rgb(r), expected_gray, cv::COLOR_RGB2GRAY);
    EXPECT_LE(MaxAbsDiff(*gray, expected_gray), 1.0);

    // Through SampleProcessor: the red quadrant's centre stays red.
    PipelineSpec spec = Uint8Spec(16);
    SampleProcessor proc(spec);
    std::vector<uint8_t> out(spec.sample_bytes());
    ASSERT_TRUE(proc.Process(jpeg, 0, 0, 0, out.data()).ok());
    const uint8_t* p = &out[(2 * 16 + 2) * 3];  // row 2, column 2: inside red
    EXPECT_GT(p[0], 240);
    EXPECT_LT(p[1], 15);
    EXPECT_LT(p[2], 15);
  }
}

TEST(JpegDecoderTest, ExifOrientationAllEight) {
  // A non-square, asymmetric image: every orientation gives a different result.
  const int W = 96, H = 64;
  const std::string plain = EncodeJpeg(W, H, 8, 95);
  JpegDecoder dec;
  ASSERT_TRUE(dec.ReadHeader(plain, kDefaultMaxPixels).ok());
  const cv::Mat stored = dec.DecodeFull(false)->clone();

  PipelineSpec rrc = Uint8Spec(32, PipelineSpec::Geometry::kRandomResizedCrop);
  rrc.roi_decode = false;  // full decode: the reference below is then exact
  PipelineSpec rrc_roi = rrc;
  rrc_roi.roi_decode = true;
  const SampleProcessor proc(rrc), proc_roi(rrc_roi);
  std::vector<uint8_t> out(rrc.sample_bytes()), expected(rrc.sample_bytes());

  // The eight orientations give eight different images.
  for (int a = 1; a <= 8; ++a) {
    for (int b = a + 1; b <= 8; ++b) {
      EXPECT_FALSE(SameBytes(ApplyOrientation(stored, a), ApplyOrientation(stored, b))) << a << " vs " << b;
    }
  }
  for (int o = 1; o <= 8; ++o) {
    for (bool le : {false, true}) {
      const std::string jpeg = WithExifOrientation(plain, o, le);
      Result<JpegInfo> info = dec.ReadHeader(jpeg, kDefaultMaxPixels);
      ASSERT_TRUE(info.ok()) << info.status().ToString();
      EXPECT_EQ(info->orientation, o) << "le=" << le;
      EXPECT_EQ(info->width, W);  // as stored
      Result<cv::Mat> decoded = dec.DecodeFull(false);
      ASSERT_TRUE(decoded.ok());
      EXPECT_TRUE(SameBytes(*decoded, stored));  // the segment changes no pixels
      const cv::Mat oriented = ApplyOrientation(stored, o);
      const cv::Mat reference = ReferenceOrient(stored, o);
      EXPECT_TRUE(SameBytes(oriented, reference)) << "orientation " << o;
      EXPECT_EQ(oriented.cols, o >= 5 ? H : W);
    }

    // SampleProcessor: a random crop of the displayed (oriented) image.
    const std::string jpeg = WithExifOrientation(plain, o, o % 2 == 0);
    const cv::Mat displayed = ReferenceOrient(stored, o);
    for (int64_t index = 0; index < 6; ++index) {
      SampleRng crop_rng(11, 2, uint64_t(index), kRngCrop);
      const cv::Rect box = RandomResizedCropBox(displayed.cols, displayed.rows, rrc, crop_rng);
      ResizeToUint8HWC(displayed(box), 32, false, expected.data());
      ASSERT_TRUE(proc.Process(jpeg, 11, 2, index, out.data()).ok());
      EXPECT_EQ(out, expected) << "orientation " << o << " index " << index;
      ASSERT_TRUE(proc_roi.Process(jpeg, 11, 2, index, out.data()).ok());
      const cv::Mat a(32, 32, CV_8UC3, out.data()), b(32, 32, CV_8UC3, expected.data());
      EXPECT_LT(MeanAbsDiff(a, b), 8.0) << "roi, orientation " << o << " index " << index;
    }
  }
}

TEST(JpegDecoderTest, ParseExifOrientationMalformed) {
  const std::string good = WithExifOrientation(EncodeJpeg(8, 8, 1), 6);
  // SOI, FF E1, a 2-byte length (counting itself), then the payload.
  const std::string body = good.substr(6, (size_t(uint8_t(good[4])) << 8 | uint8_t(good[5])) - 2);
  ASSERT_EQ(body.size(), 32u);
  auto parse = [](const std::string& s) {
    return ParseExifOrientation(reinterpret_cast<const uint8_t*>(s.data()), s.size());
  };
  ASSERT_EQ(parse(body), 6);
  EXPECT_EQ(parse(""), 1);
  EXPECT_EQ(parse("Exif"), 1);
  EXPECT_EQ(parse(body.substr(0, 13)), 1);
  EXPECT_EQ(parse(body.substr(0, 20)), 1);  // IFD entry cut off
  std::string bad = body;
  bad[0] = 'e';  // not "Exif"
  EXPECT_EQ(parse(bad), 1);
  bad = body;
  bad[6] = 'X';  // byte order neither II nor MM
  EXPECT_EQ(parse(bad), 1);
  bad = body;
  bad[9] = 43;  // not 42
  EXPECT_EQ(parse(bad), 1);
  bad = body;
  bad[10] = bad[11] = bad[12] = bad[13] = '\xFF';  // IFD offset far outside
  EXPECT_EQ(parse(bad), 1);
  bad = body;
  bad[14] = bad[15] = '\xFF';  // 65535 entries, data for one, and that one not 0x0112
  bad[16] = bad[17] = 0;
  EXPECT_EQ(parse(bad), 1);
  bad = body;
  bad[19] = 4;  // type LONG instead of SHORT
  EXPECT_EQ(parse(bad), 1);
  for (int v : {0, 9, 255}) {
    bad = body;
    bad[24] = 0;
    bad[25] = char(v);
    EXPECT_EQ(parse(bad), 1) << v;
  }
  // Random tails after a valid prefix: never out of range, never a crash (ASan).
  SampleRng rng(99, 0, 0);
  for (int k = 0; k < 2000; ++k) {
    std::string s = body.substr(0, 6 + rng.Below(12));
    const size_t extra = rng.Below(64);
    for (size_t i = 0; i < extra; ++i) s += char(rng.NextU32());
    if (rng.Below(2)) s.replace(6, std::min<size_t>(2, s.size() - 6), rng.Below(2) ? "II" : "MM");
    const int v = parse(s);
    EXPECT_TRUE(v >= 1 && v <= 8);
  }
}

// ================================================================ the pixel limit

TEST(PixelLimitTest, HugeJpegHeaderRefusedBeforeAllocating) {
  const std::string bomb = WithJpegSize(EncodeJpeg(64, 48, 9), 65000, 65000);
  JpegDecoder dec;
  const auto t0 = std::chrono::steady_clock::now();
  Result<JpegInfo> info = dec.ReadHeader(bomb, kDefaultMaxPixels);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_FALSE(info.ok());
  EXPECT_EQ(info.status().code(), StatusCode::kResourceExhausted) << info.status().ToString();
  EXPECT_TRUE(Contains(info.status().message(), "too large")) << info.status().ToString();
  EXPECT_TRUE(Contains(info.status().message(), "65000x65000")) << info.status().ToString();
  EXPECT_LT(seconds, 1.0);

  for (const PipelineSpec& spec : {PipelineSpec::ImagenetTrain(), PipelineSpec::ImagenetEval()}) {
    SampleProcessor proc(spec);
    std::vector<uint8_t> out(spec.sample_bytes());
    const auto t1 = std::chrono::steady_clock::now();
    const Status s = proc.Process(bomb, 0, 0, 0, out.data());
    EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s.ToString();
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count(), 1.0);
  }
  // The decoder is still usable afterwards.
  const std::string ok = EncodeJpeg(64, 48, 9);
  ASSERT_TRUE(dec.ReadHeader(ok, kDefaultMaxPixels).ok());
  EXPECT_TRUE(dec.DecodeFull(false).ok());
}

TEST(PixelLimitTest, ConfigurableLimit) {
  const std::string jpeg = EncodeJpeg(320, 240, 10);
  JpegDecoder dec;
  EXPECT_TRUE(dec.ReadHeader(jpeg, 320 * 240).ok());  // the limit is inclusive
  EXPECT_EQ(dec.ReadHeader(jpeg, 320 * 240 - 1).status().code(), StatusCode::kResourceExhausted);

  PipelineSpec spec = Uint8Spec(32);
  spec.max_pixels = 320 * 240 - 1;
  SampleProcessor proc(spec);
  std::vector<uint8_t> out(spec.sample_bytes());
  EXPECT_EQ(proc.Process(jpeg, 0, 0, 0, out.data()).code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(proc.Process(EncodePng(320, 240, 10), 0, 0, 0, out.data()).code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(proc.Process(EncodeJpeg(240, 200, 10), 0, 0, 0, out.data()).ok());
  EXPECT_TRUE(proc.Process(EncodePng(240, 200, 10), 0, 0, 0, out.data()).ok());
}

TEST(PixelLimitTest, HugeHeadersOfOtherFormats) {
  // IHDR patched (CRC left stale: the size check comes before any decoding).
  const std::string png = WithPngSize(EncodePng(16, 16, 11), 70000, 70000);
  Result<cv::Mat> decoded = DecodeWithOpenCV(ImageFormat::kPng, png, false, kDefaultMaxPixels);
  EXPECT_EQ(decoded.status().code(), StatusCode::kResourceExhausted) << decoded.status().ToString();
  EXPECT_TRUE(Contains(decoded.status().message(), "70000x70000"));

  std::string vp8x("RIFF\x16\0\0\0WEBPVP8X\x0a\0\0\0\x10\0\0\0", 24);
  vp8x += std::string("\xFF\x3F\x00\xFF\x3F\x00", 6);  // 16384 x 16384
  const std::string pnm = "P6\n100000 100000\n255\n" + std::string(64, '\0');
  SampleProcessor proc(PipelineSpec::ImagenetTrain());
  std::vector<uint8_t> out(proc.spec().sample_bytes());
  for (const std::string& bomb : {png, vp8x, pnm}) {
    const auto t0 = std::chrono::steady_clock::now();
    const Status s = proc.Process(bomb, 0, 0, 0, out.data());
    EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << ImageFormatName(SniffFormat(bomb)) << ": " << s.ToString();
    EXPECT_TRUE(Contains(s.message(), "too large")) << s.ToString();
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 1.0);
  }
}

// ================================================================ hostile bytes

TEST(HostileBytesTest, TruncatedEmptyRandomAndGif) {
  const std::string jpeg = EncodeJpeg(200, 150, 12);
  const std::string truncated = jpeg.substr(0, jpeg.size() * 6 / 10);
  JpegDecoder dec;
  Status s = dec.ReadHeader(truncated, kDefaultMaxPixels).status();
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_TRUE(Contains(s.message(), "truncated")) << s.ToString();
  EXPECT_EQ(dec.ReadHeader("", kDefaultMaxPixels).status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(dec.ReadHeader("\xFF\xD8", kDefaultMaxPixels).status().code(), StatusCode::kDataLoss);

  for (const PipelineSpec& spec : {PipelineSpec::ImagenetTrain(), Uint8Spec(24)}) {
    SampleProcessor proc(spec);
    std::vector<uint8_t> out(spec.sample_bytes());
    s = proc.Process(truncated, 1, 0, 0, out.data());
    EXPECT_EQ(s.code(), StatusCode::kDataLoss);
    EXPECT_TRUE(Contains(s.message(), "truncated")) << s.ToString();

    s = proc.Process("", 1, 0, 0, out.data());
    EXPECT_EQ(s.code(), StatusCode::kDataLoss);
    EXPECT_TRUE(Contains(s.message(), "zero-byte")) << s.ToString();

    SampleRng rng(12, 0, 0);
    std::string noise = "\x01\x02";
    for (int i = 0; i < 5000; ++i) noise += char(rng.NextU32());
    s = proc.Process(noise, 1, 0, 0, out.data());
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_TRUE(Contains(s.message(), "not an image")) << s.ToString();
    EXPECT_EQ(proc.Process("just some text\n", 1, 0, 0, out.data()).code(), StatusCode::kInvalidArgument);

    s = proc.Process(TinyGif(), 1, 0, 0, out.data());
    EXPECT_EQ(s.code(), StatusCode::kUnimplemented);
    EXPECT_TRUE(Contains(s.message(), "unsupported")) << s.ToString();
    EXPECT_TRUE(Contains(s.message(), "GIF")) << s.ToString();

    // The JPEG magic followed by noise (with and without an end marker).
    for (uint64_t seed = 0; seed < 20; ++seed) {
      s = proc.Process(JpegSoiThenNoise(3000, seed), 1, 0, 0, out.data());
      EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s.ToString();
      s = proc.Process(JpegSoiThenNoise(3000, seed) + "\xFF\xD9", 1, 0, 0, out.data());
      EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s.ToString();
      EXPECT_TRUE(Contains(s.message(), "corrupt")) << s.ToString();
    }
    // Truncated files of the other formats.
    const std::string png = EncodePng(64, 64, 12);
    s = proc.Process(png.substr(0, png.size() / 2), 1, 0, 0, out.data());
    EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s.ToString();
    s = proc.Process(png.substr(0, 20), 1, 0, 0, out.data());
    EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s.ToString();
  }
}

TEST(HostileBytesTest, TruncatedScanWithEndMarkerIsDataLoss) {
  // The tail cut off in the middle of the scan, an EOI appended: the end-of-image
  // check passes, the decoder must notice the missing data.
  const std::string jpeg = EncodeJpeg(200, 150, 13);
  const std::string cut = jpeg.substr(0, jpeg.size() * 6 / 10) + "\xFF\xD9";
  JpegDecoder dec;
  ASSERT_TRUE(dec.ReadHeader(cut, kDefaultMaxPixels).ok());
  Result<cv::Mat> full = dec.DecodeFull(false);
  EXPECT_EQ(full.status().code(), StatusCode::kDataLoss) << full.status().ToString();
  // The decoder recovers for the next image.
  ASSERT_TRUE(dec.ReadHeader(jpeg, kDefaultMaxPixels).ok());
  EXPECT_TRUE(dec.DecodeFull(false).ok());
}

TEST(HostileBytesTest, CorruptedEntropyDataNeverCrashes) {
  const std::string jpeg = EncodeJpeg(256, 192, 14);
  const size_t scan = ScanDataOffset(jpeg);
  ASSERT_GT(scan, 0u);
  const size_t scan_len = jpeg.size() - 2 - scan;
  SampleProcessor train(PipelineSpec::ImagenetTrain()), small(Uint8Spec(24));
  std::vector<uint8_t> out(train.spec().sample_bytes());
  JpegDecoder dec;
  // Flipped bits in Huffman data mostly decode silently to wrong pixels (libjpeg has no
  // checksum to notice them with), so both outcomes are allowed: what is tested is that
  // nothing crashes (ASan) and that a failure is reported as DataLoss.
  for (uint64_t seed = 0; seed < 60; ++seed) {
    SampleRng rng(seed, 0, 0);
    std::string bad = jpeg;
    const int flips = 1 + int(rng.Below(8));
    for (int k = 0; k < flips; ++k) {
      const size_t at = scan + scan_len / 3 + rng.Below(scan_len / 3);
      bad[at] = char(uint8_t(bad[at]) ^ uint8_t(1 + rng.Below(255)));
    }
    ASSERT_TRUE(dec.ReadHeader(bad, kDefaultMaxPixels).ok());  // the headers are intact
    Result<cv::Mat> full = dec.DecodeFull(false);
    if (!full.ok()) {
      EXPECT_EQ(full.status().code(), StatusCode::kDataLoss) << full.status().ToString();
    }
    for (const SampleProcessor* proc : {&train, &small}) {
      for (int64_t index = 0; index < 3; ++index) {
        const Status s = proc->Process(bad, seed, 0, index, out.data());
        EXPECT_TRUE(s.ok() || s.code() == StatusCode::kDataLoss) << s.ToString();
      }
    }
  }
}

TEST(HostileBytesTest, RandomByteFlipsAnywhereNeverCrash) {
  // Headers included: dimensions, tables, markers. Any outcome but a crash, a hang or
  // an unexpected kind of error.
  const std::string jpeg = EncodeJpeg(120, 80, 15);
  const std::string progressive = [] {
    std::vector<uint8_t> buf;
    cv::Mat img(60, 90, CV_8UC3);
    cv::randu(img, 0, 255);
    cv::imencode(".jpg", img, buf, {cv::IMWRITE_JPEG_PROGRESSIVE, 1});
    return std::string(buf.begin(), buf.end());
  }();
  SampleProcessor proc(Uint8Spec(24, PipelineSpec::Geometry::kRandomResizedCrop));
  std::vector<uint8_t> out(proc.spec().sample_bytes());
  for (const std::string* base : {&jpeg, &progressive}) {
    for (uint64_t seed = 0; seed < 150; ++seed) {
      SampleRng rng(seed, 1, 0);
      std::string bad = *base;
      const int flips = 1 + int(rng.Below(4));
      for (int k = 0; k < flips; ++k) {
        const size_t at = 3 + rng.Below(bad.size() - 3);
        bad[at] = char(rng.NextU32());
      }
      const Status s = proc.Process(bad, seed, 0, 0, out.data());
      EXPECT_TRUE(s.ok() || s.code() == StatusCode::kDataLoss || s.code() == StatusCode::kResourceExhausted)
          << "seed " << seed << ": " << s.ToString();
    }
  }
}

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
  std::vector<uint8_t> out(proc.spec().sample_bytes());
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
  std::vector<uint8_t> ref(spec.sample_bytes()), out(spec.sample_bytes());
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
    Result<cv::Mat> img = DecodeWithOpenCV(SniffFormat(bytes), bytes, false, kDefaultMaxPixels);
    ASSERT_TRUE(img.ok()) << ext << ": " << img.status().ToString();
    EXPECT_TRUE(SameBytes(*img, rgb)) << ext;  // lossless formats, RGB order
    PipelineSpec spec = Uint8Spec(30);
    SampleProcessor proc(spec);
    std::vector<uint8_t> out(spec.sample_bytes());
    EXPECT_TRUE(proc.Process(bytes, 0, 0, 0, out.data()).ok()) << ext;
  }
}

// ================================================================ ops

TEST(OpsTest, RandomResizedCropBoxBoundsAreaAndRatio) {
  PipelineSpec spec = PipelineSpec::ImagenetTrain();
  const cv::Size sizes[] = {{1, 1}, {3, 500}, {500, 3}, {2, 2},     {64, 48},   {500, 375},
                            {1000, 800}, {4000, 10}, {10, 4000}, {17, 23}, {224, 224}};
  for (const cv::Size& sz : sizes) {
    const int W = sz.width, H = sz.height;
    const double area = double(W) * H;
    int fallbacks = 0;
    double sum_cx = 0;
    const int draws = 1500;
    for (int k = 0; k < draws; ++k) {
      SampleRng rng(uint64_t(W) * 7919 + H, 0, uint64_t(k), kRngCrop);
      const cv::Rect r = RandomResizedCropBox(W, H, spec, rng);
      ASSERT_GE(r.x, 0) << sz;
      ASSERT_GE(r.y, 0) << sz;
      ASSERT_GE(r.width, 1) << sz;
      ASSERT_GE(r.height, 1) << sz;
      ASSERT_LE(r.x + r.width, W) << sz;
      ASSERT_LE(r.y + r.height, H) << sz;
      sum_cx += r.x + r.width / 2.0;
      // torchvision's central fallback (when 10 draws did not fit).
      const double in_ratio = double(W) / H;
      int fw = W, fh = H;
      if (in_ratio < spec.ratio_min) fh = int(std::nearbyint(W / spec.ratio_min));
      if (in_ratio > spec.ratio_max) fw = int(std::nearbyint(H * spec.ratio_max));
      const cv::Rect fallback((W - fw) / 2, (H - fh) / 2, fw, fh);
      if (r == fallback) {
        ++fallbacks;
        continue;
      }
      // A drawn box: w = round(sqrt(A*s*r)), h = round(sqrt(A*s/r)) for s in the
      // scale range and r in the ratio range, so (w +- 0.5) and (h +- 0.5) bracket them.
      const double w = r.width, h = r.height;
      EXPECT_LE((w - 0.5) * (h - 0.5), spec.scale_max * area + 1e-9) << sz << " " << r;
      EXPECT_GE((w + 0.5) * (h + 0.5), spec.scale_min * area - 1e-9) << sz << " " << r;
      EXPECT_LE((w - 0.5) / (h + 0.5), spec.ratio_max + 1e-9) << sz << " " << r;
      if (h > 0.5) {
        EXPECT_GE((w + 0.5) / (h - 0.5), spec.ratio_min - 1e-9) << sz << " " << r;
      }
    }
    if (W * 2 < H || H * 2 < W) {
      // Far outside the ratio range: no draw can fit, always the fallback.
      EXPECT_EQ(fallbacks, draws) << sz;
    }
    if (W >= 64 && H >= 48 && W <= 2 * H && H <= 2 * W) {
      EXPECT_LT(fallbacks, draws / 100) << sz;
      // Offsets are uniform: the crops' centres average near the image centre.
      EXPECT_NEAR(sum_cx / draws, W / 2.0, W * 0.05) << sz;
    }
  }
}

TEST(OpsTest, RandomResizedCropFallbackMatchesTorchvision) {
  PipelineSpec spec = PipelineSpec::ImagenetTrain();
  SampleRng rng(1, 0, 0);
  // in_ratio < 3/4: w = width, h = round(width / (3/4)); i = (H - h) // 2.
  EXPECT_EQ(RandomResizedCropBox(3, 500, spec, rng), cv::Rect(0, 248, 3, 4));
  // in_ratio > 4/3: h = height, w = round(height * 4/3); j = (W - w) // 2.
  EXPECT_EQ(RandomResizedCropBox(500, 3, spec, rng), cv::Rect(248, 0, 4, 3));
  EXPECT_EQ(RandomResizedCropBox(4000, 10, spec, rng), cv::Rect(1993, 0, 13, 10));
  EXPECT_EQ(RandomResizedCropBox(10, 4000, spec, rng), cv::Rect(0, 1993, 10, 13));  // round(10 / 0.75)
  // Python's round() is half to even: round(2.5) == 2, round(3.5) == 4.
  spec.ratio_min = 0.8;
  spec.ratio_max = 2.5;
  EXPECT_EQ(RandomResizedCropBox(2, 500, spec, rng), cv::Rect(0, 249, 2, 2));    // 2 / 0.8 = 2.5 -> 2
  EXPECT_EQ(RandomResizedCropBox(1000, 1, spec, rng), cv::Rect(499, 0, 2, 1));   // 1 * 2.5 = 2.5 -> 2
  spec.ratio_max = 3.5;
  EXPECT_EQ(RandomResizedCropBox(1000, 1, spec, rng), cv::Rect(498, 0, 4, 1));   // 1 * 3.5 = 3.5 -> 4
  // 1x1 always yields the whole pixel.
  spec = PipelineSpec::ImagenetTrain();
  for (int k = 0; k < 100; ++k) {
    SampleRng r(k, 0, 0);
    EXPECT_EQ(RandomResizedCropBox(1, 1, spec, r), cv::Rect(0, 0, 1, 1));
  }
}

TEST(OpsTest, CenterCropBoxFollowsTorchvision) {
  PipelineSpec spec = PipelineSpec::ImagenetEval();  // Resize(256), CenterCrop(224)
  // 500x375: Resize gives 341x256 (341 = int(256 * 500 / 375)); CenterCrop's
  // top = round((256 - 224) / 2) = 16, left = round((341 - 224) / 2) = round(58.5) = 58.
  // Back in the source, per axis (x by 500/341, y by 375/256):
  //   x: [58, 282) * 500/341 = [85.04, 413.49) -> [85, 413)
  //   y: [16, 240) * 375/256 = [23.44, 351.56) -> [23, 352)
  EXPECT_EQ(CenterCropBox(500, 375, spec), cv::Rect(85, 23, 328, 329));
  EXPECT_EQ(CenterCropBox(375, 500, spec), cv::Rect(23, 85, 329, 328));
  // Square: 256x256, crop [16, 240) * 2 = [32, 480).
  EXPECT_EQ(CenterCropBox(512, 512, spec), cv::Rect(32, 32, 448, 448));
  // Already the resize size: no scaling.
  EXPECT_EQ(CenterCropBox(256, 256, spec), cv::Rect(16, 16, 224, 224));
  // Upscaling a small image: 100x50 -> 512x256; left = 144, top = 16;
  //   x: [144, 368) * 100/512 = [28.1, 71.9) -> [28, 72); y: [16, 240) * 50/256 -> [3, 47).
  EXPECT_EQ(CenterCropBox(100, 50, spec), cv::Rect(28, 3, 44, 44));
  // Degenerate sizes stay inside the image.
  for (const cv::Size& sz : {cv::Size(1, 1), cv::Size(1, 1000), cv::Size(1000, 1), cv::Size(2, 3)}) {
    const cv::Rect r = CenterCropBox(sz.width, sz.height, spec);
    EXPECT_GE(r.x, 0);
    EXPECT_GE(r.y, 0);
    EXPECT_GE(r.width, 1);
    EXPECT_GE(r.height, 1);
    EXPECT_LE(r.x + r.width, sz.width) << sz;
    EXPECT_LE(r.y + r.height, sz.height) << sz;
  }
}

TEST(OpsTest, OrientedToStoredRoundTripsWithApplyOrientation) {
  const int W = 37, H = 23;
  auto px = testing::SyntheticPixels(W, H, 19);
  const cv::Mat stored = cv::Mat(H, W, CV_8UC3, px.data()).clone();
  SampleRng rng(19, 0, 0);
  for (int o = 1; o <= 8; ++o) {
    const cv::Mat oriented = ReferenceOrient(stored, o);
    ASSERT_TRUE(SameBytes(ApplyOrientation(stored, o), oriented)) << o;
    for (int k = 0; k < 200; ++k) {
      const int w = 1 + int(rng.Below(uint64_t(oriented.cols)));
      const int h = 1 + int(rng.Below(uint64_t(oriented.rows)));
      const int x = int(rng.Below(uint64_t(oriented.cols - w + 1)));
      const int y = int(rng.Below(uint64_t(oriented.rows - h + 1)));
      const cv::Rect r(x, y, w, h);
      const cv::Rect s = OrientedToStored(r, o, W, H);
      ASSERT_EQ(s & cv::Rect(0, 0, W, H), s) << "orientation " << o << " " << r << " -> " << s;
      ASSERT_TRUE(SameBytes(ApplyOrientation(stored(s), o), oriented(r)))
          << "orientation " << o << " " << r << " -> " << s;
    }
  }
}

TEST(OpsTest, ResizeToFloatCHWMatchesOpenCVBilinear) {
  const float mean[3] = {0.485f, 0.456f, 0.406f}, sd[3] = {0.229f, 0.224f, 0.225f};
  float scale[3], bias[3];
  for (int c = 0; c < 3; ++c) {
    scale[c] = 1.f / (255.f * sd[c]);
    bias[c] = -mean[c] / sd[c];
  }
  const int size = 32;
  for (const cv::Size& sz : {cv::Size(50, 40), cv::Size(64, 64), cv::Size(20, 30), cv::Size(37, 91),
                             cv::Size(32, 32), cv::Size(1, 1), cv::Size(64, 33)}) {
    for (int channels : {3, 1}) {
      auto px = testing::SyntheticPixels(sz.width, sz.height, uint64_t(sz.area()), channels);
      const cv::Mat src(sz.height, sz.width, channels == 3 ? CV_8UC3 : CV_8UC1, px.data());
      std::vector<float> out(size_t(size) * size * channels), flipped(out.size());
      ResizeToFloatCHW(src, size, false, scale, bias, out.data());
      ResizeToFloatCHW(src, size, true, scale, bias, flipped.data());
      cv::Mat srcf, ref;
      src.convertTo(srcf, CV_32F);
      cv::resize(srcf, ref, {size, size}, 0, 0, cv::INTER_LINEAR);
      double max_diff = 0;
      for (int c = 0; c < channels; ++c) {
        for (int y = 0; y < size; ++y) {
          for (int x = 0; x < size; ++x) {
            const float v = ref.ptr<float>(y)[x * channels + c];
            const float expected = (v / 255.f - mean[c]) / sd[c];
            const size_t at = (size_t(c) * size + y) * size + x;
            max_diff = std::max(max_diff, double(std::abs(out[at] - expected)));
            ASSERT_EQ(flipped[at], out[(size_t(c) * size + y) * size + (size - 1 - x)]);
          }
        }
      }
      EXPECT_LT(max_diff, 2e-3) << sz << " channels " << channels;
    }
  }
}

TEST(OpsTest, ResizeToUint8HWCMatchesOpenCVBilinear) {
  const int size = 32;
  for (const cv::Size& sz : {cv::Size(50, 40), cv::Size(64, 64), cv::Size(20, 30), cv::Size(37, 91),
                             cv::Size(32, 32), cv::Size(3, 2)}) {
    for (int channels : {3, 1}) {
      auto px = testing::SyntheticPixels(sz.width, sz.height, uint64_t(sz.area()) + 1, channels);
      const int type = channels == 3 ? CV_8UC3 : CV_8UC1;
      const cv::Mat src(sz.height, sz.width, type, px.data());
      cv::Mat out(size, size, type), flipped(size, size, type), ref, mirrored;
      ResizeToUint8HWC(src, size, false, out.data);
      ResizeToUint8HWC(src, size, true, flipped.data);
      cv::resize(src, ref, {size, size}, 0, 0, cv::INTER_LINEAR);
      EXPECT_LE(MaxAbsDiff(out, ref), 1.0) << sz << " channels " << channels;
      cv::flip(out, mirrored, 1);
      EXPECT_TRUE(SameBytes(flipped, mirrored)) << sz;
      if (sz == cv::Size(32, 32)) {
        EXPECT_TRUE(SameBytes(out, src)) << "identity resize";
      }
    }
  }
  // HFlipInPlace mirrors.
  auto px = testing::SyntheticPixels(9, 4, 3);
  cv::Mat img = cv::Mat(4, 9, CV_8UC3, px.data()).clone(), expected;
  cv::flip(img, expected, 1);
  HFlipInPlace(img.data, 9, 4, 3);
  EXPECT_TRUE(SameBytes(img, expected));
}

TEST(OpsTest, WriteFloatCHWMatchesScalarReference) {
  PipelineSpec normalized = PipelineSpec::ImagenetTrain();
  PipelineSpec plain = PipelineSpec::ImagenetTrain();
  plain.normalize = false;
  for (const PipelineSpec* spec : {&normalized, &plain}) {
    for (int channels : {3, 1}) {
      for (bool flip : {false, true}) {
        const int h = 13, w = 29;
        auto hwc = testing::SyntheticPixels(w, h, 20, channels);
        std::vector<float> out(hwc.size());
        WriteFloatCHW(hwc.data(), h, w, channels, flip, *spec, out.data());
        for (int c = 0; c < channels; ++c) {
          for (int y = 0; y < h; ++y) {
            for (int x = 0; x < w; ++x) {
              const int sx = flip ? w - 1 - x : x;
              const double v = hwc[(size_t(y) * w + sx) * channels + c] / 255.0;
              const double expected = spec->normalize ? (v - spec->mean[c]) / spec->std[c] : v;
              ASSERT_NEAR(out[(size_t(c) * h + y) * w + x], expected, 1e-5)
                  << "c " << c << " y " << y << " x " << x << " flip " << flip;
            }
          }
        }
      }
    }
  }
}

TEST(OpsTest, JitterIdentityAndExtremes) {
  auto px = testing::SyntheticPixels(31, 17, 21);
  const int n = 31 * 17;
  for (int perm = 0; perm < 6; ++perm) {
    JitterFactors identity;
    const int orders[6][3] = {{0, 1, 2}, {0, 2, 1}, {1, 0, 2}, {1, 2, 0}, {2, 0, 1}, {2, 1, 0}};
    std::copy(orders[perm], orders[perm] + 3, identity.order);
    std::vector<uint8_t> img = px;
    ApplyJitter(img.data(), n, 3, identity);
    EXPECT_EQ(img, px);
  }
  JitterFactors dark;
  dark.brightness = 0.f;
  std::vector<uint8_t> img = px;
  ApplyJitter(img.data(), n, 3, dark);
  EXPECT_TRUE(std::all_of(img.begin(), img.end(), [](uint8_t v) { return v == 0; }));

  // Contrast 0: every value becomes the mean luma (torchvision blends with it).
  JitterFactors flat;
  flat.contrast = 0.f;
  img = px;
  ApplyJitter(img.data(), n, 3, flat);
  EXPECT_TRUE(std::all_of(img.begin(), img.end(), [&](uint8_t v) { return v == img[0]; }));
  double luma = 0;
  for (int i = 0; i < n; ++i) luma += 0.299 * px[3 * i] + 0.587 * px[3 * i + 1] + 0.114 * px[3 * i + 2];
  EXPECT_NEAR(img[0], luma / n, 1.0);

  // Saturation 0: gray, R == G == B.
  JitterFactors gray;
  gray.saturation = 0.f;
  img = px;
  ApplyJitter(img.data(), n, 3, gray);
  for (int i = 0; i < n; ++i) {
    ASSERT_EQ(img[3 * i], img[3 * i + 1]);
    ASSERT_EQ(img[3 * i], img[3 * i + 2]);
  }

  // DrawJitter: factors in [max(0, 1 - v), 1 + v], order a permutation, absent ops 1.
  PipelineSpec spec = PipelineSpec::ImagenetTrain();
  spec.brightness = 0.4;
  spec.saturation = 1.5;
  for (int k = 0; k < 200; ++k) {
    SampleRng rng(k, 0, 0, kRngJitter);
    const JitterFactors f = DrawJitter(spec, rng);
    EXPECT_GE(f.brightness, 0.6f);
    EXPECT_LE(f.brightness, 1.4f);
    EXPECT_EQ(f.contrast, 1.f);
    EXPECT_GE(f.saturation, 0.f);
    EXPECT_LE(f.saturation, 2.5f);
    int seen = 0;
    for (int op : f.order) seen |= 1 << op;
    EXPECT_EQ(seen, 7);
  }
}

// ================================================================ SampleProcessor

TEST(SampleProcessorTest, DeterministicAcrossThreads) {
  const std::string jpeg = EncodeJpeg(300, 200, 22);
  const SampleProcessor proc(PipelineSpec::ImagenetTrain());
  const size_t bytes = proc.spec().sample_bytes();
  auto run = [&](uint64_t seed, uint64_t epoch, int64_t index) {
    std::vector<uint8_t> out(bytes);
    const Status s = proc.Process(jpeg, seed, epoch, index, out.data());
    EXPECT_TRUE(s.ok()) << s.ToString();
    return out;
  };
  const std::vector<uint8_t> reference = run(7, 3, 11);

  constexpr int kThreads = 4, kRounds = 8;
  std::vector<std::vector<std::vector<uint8_t>>> results(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < kRounds; ++round) {
        // Interleave other samples so that per-thread scratch memory is reused dirty.
        results[size_t(t)].push_back(run(7, 3, 11));
        run(uint64_t(t), uint64_t(round), round * 3 + t);
      }
    });
  }
  for (std::thread& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) {
    ASSERT_EQ(results[size_t(t)].size(), size_t(kRounds));
    for (const auto& r : results[size_t(t)]) EXPECT_TRUE(r == reference) << "thread " << t;
  }
  EXPECT_FALSE(run(7, 3, 12) == reference);  // another index
  EXPECT_FALSE(run(7, 4, 11) == reference);  // another epoch
  EXPECT_FALSE(run(8, 3, 11) == reference);  // another seed

  // The output is a plausible normalized image.
  const float* f = reinterpret_cast<const float*>(reference.data());
  float lo = 1e9f, hi = -1e9f;
  for (size_t i = 0; i < bytes / 4; ++i) lo = std::min(lo, f[i]), hi = std::max(hi, f[i]);
  EXPECT_GE(lo, -2.2f);
  EXPECT_LE(hi, 2.7f);
  EXPECT_LT(lo + 1.0f, hi);
}

TEST(SampleProcessorTest, JitterAndGrayPaths) {
  PipelineSpec spec = PipelineSpec::ImagenetTrain();
  spec.brightness = spec.contrast = spec.saturation = 0.4;
  PipelineSpec gray = Uint8Spec(40, PipelineSpec::Geometry::kRandomResizedCrop);
  gray.color = PipelineSpec::Color::kGray;
  gray.hflip_p = 0.5;
  const std::string jpeg = EncodeJpeg(300, 200, 23);
  for (const PipelineSpec& s : {spec, gray}) {
    SampleProcessor proc(s);
    std::vector<uint8_t> a(s.sample_bytes()), b(s.sample_bytes());
    ASSERT_TRUE(proc.Process(jpeg, 1, 0, 5, a.data()).ok());
    ASSERT_TRUE(proc.Process(jpeg, 1, 0, 5, b.data()).ok());
    EXPECT_EQ(a, b);
    ASSERT_TRUE(proc.Process(EncodePng(90, 120, 23), 1, 0, 5, b.data()).ok());
  }
}

}  // namespace
}  // namespace ferry
