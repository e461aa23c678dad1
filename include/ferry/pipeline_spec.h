// PipelineSpec: the declarative description of what happens to each image.
//
// A pipeline is an ordered list of ops, run in the order given, each matching
// torchvision's transform of the same name given the same parameters (the README's
// table lists every one, with its parameters). Three stages follow each other:
//   image ops    on the decoded uint8 image (crops, resizes, flips, rotation, affine,
//                perspective, colour and pixel ops, RandAugment and the other
//                policies), in any order torchvision allows;
//   tensor ops   after `normalize` (torchvision's ToTensor + Normalize): per sample
//                on float32 C x H x W (random_erasing);
//   batch ops    on the whole float32 batch (mixup_cutmix: soft targets
//                float32 [B, num_classes]).
// The last image op must leave every sample the same size (a crop or a fixed-size
// resize), so that batches are dense.
//
// JSON form (what the CLI and Python accept), e.g. the imagenet-train preset:
//   {"decode": "rgb",
//    "ops": [{"op": "random_resized_crop", "size": 224, "scale": [0.08, 1.0],
//             "ratio": [0.75, 1.3333333]},
//            {"op": "hflip", "p": 0.5},
//            {"op": "normalize", "mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]}],
//    "output": {"dtype": "float32", "layout": "NCHW"},
//    "max_pixels": 100000000, "roi_decode": true}
// Each op is {"op": NAME, PARAMETERS...}. Output: {"dtype": "uint8", "layout": "NHWC"}
// or {"dtype": "float32", "layout": "NCHW"} (the default when the ops normalize).
//
// This struct is the spec as written: its Validate() checks the form only. What each
// op's parameters mean, the output shape and the op-level checks belong to the ops
// (lib/ops/pipeline.h, Pipeline::Compile), which the loader, the workers and the
// dispatcher run on every job before they accept it; the installed client library
// does not need them (it sends specs and receives batches whose shapes travel).
#ifndef FERRY_PIPELINE_SPEC_H_
#define FERRY_PIPELINE_SPEC_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ferry/status.h"
#include "ferry/tensor.h"

namespace ferry {

struct PipelineSpec {
  enum class Color : uint8_t { kRgb, kGray };
  enum class Output : uint8_t { kUint8NHWC, kFloat32NCHW };

  // One step: a registered op name and its parameters, a JSON object ("{}": all
  // defaults). Kept as JSON so that ops registered by plugins travel like built-in ones.
  struct Op {
    std::string name;
    std::string params = "{}";
    bool operator==(const Op&) const = default;
  };

  Color color = Color::kRgb;
  std::vector<Op> ops;
  Output output = Output::kUint8NHWC;

  // Refuse images whose header declares more pixels than this, before allocating.
  int64_t max_pixels = 100'000'000;
  // A leading crop decodes only its window, at the largest DCT scale that keeps at
  // least the output size (JPEG).
  bool roi_decode = true;

  DType dtype() const { return output == Output::kUint8NHWC ? DType::kUint8 : DType::kFloat32; }

  // Appends an op; `params` is a JSON object. Returns *this, to chain.
  PipelineSpec& Add(std::string name, std::string params = "{}");

  // The form: known top-level keys, each op a name and a JSON object, max_pixels > 0.
  Status Validate() const;
  // Keys sorted, parameters as given (Pipeline::Compile's canonical form spells out
  // every default).
  std::string ToJson() const;
  // A stable identity of the spec for dataset fingerprints.
  uint64_t Fingerprint() const;
  // Equal canonical forms. Specs that match field by field (the usual case: every
  // job request is compared with its job) are equal without parsing their params.
  bool operator==(const PipelineSpec& other) const {
    if (color != other.color || output != other.output || max_pixels != other.max_pixels ||
        roi_decode != other.roi_decode || ops.size() != other.ops.size())
      return false;
    return ops == other.ops || ToJson() == other.ToJson();
  }

  static Result<PipelineSpec> FromJson(std::string_view json);
  // "imagenet-train", "imagenet-eval", or a JSON object (starts with '{'), or a path to
  // a .json file.
  static Result<PipelineSpec> Parse(std::string_view name_or_json);
  static PipelineSpec ImagenetTrain();  // RandomResizedCrop 224, flip, normalize; float32
  static PipelineSpec ImagenetEval();   // Resize 256, CenterCrop 224, normalize; float32
};

}  // namespace ferry

#endif  // FERRY_PIPELINE_SPEC_H_
