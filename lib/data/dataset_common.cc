// What the dataset sources share: the image-extension rule, brace patterns, and POSIX
// file reads that report Status. (OpenDataset and the registry: data/source.cc.)
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

#include "data/dataset.h"
#include "data/dataset_bases.h"
#include "data/file_util.h"
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

class SyntheticDataset final : public ListedDataset {
 public:
  explicit SyntheticDataset(int64_t n)
      : ListedDataset({.kind = "synthetic", .fingerprint = uint64_t(n) * 0x9e3779b97f4a7c15ull, .reads = SampleReads::kNone}),
        n_(n) {}
  int64_t size() const override { return n_; }
  int32_t Label(int64_t index) const override { return int32_t(index % 1000); }
  std::string Path(int64_t index) const override { return "synthetic:" + std::to_string(index); }
  Status ReadSample(int64_t, std::string* out) const override {
    out->clear();
    return Status::OK();
  }

 private:
  const int64_t n_;
};

}  // namespace

std::unique_ptr<Dataset> MakeSyntheticDataset(int64_t n) { return std::make_unique<SyntheticDataset>(n); }

namespace {

// A user-code job's samples: indices only; the job's Python code makes them.
class UserCodeDataset final : public ListedDataset {
 public:
  UserCodeDataset(int64_t n, uint64_t fingerprint)
      : ListedDataset({.kind = "python", .fingerprint = fingerprint, .reads = SampleReads::kNone}), n_(n) {}
  int64_t size() const override { return n_; }
  std::string Path(int64_t index) const override { return "python:" + std::to_string(index); }
  Status ReadSample(int64_t, std::string*) const override {
    return Status::Unimplemented("a user-code dataset's samples are made by its Python code");
  }

 private:
  const int64_t n_;
};

}  // namespace

std::unique_ptr<Dataset> MakeUserCodeDataset(int64_t n, uint64_t fingerprint) {
  return std::make_unique<UserCodeDataset>(n, fingerprint);
}


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

}  // namespace ferry
