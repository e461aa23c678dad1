#include "dispatch/journal.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "wire/codec.h"

namespace ferry::dispatch {

namespace {

// --- A small, bounds-checked binary encoding ------------------------------------

class Writer {
 public:
  void U64(uint64_t v) {
    while (v >= 0x80) {
      s_.push_back(char(v | 0x80));
      v >>= 7;
    }
    s_.push_back(char(v));
  }
  void I64(int64_t v) { U64((uint64_t(v) << 1) ^ uint64_t(v >> 63)); }
  void Str(const std::string& v) {
    U64(v.size());
    s_ += v;
  }
  std::string Take() { return std::move(s_); }

 private:
  std::string s_;
};

class Reader {
 public:
  explicit Reader(const std::string& s) : s_(s) {}
  bool U64(uint64_t* v) {
    *v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (pos_ >= s_.size()) return false;
      const uint8_t b = uint8_t(s_[pos_++]);
      *v |= uint64_t(b & 0x7f) << shift;
      if (!(b & 0x80)) return true;
    }
    return false;
  }
  bool I64(int64_t* v) {
    uint64_t u;
    if (!U64(&u)) return false;
    *v = int64_t(u >> 1) ^ -int64_t(u & 1);
    return true;
  }
  bool Str(std::string* v) {
    uint64_t n;
    if (!U64(&n) || n > s_.size() - pos_) return false;
    v->assign(s_, pos_, n);
    pos_ += n;
    return true;
  }
  bool done() const { return pos_ == s_.size(); }

 private:
  const std::string& s_;
  size_t pos_ = 0;
};

uint32_t Crc32(const std::string& data) {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  uint32_t c = 0xFFFFFFFFu;
  for (unsigned char b : data) c = table[(c ^ b) & 0xff] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

// Tag 1 was CreateJob with a job encoding of its own (before one JobSpec travelled
// everywhere): such a journal is refused with a clear error rather than misread.
enum Tag : uint64_t {
  kCreateJobV1 = 1, kAddConsumer, kRegisterWorker, kRemoveWorker, kDrainWorker, kLeaseSplits, kAckSplits, kRemoveJob,
  kJobProgress, kRestoreConsumer, kCreateJob, kRegisterServingWorker, kRemoveConsumer, kAssignSplits, kReturnSplits,
};

constexpr uint64_t kMaxListed = 1 << 24;

Status Io(const std::string& what) { return Status::Unavailable(what + ": " + std::strerror(errno)); }

Status WriteAll(int fd, const std::string& bytes) {
  size_t off = 0;
  while (off < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + off, bytes.size() - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Io("journal write");
    }
    off += size_t(n);
  }
  return Status::OK();
}

std::string Record(const std::string& payload) {
  std::string r(8, '\0');
  const uint32_t len = uint32_t(payload.size()), crc = Crc32(payload);
  std::memcpy(r.data(), &len, 4);
  std::memcpy(r.data() + 4, &crc, 4);
  return r + payload;
}

// Reads the records of a file. A torn tail (short header or payload at the very end)
// is reported through *torn_at; anything else malformed is DataLoss.
Status ReadRecords(const std::string& path, std::vector<Update>* out, off_t* torn_at) {
  *torn_at = -1;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno == ENOENT ? Status::NotFound(path) : Io("open " + path);
  std::string data;
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      ::close(fd);
      return Io("read " + path);
    }
    if (n == 0) break;
    data.append(buf, size_t(n));
  }
  ::close(fd);
  size_t pos = 0;
  while (pos < data.size()) {
    // A tail of zeros: the file grew but its blocks were never written (a crash on a
    // file system that orders metadata before data). Torn, like a short tail.
    if (std::all_of(data.begin() + ptrdiff_t(pos), data.end(), [](char c) { return c == 0; })) {
      *torn_at = off_t(pos);
      return Status::OK();
    }
    if (data.size() - pos < 8) {
      *torn_at = off_t(pos);
      return Status::OK();
    }
    uint32_t len, crc;
    std::memcpy(&len, data.data() + pos, 4);
    std::memcpy(&crc, data.data() + pos + 4, 4);
    if (data.size() - pos - 8 < len) {
      *torn_at = off_t(pos);
      return Status::OK();
    }
    std::string payload = data.substr(pos + 8, len);
    if (Crc32(payload) != crc) {
      if (pos + 8 + len == data.size()) {  // a torn last write can also look like this
        *torn_at = off_t(pos);
        return Status::OK();
      }
      return Status::DataLoss(path + ": checksum mismatch at offset " + std::to_string(pos));
    }
    Result<Update> u = DecodeUpdate(payload);
    if (!u.ok()) return Status::DataLoss(path + ": bad record at offset " + std::to_string(pos) + ": " + u.status().message());
    out->push_back(std::move(*u));
    pos += 8 + len;
  }
  return Status::OK();
}

std::string GenPath(const std::string& dir, const char* kind, uint64_t g) { return dir + "/" + kind + "-" + std::to_string(g); }

Status SyncDir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Io("open " + dir);
  const bool ok = ::fsync(fd) == 0;
  Status s = ok ? Status::OK() : Io("fsync " + dir);
  ::close(fd);
  return s;
}

// Removes what an interrupted Compact() or StateId() left: *.tmp files.
void RemoveStaleTemporaries(const std::string& dir) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.size() > 4 && name.compare(name.size() - 4, 4, ".tmp") == 0) std::filesystem::remove(entry.path(), ec);
  }
}

}  // namespace

std::string EncodeUpdate(const Update& u) {
  Writer w;
  std::visit(
      [&w](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, CreateJob>) {
          w.U64(kCreateJob);
          w.Str(x.name);
          w.Str(wire::EncodeJobBytes(x.spec));  // the wire's Job: one encoding of a job
        } else if constexpr (std::is_same_v<T, AddConsumer>) {
          w.U64(kAddConsumer);
          w.Str(x.job);
          w.Str(x.consumer);
        } else if constexpr (std::is_same_v<T, RegisterWorker>) {
          // A worker for everyone keeps the old record (journals stay readable by
          // either version); a hybrid one has its own.
          w.U64(x.serves_job.empty() ? kRegisterWorker : kRegisterServingWorker);
          w.Str(x.worker);
          w.Str(x.address);
          if (!x.serves_job.empty()) {
            w.Str(x.serves_job);
            w.Str(x.serves_consumer);
          }
        } else if constexpr (std::is_same_v<T, RemoveWorker>) {
          w.U64(kRemoveWorker);
          w.Str(x.worker);
        } else if constexpr (std::is_same_v<T, DrainWorker>) {
          w.U64(kDrainWorker);
          w.Str(x.worker);
        } else if constexpr (std::is_same_v<T, ReturnSplits>) {
          w.U64(kReturnSplits);
          w.Str(x.job);
          w.Str(x.worker);
        } else if constexpr (std::is_same_v<T, LeaseSplits>) {
          w.U64(kLeaseSplits);
          w.Str(x.job);
          w.Str(x.worker);
          w.U64(x.splits.size());
          for (const auto& l : x.splits) {
            w.U64(l.ref.epoch);
            w.I64(l.ref.split);
            w.Str(l.consumer);
          }
        } else if constexpr (std::is_same_v<T, AckSplits>) {
          w.U64(kAckSplits);
          w.Str(x.job);
          w.Str(x.consumer);
          w.U64(x.splits.size());
          for (const auto& r : x.splits) {
            w.U64(r.epoch);
            w.I64(r.split);
          }
        } else if constexpr (std::is_same_v<T, RemoveJob>) {
          w.U64(kRemoveJob);
          w.Str(x.job);
        } else if constexpr (std::is_same_v<T, JobProgress>) {
          w.U64(kJobProgress);
          w.Str(x.job);
          w.U64(x.first_open);
        } else if constexpr (std::is_same_v<T, RemoveConsumer>) {
          w.U64(kRemoveConsumer);
          w.Str(x.job);
          w.Str(x.consumer);
        } else if constexpr (std::is_same_v<T, AssignSplits>) {
          w.U64(kAssignSplits);
          w.Str(x.job);
          w.Str(x.consumer);
          w.U64(x.splits.size());
          for (const auto& r : x.splits) {
            w.U64(r.epoch);
            w.I64(r.split);
          }
        } else if constexpr (std::is_same_v<T, RestoreConsumer>) {
          w.U64(kRestoreConsumer);
          w.Str(x.job);
          w.Str(x.consumer);
          w.U64(x.first_open);
          w.U64(x.done.size());
          for (const auto& r : x.done) {
            w.U64(r.epoch);
            w.I64(r.split);
          }
        }
      },
      u);
  return w.Take();
}

Result<Update> DecodeUpdate(const std::string& bytes) {
  Reader r(bytes);
  uint64_t tag;
  if (!r.U64(&tag)) return Status::DataLoss("empty update");
  auto bad = [] { return Status::DataLoss("malformed update"); };
  Update u;
  switch (tag) {
    case kCreateJob: {
      CreateJob x;
      std::string job;
      if (!r.Str(&x.name) || !r.Str(&job)) return bad();
      auto spec = wire::DecodeJobBytes(job);
      if (!spec.ok()) return Status::DataLoss("malformed job in the journal: " + spec.status().message());
      x.spec = std::move(*spec);
      u = std::move(x);
      break;
    }
    case kCreateJobV1:
      return Status::DataLoss(
          "the journal was written by an older Ferry (job format 1); start the dispatcher with an empty --work-dir");
    case kAddConsumer: {
      AddConsumer x;
      if (!r.Str(&x.job) || !r.Str(&x.consumer)) return bad();
      u = std::move(x);
      break;
    }
    case kRegisterWorker: {
      RegisterWorker x;
      if (!r.Str(&x.worker) || !r.Str(&x.address)) return bad();
      u = std::move(x);
      break;
    }
    case kRegisterServingWorker: {
      RegisterWorker x;
      if (!r.Str(&x.worker) || !r.Str(&x.address) || !r.Str(&x.serves_job) || !r.Str(&x.serves_consumer)) return bad();
      u = std::move(x);
      break;
    }
    case kRemoveWorker: {
      RemoveWorker x;
      if (!r.Str(&x.worker)) return bad();
      u = std::move(x);
      break;
    }
    case kDrainWorker: {
      DrainWorker x;
      if (!r.Str(&x.worker)) return bad();
      u = std::move(x);
      break;
    }
    case kReturnSplits: {
      ReturnSplits x;
      if (!r.Str(&x.job) || !r.Str(&x.worker)) return bad();
      u = std::move(x);
      break;
    }
    case kLeaseSplits: {
      LeaseSplits x;
      uint64_t n;
      if (!r.Str(&x.job) || !r.Str(&x.worker) || !r.U64(&n) || n > kMaxListed) return bad();
      x.splits.resize(size_t(n));
      for (auto& l : x.splits) {
        if (!r.U64(&l.ref.epoch) || !r.I64(&l.ref.split) || !r.Str(&l.consumer)) return bad();
      }
      u = std::move(x);
      break;
    }
    case kAckSplits: {
      AckSplits x;
      uint64_t n;
      if (!r.Str(&x.job) || !r.Str(&x.consumer) || !r.U64(&n) || n > kMaxListed) return bad();
      x.splits.resize(size_t(n));
      for (auto& s : x.splits) {
        if (!r.U64(&s.epoch) || !r.I64(&s.split)) return bad();
      }
      u = std::move(x);
      break;
    }
    case kRemoveJob: {
      RemoveJob x;
      if (!r.Str(&x.job)) return bad();
      u = std::move(x);
      break;
    }
    case kJobProgress: {
      JobProgress x;
      if (!r.Str(&x.job) || !r.U64(&x.first_open)) return bad();
      u = std::move(x);
      break;
    }
    case kRestoreConsumer: {
      RestoreConsumer x;
      uint64_t n;
      if (!r.Str(&x.job) || !r.Str(&x.consumer) || !r.U64(&x.first_open) || !r.U64(&n) || n > kMaxListed)
        return bad();
      x.done.resize(size_t(n));
      for (auto& s : x.done) {
        if (!r.U64(&s.epoch) || !r.I64(&s.split)) return bad();
      }
      u = std::move(x);
      break;
    }
    case kRemoveConsumer: {
      RemoveConsumer x;
      if (!r.Str(&x.job) || !r.Str(&x.consumer)) return bad();
      u = std::move(x);
      break;
    }
    case kAssignSplits: {
      AssignSplits x;
      uint64_t n;
      if (!r.Str(&x.job) || !r.Str(&x.consumer) || !r.U64(&n) || n > kMaxListed) return bad();
      x.splits.resize(size_t(n));
      for (auto& s : x.splits) {
        if (!r.U64(&s.epoch) || !r.I64(&s.split)) return bad();
      }
      u = std::move(x);
      break;
    }
    default:
      return Status::DataLoss("unknown update tag " + std::to_string(tag));
  }
  if (!r.done()) return bad();
  return u;
}

Result<std::unique_ptr<Journal>> Journal::Open(const std::string& dir, std::vector<Update>* replay) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Status::Unavailable("cannot create " + dir + ": " + ec.message());
  // The newest generation with a journal file wins.
  uint64_t gen = 0;
  bool found = false;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("journal-", 0) == 0) {
      char* end = nullptr;
      const uint64_t g = std::strtoull(name.c_str() + 8, &end, 10);
      if (*end == '\0' && (!found || g > gen)) {
        gen = g;
        found = true;
      }
    }
  }
  RemoveStaleTemporaries(dir);
  replay->clear();
  if (found) {
    off_t torn = -1;
    Status s = ReadRecords(GenPath(dir, "snapshot", gen), replay, &torn);
    if (!s.ok() && s.code() != StatusCode::kNotFound) return s;
    if (torn >= 0) return Status::DataLoss("snapshot-" + std::to_string(gen) + " is incomplete");
    const std::string jpath = GenPath(dir, "journal", gen);
    s = ReadRecords(jpath, replay, &torn);
    if (!s.ok() && s.code() != StatusCode::kNotFound) return s;
    if (torn >= 0 && ::truncate(jpath.c_str(), torn) != 0) return Io("truncate " + jpath);
  }
  const int fd = ::open(GenPath(dir, "journal", gen).c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return Io("open journal in " + dir);
  auto j = std::unique_ptr<Journal>(new Journal(dir, gen, fd));
  const off_t end = ::lseek(fd, 0, SEEK_END);
  if (end < 0) return Io("seek journal in " + dir);
  j->size_ = j->synced_size_ = uint64_t(end);
  FERRY_RETURN_IF_ERROR(SyncDir(dir));
  return j;
}

Journal::~Journal() {
  if (fd_ >= 0) ::close(fd_);
}

Status Journal::Append(const Update& u) {
  if (failed()) return sync_error_;
  std::string record = Record(EncodeUpdate(u));
  ++records_;
  if (broken_) {
    unsynced_.push_back(std::move(record));  // written by the next Sync() that can
    return last_error_;
  }
  Status s = WriteAll(fd_, record);
  if (!s.ok()) {
    // A full disk, say: part of the record may be on disk. Cut it off (shrinking needs
    // no space), so that the file ends with whole records; the record waits in memory.
    unsynced_.push_back(std::move(record));
    return Break(s);
  }
  size_ += record.size();
  unsynced_.push_back(std::move(record));
  if (sync_) return Sync();
  return Status::OK();
}

Status Journal::Break(const Status& s) {
  broken_ = true;
  last_error_ = s;
  if (::ftruncate(fd_, off_t(synced_size_)) == 0) size_ = synced_size_;
  return s;
}

Status Journal::Sync() {
  if (failed()) return sync_error_;
  if (broken_) {
    // Repair: back to the last size known durable, then every record since, whole,
    // then fdatasync. A failed fdatasync may have dropped pages it could not write
    // (Linux marks them clean), so nothing written since the last good one is trusted.
    if (::ftruncate(fd_, off_t(synced_size_)) != 0) return last_error_ = Io("journal truncate");
    size_ = synced_size_;
    for (const std::string& r : unsynced_) {
      Status s = WriteAll(fd_, r);
      if (!s.ok()) return Break(s);
      size_ += r.size();
    }
  }
  const int64_t t0 = MonoNs();
  if (::fdatasync(fd_) != 0) {
    const int err = errno;
    sync_error_ = Status::DataLoss("fdatasync of " + GenPath(dir_, "journal", generation_) + " failed (" +
                                   std::strerror(err) +
                                   "): what it held may not be on disk, and no later sync can prove it is");
    broken_ = true;
    last_error_ = sync_error_;
    return sync_error_;
  }
  sync_seconds_.ObserveNs(MonoNs() - t0);
  synced_size_ = size_;
  unsynced_.clear();
  broken_ = false;
  last_error_ = Status::OK();
  return Status::OK();
}

Status Journal::Compact(const DispatcherState& state) {
  if (failed()) return sync_error_;
  if (broken_) return Status::FailedPrecondition("compaction needs a journal that can be written");
  const uint64_t next = generation_ + 1;
  const std::string tmp = GenPath(dir_, "snapshot", next) + ".tmp";
  std::string bytes;
  for (const Update& u : state.Snapshot()) bytes += Record(EncodeUpdate(u));
  const int sfd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (sfd < 0) return Io("open " + tmp);
  Status s = WriteAll(sfd, bytes);
  if (s.ok() && ::fsync(sfd) != 0) s = Io("fsync " + tmp);
  ::close(sfd);
  FERRY_RETURN_IF_ERROR(s);
  if (::rename(tmp.c_str(), GenPath(dir_, "snapshot", next).c_str()) != 0) {
    s = Io("rename " + tmp);
    ::unlink(tmp.c_str());
    return s;
  }
  const std::string jnext = GenPath(dir_, "journal", next);
  const int jfd = ::open(jnext.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
  if (jfd < 0) {
    s = Io("open " + jnext);
    ::unlink(GenPath(dir_, "snapshot", next).c_str());
    return s;
  }
  if (s = SyncDir(dir_); !s.ok()) {
    // Start-up reads the newest journal: journal-(G+1) must go, or appends to G would
    // be lost behind it. Should it not go, switch to it (its snapshot is complete).
    ::close(jfd);
    if (::unlink(jnext.c_str()) == 0) {
      ::unlink(GenPath(dir_, "snapshot", next).c_str());
      return s;
    }
    const int again = ::open(jnext.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
    if (again < 0) return Break(Io("reopen " + jnext));  // nothing is safe to append to
    ::close(fd_);
    fd_ = again;
    generation_ = next;
    records_ = 0;
    size_ = synced_size_ = 0;
    unsynced_.clear();  // in the snapshot, which is durable
    return s;
  }
  // Generation `next` is complete on disk: the old one can go.
  ::close(fd_);
  fd_ = jfd;
  ::unlink(GenPath(dir_, "journal", generation_).c_str());
  ::unlink(GenPath(dir_, "snapshot", generation_).c_str());
  generation_ = next;
  records_ = 0;
  size_ = synced_size_ = 0;
  unsynced_.clear();  // in the snapshot, which is durable
  return Status::OK();
}

}  // namespace ferry::dispatch
