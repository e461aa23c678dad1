// Op plugins (include/ferry/plugin.h): the example plugin (tests/plugin/example_ops.c)
// loaded, its ops named in a pipeline like built-in ones, deterministic per sample,
// moving boxes and masks when they say how, and refused by name when they cannot.
#include "ops/plugin.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <opencv2/core.hpp>

#include "ops/painted_shapes.h"
#include "ops/pipeline.h"

namespace ferry {
namespace {

using testing::Checked;
using testing::ExpectTargetsFollow;
using testing::kShapes;
using testing::Painted;
using testing::PaintPhoto;
using testing::Photos;

std::shared_ptr<const Pipeline> CompileWithPlugins(const std::string& ops) {
  Result<PipelineSpec> spec = PipelineSpec::FromJson(R"({"ops": )" + ops + "}");
  EXPECT_TRUE(spec.ok()) << spec.status().ToString();
  if (!spec.ok()) return nullptr;
  Result<std::shared_ptr<const Pipeline>> p = Pipeline::Compile(*spec);
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return p.ok() ? *p : nullptr;
}

class PluginTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { ASSERT_TRUE(LoadPlugin(FERRY_EXAMPLE_PLUGIN).ok()); }
};

TEST_F(PluginTest, OpsRegisterAndRunDeterministically) {
  const std::vector<std::string> ops = RegisteredOps();
  EXPECT_NE(std::find(ops.begin(), ops.end(), "example_noise"), ops.end());
  EXPECT_TRUE(LoadPlugin(FERRY_EXAMPLE_PLUGIN).ok()) << "a second load is a no-op";
  auto p = CompileWithPlugins(R"([{"op": "resize", "size": [96, 96]}, {"op": "example_noise", "amount": 0.3},
                       {"op": "example_shift", "max_shift": 20}])");
  ASSERT_NE(p, nullptr);
  const Painted photo = PaintPhoto(Photos(1)[0], 1, false);
  auto run = [&](uint64_t seed, uint64_t index) {
    cv::Mat out(96, 96, CV_8UC3);
    const Status s = p->Process(photo.bytes, seed, 0, index, out.data, nullptr, nullptr, nullptr);
    EXPECT_TRUE(s.ok()) << s.ToString();
    return out;
  };
  const cv::Mat a = run(5, 3), b = run(5, 3), c = run(5, 4), plain = [&] {
    auto q = CompileWithPlugins(R"([{"op": "resize", "size": [96, 96]}])");
    cv::Mat out(96, 96, CV_8UC3);
    EXPECT_TRUE(q->Process(photo.bytes, 5, 0, 3, out.data, nullptr, nullptr, nullptr).ok());
    return out;
  }();
  EXPECT_EQ(cv::norm(a, b, cv::NORM_INF), 0) << "the same sample: the same pixels";
  EXPECT_GT(cv::norm(a, c, cv::NORM_L1), 0) << "another sample: other draws";
  // About 30 % of the pixels are salt or pepper: against the image without the noise.
  auto noise_only = CompileWithPlugins(R"([{"op": "resize", "size": [96, 96]}, {"op": "example_noise", "amount": 0.3}])");
  cv::Mat noisy(96, 96, CV_8UC3);
  ASSERT_TRUE(noise_only->Process(photo.bytes, 5, 0, 3, noisy.data, nullptr, nullptr, nullptr).ok());
  cv::Mat diff;
  cv::absdiff(noisy, plain, diff);
  cv::Mat changed;
  cv::transform(diff, changed, cv::Matx13f(1, 1, 1));
  const double share = cv::countNonZero(changed) / double(96 * 96);
  EXPECT_GT(share, 0.2);
  EXPECT_LT(share, 0.35);
  EXPECT_GT(cv::norm(a, plain, cv::NORM_L1), 0);
}

TEST_F(PluginTest, BoxesAndMasksFollowAPluginsWarp) {
  auto p = CompileWithPlugins(R"([{"op": "resize", "size": [160, 160]}, {"op": "example_shift", "max_shift": 40},
                       {"op": "hflip"}])");
  ASSERT_NE(p, nullptr);
  ASSERT_TRUE(p->CheckTargets().ok());
  int visible = 0;
  for (const std::string& path : Photos(3)) {
    const Painted photo = PaintPhoto(path, 2, false);
    for (int64_t index = 0; index < 6; ++index) {
      SampleTargets t = photo.targets;
      cv::Mat out(160, 160, CV_8UC3);
      const Status s = p->Process(photo.bytes, 9, 0, index, out.data, nullptr, nullptr, &t);
      ASSERT_TRUE(s.ok()) << s.ToString();
      visible += ExpectTargetsFollow(out, t, true, false, path + " #" + std::to_string(index)).visible;
      if (::testing::Test::HasFailure()) return;
    }
  }
  EXPECT_GE(visible, 3 * 6 * kShapes / 2);
  // The noise moves no point; an op that cannot say is refused in a job with targets.
  auto noisy = CompileWithPlugins(R"([{"op": "resize", "size": [64, 64]}, {"op": "example_noise"}])");
  ASSERT_NE(noisy, nullptr);
  EXPECT_TRUE(noisy->CheckTargets().ok());
}

TEST_F(PluginTest, BadParametersAndBadLibrariesAreRefusedByName) {
  Result<PipelineSpec> spec = PipelineSpec::FromJson(R"({"ops": [{"op": "resize", "size": [32, 32]},
                                                                  {"op": "example_noise", "amount": 7}]})");
  Status s = spec.ok() ? Pipeline::Compile(*spec).status() : spec.status();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("example_noise"), std::string::npos) << s.ToString();
  spec = PipelineSpec::FromJson(R"({"ops": [{"op": "resize", "size": [32, 32]}, {"op": "example_shift", "x": 1}]})");
  s = spec.ok() ? Pipeline::Compile(*spec).status() : spec.status();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << "an unknown parameter";

  s = LoadPlugin("/nonexistent/libnothing.so");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("libnothing.so"), std::string::npos);
  s = LoadPlugin("/proc/self/exe");  // an ELF file that is no plugin
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
}

}  // namespace
}  // namespace ferry
