// Tests of lib/ops/pipeline.h, Pipeline::Process (through the tests' SampleProcessor):
// determinism across threads, the jitter and gray paths, float32 as the normalize of
// uint8, and the Status it returns for empty, non-image, unsupported and truncated
// inputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "core/philox.h"
#include "ferry/pipeline_spec.h"
#include "image/image_test_util.h"
#include "image/jpeg_decoder.h"
#include "testutil.h"

namespace ferry {
namespace {

using testing::Contains;
using testing::EncodeJpeg;
using testing::EncodePng;
using testing::JpegSoiThenNoise;
using testing::kDefaultMaxPixels;
using testing::TinyGif;
using testing::SampleBytes;
using testing::SampleProcessor;
using testing::Uint8Spec;

// ================================================================ SampleProcessor

TEST(SampleProcessorTest, DeterministicAcrossThreads) {
  const std::string jpeg = EncodeJpeg(300, 200, 22);
  const SampleProcessor proc(PipelineSpec::ImagenetTrain());
  const size_t bytes = proc.sample_bytes();
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
  PipelineSpec spec = *PipelineSpec::FromJson(
      R"({"ops": [{"op": "random_resized_crop", "size": 224}, {"op": "hflip"},
                  {"op": "color_jitter", "brightness": 0.4, "contrast": 0.4, "saturation": 0.4},
                  {"op": "normalize", "mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]}]})");
  PipelineSpec gray = Uint8Spec(40, /*rrc=*/true, /*hflip=*/0.5);
  gray.color = PipelineSpec::Color::kGray;
  const std::string jpeg = EncodeJpeg(300, 200, 23);
  for (const PipelineSpec& s : {spec, gray}) {
    SampleProcessor proc(s);
    std::vector<uint8_t> a(SampleBytes(s)), b(SampleBytes(s));
    ASSERT_TRUE(proc.Process(jpeg, 1, 0, 5, a.data()).ok());
    ASSERT_TRUE(proc.Process(jpeg, 1, 0, 5, b.data()).ok());
    EXPECT_EQ(a, b);
    ASSERT_TRUE(proc.Process(EncodePng(90, 120, 23), 1, 0, 5, b.data()).ok());
  }
}

// Float32 output is the normalize of the uint8 output of the same spec, exactly (the
// arithmetic of WriteFloatCHW: v * 1/(255 std) + -mean/std): a trainer that receives
// uint8 and normalizes gets what a worker's float32 would have been.
TEST(SampleProcessorTest, Float32IsTheNormalizeOfUint8) {
  const float mean[3] = {0.485f, 0.456f, 0.406f}, sd[3] = {0.229f, 0.224f, 0.225f};
  for (const bool jitter : {false, true}) {
    const std::string image_ops = std::string(R"([{"op": "random_resized_crop", "size": 64}, {"op": "hflip"})") +
                                  (jitter ? R"(, {"op": "color_jitter", "brightness": 0.3, "contrast": 0.3}])" : "]");
    const PipelineSpec u8 = *PipelineSpec::FromJson(R"({"ops": )" + image_ops + "}");
    PipelineSpec f32 = u8;
    f32.Add("normalize", R"({"mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]})");
    f32.output = PipelineSpec::Output::kFloat32NCHW;
    const SampleProcessor pf(f32), pu(u8);
    for (int64_t index = 0; index < 8; ++index) {  // flips drawn and not
      const std::string jpeg = EncodeJpeg(300 + int(index) * 40, 200, uint64_t(index));
      std::vector<float> got(size_t(3) * 64 * 64);
      std::vector<uint8_t> pixels(SampleBytes(u8));
      ASSERT_TRUE(pf.Process(jpeg, 9, 1, index, got.data()).ok());
      ASSERT_TRUE(pu.Process(jpeg, 9, 1, index, pixels.data()).ok());
      for (int c = 0; c < 3; ++c) {
        const float scale = 1.f / (255.f * sd[c]), bias = -mean[c] / sd[c];
        for (int p = 0; p < 64 * 64; ++p) {
          const float want = float(pixels[size_t(p) * 3 + size_t(c)]) * scale + bias;
          ASSERT_NEAR(got[size_t(c) * 64 * 64 + size_t(p)], want, 1e-5f)
              << "index " << index << " channel " << c << " pixel " << p << (jitter ? " jitter" : "");
        }
      }
    }
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
    std::vector<uint8_t> out(SampleBytes(spec));
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

}  // namespace
}  // namespace ferry
