// What the three dataset sources share: the image-extension rule, OpenDataset's
// dispatch by the shape of the spec, and POSIX file reads that report Status.
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/dataset.h"
#include "data/data_roots.h"
#include "data/file_util.h"
#include "data/object_dataset.h"
#include "store/object_store.h"

namespace ferry {

namespace internal {

std::string ErrnoText(int err) {
  char buf[256];
  // GNU strerror_r: returns a pointer to the message (maybe not into buf).
  return strerror_r(err, buf, sizeof buf);
}

Status ErrnoToStatus(int err, std::string_view path) {
  std::string m(path);
  m += ": ";
  m += ErrnoText(err);
  switch (err) {
    case ENOENT:
    case ENOTDIR:
      return Status::NotFound(std::move(m));
    case EACCES:
    case EPERM:
      return Status::PermissionDenied(std::move(m));
    case EISDIR:
    case ELOOP:
    case ENAMETOOLONG:
      return Status::InvalidArgument(std::move(m));
    case EIO:
      return Status::DataLoss(std::move(m));
    case EMFILE:
    case ENFILE:
    case ENOMEM:
      return Status::ResourceExhausted(std::move(m));
    case EAGAIN:
    case EINTR:
    case ESTALE:
    case ETIMEDOUT:
      return Status::Unavailable(std::move(m));
    default:
      return Status::Internal(std::move(m));
  }
}

void ScopedFd::Reset() {
  if (fd_ >= 0) ::close(fd_);  // close() errors on a read-only fd carry no information
  fd_ = -1;
}

Status PreadFully(int fd, uint64_t offset, size_t n, char* dst, std::string_view what) {
  size_t done = 0;
  while (done < n) {
    const ssize_t r = ::pread(fd, dst + done, n - done, static_cast<off_t>(offset + done));
    if (r < 0) {
      if (errno == EINTR) continue;
      return ErrnoToStatus(errno, what);
    }
    if (r == 0) {
      return Status::DataLoss(std::string(what) + ": short read: wanted " + std::to_string(n) +
                              " bytes at offset " + std::to_string(offset) +
                              ", the file ends after " + std::to_string(done));
    }
    done += static_cast<size_t>(r);
  }
  return Status::OK();
}

Status ReadWholeFileOrObject(const std::string& path_or_url, std::string* out, uint64_t max_bytes) {
  if (!store::IsObjectUrl(path_or_url)) return ReadWholeFile(path_or_url, out, max_bytes);
  FERRY_ASSIGN_OR_RETURN(store::ObjectUrl url, store::ParseObjectUrl(path_or_url));
  return store::ObjectStore::Get().ReadAll(url, out, max_bytes);
}

Status ReadWholeFile(const std::string& path, std::string* out, uint64_t max_bytes) {
  int fd;
  // O_NONBLOCK so that a FIFO named like an image cannot block us in open(); it has
  // no effect on regular files.
  do {
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) {
    const int err = errno;
    struct stat lst;
    if (err == ENOENT && ::lstat(path.c_str(), &lst) == 0 && S_ISLNK(lst.st_mode)) {
      return Status::NotFound(path + ": dangling symlink (its target does not exist)");
    }
    return ErrnoToStatus(err, path);
  }
  ScopedFd file(fd);
  struct stat st;
  if (::fstat(fd, &st) != 0) return ErrnoToStatus(errno, path);
  if (S_ISDIR(st.st_mode)) return Status::InvalidArgument(path + ": is a directory");
  if (!S_ISREG(st.st_mode)) return Status::InvalidArgument(path + ": not a regular file");
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size > max_bytes) {
    return Status::InvalidArgument(path + ": file too large (" + std::to_string(size) +
                                   " bytes, the limit is " + std::to_string(max_bytes) + ")");
  }
  out->resize(size);
  return PreadFully(fd, 0, size, out->data(), path);
}

bool EndsWithIgnoreCase(std::string_view s, std::string_view suffix) {
  if (s.size() < suffix.size()) return false;
  const std::string_view tail = s.substr(s.size() - suffix.size());
  for (size_t i = 0; i < suffix.size(); ++i) {
    char c = tail[i];
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    char d = suffix[i];
    if (d >= 'A' && d <= 'Z') d = static_cast<char>(d - 'A' + 'a');
    if (c != d) return false;
  }
  return true;
}

std::string_view Basename(std::string_view path) {
  const size_t slash = path.rfind('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

std::string JoinPath(std::string_view base, std::string_view rel) {
  if (base.empty() || (!rel.empty() && rel.front() == '/') || store::IsObjectUrl(rel)) return std::string(rel);
  std::string out(base);
  if (out.back() != '/') out += '/';
  out += rel;
  return out;
}

}  // namespace internal

namespace {

// If `dir` holds at least one .tar file and no subdirectories, returns its .tar
// files (full paths, sorted by name); otherwise returns an empty list.
Result<std::vector<std::string>> TarShardsInDirectory(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return internal::ErrnoToStatus(errno, dir);
  std::vector<std::string> names;
  bool has_subdir = false;
  int err = 0;
  for (;;) {
    errno = 0;
    const dirent* e = ::readdir(d);
    if (e == nullptr) {
      err = errno;
      break;
    }
    const std::string_view name = e->d_name;
    if (name == "." || name == "..") continue;
    bool is_dir = e->d_type == DT_DIR;
    if (e->d_type == DT_LNK || e->d_type == DT_UNKNOWN) {
      struct stat st;
      is_dir = ::fstatat(::dirfd(d), e->d_name, &st, 0) == 0 && S_ISDIR(st.st_mode);
    }
    if (is_dir) {
      has_subdir = true;
      break;
    }
    if (internal::EndsWithIgnoreCase(name, ".tar")) names.emplace_back(name);
  }
  ::closedir(d);
  if (err != 0) return internal::ErrnoToStatus(err, dir);
  if (has_subdir) return std::vector<std::string>{};
  std::sort(names.begin(), names.end());
  for (std::string& n : names) n = internal::JoinPath(dir, n);
  return names;
}

}  // namespace

bool HasImageExtension(std::string_view filename) {
  // torchvision.datasets.folder.IMG_EXTENSIONS, matched like
  // `filename.lower().endswith(IMG_EXTENSIONS)`.
  static constexpr std::array<std::string_view, 9> kExtensions = {
      ".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp"};
  for (std::string_view ext : kExtensions) {
    if (internal::EndsWithIgnoreCase(filename, ext)) return true;
  }
  return false;
}

namespace {

class SyntheticDataset : public Dataset {
 public:
  explicit SyntheticDataset(int64_t n) : n_(n) {}
  int64_t size() const override { return n_; }
  int32_t Label(int64_t index) const override { return int32_t(index % 1000); }
  std::string Path(int64_t index) const override { return "synthetic:" + std::to_string(index); }
  Status ReadSample(int64_t, std::string* out) const override {
    out->clear();
    return Status::OK();
  }
  const std::vector<std::string>& classes() const override { return classes_; }
  uint64_t fingerprint() const override { return uint64_t(n_) * 0x9e3779b97f4a7c15ull; }
  const std::vector<ListingIssue>& listing_issues() const override { return issues_; }
  std::string_view kind() const override { return "synthetic"; }

 private:
  const int64_t n_;
  const std::vector<std::string> classes_;
  const std::vector<ListingIssue> issues_;
};

}  // namespace

std::unique_ptr<Dataset> MakeSyntheticDataset(int64_t n) { return std::make_unique<SyntheticDataset>(n); }

namespace {

// A user-code job's samples: indices only; the job's Python code makes them.
class UserCodeDataset : public Dataset {
 public:
  UserCodeDataset(int64_t n, uint64_t fingerprint) : n_(n), fingerprint_(fingerprint) {}
  int64_t size() const override { return n_; }
  int32_t Label(int64_t) const override { return 0; }
  std::string Path(int64_t index) const override { return "python:" + std::to_string(index); }
  Status ReadSample(int64_t, std::string*) const override {
    return Status::Unimplemented("a user-code dataset's samples are made by its Python code");
  }
  const std::vector<std::string>& classes() const override { return classes_; }
  uint64_t fingerprint() const override { return fingerprint_; }
  const std::vector<ListingIssue>& listing_issues() const override { return issues_; }
  std::string_view kind() const override { return "python"; }

 private:
  const int64_t n_;
  const uint64_t fingerprint_;
  const std::vector<std::string> classes_;
  const std::vector<ListingIssue> issues_;
};

}  // namespace

std::unique_ptr<Dataset> MakeUserCodeDataset(int64_t n, uint64_t fingerprint) {
  return std::make_unique<UserCodeDataset>(n, fingerprint);
}

namespace {

// A JSON source description: {"format": ..., ...}. Unknown keys are refused by name
// (a misspelt option would otherwise be ignored in silence).
Result<std::unique_ptr<Dataset>> OpenDescribed(const std::string& spec, const DataRoots& roots) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(spec);
  } catch (const nlohmann::json::exception& e) {
    return Status::InvalidArgument(std::string("dataset spec: not valid JSON: ") + e.what());
  }
  if (!j.is_object()) return Status::InvalidArgument("dataset spec: a JSON source description must be an object");
  const auto format = j.find("format");
  if (format == j.end() || !format->is_string())
    return Status::InvalidArgument("dataset spec: \"format\" must name the source (\"coco\")");
  auto text = [&](const char* key, std::string* out) -> Status {
    const auto v = j.find(key);
    if (v == j.end() || !v->is_string() || v->get_ref<const std::string&>().empty())
      return Status::InvalidArgument(std::string("dataset spec: \"") + key + "\" must be a non-empty path");
    *out = v->get<std::string>();
    return Status::OK();
  };
  auto flag = [&](const char* key, bool* out) -> Status {
    const auto v = j.find(key);
    if (v == j.end()) return Status::OK();
    if (!v->is_boolean()) return Status::InvalidArgument(std::string("dataset spec: \"") + key + "\" must be true or false");
    *out = v->get<bool>();
    return Status::OK();
  };
  if (format->get_ref<const std::string&>() == "coco") {
    for (const auto& [key, value] : j.items()) {
      if (key != "format" && key != "annotations" && key != "images" && key != "remove_images_without_annotations" &&
          key != "skip_crowd" && key != "contiguous_labels")
        return Status::InvalidArgument("dataset spec: unknown key \"" + key +
                                       "\" for format coco (annotations, images, remove_images_without_annotations, "
                                       "skip_crowd, contiguous_labels)");
    }
    std::string annotations, images;
    CocoOptions o;
    FERRY_RETURN_IF_ERROR(text("annotations", &annotations));
    FERRY_RETURN_IF_ERROR(text("images", &images));
    FERRY_RETURN_IF_ERROR(flag("remove_images_without_annotations", &o.remove_images_without_annotations));
    FERRY_RETURN_IF_ERROR(flag("skip_crowd", &o.skip_crowd));
    FERRY_RETURN_IF_ERROR(flag("contiguous_labels", &o.contiguous_labels));
    FERRY_RETURN_IF_ERROR(roots.CheckAny(annotations, "annotations file"));  // before any request
    FERRY_RETURN_IF_ERROR(roots.CheckAny(images, "images folder"));
    return OpenCoco(annotations, images, o);
  }
  if (format->get_ref<const std::string&>() == "segmentation") {
    for (const auto& [key, value] : j.items()) {
      if (key != "format" && key != "images" && key != "masks" && key != "list" && key != "image_suffix" &&
          key != "mask_suffix" && key != "ignore_index")
        return Status::InvalidArgument("dataset spec: unknown key \"" + key +
                                       "\" for format segmentation (images, masks, list, image_suffix, mask_suffix, "
                                       "ignore_index)");
    }
    SegmentationOptions o;
    FERRY_RETURN_IF_ERROR(text("images", &o.images));
    FERRY_RETURN_IF_ERROR(text("masks", &o.masks));
    for (auto [key, out] : {std::pair{"list", &o.list}, std::pair{"image_suffix", &o.image_suffix},
                            std::pair{"mask_suffix", &o.mask_suffix}}) {
      const auto v = j.find(key);
      if (v == j.end()) continue;
      if (!v->is_string()) return Status::InvalidArgument(std::string("dataset spec: \"") + key + "\" must be a string");
      *out = v->get<std::string>();
    }
    if (const auto v = j.find("ignore_index"); v != j.end()) {
      if (!v->is_number_integer() || v->get<int64_t>() < 0 || v->get<int64_t>() > 255)
        return Status::InvalidArgument("dataset spec: \"ignore_index\" must be an integer in [0, 255]");
      o.ignore_index = uint8_t(v->get<int64_t>());
    }
    FERRY_RETURN_IF_ERROR(roots.CheckAny(o.images, "images folder"));  // URLs: before any request
    FERRY_RETURN_IF_ERROR(roots.CheckAny(o.masks, "masks folder"));
    if (!o.list.empty()) FERRY_RETURN_IF_ERROR(roots.CheckAny(o.list, "list"));
    return OpenSegmentation(o, roots);
  }
  return Status::InvalidArgument("dataset spec: unknown format (known: coco, segmentation)");
}

}  // namespace

Result<std::vector<std::string>> ExpandBraces(const std::string& pattern) {
  const size_t open = pattern.find('{');
  if (open == std::string::npos) return std::vector<std::string>{pattern};
  const size_t close = pattern.find('}', open);
  const size_t dots = pattern.find("..", open);
  if (close == std::string::npos || dots == std::string::npos || dots > close)
    return Status::InvalidArgument("dataset spec: a brace must be a range {first..last}");
  const std::string lo = pattern.substr(open + 1, dots - open - 1), hi = pattern.substr(dots + 2, close - dots - 2);
  auto number = [](const std::string& s, int64_t* v) {
    if (s.empty() || s.size() > 9) return false;
    *v = 0;
    for (char c : s) {
      if (c < '0' || c > '9') return false;
      *v = *v * 10 + (c - '0');
    }
    return true;
  };
  int64_t a = 0, b = 0;
  if (!number(lo, &a) || !number(hi, &b) || a > b)
    return Status::InvalidArgument("dataset spec: a brace range must be {first..last}, decimal, first <= last");
  FERRY_ASSIGN_OR_RETURN(std::vector<std::string> rest, ExpandBraces(pattern.substr(close + 1)));
  if ((b - a + 1) * int64_t(rest.size()) > 1000000)
    return Status::InvalidArgument("dataset spec: the braces name more than 1,000,000 shards");
  std::vector<std::string> out;
  for (int64_t v = a; v <= b; ++v) {
    std::string n = std::to_string(v);
    if (n.size() < lo.size()) n.insert(0, lo.size() - n.size(), '0');  // "{000..127}" keeps 3 digits
    for (const std::string& r : rest) out.push_back(pattern.substr(0, open) + n + r);
  }
  return out;
}

namespace {

Result<std::unique_ptr<Dataset>> OpenDatasetWithin(const std::string& spec, const DataRoots& roots) {
  if (store::IsObjectUrl(spec)) return OpenObjectDataset(spec, roots);  // checks every URL before any request
  // A JSON description starts with '{'; a brace pattern that does ("{0..3}.tar") ends in .tar.
  if (spec.front() == '{' && !internal::EndsWithIgnoreCase(spec, ".tar")) return OpenDescribed(spec, roots);
  if (spec.find('{') != std::string::npos && spec.find("..") != std::string::npos) {
    // WebDataset's brace notation for shards: "train/shard-{000000..000127}.tar".
    FERRY_ASSIGN_OR_RETURN(std::vector<std::string> shards, ExpandBraces(spec));
    for (const std::string& shard : shards) {
      if (!internal::EndsWithIgnoreCase(shard, ".tar"))
        return Status::InvalidArgument("dataset spec: '" + shard + "' of the brace pattern is not a .tar shard");
      FERRY_RETURN_IF_ERROR(roots.Check(shard, "shard"));
    }
    return OpenTarShards(shards);
  }
  struct stat st;
  if (::stat(spec.c_str(), &st) == 0) {
    FERRY_RETURN_IF_ERROR(roots.Check(spec, "dataset"));
    if (S_ISDIR(st.st_mode)) {
      FERRY_ASSIGN_OR_RETURN(std::vector<std::string> shards, TarShardsInDirectory(spec));
      for (const std::string& shard : shards) FERRY_RETURN_IF_ERROR(roots.Check(shard, "shard"));
      if (!shards.empty()) return OpenTarShards(shards);
      return OpenImageFolder(spec);
    }
    if (internal::EndsWithIgnoreCase(spec, ".tsv") || internal::EndsWithIgnoreCase(spec, ".txt")) {
      return OpenFileList(spec);
    }
    if (internal::EndsWithIgnoreCase(spec, ".tar")) return OpenTarShards({spec});
    return Status::InvalidArgument(
        spec +
        ": cannot tell the dataset kind: expected a directory, a .tsv/.txt file list, "
        "or .tar shards");
  }
  const int err = errno;
  // Not an existing path: maybe a comma-separated list of shards.
  if (spec.find(',') != std::string::npos) {
    std::vector<std::string> shards;
    size_t begin = 0;
    while (begin <= spec.size()) {
      size_t end = spec.find(',', begin);
      if (end == std::string::npos) end = spec.size();
      std::string piece = spec.substr(begin, end - begin);
      if (!piece.empty()) {
        if (!internal::EndsWithIgnoreCase(piece, ".tar")) {
          return Status::InvalidArgument("dataset spec '" + spec + "': '" + piece +
                                         "' in a comma-separated list is not a .tar shard");
        }
        FERRY_RETURN_IF_ERROR(roots.Check(piece, "shard"));
        shards.push_back(std::move(piece));
      }
      begin = end + 1;
    }
    if (shards.empty())
      return Status::InvalidArgument("dataset spec '" + spec + "' names no shards");
    return OpenTarShards(shards);
  }
  FERRY_RETURN_IF_ERROR(roots.CheckLexically(spec, "dataset"));  // missing outside the roots: refused, not NotFound
  return internal::ErrnoToStatus(err, spec);
}

}  // namespace

Result<std::unique_ptr<Dataset>> OpenDataset(const std::string& spec) { return OpenDataset(spec, DataRoots()); }

Result<std::unique_ptr<Dataset>> OpenDataset(const std::string& spec, const DataRoots& roots) {
  if (spec.empty()) return Status::InvalidArgument("empty dataset spec");
  FERRY_ASSIGN_OR_RETURN(std::unique_ptr<Dataset> ds, OpenDatasetWithin(spec, roots));
  if (roots.confined() && (ds->kind() == "file_list" || ds->kind() == "coco")) {
    // Every entry, before the job is taken: an absolute entry or one whose ".."s climb
    // out is refused by name (Confine() checks symlinks when each is read).
    for (int64_t i = 0; i < ds->size(); ++i)
      FERRY_RETURN_IF_ERROR(roots.CheckAnyLexically(ds->Path(i), "file list entry"));
  }
  return Confine(std::move(ds), roots);
}

}  // namespace ferry
