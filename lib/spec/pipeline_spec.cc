#include "ferry/pipeline_spec.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/hash.h"

namespace ferry {

using nlohmann::json;

PipelineSpec PipelineSpec::ImagenetTrain() {
  PipelineSpec s;
  s.geometry = Geometry::kRandomResizedCrop;
  s.size = 224;
  s.hflip_p = 0.5;
  s.normalize = true;
  s.mean = {0.485f, 0.456f, 0.406f};
  s.std = {0.229f, 0.224f, 0.225f};
  s.output = Output::kFloat32NCHW;
  return s;
}

PipelineSpec PipelineSpec::ImagenetEval() {
  PipelineSpec s = ImagenetTrain();
  s.geometry = Geometry::kResizeCenterCrop;
  s.resize_shorter = 256;
  s.size = 224;
  s.hflip_p = 0.0;
  return s;
}

Status PipelineSpec::Validate() const {
  auto bad = [](std::string m) { return Status::InvalidArgument("pipeline spec: " + m); };
  if (size <= 0 || size > 8192) return bad("size must be in [1, 8192]");
  if (geometry == Geometry::kRandomResizedCrop) {
    if (!(scale_min > 0 && scale_min <= scale_max && scale_max <= 1.0))
      return bad("random_resized_crop scale must satisfy 0 < min <= max <= 1");
    if (!(ratio_min > 0 && ratio_min <= ratio_max)) return bad("random_resized_crop ratio must satisfy 0 < min <= max");
  } else {
    if (resize_shorter <= 0 || resize_shorter > 16384) return bad("resize_shorter must be in [1, 16384]");
    // torchvision would pad a center crop larger than the resized image; Ferry does not.
    if (size > resize_shorter) return bad("center_crop size must not exceed resize_shorter");
  }
  if (!(hflip_p >= 0 && hflip_p <= 1)) return bad("hflip p must be in [0, 1]");
  if (brightness < 0 || contrast < 0 || saturation < 0) return bad("color_jitter factors must be >= 0");
  for (float v : std) {
    if (!(v > 0)) return bad("normalize std must be > 0");
  }
  if (normalize && output == Output::kUint8NHWC) return bad("normalize needs float32 NCHW output");
  if (max_pixels <= 0) return bad("max_pixels must be > 0");
  return Status::OK();
}

std::string PipelineSpec::ToJson() const {
  json ops = json::array();
  if (geometry == Geometry::kRandomResizedCrop) {
    ops.push_back({{"op", "random_resized_crop"}, {"size", size}, {"scale", {scale_min, scale_max}},
                   {"ratio", {ratio_min, ratio_max}}});
  } else {
    ops.push_back({{"op", "resize_shorter"}, {"size", resize_shorter}});
    ops.push_back({{"op", "center_crop"}, {"size", size}});
  }
  if (hflip_p > 0) ops.push_back({{"op", "hflip"}, {"p", hflip_p}});
  if (brightness > 0 || contrast > 0 || saturation > 0)
    ops.push_back({{"op", "color_jitter"}, {"brightness", brightness}, {"contrast", contrast},
                   {"saturation", saturation}});
  if (normalize) ops.push_back({{"op", "normalize"}, {"mean", mean}, {"std", std}});
  json j = {{"decode", color == Color::kGray ? "gray" : "rgb"},
            {"ops", ops},
            {"output", output == Output::kUint8NHWC ? json{{"dtype", "uint8"}, {"layout", "NHWC"}}
                                                    : json{{"dtype", "float32"}, {"layout", "NCHW"}}},
            {"max_pixels", max_pixels},
            {"roi_decode", roi_decode}};
  return j.dump();
}

uint64_t PipelineSpec::Fingerprint() const {
  Fingerprinter f;
  f.Add("pipeline-spec-v1");
  f.Add(ToJson());
  return f.Finish();
}

namespace {

Status Pair(const json& op, const char* key, double* lo, double* hi) {
  if (!op.contains(key)) return Status::OK();
  const json& v = op.at(key);
  if (!v.is_array() || v.size() != 2 || !v[0].is_number() || !v[1].is_number())
    return Status::InvalidArgument(std::string("pipeline spec: '") + key + "' must be [min, max]");
  *lo = v[0].get<double>();
  *hi = v[1].get<double>();
  return Status::OK();
}

Status Triple(const json& op, const char* key, std::array<float, 3>* out) {
  const json& v = op.at(key);
  if (!v.is_array() || v.size() != 3)
    return Status::InvalidArgument(std::string("pipeline spec: normalize '") + key + "' must have 3 numbers");
  for (int i = 0; i < 3; ++i) (*out)[i] = v[i].get<float>();
  return Status::OK();
}

Result<PipelineSpec> FromJsonImpl(const json& j) {
  if (!j.is_object()) return Status::InvalidArgument("pipeline spec: expected a JSON object");
  PipelineSpec s;
  s.normalize = false;
  s.hflip_p = 0;
  bool have_rrc = false, have_resize = false, have_center = false;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& k = it.key();
    if (k != "decode" && k != "ops" && k != "output" && k != "max_pixels" && k != "roi_decode")
      return Status::InvalidArgument("pipeline spec: unknown key '" + k + "'");
  }
  if (j.contains("decode")) {
    const std::string d = j.at("decode").get<std::string>();
    if (d == "rgb") s.color = PipelineSpec::Color::kRgb;
    else if (d == "gray") s.color = PipelineSpec::Color::kGray;
    else return Status::InvalidArgument("pipeline spec: decode must be 'rgb' or 'gray', not '" + d + "'");
  }
  if (!j.contains("ops") || !j.at("ops").is_array())
    return Status::InvalidArgument("pipeline spec: 'ops' must be a list");
  for (const json& op : j.at("ops")) {
    if (!op.is_object() || !op.contains("op"))
      return Status::InvalidArgument("pipeline spec: each op needs an \"op\" name");
    const std::string name = op.at("op").get<std::string>();
    if (name == "random_resized_crop") {
      have_rrc = true;
      s.geometry = PipelineSpec::Geometry::kRandomResizedCrop;
      s.size = op.value("size", 224);
      FERRY_RETURN_IF_ERROR(Pair(op, "scale", &s.scale_min, &s.scale_max));
      FERRY_RETURN_IF_ERROR(Pair(op, "ratio", &s.ratio_min, &s.ratio_max));
    } else if (name == "resize_shorter" || name == "resize") {
      have_resize = true;
      s.resize_shorter = op.at("size").get<int>();
    } else if (name == "center_crop") {
      have_center = true;
      s.size = op.at("size").get<int>();
    } else if (name == "hflip") {
      s.hflip_p = op.value("p", 0.5);
    } else if (name == "color_jitter") {
      s.brightness = op.value("brightness", 0.0);
      s.contrast = op.value("contrast", 0.0);
      s.saturation = op.value("saturation", 0.0);
    } else if (name == "normalize") {
      s.normalize = true;
      FERRY_RETURN_IF_ERROR(Triple(op, "mean", &s.mean));
      FERRY_RETURN_IF_ERROR(Triple(op, "std", &s.std));
    } else {
      return Status::InvalidArgument("pipeline spec: unknown op '" + name + "'");
    }
  }
  if (have_rrc && (have_resize || have_center))
    return Status::InvalidArgument("pipeline spec: use random_resized_crop or resize_shorter+center_crop, not both");
  if (!have_rrc) {
    if (!have_center)
      return Status::InvalidArgument(
          "pipeline spec: needs random_resized_crop or center_crop, so that every sample has the same shape");
    s.geometry = PipelineSpec::Geometry::kResizeCenterCrop;
    if (!have_resize) s.resize_shorter = s.size;
  }
  s.output = s.normalize ? PipelineSpec::Output::kFloat32NCHW : PipelineSpec::Output::kUint8NHWC;
  if (j.contains("output")) {
    const json& o = j.at("output");
    const std::string dtype = o.value("dtype", s.normalize ? "float32" : "uint8");
    const std::string layout = o.value("layout", dtype == "uint8" ? "NHWC" : "NCHW");
    if (dtype == "uint8" && layout == "NHWC") s.output = PipelineSpec::Output::kUint8NHWC;
    else if (dtype == "float32" && layout == "NCHW") s.output = PipelineSpec::Output::kFloat32NCHW;
    else return Status::InvalidArgument("pipeline spec: output must be uint8 NHWC or float32 NCHW");
  }
  if (j.contains("max_pixels")) s.max_pixels = j.at("max_pixels").get<int64_t>();
  if (j.contains("roi_decode")) s.roi_decode = j.at("roi_decode").get<bool>();
  FERRY_RETURN_IF_ERROR(s.Validate());
  return s;
}

}  // namespace

Result<PipelineSpec> PipelineSpec::FromJson(std::string_view text) {
  try {
    return FromJsonImpl(json::parse(text));
  } catch (const json::exception& e) {
    return Status::InvalidArgument(std::string("pipeline spec: ") + e.what());
  }
}

Result<PipelineSpec> PipelineSpec::Parse(std::string_view name) {
  if (name == "imagenet-train") return ImagenetTrain();
  if (name == "imagenet-eval") return ImagenetEval();
  if (!name.empty() && name.front() == '{') return FromJson(name);
  if (name.size() > 5 && name.substr(name.size() - 5) == ".json") {
    std::ifstream f{std::string(name)};
    if (!f) return Status::NotFound("pipeline spec file not found: " + std::string(name));
    std::stringstream ss;
    ss << f.rdbuf();
    return FromJson(ss.str());
  }
  return Status::InvalidArgument("unknown pipeline '" + std::string(name) +
                                 "': use imagenet-train, imagenet-eval, a JSON object or a .json file");
}

}  // namespace ferry
