#include "data/data_roots.h"

#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <filesystem>

#include "core/strings.h"
#include "data/dataset.h"
#include "data/dataset_bases.h"
#include "data/file_util.h"
#include "store/object_store.h"

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
class ConfinedDataset final : public ForwardingDataset {
 public:
  ConfinedDataset(std::unique_ptr<Dataset> inner, DataRoots roots)
      : ForwardingDataset(std::move(inner)), roots_(std::move(roots)) {}
  Status ReadSample(int64_t index, std::string* out) const override {
    FERRY_RETURN_IF_ERROR(roots_.CheckAny(inner().Path(index), "sample"));
    return inner().ReadSample(index, out);
  }

 private:
  const DataRoots roots_;
};

}  // namespace

Result<DataRoots> DataRoots::Make(const std::vector<std::string>& dirs) {
  DataRoots r;
  r.daemon_ = true;
  for (const std::string& d : dirs) {
    if (d.empty()) return Status::InvalidArgument("--data-root: an empty path");
    if (store::IsObjectUrl(d)) {
      Result<store::ObjectUrl> u = store::ParseObjectUrl(d);
      if (!u.ok()) return u.status().WithContext("--data-root");
      std::string root = u->ToString();  // scheme and host lower-cased
      while (root.size() > 1 && root.back() == '/') root.pop_back();
      r.url_roots_.push_back(std::move(root));
      continue;
    }
    char buf[PATH_MAX];
    if (::realpath(d.c_str(), buf) == nullptr) return internal::ErrnoToStatus(errno, "--data-root " + d);
    struct stat st;
    if (::stat(buf, &st) != 0 || !S_ISDIR(st.st_mode))
      return Status::InvalidArgument("--data-root " + d + ": not a folder");
    r.roots_.emplace_back(buf);
  }
  return r;
}

std::string DataRoots::Describe() const {
  std::string out;
  for (const std::vector<std::string>* list : {&roots_, &url_roots_})
    for (const std::string& root : *list) out += (out.empty() ? "" : ", ") + root;
  return out;
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
  if (roots_.empty())
    return Status::PermissionDenied(m + ": this process reads no files (its --data-root names only URLs: " +
                                    std::to_string(url_roots_.size()) + ")");
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

namespace {

// A host no job may name: link-local addresses (the clouds' metadata services answer
// at 169.254.169.254 and fd00:ec2::254) and the metadata services' names.
bool ForbiddenHost(std::string host) {
  std::transform(host.begin(), host.end(), host.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  if (!host.empty() && host.front() == '[') {  // [v6]:port
    const size_t close = host.find(']');
    host = host.substr(1, close == std::string::npos ? std::string::npos : close - 1);
    return StartsWithNoCase(host, "fe8") || StartsWithNoCase(host, "fe9") || StartsWithNoCase(host, "fea") ||
           StartsWithNoCase(host, "feb") || host == "fd00:ec2::254" || host.find("169.254.") != std::string::npos;
  }
  const size_t colon = host.find(':');
  if (colon != std::string::npos) host.resize(colon);
  while (!host.empty() && host.back() == '.') host.pop_back();
  return StartsWithNoCase(host, "169.254.") || host == "metadata.google.internal" || host == "metadata" ||
         host == "metadata.azure.internal" || host == "100.100.100.200" || host == "instance-data" ||
         host == "instance-data.ec2.internal";
}

// A "." or ".." path segment, written or percent-encoded: a server would fold it.
bool DotSegment(std::string_view key) {
  std::string k;  // percent-encoded dots decoded, in one pass
  k.reserve(key.size());
  for (size_t i = 0; i < key.size(); ++i) {
    if (key[i] == '%' && i + 2 < key.size() && key[i + 1] == '2' && (key[i + 2] == 'e' || key[i + 2] == 'E')) {
      k += '.';
      i += 2;
    } else {
      k += key[i];
    }
  }
  const size_t q = k.find_first_of("?#");
  if (q != std::string::npos) k.resize(q);
  size_t begin = 0;
  for (;;) {
    const size_t end = k.find('/', begin);
    const std::string_view seg = std::string_view(k).substr(begin, end == std::string::npos ? end : end - begin);
    if (seg == "." || seg == "..") return true;
    if (end == std::string::npos) return false;
    begin = end + 1;
  }
}

}  // namespace

Status DataRoots::CheckUrl(std::string_view url, std::string_view what) const {
  Result<store::ObjectUrl> u = store::ParseObjectUrl(url);
  if (!u.ok()) return u.status().WithContext(std::string(what));
  const std::string shown = u->ToString();
  if (!u->is_s3() && ForbiddenHost(u->bucket))
    return Status::PermissionDenied(std::string(what) + " " + shown +
                                    ": a link-local or cloud metadata address is never read");
  if (DotSegment(u->key))
    return Status::PermissionDenied(std::string(what) + " " + shown + ": a URL with a '.' or '..' segment is not read");
  if (!daemon_) return Status::OK();
  for (const std::string& root : url_roots_) {
    if (shown.size() >= root.size() && shown.compare(0, root.size(), root) == 0 &&
        (shown.size() == root.size() || shown[root.size()] == '/' || root.back() == '/'))
      return Status::OK();
  }
  if (url_roots_.empty())
    return Status::PermissionDenied(std::string(what) + " " + shown +
                                    ": this process reads no URL: start it with --data-root naming the bucket or URL "
                                    "prefix (s3://bucket/, https://host/path/) to allow one");
  std::string list;
  for (const std::string& root : url_roots_) list += (list.empty() ? "" : ", ") + root;
  return Status::PermissionDenied(std::string(what) + " " + shown + " is outside this process's --data-root URLs (" +
                                  list + ")");
}

Status DataRoots::CheckAny(std::string_view path_or_url, std::string_view what) const {
  return store::IsObjectUrl(path_or_url) ? CheckUrl(path_or_url, what) : Check(path_or_url, what);
}

Status DataRoots::CheckAnyLexically(std::string_view path_or_url, std::string_view what) const {
  return store::IsObjectUrl(path_or_url) ? CheckUrl(path_or_url, what) : CheckLexically(path_or_url, what);
}

std::unique_ptr<Dataset> Confine(std::unique_ptr<Dataset> dataset, const DataRoots& roots) {
  // Shards and object folders read only what their open checked; synthetic and
  // user-code samples read nothing.
  if (!roots.confined() || dataset->sample_reads() != SampleReads::kByPath) return dataset;
  return std::make_unique<ConfinedDataset>(std::move(dataset), roots);
}

}  // namespace ferry
