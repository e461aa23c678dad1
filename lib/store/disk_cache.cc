// DiskCache (store/disk_cache.h).
#include "store/disk_cache.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <utility>
#include <vector>

#include "core/hash.h"
#include "core/log.h"

namespace ferry::store {
namespace {

constexpr char kMagic[8] = {'F', 'E', 'R', 'R', 'Y', 'C', '1', '\n'};

std::string NameOf(const std::string& key) {
  Fingerprinter a, b;
  a.Add(key);
  b.AddU64(0x5eed);
  b.Add(key);
  return a.Hex() + b.Hex();
}

// The entry's bytes' hash: FNV-1a over the bytes and their length (Fingerprinter's
// raw form, so that a streamed entry hashes as it is written).
uint64_t HashOf(const std::string& bytes) {
  Fingerprinter f;
  f.AddRaw(bytes);
  return f.FinishRaw(bytes.size());
}

void PutU64(std::string* s, uint64_t v) { s->append(reinterpret_cast<const char*>(&v), 8); }

bool ReadAll(int fd, char* dst, size_t n) {
  size_t done = 0;
  while (done < n) {
    const ssize_t r = ::read(fd, dst + done, n - done);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    done += size_t(r);
  }
  return true;
}

bool WriteAll(int fd, const char* src, size_t n) {
  size_t done = 0;
  while (done < n) {
    const ssize_t r = ::write(fd, src + done, n - done);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    done += size_t(r);
  }
  return true;
}

}  // namespace

Result<std::unique_ptr<DiskCache>> DiskCache::Open(const std::string& dir, uint64_t max_bytes) {
  if (max_bytes == 0) return Status::InvalidArgument("--cache-bytes must be > 0");
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
    return Status::InvalidArgument("--cache-dir " + dir + ": " + std::strerror(errno));
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    return Status::InvalidArgument("--cache-dir " + dir + ": not a folder");
  if (::access(dir.c_str(), W_OK) != 0)
    return Status::InvalidArgument("--cache-dir " + dir + ": not writable: " + std::strerror(errno));
  auto cache = std::unique_ptr<DiskCache>(new DiskCache(dir, max_bytes));
  cache->Load();
  return cache;
}

void DiskCache::Load() {
  struct Found {
    std::string name;
    uint64_t size;
    time_t mtime;
  };
  std::vector<Found> found;
  if (DIR* d = ::opendir(dir_.c_str())) {
    while (const dirent* e = ::readdir(d)) {
      const std::string name = e->d_name;
      if (name == "." || name == "..") continue;
      struct stat st;
      if (::stat(FileOf(name).c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
      if (name.size() != 32 || name.find_first_not_of("0123456789abcdef") != std::string::npos) {
        if (name.rfind(".tmp-", 0) == 0) ::unlink(FileOf(name).c_str());  // a write cut short
        continue;
      }
      found.push_back({name, uint64_t(st.st_size), st.st_mtime});
    }
    ::closedir(d);
  }
  std::sort(found.begin(), found.end(), [](const Found& a, const Found& b) { return a.mtime > b.mtime; });
  MutexLock lock(&mu_);
  for (const Found& f : found) {
    lru_.push_back(f.name);
    entries_[f.name] = {f.size, std::prev(lru_.end())};
    total_ += f.size;
  }
  EvictFor(0);
  if (!found.empty())
    Log("cache %s: %zu entries, %llu bytes (limit %llu)", dir_.c_str(), entries_.size(),
        (unsigned long long)total_, (unsigned long long)max_bytes_);
}

uint64_t DiskCache::bytes() const {
  MutexLock lock(&mu_);
  return total_;
}

void DiskCache::Touch(const std::string& name) {
  auto it = entries_.find(name);
  if (it == entries_.end()) return;
  lru_.splice(lru_.begin(), lru_, it->second.lru);
}

void DiskCache::Forget(const std::string& name) {
  auto it = entries_.find(name);
  if (it == entries_.end()) return;
  total_ -= it->second.size;
  lru_.erase(it->second.lru);
  entries_.erase(it);
}

void DiskCache::EvictFor(uint64_t incoming) {
  while (!lru_.empty() && total_ + incoming > max_bytes_) {
    const std::string victim = lru_.back();
    ::unlink(FileOf(victim).c_str());
    Forget(victim);
  }
}

bool DiskCache::Get(const std::string& key, std::string* out) {
  const std::string name = NameOf(key);
  bool known = false;
  {
    MutexLock lock(&mu_);
    known = entries_.find(name) != entries_.end();
    if (known) Touch(name);
  }
  bool ok = false;
  // Not in this process's index: another process sharing the folder may have written it.
  const int fd = ::open(FileOf(name).c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0 && !known) {
    misses_.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  if (fd >= 0) {
    char magic[8];
    uint64_t key_len = 0, len = 0, hash = 0;
    if (ReadAll(fd, magic, 8) && std::memcmp(magic, kMagic, 8) == 0 &&
        ReadAll(fd, reinterpret_cast<char*>(&key_len), 8) && key_len == key.size()) {
      std::string stored(key_len, '\0');
      if (ReadAll(fd, stored.data(), key_len) && stored == key && ReadAll(fd, reinterpret_cast<char*>(&len), 8) &&
          ReadAll(fd, reinterpret_cast<char*>(&hash), 8) && len < (uint64_t{1} << 32)) {
        out->resize(size_t(len));
        ok = ReadAll(fd, out->data(), size_t(len)) && HashOf(*out) == hash;
      }
    }
    ::close(fd);
  }
  if (!ok) {
    // Torn, flipped or another key's: a miss, and the file goes.
    ::unlink(FileOf(name).c_str());
    MutexLock lock(&mu_);
    Forget(name);
    misses_.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  // Recently used: its modification time orders it at the next start.
  ::utimensat(AT_FDCWD, FileOf(name).c_str(), nullptr, 0);
  if (!known) {
    MutexLock lock(&mu_);
    if (entries_.find(name) == entries_.end()) {
      struct stat st;
      if (::stat(FileOf(name).c_str(), &st) == 0) {
        lru_.push_front(name);
        entries_[name] = {uint64_t(st.st_size), lru_.begin()};
        total_ += uint64_t(st.st_size);
        EvictFor(0);
      }
    }
  }
  hits_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

void DiskCache::WarnOnce(const char* what, int err) {
  MutexLock lock(&mu_);
  if (warned_) return;
  warned_ = true;
  LogWarn("cache %s: %s (%s): reads go on uncached", dir_.c_str(), what, std::strerror(err));
}

bool DiskCache::Adopt(const std::string& tmp, const std::string& name, uint64_t size) {
  MutexLock lock(&mu_);
  if (size > max_bytes_) {
    ::unlink(tmp.c_str());
    return false;
  }
  Forget(name);
  EvictFor(size);
  if (::rename(tmp.c_str(), FileOf(name).c_str()) != 0) {
    ::unlink(tmp.c_str());
    return false;
  }
  lru_.push_front(name);
  entries_[name] = {size, lru_.begin()};
  total_ += size;
  return true;
}

DiskCache::Span::~Span() {
  if (fd >= 0) ::close(fd);
}

std::unique_ptr<DiskCache::Span> DiskCache::OpenSpan(const std::string& key) {
  const std::string name = NameOf(key);
  auto span = std::make_unique<Span>();
  span->fd = ::open(FileOf(name).c_str(), O_RDONLY | O_CLOEXEC);
  if (span->fd < 0) {
    misses_.fetch_add(1, std::memory_order_relaxed);
    return nullptr;
  }
  char magic[8];
  uint64_t key_len = 0, len = 0, hash = 0;
  bool ok = ReadAll(span->fd, magic, 8) && std::memcmp(magic, kMagic, 8) == 0 &&
            ReadAll(span->fd, reinterpret_cast<char*>(&key_len), 8) && key_len == key.size();
  if (ok) {
    std::string stored(key_len, '\0');
    ok = ReadAll(span->fd, stored.data(), key_len) && stored == key &&
         ReadAll(span->fd, reinterpret_cast<char*>(&len), 8) && ReadAll(span->fd, reinterpret_cast<char*>(&hash), 8);
  }
  if (ok) {
    // The whole entry checked once, as it is opened: read in place after this.
    span->offset = 8 + 8 + key.size() + 8 + 8;
    span->size = len;
    Fingerprinter f;
    std::string chunk(1 << 20, '\0');
    for (uint64_t done = 0; ok && done < len;) {
      const size_t n = size_t(std::min<uint64_t>(chunk.size(), len - done));
      ok = ReadAll(span->fd, chunk.data(), n);
      if (ok) f.AddRaw(std::string_view(chunk.data(), n));
      done += n;
    }
    char extra;
    ok = ok && f.FinishRaw(len) == hash && ::read(span->fd, &extra, 1) == 0;
  }
  if (!ok) {
    ::unlink(FileOf(name).c_str());
    MutexLock lock(&mu_);
    Forget(name);
    misses_.fetch_add(1, std::memory_order_relaxed);
    return nullptr;
  }
  {
    MutexLock lock(&mu_);
    if (entries_.find(name) != entries_.end()) {
      Touch(name);
    } else {
      struct stat st;
      if (::fstat(span->fd, &st) == 0) {
        lru_.push_front(name);
        entries_[name] = {uint64_t(st.st_size), lru_.begin()};
        total_ += uint64_t(st.st_size);
      }
    }
  }
  ::utimensat(AT_FDCWD, FileOf(name).c_str(), nullptr, 0);
  hits_.fetch_add(1, std::memory_order_relaxed);
  return span;
}

std::unique_ptr<DiskCache::Writer> DiskCache::Begin(const std::string& key) {
  auto w = std::unique_ptr<Writer>(new Writer());
  w->cache_ = this;
  w->key_ = key;
  w->name_ = NameOf(key);
  w->tmp_ = FileOf(".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(seq_.fetch_add(1)));
  w->fd_ = ::open(w->tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  std::string head(kMagic, 8);
  PutU64(&head, key.size());
  head += key;
  w->length_at_ = head.size();
  PutU64(&head, 0);  // the length and the hash, written at Commit
  PutU64(&head, 0);
  if (w->fd_ < 0 || !WriteAll(w->fd_, head.data(), head.size())) {
    WarnOnce("cannot write an entry", errno);
    w->failed_ = true;
  }
  return w;
}

DiskCache::Writer::~Writer() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(tmp_.c_str());
  }
}

Status DiskCache::Writer::Append(const char* p, size_t n) {
  if (failed_) return Status::OK();  // uncached: the caller goes on
  if (!WriteAll(fd_, p, n)) {
    cache_->WarnOnce("cannot write an entry", errno);
    failed_ = true;
    return Status::OK();
  }
  hash_.AddRaw(std::string_view(p, n));
  written_ += n;
  return Status::OK();
}

Status DiskCache::Writer::Commit() {
  if (failed_ || fd_ < 0) return Status::Unavailable("not cached");
  const uint64_t hash = hash_.FinishRaw(written_);
  bool ok = ::pwrite(fd_, &written_, 8, off_t(length_at_)) == 8 && ::pwrite(fd_, &hash, 8, off_t(length_at_ + 8)) == 8;
  ok = (::close(fd_) == 0) && ok;
  fd_ = -1;
  const uint64_t size = length_at_ + 16 + written_;
  if (!ok || !cache_->Adopt(tmp_, name_, size)) {
    ::unlink(tmp_.c_str());
    return Status::Unavailable("not cached");
  }
  return Status::OK();
}

void DiskCache::Put(const std::string& key, const std::string& bytes) {
  std::string head(kMagic, 8);
  PutU64(&head, key.size());
  head += key;
  PutU64(&head, bytes.size());
  PutU64(&head, HashOf(bytes));
  const uint64_t size = head.size() + bytes.size();
  if (size > max_bytes_) return;
  const std::string name = NameOf(key);
  const std::string tmp = FileOf(".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(seq_.fetch_add(1)));
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  bool ok = fd >= 0 && WriteAll(fd, head.data(), head.size()) && WriteAll(fd, bytes.data(), bytes.size());
  const int err = errno;
  if (fd >= 0) ok = (::close(fd) == 0) && ok;
  MutexLock lock(&mu_);
  if (!ok) {
    ::unlink(tmp.c_str());
    if (!warned_) {
      warned_ = true;
      LogWarn("cache %s: cannot write an entry (%s): reads go on uncached", dir_.c_str(), std::strerror(err));
    }
    return;
  }
  Forget(name);  // replaced, if it was there
  EvictFor(size);
  if (::rename(tmp.c_str(), FileOf(name).c_str()) != 0) {
    ::unlink(tmp.c_str());
    return;
  }
  lru_.push_front(name);
  entries_[name] = {size, lru_.begin()};
  total_ += size;
}

}  // namespace ferry::store
