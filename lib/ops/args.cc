#include "ops/args.h"

#include <cmath>
#include <string_view>

namespace ferry {

using nlohmann::json;

OpArgs::OpArgs(std::string op, json params) : op_(std::move(op)), params_(std::move(params)) {
  if (!params_.is_object()) {
    status_ = Status::InvalidArgument("op '" + op_ + "': parameters must be a JSON object");
    params_ = json::object();
  }
}

void OpArgs::Fail(const std::string& key, const std::string& what) {
  if (status_.ok()) status_ = Status::InvalidArgument("op '" + op_ + "': '" + key + "' " + what);
}

const json* OpArgs::Lookup(const char* key) {
  read_.insert(key);
  auto it = params_.find(key);
  return it == params_.end() || it->is_null() ? nullptr : &*it;
}

const json* OpArgs::Raw(const char* key) { return Lookup(key); }

void OpArgs::Record(const char* key, json value) { canonical_[key] = std::move(value); }

double OpArgs::Number(const char* key, double def) {
  double v = def;
  if (const json* j = Lookup(key)) {
    if (j->is_number() && std::isfinite(j->get<double>())) v = j->get<double>();
    else Fail(key, "must be a finite number");
  }
  canonical_[key] = v;
  return v;
}

std::optional<int> WholeInt(const json& e) {
  if (!e.is_number()) return std::nullopt;
  const double d = e.get<double>();
  if (!(std::abs(d) < 1e9) || std::floor(d) != d) return std::nullopt;
  return int(d);
}

int OpArgs::Int(const char* key, int def) {
  int v = def;
  if (const json* j = Lookup(key)) {
    if (std::optional<int> w = WholeInt(*j)) v = *w;
    else Fail(key, "must be an integer");
  }
  canonical_[key] = v;
  return v;
}

bool OpArgs::Bool(const char* key, bool def) {
  bool v = def;
  if (const json* j = Lookup(key)) {
    if (j->is_boolean()) v = j->get<bool>();
    else Fail(key, "must be true or false");
  }
  canonical_[key] = v;
  return v;
}

std::string OpArgs::String(const char* key, const std::string& def) {
  std::string v = def;
  if (const json* j = Lookup(key)) {
    if (j->is_string()) v = j->get<std::string>();
    else Fail(key, "must be a string");
  }
  canonical_[key] = v;
  return v;
}

std::pair<double, double> OpArgs::Range(const char* key, std::pair<double, double> def,
                                        const double* symmetric_about) {
  std::pair<double, double> v = def;
  if (const json* j = Lookup(key)) {
    if (j->is_number() && symmetric_about != nullptr) {
      const double d = j->get<double>();
      if (d < 0) Fail(key, "must be >= 0 when a single number");
      v = {*symmetric_about - d, *symmetric_about + d};
    } else if (j->is_array() && j->size() == 2 && (*j)[0].is_number() && (*j)[1].is_number()) {
      v = {(*j)[0].get<double>(), (*j)[1].get<double>()};
      if (!(v.first <= v.second)) Fail(key, "must be [min, max] with min <= max");
    } else {
      Fail(key, symmetric_about ? "must be a number or [min, max]" : "must be [min, max]");
    }
    if (!std::isfinite(v.first) || !std::isfinite(v.second)) Fail(key, "must be finite");
  }
  canonical_[key] = {v.first, v.second};
  return v;
}

std::vector<double> OpArgs::Numbers(const char* key, const std::vector<double>& def) {
  std::vector<double> v = def;
  if (const json* j = Lookup(key)) {
    v.clear();
    if (j->is_number()) {
      v.push_back(j->get<double>());
    } else if (j->is_array()) {
      for (const json& e : *j) {
        if (!e.is_number()) {
          Fail(key, "must be a list of numbers");
          v = def;
          break;
        }
        v.push_back(e.get<double>());
      }
    } else {
      Fail(key, "must be a number or a list of numbers");
      v = def;
    }
  }
  canonical_[key] = v;
  return v;
}

std::pair<int, int> OpArgs::Size(const char* key, std::pair<int, int> def) {
  std::pair<int, int> v = def;
  if (const json* j = Lookup(key)) {
    // One value for both sides, [value], or [height, width].
    const bool list = j->is_array() && (j->size() == 1 || j->size() == 2);
    const std::optional<int> h = list ? WholeInt((*j)[0]) : WholeInt(*j);
    const std::optional<int> w = list && j->size() == 2 ? WholeInt((*j)[1]) : h;
    if ((list || !j->is_array()) && h && w) {
      v = {*h, *w};
    } else {
      Fail(key, "must be an integer or [height, width]");
    }
  }
  if (!(v.first > 0 && v.first <= 16384 && v.second > 0 && v.second <= 16384)) {
    Fail(key, "must be in [1, 16384]");
    v = {1, 1};
  }
  canonical_[key] = {v.first, v.second};
  return v;
}

int OpArgs::Interpolation(const char* key, const char* def) {
  // Index = Ferry's mode (geometry.h InterpMode).
  static const char* const kNames[] = {"nearest", "bilinear", "bicubic"};
  auto by_name = [](std::string_view n) {
    for (int m = 0; m < 3; ++m)
      if (n == kNames[m]) return m;
    return -1;
  };
  int mode = by_name(def);
  if (const json* j = Lookup(key)) {
    mode = -1;
    if (j->is_string()) {
      mode = by_name(j->get<std::string>());
    } else if (j->is_number_integer() && WholeInt(*j)) {
      const int pil = *WholeInt(*j);  // PIL's Image.NEAREST, BILINEAR, BICUBIC
      mode = pil == 0 ? 0 : pil == 2 ? 1 : pil == 3 ? 2 : -1;
    }
  }
  if (mode < 0) {
    Fail(key, "must be \"nearest\", \"bilinear\" or \"bicubic\"");
    mode = 1;
  }
  canonical_[key] = kNames[mode];
  return mode;
}

std::array<uint8_t, 3> OpArgs::Fill(const char* key, double def) {
  std::vector<double> v = {def};
  if (const json* j = Lookup(key)) {
    v.clear();
    if (j->is_number()) v.push_back(j->get<double>());
    else if (j->is_array() && (j->size() == 1 || j->size() == 3))
      for (const json& e : *j) v.push_back(e.is_number() ? e.get<double>() : -1);
    else v.push_back(-1);
  }
  std::array<uint8_t, 3> out{};
  for (size_t c = 0; c < 3; ++c) {
    const double x = v.size() == 1 ? v[0] : v[c];
    if (!(x >= 0 && x <= 255)) {
      Fail(key, "must be a number in [0, 255] or one per channel");
      break;
    }
    out[c] = uint8_t(int(x));  // PIL takes the integer part of a fill
  }
  if (v.size() == 1) canonical_[key] = int(out[0]);
  else canonical_[key] = {int(out[0]), int(out[1]), int(out[2])};
  return out;
}

Status OpArgs::Finish() const {
  if (!status_.ok()) return status_;
  for (auto it = params_.begin(); it != params_.end(); ++it) {
    if (read_.count(it.key()) == 0)
      return Status::InvalidArgument("op '" + op_ + "': unknown parameter '" + it.key() + "'");
  }
  return Status::OK();
}

}  // namespace ferry
