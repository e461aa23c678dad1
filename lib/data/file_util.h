// Private helpers of the data layer: POSIX file reads that report Status, and a
// compact table of strings for listings of millions of paths.
//
// Everything here is thread-safe in the sense that it holds no shared state; a
// StringTable is thread-compatible (const methods may run concurrently).
#ifndef FERRY_DATA_FILE_UTIL_H_
#define FERRY_DATA_FILE_UTIL_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/check.h"
#include "ferry/status.h"

namespace ferry {
class DataRoots;
}  // namespace ferry

namespace ferry::internal {

// The largest sample we read (1 GiB). A larger "image" is a mistake (a video or a
// disk image with an image extension), and reading it would only exhaust memory.
inline constexpr uint64_t kMaxSampleBytes = uint64_t{1} << 30;

// The system's description of errno value `err` (thread-safe).
std::string ErrnoText(int err);

// Maps an errno value from an operation on `path` to a Status whose message names
// the path and the system's reason:
//   ENOENT/ENOTDIR -> NotFound, EACCES/EPERM -> PermissionDenied, EISDIR ->
//   InvalidArgument, EIO -> DataLoss, EMFILE/ENFILE/ENOMEM -> ResourceExhausted,
//   EAGAIN/ESTALE/ETIMEDOUT/EINTR -> Unavailable, anything else -> Internal.
Status ErrnoToStatus(int err, std::string_view path);

// Reads the whole file at `path` into *out (resized to the file's size; capacity is
// reused). Follows symlinks. Zero-byte files read fine as empty.
// Errors: NotFound (missing, or a dangling symlink: the message says which),
// PermissionDenied, InvalidArgument (a directory, not a regular file, or larger than
// `max_bytes`), DataLoss (the file shrank while read, or EIO).
Status ReadWholeFile(const std::string& path, std::string* out,
                     uint64_t max_bytes = kMaxSampleBytes);

// ReadWholeFile, or for a URL (s3://, http(s)://: store/object_store.h) the whole
// object. The caller has checked the URL against its roots.
Status ReadWholeFileOrObject(const std::string& path_or_url, std::string* out,
                             uint64_t max_bytes = kMaxSampleBytes);

// The .tar shards a pattern names (data/tar_shards.cc): a brace pattern
// ("shard-{000..127}.tar", ExpandBraces) or a comma-separated list of shards or
// patterns, paths or URLs, each checked against `roots` (a URL before any request).
// InvalidArgument for a name that is not a .tar, or none at all.
Result<std::vector<std::string>> ShardsOfPattern(const std::string& spec, const DataRoots& roots);

// Reads exactly `n` bytes at `offset` of `fd` into `dst`, retrying on EINTR and
// partial reads. `what` names the file in messages. A read that ends early (the file
// is shorter than offset + n) is DataLoss.
Status PreadFully(int fd, uint64_t offset, size_t n, char* dst, std::string_view what);

// An owned file descriptor, closed on destruction. Move-only.
class ScopedFd {
 public:
  ScopedFd() = default;
  explicit ScopedFd(int fd) : fd_(fd) {}
  ~ScopedFd() { Reset(); }
  ScopedFd(ScopedFd&& other) noexcept : fd_(other.Release()) {}
  ScopedFd& operator=(ScopedFd&& other) noexcept {
    if (this != &other) {
      Reset();
      fd_ = other.Release();
    }
    return *this;
  }
  ScopedFd(const ScopedFd&) = delete;
  ScopedFd& operator=(const ScopedFd&) = delete;

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int Release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void Reset();

 private:
  int fd_ = -1;
};

// True if `s` ends with `suffix`, comparing ASCII letters case-insensitively.
bool EndsWithIgnoreCase(std::string_view s, std::string_view suffix);

// The part of `path` after the last '/', or all of it.
std::string_view Basename(std::string_view path);

// Appends `rel` to `base` with one '/' between; `rel` is returned unchanged if it is
// absolute or `base` is empty.
std::string JoinPath(std::string_view base, std::string_view rel);

// An append-only table of strings stored back to back in one buffer: one allocation
// for all the bytes plus 8 bytes of offset per entry, instead of a std::string (32
// bytes plus a heap block) each. Views returned by Get() stay valid until the next
// Append().
class StringTable {
 public:
  StringTable() : ends_{0} {}

  void Append(std::string_view s) {
    bytes_.append(s);
    ends_.push_back(bytes_.size());
  }
  int64_t size() const { return static_cast<int64_t>(ends_.size()) - 1; }
  // REQUIRES: 0 <= i < size()
  std::string_view Get(int64_t i) const {
    FERRY_CHECK(i >= 0 && i < size());
    const size_t begin = ends_[static_cast<size_t>(i)];
    const size_t end = ends_[static_cast<size_t>(i) + 1];
    return std::string_view(bytes_).substr(begin, end - begin);
  }
  void Reserve(size_t entries, size_t bytes) {
    ends_.reserve(entries + 1);
    bytes_.reserve(bytes);
  }
  // Releases spare capacity once the table is complete.
  void ShrinkToFit() {
    bytes_.shrink_to_fit();
    ends_.shrink_to_fit();
  }
  size_t bytes() const { return bytes_.size(); }

 private:
  std::string bytes_;
  std::vector<uint64_t> ends_;  // ends_[0] == 0; entry i is [ends_[i], ends_[i+1]).
};

}  // namespace ferry::internal

#endif  // FERRY_DATA_FILE_UTIL_H_
