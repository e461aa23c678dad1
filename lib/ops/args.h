// OpArgs: an op's JSON parameters, read with defaults and checked.
//
// Every getter records the value it returns (given or default) in canonical(), so
// that the canonical form of a spec spells out every parameter: two specs that mean
// the same pixels compare equal whatever defaults they relied on. The first problem
// (a wrong type, a value out of range, a parameter no getter asked for) is kept and
// returned by Finish(), naming the op and the parameter. Getters return the default
// after an error, so factories can read on and check once.
#ifndef FERRY_OPS_ARGS_H_
#define FERRY_OPS_ARGS_H_

#include <array>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "ferry/status.h"

namespace ferry {

// A JSON number that is a whole number of magnitude below 1e9 (2, 2.0), as an int;
// nullopt for anything else. Never converts a double out of int's range (undefined
// behaviour: found by the frame fuzzer with 1e102) nor wraps a large integer into range.
std::optional<int> WholeInt(const nlohmann::json& e);

class OpArgs {
 public:
  OpArgs(std::string op, nlohmann::json params);

  const std::string& op() const { return op_; }

  bool Has(const char* key) const { return params_.contains(key); }
  // Every parameter given, in order (a plugin op takes them all as they are).
  std::vector<std::string> Keys() const {
    std::vector<std::string> keys;
    if (params_.is_object())
      for (auto it = params_.begin(); it != params_.end(); ++it) keys.push_back(it.key());
    return keys;
  }
  double Number(const char* key, double def);
  int Int(const char* key, int def);
  bool Bool(const char* key, bool def);
  std::string String(const char* key, const std::string& def);
  // [lo, hi], lo <= hi. A single number v means [center - v, center + v] when
  // `symmetric_about` is given (torchvision's degrees=30 is [-30, 30]).
  std::pair<double, double> Range(const char* key, std::pair<double, double> def,
                                  const double* symmetric_about = nullptr);
  std::vector<double> Numbers(const char* key, const std::vector<double>& def);
  // An output size: int n (square), or [h, w]. (torchvision's size arguments.)
  std::pair<int, int> Size(const char* key, std::pair<int, int> def);
  // An interpolation name: "nearest", "bilinear" or "bicubic" (torchvision's
  // InterpolationMode values; PIL's integers 0, 2 and 3 are accepted too).
  int Interpolation(const char* key, const char* def);
  // A fill: a number for every channel, or one per channel (1 or 3). 0..255.
  std::array<uint8_t, 3> Fill(const char* key, double def);
  // The raw value (nullptr when absent), for parameters of several forms; the factory
  // must Record() what it made of it.
  const nlohmann::json* Raw(const char* key);
  void Record(const char* key, nlohmann::json value);

  // Records a problem with parameter `key` (the first one is kept).
  void Fail(const std::string& key, const std::string& what);
  // A range check: records a failure unless ok.
  void Require(bool ok, const std::string& key, const std::string& what) {
    if (!ok) Fail(key, what);
  }

  // The first problem, or an unknown parameter, or OK.
  Status Finish() const;
  const nlohmann::json& canonical() const { return canonical_; }

 private:
  const nlohmann::json* Lookup(const char* key);

  std::string op_;
  nlohmann::json params_;
  nlohmann::json canonical_ = nlohmann::json::object();
  std::set<std::string> read_;
  Status status_;
};

}  // namespace ferry

#endif  // FERRY_OPS_ARGS_H_
