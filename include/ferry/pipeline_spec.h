// PipelineSpec: the declarative description of what happens to each image.
//
// Execution order is fixed, whatever order the JSON lists the ops in:
//   decode (rgb|gray) -> geometry -> hflip -> color_jitter -> normalize -> output
// Geometry is exactly one of
//   random_resized_crop(size, scale, ratio)   (torchvision RandomResizedCrop), or
//   resize_shorter(size) then center_crop(size) (torchvision Resize + CenterCrop),
// so that every sample has the same output shape and batches are dense.
//
// JSON form (what the CLI and Python accept), e.g. the imagenet-train preset:
//   {"decode": "rgb",
//    "ops": [{"op": "random_resized_crop", "size": 224, "scale": [0.08, 1.0],
//             "ratio": [0.75, 1.3333333]},
//            {"op": "hflip", "p": 0.5},
//            {"op": "normalize", "mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]}],
//    "output": {"dtype": "float32", "layout": "NCHW"},
//    "max_pixels": 100000000, "roi_decode": true}
// Ops: random_resized_crop, resize_shorter, center_crop, hflip(p),
//      color_jitter(brightness, contrast, saturation), normalize(mean, std).
// Output: {"dtype": "uint8", "layout": "NHWC"} or {"dtype": "float32", "layout": "NCHW"}.
#ifndef FERRY_PIPELINE_SPEC_H_
#define FERRY_PIPELINE_SPEC_H_

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "ferry/status.h"
#include "ferry/tensor.h"

namespace ferry {

struct PipelineSpec {
  enum class Color : uint8_t { kRgb, kGray };
  enum class Geometry : uint8_t { kRandomResizedCrop, kResizeCenterCrop };
  enum class Output : uint8_t { kUint8NHWC, kFloat32NCHW };

  Color color = Color::kRgb;

  Geometry geometry = Geometry::kRandomResizedCrop;
  int size = 224;  // output height and width (RRC size, or center_crop size)
  double scale_min = 0.08, scale_max = 1.0;          // RRC area fraction
  double ratio_min = 3.0 / 4.0, ratio_max = 4.0 / 3.0;  // RRC aspect ratio (w/h)
  int resize_shorter = 256;                          // kResizeCenterCrop only

  double hflip_p = 0.0;
  double brightness = 0.0, contrast = 0.0, saturation = 0.0;  // 0 = op absent

  bool normalize = false;
  std::array<float, 3> mean{0.f, 0.f, 0.f};  // in [0,1] units, as torchvision after ToTensor
  std::array<float, 3> std{1.f, 1.f, 1.f};

  Output output = Output::kUint8NHWC;

  // Refuse images whose header declares more pixels than this, before allocating.
  int64_t max_pixels = 100'000'000;
  // Decode only the crop window, at the largest DCT scale that keeps >= output size.
  bool roi_decode = true;

  int channels() const { return color == Color::kGray ? 1 : 3; }
  DType dtype() const { return output == Output::kUint8NHWC ? DType::kUint8 : DType::kFloat32; }
  // Bytes of one output image.
  size_t sample_bytes() const { return size_t(size) * size * channels() * DTypeSize(dtype()); }

  Status Validate() const;
  std::string ToJson() const;
  // A stable identity of the spec for dataset fingerprints.
  uint64_t Fingerprint() const;
  // Equal when they produce the same pixels: the canonical JSON forms are equal
  // (parameters of ops a spec does not use do not count).
  bool operator==(const PipelineSpec& other) const { return ToJson() == other.ToJson(); }

  static Result<PipelineSpec> FromJson(std::string_view json);
  // "imagenet-train", "imagenet-eval", or a JSON object (starts with '{'), or a path to
  // a .json file.
  static Result<PipelineSpec> Parse(std::string_view name_or_json);
  static PipelineSpec ImagenetTrain();
  static PipelineSpec ImagenetEval();
};

}  // namespace ferry

#endif  // FERRY_PIPELINE_SPEC_H_
