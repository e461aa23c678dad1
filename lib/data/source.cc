// The source registry (data/source.h) and OpenDataset, which asks it.
#include "data/source.h"

#include <errno.h>
#include <sys/stat.h>

#include <algorithm>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/mutex.h"
#include "data/data_roots.h"
#include "data/file_util.h"
#include "store/object_store.h"

namespace ferry {

#define FERRY_SOURCE(fn) void fn();
#include "data/all_sources.inc"
#undef FERRY_SOURCE

namespace {

struct Registry {
  Mutex mu;
  std::vector<std::shared_ptr<const SourceKind>> kinds GUARDED_BY(mu);
};

Registry& Instance() {
  static Registry* r = new Registry;  // never destroyed: datasets may be opened during exit
  return *r;
}

void EnsureBuiltins() {
  static std::once_flag once;
  std::call_once(once, [] {
#define FERRY_SOURCE(fn) fn();
#include "data/all_sources.inc"
#undef FERRY_SOURCE
  });
}

std::string Known(const std::vector<std::shared_ptr<const SourceKind>>& kinds,
                  const std::vector<std::string> SourceKind::*names) {
  std::vector<std::string> all;
  for (const auto& k : kinds) all.insert(all.end(), ((*k).*names).begin(), ((*k).*names).end());
  std::sort(all.begin(), all.end());
  std::string out;
  for (const std::string& n : all) {
    if (!out.empty()) out += ", ";
    out += n;
  }
  return out;
}

}  // namespace

void RegisterSource(SourceKind kind) {
  auto shared = std::make_shared<const SourceKind>(std::move(kind));
  Registry& r = Instance();
  MutexLock lock(&r.mu);
  for (auto& k : r.kinds) {
    if (k->name == shared->name) {
      k = std::move(shared);
      return;
    }
  }
  r.kinds.push_back(std::move(shared));
}

std::vector<std::shared_ptr<const SourceKind>> RegisteredSources() {
  EnsureBuiltins();
  Registry& r = Instance();
  MutexLock lock(&r.mu);
  return r.kinds;
}

DescriptionArgs::DescriptionArgs(const SourceSpec& spec) : spec_(spec) { asked_.push_back("format"); }

const nlohmann::json* DescriptionArgs::Find(const char* key) {
  asked_.emplace_back(key);
  const auto it = spec_.description->find(key);
  return it == spec_.description->end() ? nullptr : &*it;
}

void DescriptionArgs::Fail(std::string what) {
  if (status_.ok()) status_ = Status::InvalidArgument("dataset spec: " + std::move(what));
}

std::string DescriptionArgs::Path(const char* key, bool required) {
  const nlohmann::json* v = Find(key);
  if (v == nullptr && !required) return "";
  if (v == nullptr || !v->is_string() || v->get_ref<const std::string&>().empty()) {
    Fail(std::string("\"") + key + "\" must be a non-empty path");
    return "";
  }
  return v->get<std::string>();
}

std::string DescriptionArgs::Text(const char* key) {
  const nlohmann::json* v = Find(key);
  if (v == nullptr) return "";
  if (!v->is_string()) {
    Fail(std::string("\"") + key + "\" must be a string");
    return "";
  }
  return v->get<std::string>();
}

bool DescriptionArgs::Flag(const char* key, bool def) {
  const nlohmann::json* v = Find(key);
  if (v == nullptr) return def;
  if (!v->is_boolean()) {
    Fail(std::string("\"") + key + "\" must be true or false");
    return def;
  }
  return v->get<bool>();
}

int64_t DescriptionArgs::Int(const char* key, int64_t def, int64_t lo, int64_t hi) {
  const nlohmann::json* v = Find(key);
  if (v == nullptr) return def;
  if (!v->is_number_integer() || v->get<int64_t>() < lo || v->get<int64_t>() > hi) {
    Fail(std::string("\"") + key + "\" must be an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) +
         "]");
    return def;
  }
  return v->get<int64_t>();
}

Status DescriptionArgs::Finish() const {
  if (!status_.ok()) return status_;
  for (const auto& [key, value] : spec_.description->items()) {
    if (std::find(asked_.begin(), asked_.end(), key) != asked_.end()) continue;
    std::string known;
    for (size_t i = 1; i < asked_.size(); ++i) {
      if (i > 1) known += ", ";
      known += asked_[i];
    }
    return Status::InvalidArgument("dataset spec: unknown key \"" + key + "\" for format " + spec_.format + " (" +
                                   known + ")");
  }
  return Status::OK();
}

Result<SourceSpec> ReadSourceSpec(const std::string& spec, const DataRoots& roots) {
  if (spec.empty()) return Status::InvalidArgument("empty dataset spec");
  SourceSpec s;
  s.text = spec;
  if (store::IsObjectUrl(spec)) {
    s.form = SpecForm::kUrl;
    s.scheme = spec.substr(0, spec.find("://"));
    for (char& c : s.scheme) c = char(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
    return s;
  }
  // A JSON description starts with '{'; a brace pattern that does ("{0..3}.tar") ends in .tar.
  if (spec.front() == '{' && !internal::EndsWithIgnoreCase(spec, ".tar")) {
    auto j = std::make_shared<nlohmann::json>();
    try {
      *j = nlohmann::json::parse(spec);
    } catch (const nlohmann::json::exception& e) {
      return Status::InvalidArgument(std::string("dataset spec: not valid JSON: ") + e.what());
    }
    if (!j->is_object()) return Status::InvalidArgument("dataset spec: a JSON source description must be an object");
    const auto format = j->find("format");
    if (format == j->end() || !format->is_string())
      return Status::InvalidArgument("dataset spec: \"format\" must name the source (\"coco\")");
    s.form = SpecForm::kDescription;
    s.format = format->get<std::string>();
    s.description = std::move(j);
    return s;
  }
  if (spec.find('{') != std::string::npos && spec.find("..") != std::string::npos) {
    s.form = SpecForm::kPattern;  // WebDataset's brace notation: "train/shard-{000000..000127}.tar"
    return s;
  }
  struct stat st;
  if (::stat(spec.c_str(), &st) == 0) {
    FERRY_RETURN_IF_ERROR(roots.Check(spec, "dataset"));  // before any source looks inside
    s.form = SpecForm::kPath;
    s.is_dir = S_ISDIR(st.st_mode);
    return s;
  }
  const int err = errno;
  if (spec.find(',') != std::string::npos) {  // not a path: maybe a comma-separated list of shards
    s.form = SpecForm::kPattern;
    return s;
  }
  FERRY_RETURN_IF_ERROR(roots.CheckLexically(spec, "dataset"));  // missing outside the roots: refused, not NotFound
  return internal::ErrnoToStatus(err, spec);
}

Result<std::shared_ptr<const SourceKind>> FindSource(const SourceSpec& spec) {
  const std::vector<std::shared_ptr<const SourceKind>> kinds = RegisteredSources();
  auto has = [](const std::vector<std::string>& names, const std::string& n) {
    return std::find(names.begin(), names.end(), n) != names.end();
  };
  switch (spec.form) {
    case SpecForm::kDescription:
      for (const auto& k : kinds)
        if (has(k->formats, spec.format)) return k;
      return Status::InvalidArgument("dataset spec: unknown format \"" + spec.format + "\" (known: " +
                                     Known(kinds, &SourceKind::formats) + ")");
    case SpecForm::kUrl:
      for (const auto& k : kinds)
        if (has(k->schemes, spec.scheme)) return k;
      return Status::InvalidArgument(spec.text + ": no source reads " + spec.scheme + ":// URLs (known: " +
                                     Known(kinds, &SourceKind::schemes) + ")");
    case SpecForm::kPattern:
    case SpecForm::kPath:
      break;
  }
  std::string expected;
  for (const auto& k : kinds) {
    if (!k->claims) continue;
    if (k->claims(spec)) return k;
    if (!expected.empty()) expected += ", ";
    expected += k->summary;
  }
  return Status::InvalidArgument(spec.text + ": cannot tell the dataset kind: expected " + expected);
}

Result<std::unique_ptr<Dataset>> OpenDataset(const std::string& spec) { return OpenDataset(spec, DataRoots()); }

Result<std::unique_ptr<Dataset>> OpenDataset(const std::string& spec, const DataRoots& roots) {
  FERRY_ASSIGN_OR_RETURN(SourceSpec s, ReadSourceSpec(spec, roots));
  FERRY_ASSIGN_OR_RETURN(std::shared_ptr<const SourceKind> source, FindSource(s));
  FERRY_ASSIGN_OR_RETURN(std::unique_ptr<Dataset> ds, source->open(s, roots));
  if (roots.confined() && ds->entries_from_contents()) {
    // Every entry, before the job is taken: an absolute entry or one whose ".."s climb
    // out is refused by name (Confine() checks symlinks when each is read).
    for (int64_t i = 0; i < ds->size(); ++i)
      FERRY_RETURN_IF_ERROR(roots.CheckAnyLexically(ds->Path(i), "file list entry"));
  }
  return Confine(std::move(ds), roots);
}

}  // namespace ferry
