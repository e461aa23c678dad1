#include "ferry/pipeline_spec.h"

#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/hash.h"

namespace ferry {

using nlohmann::json;

namespace {

// An op's parameters as a sorted, compact JSON object: the form ToJson writes and
// comparisons see, whatever spacing or key order the spec was written with.
Result<std::string> NormalizeParams(std::string_view params, const std::string& op) {
  try {
    json j = json::parse(params.empty() ? std::string_view("{}") : params);
    if (!j.is_object()) return Status::InvalidArgument("pipeline spec: op '" + op + "': parameters must be an object");
    if (j.contains("op")) return Status::InvalidArgument("pipeline spec: op '" + op + "': 'op' is not a parameter");
    return j.dump();
  } catch (const json::exception& e) {
    return Status::InvalidArgument("pipeline spec: op '" + op + "': parameters are not JSON: " + e.what());
  }
}

}  // namespace

PipelineSpec& PipelineSpec::Add(std::string name, std::string params) {
  ops.push_back({std::move(name), std::move(params)});
  return *this;
}

// Every JobSpec starts from ImagenetTrain() (its default pipeline), decoders included:
// built once, then copied, rather than normalizing its parameters' JSON each time.
PipelineSpec PipelineSpec::ImagenetTrain() {
  static const PipelineSpec spec = [] {
    PipelineSpec s;
    s.Add("random_resized_crop",
          json{{"size", 224}, {"scale", {0.08, 1.0}}, {"ratio", {3.0 / 4.0, 4.0 / 3.0}}}.dump());
    s.Add("hflip", R"({"p":0.5})");
    s.Add("normalize", R"({"mean":[0.485,0.456,0.406],"std":[0.229,0.224,0.225]})");
    s.output = Output::kFloat32NCHW;
    return s;
  }();
  return spec;
}

PipelineSpec PipelineSpec::ImagenetEval() {
  PipelineSpec s;
  s.Add("resize", R"({"size":256})");
  s.Add("center_crop", R"({"size":224})");
  s.Add("normalize", R"({"mean":[0.485,0.456,0.406],"std":[0.229,0.224,0.225]})");
  s.output = Output::kFloat32NCHW;
  return s;
}

Status PipelineSpec::Validate() const {
  auto bad = [](std::string m) { return Status::InvalidArgument("pipeline spec: " + m); };
  if (ops.empty()) return bad("'ops' is empty: a batch needs at least a crop or a fixed-size resize");
  if (ops.size() > 200) return bad("more than 200 ops");
  for (const Op& op : ops) {
    if (op.name.empty()) return bad("an op has no name");
    FERRY_RETURN_IF_ERROR(NormalizeParams(op.params, op.name).status());
  }
  if (max_pixels <= 0) return bad("max_pixels must be > 0");
  return Status::OK();
}

std::string PipelineSpec::ToJson() const {
  json list = json::array();
  for (const Op& op : ops) {
    json o = json::object();
    try {
      o = json::parse(op.params.empty() ? std::string("{}") : op.params);
      if (!o.is_object()) o = json{{"params", op.params}};
    } catch (const json::exception&) {
      o = json{{"params", op.params}};  // not JSON: shown as is (Validate refuses it)
    }
    o["op"] = op.name;
    list.push_back(std::move(o));
  }
  json j = {{"decode", color == Color::kGray ? "gray" : "rgb"},
            {"ops", list},
            {"output", output == Output::kUint8NHWC ? json{{"dtype", "uint8"}, {"layout", "NHWC"}}
                                                    : json{{"dtype", "float32"}, {"layout", "NCHW"}}},
            {"max_pixels", max_pixels},
            {"roi_decode", roi_decode}};
  return j.dump();
}

uint64_t PipelineSpec::Fingerprint() const {
  Fingerprinter f;
  f.Add("pipeline-spec-v2");
  f.Add(ToJson());
  return f.Finish();
}

namespace {

Result<PipelineSpec> FromJsonImpl(const json& j) {
  if (!j.is_object()) return Status::InvalidArgument("pipeline spec: expected a JSON object");
  PipelineSpec s;
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
  bool normalizes = false;
  for (const json& op : j.at("ops")) {
    if (!op.is_object() || !op.contains("op") || !op.at("op").is_string())
      return Status::InvalidArgument("pipeline spec: each op needs an \"op\" name");
    json params = op;
    params.erase("op");
    const std::string name = op.at("op").get<std::string>();
    normalizes = normalizes || name == "normalize";
    s.ops.push_back({name, params.dump()});
  }
  s.output = normalizes ? PipelineSpec::Output::kFloat32NCHW : PipelineSpec::Output::kUint8NHWC;
  if (j.contains("output")) {
    const json& o = j.at("output");
    if (!o.is_object()) return Status::InvalidArgument("pipeline spec: output must be an object");
    const std::string dtype = o.value("dtype", normalizes ? "float32" : "uint8");
    const std::string layout = o.value("layout", dtype == "uint8" ? "NHWC" : "NCHW");
    if (dtype == "uint8" && layout == "NHWC") s.output = PipelineSpec::Output::kUint8NHWC;
    else if (dtype == "float32" && layout == "NCHW") s.output = PipelineSpec::Output::kFloat32NCHW;
    else return Status::InvalidArgument("pipeline spec: output must be uint8 NHWC or float32 NCHW");
  }
  if (j.contains("max_pixels")) {
    // An integer: a double such as 1e102 does not convert to int64_t (undefined
    // behaviour, found by the frame fuzzer in a peer's job).
    const json& m = j.at("max_pixels");
    if (!m.is_number_integer() || (m.is_number_unsigned() && m.get<uint64_t>() > uint64_t(INT64_MAX)))
      return Status::InvalidArgument("pipeline spec: max_pixels must be an integer");
    s.max_pixels = m.get<int64_t>();
  }
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
