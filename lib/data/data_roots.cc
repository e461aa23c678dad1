#include "data/data_roots.h"

#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>

#include "data/dataset.h"
#include "data/file_util.h"

namespace ferry {

namespace {

std::string Absolute(std::string_view path) {
  std::filesystem::path p{std::string(path)};
  if (p.is_relative()) {
    std::error_code ec;
    p = std::filesystem::current_path(ec) / p;
  }
  std::string s = p.lexically_normal().string();
  while (s.size() > 1 && s.back() == '/') s.pop_back();
  return s;
}

// A sample's reads go through the roots once more: its path may be a symlink that
// leads out (a folder's entry, a list's relative entry that is a link).
class ConfinedDataset final : public Dataset {
 public:
  ConfinedDataset(std::unique_ptr<Dataset> inner, DataRoots roots) : inner_(std::move(inner)), roots_(std::move(roots)) {}
  int64_t size() const override { return inner_->size(); }
  int32_t Label(int64_t index) const override { return inner_->Label(index); }
  std::string Path(int64_t index) const override { return inner_->Path(index); }
  std::string Key(int64_t index) const override { return inner_->Key(index); }
  Status ReadSample(int64_t index, std::string* out) const override {
    FERRY_RETURN_IF_ERROR(roots_.Check(inner_->Path(index), "sample"));
    return inner_->ReadSample(index, out);
  }
  const std::vector<std::string>& classes() const override { return inner_->classes(); }
  uint64_t fingerprint() const override { return inner_->fingerprint(); }
  const std::vector<ListingIssue>& listing_issues() const override { return inner_->listing_issues(); }
  std::string_view kind() const override { return inner_->kind(); }
  bool has_annotations() const override { return inner_->has_annotations(); }
  Status ReadAnnotations(int64_t index, SampleAnnotations* out) const override {
    return inner_->ReadAnnotations(index, out);
  }

 private:
  const std::unique_ptr<Dataset> inner_;
  const DataRoots roots_;
};

}  // namespace

Result<DataRoots> DataRoots::Make(const std::vector<std::string>& dirs) {
  DataRoots r;
  for (const std::string& d : dirs) {
    if (d.empty()) return Status::InvalidArgument("--data-root: an empty path");
    char buf[PATH_MAX];
    if (::realpath(d.c_str(), buf) == nullptr) return internal::ErrnoToStatus(errno, "--data-root " + d);
    struct stat st;
    if (::stat(buf, &st) != 0 || !S_ISDIR(st.st_mode))
      return Status::InvalidArgument("--data-root " + d + ": not a folder");
    r.roots_.emplace_back(buf);
  }
  return r;
}

bool DataRoots::Inside(const std::string& resolved) const {
  for (const std::string& root : roots_) {
    if (root == "/") return true;
    if (resolved.size() >= root.size() && resolved.compare(0, root.size(), root) == 0 &&
        (resolved.size() == root.size() || resolved[root.size()] == '/'))
      return true;
  }
  return false;
}

Status DataRoots::Outside(std::string_view path, std::string_view what, const std::string& resolved) const {
  std::string list;
  for (const std::string& root : roots_) list += (list.empty() ? "" : ", ") + root;
  std::string m = std::string(what) + " " + std::string(path);
  if (resolved != path) m += " (" + resolved + ")";
  return Status::PermissionDenied(m + " is outside this process's --data-root folders (" + list +
                                  "): a job may name only paths that resolve, after symlinks, inside one of them");
}

Status DataRoots::CheckLexically(std::string_view path, std::string_view what) const {
  if (!confined()) return Status::OK();
  const std::string abs = Absolute(path);
  if (!Inside(abs)) return Outside(path, what, abs);
  return Status::OK();
}

Status DataRoots::Check(std::string_view path, std::string_view what) const {
  if (!confined()) return Status::OK();
  const std::string p(path);
  char buf[PATH_MAX];
  if (::realpath(p.c_str(), buf) == nullptr) {
    const int err = errno;
    // A path that does not resolve: outside the roots as written, it is refused as
    // outside (whether it exists there is no peer's business); inside, the error is
    // the file system's.
    FERRY_RETURN_IF_ERROR(CheckLexically(path, what));
    return internal::ErrnoToStatus(err, p);
  }
  const std::string resolved(buf);
  if (!Inside(resolved)) return Outside(path, what, resolved);
  return Status::OK();
}

std::unique_ptr<Dataset> Confine(std::unique_ptr<Dataset> dataset, const DataRoots& roots) {
  if (!roots.confined() || dataset->kind() == "tar_shards" || dataset->kind() == "synthetic") return dataset;
  return std::make_unique<ConfinedDataset>(std::move(dataset), roots);
}

}  // namespace ferry
