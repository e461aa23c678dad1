// Tests of PipelineSpec (include/ferry/pipeline_spec.h, lib/spec/pipeline_spec.cc):
// the presets, the JSON round trip, Parse() of names, inline JSON and files, and the
// messages of invalid specs.
#include <gtest/gtest.h>

#include <string>

#include "ferry/pipeline_spec.h"
#include "testutil.h"

namespace ferry {
namespace {

using testing::TempDir;
using testing::WriteFile;

bool Contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

PipelineSpec Uint8Spec(int size, PipelineSpec::Geometry g = PipelineSpec::Geometry::kResizeCenterCrop) {
  PipelineSpec s;
  s.geometry = g;
  s.size = size;
  s.resize_shorter = size;
  s.output = PipelineSpec::Output::kUint8NHWC;
  return s;
}

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

}  // namespace
}  // namespace ferry
