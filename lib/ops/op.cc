#include "ops/op.h"

#include <map>
#include <mutex>

#include "core/mutex.h"

namespace ferry {

// The built-in ops, one registration function each (all_ops.inc lists them).
#define FERRY_OP(fn) void fn();
#include "ops/all_ops.inc"
#undef FERRY_OP

namespace {

struct Registry {
  Mutex mu;
  std::map<std::string, OpFactory, std::less<>> factories GUARDED_BY(mu);
  bool registering_builtins GUARDED_BY(mu) = false;
};

Registry& Instance() {
  static Registry* r = new Registry;  // never destroyed: ops may be made during exit
  return *r;
}

// The built-ins register at the first lookup. A plugin's op registered under a
// built-in name (before or after) replaces it.
void EnsureBuiltins() {
  static std::once_flag once;
  std::call_once(once, [] {
    {
      MutexLock lock(&Instance().mu);
      Instance().registering_builtins = true;
    }
#define FERRY_OP(fn) fn();
#include "ops/all_ops.inc"
#undef FERRY_OP
    MutexLock lock(&Instance().mu);
    Instance().registering_builtins = false;
  });
}

}  // namespace

void RegisterOp(std::string name, OpFactory factory) {
  Registry& r = Instance();
  MutexLock lock(&r.mu);
  if (r.registering_builtins) r.factories.emplace(std::move(name), std::move(factory));
  else r.factories[std::move(name)] = std::move(factory);
}

std::vector<std::string> RegisteredOps() {
  EnsureBuiltins();
  Registry& r = Instance();
  MutexLock lock(&r.mu);
  std::vector<std::string> names;
  for (const auto& [name, f] : r.factories) names.push_back(name);
  return names;
}

namespace {

Result<std::unique_ptr<Op>> MakeFromJson(const std::string& name, nlohmann::json params, nlohmann::json* canonical) {
  EnsureBuiltins();
  OpFactory factory;
  {
    Registry& r = Instance();
    MutexLock lock(&r.mu);
    auto it = r.factories.find(name);
    if (it == r.factories.end())
      return Status::InvalidArgument("pipeline spec: unknown op '" + name +
                                     "' (the README's table lists the ops; a plugin may register more)");
    factory = it->second;
  }
  OpArgs args(name, std::move(params));
  Result<std::unique_ptr<Op>> op = factory(args);
  if (!op.ok()) return Status(op.status().code(), "pipeline spec: " + op.status().message());
  if (Status st = args.Finish(); !st.ok()) return Status(st.code(), "pipeline spec: " + st.message());
  if (canonical != nullptr) *canonical = args.canonical();
  return op;
}

}  // namespace

Result<std::unique_ptr<Op>> MakeOp(std::string_view name, std::string_view params, std::string* canonical) {
  nlohmann::json p;
  try {
    p = nlohmann::json::parse(params.empty() ? std::string_view("{}") : params);
  } catch (const nlohmann::json::exception& e) {
    return Status::InvalidArgument("pipeline spec: op '" + std::string(name) + "': parameters are not JSON: " +
                                   e.what());
  }
  nlohmann::json c;
  FERRY_ASSIGN_OR_RETURN(std::unique_ptr<Op> op, MakeFromJson(std::string(name), std::move(p), &c));
  if (canonical != nullptr) *canonical = c.dump();
  return op;
}

Result<std::vector<std::unique_ptr<Op>>> MakeNestedOps(OpArgs& args, const char* key) {
  std::vector<std::unique_ptr<Op>> ops;
  const nlohmann::json* list = args.Raw(key);
  if (list == nullptr || !list->is_array() || list->empty()) {
    args.Fail(key, "must be a non-empty list of ops ({\"op\": NAME, ...})");
    return ops;
  }
  nlohmann::json canonical = nlohmann::json::array();
  for (const nlohmann::json& e : *list) {
    if (!e.is_object() || !e.contains("op") || !e.at("op").is_string()) {
      args.Fail(key, "must be a list of ops ({\"op\": NAME, ...})");
      return ops;
    }
    nlohmann::json params = e;
    params.erase("op");
    nlohmann::json c;
    Result<std::unique_ptr<Op>> op = MakeFromJson(e.at("op").get<std::string>(), std::move(params), &c);
    if (!op.ok()) return op.status();
    if ((*op)->stage() != Op::Stage::kImage) {
      args.Fail(key, "may hold image ops only, not '" + e.at("op").get<std::string>() + "'");
      return ops;
    }
    c["op"] = e.at("op");
    canonical.push_back(std::move(c));
    ops.push_back(std::move(*op));
  }
  args.Record(key, std::move(canonical));
  return ops;
}

}  // namespace ferry
