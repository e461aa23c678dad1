// A worker's cache of fetched object bytes on its local disk (--cache-dir,
// --cache-bytes): epochs after the first read a dataset in object storage from here,
// not from the store. Shared by every job of the process (a key is the object's URL and
// byte range, whichever job asked).
//
// One file per entry, named by a 128-bit hash of its key: a header (magic, the key,
// the length, a hash of the bytes) and the bytes. A file whose header or bytes do not
// check (a torn write, a flipped bit, another key) is a miss and is removed. New files
// are written under a temporary name and renamed. Least recently used entries are
// removed to keep the total within the limit; the index is rebuilt from the folder at
// start (sizes and modification times), so the cache survives restarts. A key missing
// from the index is still looked for in the folder (another process sharing it may have
// written it): workers on one node may share a folder, each keeping the total it
// knows within the limit (give each its share).
//
// Thread safety: every method may be called from any number of threads.
#ifndef FERRY_STORE_DISK_CACHE_H_
#define FERRY_STORE_DISK_CACHE_H_

#include <atomic>
#include <cstdint>
#include <list>
#include <memory>
#include <string>
#include <unordered_map>

#include "core/hash.h"
#include "core/mutex.h"
#include "core/thread_annotations.h"
#include "ferry/status.h"

namespace ferry::store {

class DiskCache {
 public:
  // InvalidArgument if `dir` cannot be made or written, or max_bytes is 0.
  static Result<std::unique_ptr<DiskCache>> Open(const std::string& dir, uint64_t max_bytes);

  // True and *out filled when `key` is cached whole.
  bool Get(const std::string& key, std::string* out);
  // Stores `bytes` under `key` (nothing when larger than the cache); errors are logged
  // once and the cache goes on (a full disk is not a failed read).
  void Put(const std::string& key, const std::string& bytes);

  // A whole object written as it streams (a shard read while it is listed): Append its
  // bytes in order, then Commit; dropped without Commit, nothing is kept.
  class Writer {
   public:
    ~Writer();
    Status Append(const char* p, size_t n);
    Status Commit();

   private:
    friend class DiskCache;
    DiskCache* cache_ = nullptr;
    std::string key_, name_, tmp_;
    int fd_ = -1;
    uint64_t length_at_ = 0;  // where the header's length and hash go
    uint64_t written_ = 0;
    Fingerprinter hash_;
    bool failed_ = false;
  };
  std::unique_ptr<Writer> Begin(const std::string& key);

  // An entry read in place: its file open, and where its bytes start. The entry is
  // checked whole (header and hash) when opened; null on a miss.
  struct Span {
    int fd = -1;
    uint64_t offset = 0, size = 0;
    ~Span();
  };
  std::unique_ptr<Span> OpenSpan(const std::string& key);

  uint64_t bytes() const;
  uint64_t hits() const { return hits_.load(); }
  uint64_t misses() const { return misses_.load(); }
  const std::string& dir() const { return dir_; }

 private:
  DiskCache(std::string dir, uint64_t max_bytes) : dir_(std::move(dir)), max_bytes_(max_bytes) {}
  void Load();
  std::string FileOf(const std::string& name) const { return dir_ + "/" + name; }
  void Touch(const std::string& name) EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EvictFor(uint64_t incoming) EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Forget(const std::string& name) EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Adds a file written under `tmp` as entry `name` of `size` bytes (evicting for it).
  bool Adopt(const std::string& tmp, const std::string& name, uint64_t size);
  void WarnOnce(const char* what, int err);

  const std::string dir_;
  const uint64_t max_bytes_;
  mutable Mutex mu_;
  struct Entry {
    uint64_t size;
    std::list<std::string>::iterator lru;
  };
  std::unordered_map<std::string, Entry> entries_ GUARDED_BY(mu_);  // file name -> entry
  std::list<std::string> lru_ GUARDED_BY(mu_);                       // front: most recent
  uint64_t total_ GUARDED_BY(mu_) = 0;
  bool warned_ GUARDED_BY(mu_) = false;
  std::atomic<uint64_t> hits_{0}, misses_{0}, seq_{0};
};

}  // namespace ferry::store

#endif  // FERRY_STORE_DISK_CACHE_H_
