// Tests of PipelineSpec (include/ferry/pipeline_spec.h, lib/spec/pipeline_spec.cc):
// the presets, the JSON round trip, Parse() of names, inline JSON and files, and the
// messages of specs whose form is wrong. What the ops' parameters mean is checked by
// Pipeline::Compile (tests/ops/compile_test.cc).
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

TEST(PipelineSpecTest, PresetsValidate) {
  EXPECT_TRUE(PipelineSpec::ImagenetTrain().Validate().ok());
  EXPECT_TRUE(PipelineSpec::ImagenetEval().Validate().ok());
  const PipelineSpec train = PipelineSpec::ImagenetTrain();
  ASSERT_EQ(train.ops.size(), 3u);
  EXPECT_EQ(train.ops[0].name, "random_resized_crop");
  EXPECT_EQ(train.ops[1].name, "hflip");
  EXPECT_EQ(train.ops[2].name, "normalize");
  EXPECT_EQ(train.output, PipelineSpec::Output::kFloat32NCHW);
  EXPECT_EQ(train.dtype(), DType::kFloat32);
  const PipelineSpec eval = PipelineSpec::ImagenetEval();
  ASSERT_EQ(eval.ops.size(), 3u);
  EXPECT_EQ(eval.ops[0].name, "resize");
  EXPECT_EQ(eval.ops[1].name, "center_crop");
  EXPECT_NE(train.Fingerprint(), eval.Fingerprint());
}

TEST(PipelineSpecTest, JsonRoundTripKeepsTheOrder) {
  PipelineSpec gray;
  gray.color = PipelineSpec::Color::kGray;
  gray.Add("resize", R"({"size": 60})").Add("center_crop", R"({"size": 48})");
  gray.max_pixels = 12345;
  gray.roi_decode = false;
  PipelineSpec reordered = PipelineSpec::ImagenetTrain();
  std::swap(reordered.ops[0], reordered.ops[1]);  // a flip before the crop: another pipeline
  for (const PipelineSpec& s : {PipelineSpec::ImagenetTrain(), PipelineSpec::ImagenetEval(), gray, reordered}) {
    const std::string json = s.ToJson();
    Result<PipelineSpec> back = PipelineSpec::FromJson(json);
    ASSERT_TRUE(back.ok()) << back.status().ToString() << "\n" << json;
    EXPECT_EQ(back->ToJson(), json);
    EXPECT_EQ(back->Fingerprint(), s.Fingerprint());
    EXPECT_EQ(back->ops.size(), s.ops.size());
    for (size_t i = 0; i < s.ops.size(); ++i) EXPECT_EQ(back->ops[i].name, s.ops[i].name);
  }
  EXPECT_NE(reordered.Fingerprint(), PipelineSpec::ImagenetTrain().Fingerprint()) << "order is meaning";
  // Spacing and key order of parameters do not matter.
  PipelineSpec a, b;
  a.Add("random_resized_crop", R"({"size": 8, "scale": [0.5, 1.0]})");
  b.Add("random_resized_crop", R"({ "scale":[0.5,1.0],"size":8 })");
  EXPECT_EQ(a, b);
}

TEST(PipelineSpecTest, ParseNamesJsonAndFiles) {
  Result<PipelineSpec> train = PipelineSpec::Parse("imagenet-train");
  ASSERT_TRUE(train.ok());
  EXPECT_EQ(train->ToJson(), PipelineSpec::ImagenetTrain().ToJson());
  Result<PipelineSpec> eval = PipelineSpec::Parse("imagenet-eval");
  ASSERT_TRUE(eval.ok());
  EXPECT_EQ(eval->ToJson(), PipelineSpec::ImagenetEval().ToJson());

  const std::string json =
      R"({"decode": "gray", "ops": [{"op": "resize", "size": 72}, {"op": "center_crop", "size": 64},
          {"op": "hflip", "p": 0.25}], "output": {"dtype": "uint8", "layout": "NHWC"}})";
  Result<PipelineSpec> inline_spec = PipelineSpec::Parse(json);
  ASSERT_TRUE(inline_spec.ok()) << inline_spec.status().ToString();
  EXPECT_EQ(inline_spec->color, PipelineSpec::Color::kGray);
  ASSERT_EQ(inline_spec->ops.size(), 3u);
  EXPECT_EQ(inline_spec->ops[2].name, "hflip");
  EXPECT_EQ(inline_spec->ops[2].params, R"({"p":0.25})");
  EXPECT_EQ(inline_spec->output, PipelineSpec::Output::kUint8NHWC);

  // The output defaults to float32 when the ops normalize, uint8 otherwise.
  Result<PipelineSpec> plain = PipelineSpec::Parse(R"({"ops": [{"op": "center_crop", "size": 40}]})");
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->output, PipelineSpec::Output::kUint8NHWC);
  Result<PipelineSpec> normalized = PipelineSpec::Parse(
      R"({"ops": [{"op": "center_crop", "size": 40}, {"op": "normalize", "mean": [0.5], "std": [0.5]}]})");
  ASSERT_TRUE(normalized.ok());
  EXPECT_EQ(normalized->output, PipelineSpec::Output::kFloat32NCHW);

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

TEST(PipelineSpecTest, ClearErrorsAboutTheForm) {
  struct Case {
    const char* json;
    const char* message_part;
  } cases[] = {
      {R"({"ops": [{"op": "center_crop", "size": 8}], "colour": "rgb"})", "unknown key 'colour'"},
      {R"({"ops": []})", "'ops' is empty"},
      {R"({"decode": "rgb"})", "'ops' must be a list"},
      {R"({"ops": [{"op": "center_crop", "size": 8}], "output": {"dtype": "uint8", "layout": "NCHW"}})",
       "output must be"},
      {R"({"ops": [{"op": "center_crop", "size": 8}], "output": {"dtype": "float16"}})", "output must be"},
      {R"({"ops": [{"op": "center_crop", "size": 8}], "max_pixels": 0})", "max_pixels"},
      // Found by the frame fuzzer (UBSan): a double past int64_t's range was converted.
      {R"({"ops": [{"op": "center_crop", "size": 8}], "max_pixels": 100E00100})", "max_pixels must be an integer"},
      {R"({"ops": [{"op": "center_crop", "size": 8}], "max_pixels": 18446744073709551615})",
       "max_pixels must be an integer"},
      {R"({"decode": "cmyk", "ops": [{"op": "center_crop", "size": 8}]})", "decode must be"},
      {R"({"ops": [{"size": 8}]})", "needs an \"op\""},
      {R"({"ops": [{"op": 3}]})", "needs an \"op\""},
      {R"([1, 2])", "expected a JSON object"},
      {R"({"ops": [)", "pipeline spec"},  // JSON syntax error
  };
  for (const Case& c : cases) {
    const Status s = PipelineSpec::FromJson(c.json).status();
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << c.json << " -> " << s.ToString();
    EXPECT_TRUE(Contains(s.message(), c.message_part)) << c.json << " -> " << s.ToString();
  }
  PipelineSpec bad;
  bad.Add("hflip", "not json");
  EXPECT_EQ(bad.Validate().code(), StatusCode::kInvalidArgument);
  bad.ops[0].params = "[1]";
  EXPECT_TRUE(Contains(bad.Validate().message(), "must be an object")) << bad.Validate().ToString();
}

}  // namespace
}  // namespace ferry
