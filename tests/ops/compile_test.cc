// Tests of Pipeline::Compile (lib/ops/pipeline.h): the op-level checks every process
// runs before it accepts a job (unknown ops and parameters, ranges, op order, a fixed
// output size, the output dtype), the canonical form, shapes, the batch's bytes.
#include <gtest/gtest.h>

#include <string>

#include "ferry/job.h"
#include "image/image_test_util.h"
#include "ops/pipeline.h"

namespace ferry {
namespace {

using testing::Contains;

Result<std::shared_ptr<const Pipeline>> Compile(const std::string& json) {
  Result<PipelineSpec> spec = PipelineSpec::FromJson(json);
  if (!spec.ok()) return spec.status();
  return Pipeline::Compile(*spec);
}

TEST(CompileTest, ClearErrors) {
  struct Case {
    const char* json;
    const char* message_part;
  } cases[] = {
      {R"({"ops": [{"op": "blur", "sigma": 2}]})", "unknown op 'blur'"},
      {R"({"ops": [{"op": "center_crop", "size": 8, "sise": 3}]})", "unknown parameter 'sise'"},
      {R"({"ops": [{"op": "resize", "size": 256}]})", "output size varies"},
      {R"({"ops": [{"op": "hflip"}]})", "output size varies"},
      {R"({"ops": [{"op": "center_crop", "size": 8}, {"op": "normalize", "mean": [0, 0, 0], "std": [1, 1, 1]}],
           "output": {"dtype": "uint8", "layout": "NHWC"}})",
       "must be float32"},
      {R"({"ops": [{"op": "center_crop", "size": 8}, {"op": "normalize", "mean": [0, 0], "std": [1, 1, 1]}]})",
       "1 or 3 values"},
      {R"({"ops": [{"op": "center_crop", "size": 8}, {"op": "normalize", "mean": [0, 0, 0], "std": [1, 0, 1]}]})",
       "std"},
      {R"({"ops": [{"op": "center_crop", "size": 8}, {"op": "normalize"}, {"op": "hflip"}]})", "image ops first"},
      {R"({"ops": [{"op": "center_crop", "size": 8}, {"op": "mixup_cutmix", "num_classes": 3, "mixup_alpha": 1},
                   {"op": "normalize"}]})",
       "must be last"},
      {R"({"ops": [{"op": "center_crop", "size": 8}, {"op": "mixup_cutmix", "mixup_alpha": 1}]})", "num_classes"},
      {R"({"ops": [{"op": "random_resized_crop", "size": 8, "scale": [0.5, 0.1]}]})", "scale"},
      {R"({"ops": [{"op": "random_resized_crop", "size": 8, "scale": [0.5]}]})", "[min, max]"},
      {R"({"ops": [{"op": "random_resized_crop", "size": 8, "ratio": [0, 1]}]})", "ratio"},
      {R"({"ops": [{"op": "random_resized_crop", "size": 8, "interpolation": "lanczos"}]})", "interpolation"},
      {R"({"ops": [{"op": "center_crop", "size": 0}]})", "'size' must be in"},
      {R"({"ops": [{"op": "center_crop", "size": "big"}]})", "'size' must be"},
      // A whole double past int's range, and an integer that would wrap into range
      // (2^32 + 8): refused, never converted (undefined behaviour, or 8).
      {R"({"ops": [{"op": "center_crop", "size": 1e102}]})", "'size' must be"},
      {R"({"ops": [{"op": "center_crop", "size": [8, 4294967304]}]})", "'size' must be"},
      {R"({"ops": [{"op": "center_crop", "size": 8}, {"op": "random_crop", "size": 8, "padding": 4294967300}]})",
       "padding"},
      {R"({"ops": [{"op": "center_crop", "size": 8}, {"op": "hflip", "p": 2}]})", "hflip"},
      {R"({"ops": [{"op": "center_crop", "size": 8}, {"op": "color_jitter", "brightness": -1}]})", "brightness"},
      {R"({"ops": [{"op": "center_crop", "size": 8}, {"op": "color_jitter", "hue": 0.7}]})", "hue"},
      {R"({"ops": [{"op": "center_crop", "size": 8}, {"op": "rand_augment", "magnitude": 40}]})", "magnitude"},
      {R"({"ops": [{"op": "center_crop", "size": 8}, {"op": "random_apply", "ops": []}]})", "non-empty list"},
      {R"({"ops": [{"op": "center_crop", "size": 8}, {"op": "random_apply", "ops": [{"op": "normalize"}]}]})",
       "image ops only"},
      {R"({"ops": [{"op": "center_crop", "size": 8}, {"op": "timm_rand_augment", "config": "rand-m9-z3"}]})",
       "config"},
      {R"({"ops": [{"op": "center_crop", "size": 8}, {"op": "gaussian_blur", "kernel_size": 4}]})", "odd"},
  };
  for (const Case& c : cases) {
    const Status s = Compile(c.json).status();
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << c.json << " -> " << s.ToString();
    EXPECT_TRUE(Contains(s.message(), c.message_part)) << c.json << " -> " << s.ToString();
  }
}

TEST(CompileTest, ShapesAndTheCanonicalForm) {
  auto p = Compile(R"({"ops": [{"op": "resize", "size": [120, 200]}, {"op": "random_crop", "size": [96, 160]},
                              {"op": "rand_augment"}, {"op": "normalize"}]})");
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ((*p)->output_shape().height, 96);
  EXPECT_EQ((*p)->output_shape().width, 160);
  EXPECT_EQ((*p)->sample_bytes(), size_t(3 * 96 * 160 * 4));
  EXPECT_EQ((*p)->num_classes(), 0);
  // Every default is spelled out, and the canonical form compiles to the same.
  const std::string canonical = (*p)->canonical().ToJson();
  EXPECT_TRUE(Contains(canonical, R"("num_magnitude_bins":31)")) << canonical;
  EXPECT_TRUE(Contains(canonical, R"("interpolation":"nearest")")) << canonical;
  auto again = Compile(canonical);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ((*again)->canonical().ToJson(), canonical);
  // Gray output, and the image spec the workers run when the trainer normalizes.
  auto gray = Compile(R"({"ops": [{"op": "center_crop", "size": 32}, {"op": "grayscale"},
                                 {"op": "normalize", "mean": [0.5], "std": [0.5]},
                                 {"op": "random_erasing", "value": "random"},
                                 {"op": "mixup_cutmix", "num_classes": 10, "mixup_alpha": 0.2}]})");
  ASSERT_TRUE(gray.ok()) << gray.status().ToString();
  EXPECT_EQ((*gray)->output_shape().channels, 1);
  EXPECT_EQ((*gray)->num_classes(), 10);
  EXPECT_TRUE((*gray)->has_tensor_ops());
  const PipelineSpec image = (*gray)->ImageSpec();
  EXPECT_EQ(image.ops.size(), 2u);
  EXPECT_EQ(image.output, PipelineSpec::Output::kUint8NHWC);
  // The legacy spelling of the fixed pipeline still compiles.
  EXPECT_TRUE(Compile(R"({"ops": [{"op": "resize_shorter", "size": 256}, {"op": "center_crop", "size": 224}]})").ok());
}

TEST(CompileTest, CheckJobBoundsTheBatch) {
  JobSpec j;
  j.dataset = "/data";
  j.batch_size = 4;
  j.pipeline = PipelineSpec::ImagenetTrain();
  EXPECT_TRUE(CheckJob(j).ok());
  j.batch_size = 3567;  // 3567 x 602128 bytes: just over 2 GiB
  const Status s = CheckJob(j);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(s.message(), "batch_size")) << s.ToString();
  j.batch_size = 3566;
  EXPECT_TRUE(CheckJob(j).ok());
  j.batch_size = 200000;
  j.dataset = "synthetic:1024:1";  // names its own bytes
  EXPECT_TRUE(CheckJob(j).ok());
  j.dataset = "/data";
  j.batch_size = 4;
  j.pipeline.Add("no_such_op");
  EXPECT_TRUE(Contains(CheckJob(j).message(), "unknown op")) << CheckJob(j).ToString();
}

}  // namespace
}  // namespace ferry
