// Tests of lib/image/jpeg_decoder.h: headers, full, ROI and DCT-scaled decodes against
// OpenCV's decode of the same bytes, CMYK, EXIF orientation, the pixel limit, and
// truncated or corrupted JPEGs, directly and through SampleProcessor.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <jpeglib.h>

#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

#include "core/philox.h"
#include "ferry/pipeline_spec.h"
#include "image/image_test_util.h"
#include "image/jpeg_decoder.h"
#include "image/orientation.h"
#include "ops/geometry.h"
#include "ops/kernels/pixels.h"
#include "testutil.h"

namespace ferry {
namespace {

using testing::Contains;
using testing::EncodeJpeg;
using testing::EncodePng;
using testing::kDefaultMaxPixels;
using testing::MaxAbsDiff;
using testing::ReferenceOrient;
using testing::SameBytes;
using testing::SampleBytes;
using testing::SampleProcessor;
using testing::Uint8Spec;
using testing::WithExifOrientation;
using testing::WithJpegSize;

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
  std::vector<uint8_t> out(proc.sample_bytes());
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
    std::vector<uint8_t> out(SampleBytes(spec));
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

  PipelineSpec rrc = Uint8Spec(32, /*rrc=*/true);
  rrc.roi_decode = false;  // full decode: the reference below is then exact
  PipelineSpec rrc_roi = rrc;
  rrc_roi.roi_decode = true;
  const SampleProcessor proc(rrc), proc_roi(rrc_roi);
  std::vector<uint8_t> out(SampleBytes(rrc)), expected(SampleBytes(rrc));

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
      const cv::Rect box = RandomResizedCropBox(displayed.cols, displayed.rows, {0.08, 1.0}, {0.75, 4.0 / 3}, crop_rng);
      kernels::ResizeToUint8HWC(displayed(box), 32, 32, false, expected.data());
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
    std::vector<uint8_t> out(SampleBytes(spec));
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
  std::vector<uint8_t> out(SampleBytes(spec));
  EXPECT_EQ(proc.Process(jpeg, 0, 0, 0, out.data()).code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(proc.Process(EncodePng(320, 240, 10), 0, 0, 0, out.data()).code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(proc.Process(EncodeJpeg(240, 200, 10), 0, 0, 0, out.data()).ok());
  EXPECT_TRUE(proc.Process(EncodePng(240, 200, 10), 0, 0, 0, out.data()).ok());
}

// ================================================================ hostile bytes

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
  std::vector<uint8_t> out(train.sample_bytes());
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
  SampleProcessor proc(Uint8Spec(24, /*rrc=*/true));
  std::vector<uint8_t> out(proc.sample_bytes());
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

}  // namespace
}  // namespace ferry
