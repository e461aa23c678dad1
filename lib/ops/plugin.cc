#include "ops/plugin.h"

#include <dlfcn.h>
#include <stdlib.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/mutex.h"
#include "ferry/plugin.h"
#include "ops/op.h"

namespace ferry {
namespace {

// A plugin's op as an Op: the plugin's state for one compiled pipeline.
class PluginOp final : public Op {
 public:
  PluginOp(const FerryOpV1* d, void* state) : d_(d), state_(state) {}
  ~PluginOp() override {
    if (d_->destroy != nullptr) d_->destroy(state_);
  }

  Result<Shape> OutputShape(const Shape& in) const override {
    if (d_->output_shape == nullptr) return in;
    Shape out;
    char error[256] = {0};
    if (d_->output_shape(state_, in.height, in.width, in.channels, &out.height, &out.width, &out.channels, error,
                         sizeof(error) - 1) != 0)
      return Status::InvalidArgument(Name() + ": " + error);
    if ((out.channels != 1 && out.channels != 3) || out.height == 0 || out.width == 0 || out.height < -1 ||
        out.width < -1 || out.height > 65535 || out.width > 65535)
      return Status::InvalidArgument(Name() + ": output_shape gave an impossible shape");
    return out;
  }

  Motion motion() const override {
    return d_->motion == FERRY_MOTION_NONE   ? Motion::kNone
           : d_->motion == FERRY_MOTION_WARP ? Motion::kWarp
                                             : Motion::kUnknown;
  }
  Status Apply(cv::Mat& img, SampleRng& rng) const override { return ApplyWarp(img, rng, nullptr); }
  Status ApplyWarp(cv::Mat& img, SampleRng& rng, Warp* warp) const override {
    Shape out_shape{img.rows, img.cols, img.channels()};
    if (d_->output_shape != nullptr) {
      FERRY_ASSIGN_OR_RETURN(out_shape, OutputShape(out_shape));
      if (!out_shape.fixed()) return Status::InvalidArgument(Name() + ": output_shape gave no size for an image");
    }
    cv::Mat out(out_shape.height, out_shape.width, CV_8UC(out_shape.channels));
    FerryImage in_view{img.data, img.rows, img.cols, img.channels(), int64_t(img.step[0])};
    FerryImage out_view{out.data, out.rows, out.cols, out.channels(), int64_t(out.step[0])};
    FerryRng r{&NextU64, &Uniform, &Below, &rng};
    double w[9] = {1, 0, 0, 0, 1, 0, 0, 0, 1};
    char error[256] = {0};
    if (d_->apply(state_, &in_view, &out_view, &r, warp != nullptr ? w : nullptr, error, sizeof(error) - 1) != 0)
      return Status::InvalidArgument(Name() + ": " + (error[0] != 0 ? error : "failed"));
    if (warp != nullptr) {
      *warp = d_->motion == FERRY_MOTION_WARP ? Warp(w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7], w[8])
                                              : IdentityWarp();
    }
    img = out;
    return Status::OK();
  }

 private:
  std::string Name() const { return std::string("plugin op '") + d_->name + "'"; }
  static uint64_t NextU64(FerryRng* r) { return static_cast<SampleRng*>(r->impl)->NextU64(); }
  static double Uniform(FerryRng* r) { return static_cast<SampleRng*>(r->impl)->Uniform(); }
  static uint64_t Below(FerryRng* r, uint64_t n) {
    return n == 0 ? 0 : static_cast<SampleRng*>(r->impl)->Below(n);
  }

  const FerryOpV1* const d_;
  void* const state_;
};

Result<std::unique_ptr<Op>> MakePluginOp(const FerryOpV1* d, OpArgs& args) {
  nlohmann::json params = nlohmann::json::object();
  for (const std::string& key : args.Keys()) {
    const nlohmann::json* v = args.Raw(key.c_str());
    if (v == nullptr) continue;
    params[key] = *v;
    args.Record(key.c_str(), *v);
  }
  char error[256] = {0};
  void* state = d->create(params.dump().c_str(), error, sizeof(error) - 1);
  if (state == nullptr)
    return Status::InvalidArgument("op '" + args.op() + "': " + (error[0] != 0 ? error : "bad parameters"));
  return std::unique_ptr<Op>(new PluginOp(d, state));
}

bool GoodName(const char* name) {
  if (name == nullptr || name[0] == 0 || std::strlen(name) > 64) return false;
  for (const char* p = name; *p != 0; ++p)
    if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '_')) return false;
  return true;
}

struct Loading {
  std::vector<const FerryOpV1*> ops;
  std::string problem;
};

int RegisterFromPlugin(const FerryPluginHost* host, const FerryOpV1* op) {
  auto* l = static_cast<Loading*>(host->impl);
  if (op == nullptr || !GoodName(op->name) || op->create == nullptr || op->apply == nullptr ||
      op->motion < FERRY_MOTION_NONE || op->motion > FERRY_MOTION_UNKNOWN) {
    l->problem = "it registers an op with a malformed name ([a-z0-9_]+) or no create/apply";
    return 1;
  }
  const std::vector<std::string> taken = RegisteredOps();
  for (const FerryOpV1* o : l->ops)
    if (std::strcmp(o->name, op->name) == 0) {
      l->problem = std::string("it registers op '") + op->name + "' twice";
      return 1;
    }
  for (const std::string& t : taken)
    if (t == op->name) {
      l->problem = std::string("op '") + op->name + "' is taken (a built-in op's or another plugin's name)";
      return 1;
    }
  l->ops.push_back(op);
  return 0;
}

Mutex& LoadMutex() {
  static Mutex mu;
  return mu;
}

}  // namespace

Status LoadPlugin(const std::string& path) {
  MutexLock lock(&LoadMutex());
  static std::set<std::string>* loaded = new std::set<std::string>();
  char resolved[PATH_MAX];
  if (::realpath(path.c_str(), resolved) == nullptr)
    return Status::InvalidArgument("plugin " + path + ": " + std::strerror(errno));
  if (loaded->count(resolved) != 0) return Status::OK();
  // RTLD_LOCAL: a plugin's symbols do not leak into the next one's.
  void* handle = ::dlopen(resolved, RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* e = ::dlerror();
    return Status::InvalidArgument("plugin " + path + " does not load: " + (e != nullptr ? e : "?"));
  }
  auto init = reinterpret_cast<FerryPluginInit>(::dlsym(handle, "ferry_plugin_init"));
  if (init == nullptr) {
    ::dlclose(handle);
    return Status::InvalidArgument("plugin " + path + " has no ferry_plugin_init (see include/ferry/plugin.h)");
  }
  Loading l;
  FerryPluginHost host{FERRY_PLUGIN_ABI_VERSION, &RegisterFromPlugin, &l};
  const int rc = init(&host);
  if (rc != 0 || !l.problem.empty()) {
    // Its code may be referenced by nothing yet, but a half-registered plugin is not
    // kept: none of its ops is registered. The library stays mapped (its init ran).
    return Status::InvalidArgument("plugin " + path + ": " +
                                   (l.problem.empty() ? "ferry_plugin_init returned " + std::to_string(rc) : l.problem));
  }
  for (const FerryOpV1* op : l.ops)
    RegisterOp(op->name, [op](OpArgs& args) { return MakePluginOp(op, args); });
  loaded->insert(resolved);  // never unloaded: compiled pipelines call into it
  return Status::OK();
}

Status LoadPlugins(const std::vector<std::string>& paths) {
  std::vector<std::string> all = paths;
  if (const char* env = ::getenv("FERRY_PLUGIN"); env != nullptr && env[0] != 0) all.push_back(env);
  for (const std::string& entry : all) {
    size_t start = 0;
    while (start <= entry.size()) {
      const size_t end = std::min(entry.find(':', start), entry.size());
      if (end > start) FERRY_RETURN_IF_ERROR(LoadPlugin(entry.substr(start, end - start)));
      start = end + 1;
    }
  }
  return Status::OK();
}

}  // namespace ferry
