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

#include "core/log.h"
#include "dispatch/journal_codec.h"

namespace ferry::dispatch {

namespace {

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

// Format 3 files start with this. Format 2 files (the same records) start with
// kMagicV2, and files with neither are of format 1; both are read, then compacted into
// format 3 at once (Journal::upgrade_due()). Format 3 differs from 2 in what a job's
// `epochs` means: a count from its first_epoch, where formats 1 and 2 kept an end
// epoch (CountEpochs converts).
constexpr char kMagic[] = "FERRYJ3\n";
constexpr char kMagicV2[] = "FERRYJ2\n";
constexpr size_t kMagicSize = 8;

// A job of format 1 or 2 ran over [first_epoch, epochs): its count is the difference
// (CheckJob refused first_epoch >= epochs then, so it is > 0 when epochs was).
void CountEpochs(std::vector<Update>* updates, size_t from) {
  for (size_t i = from; i < updates->size(); ++i) {
    if (auto* c = std::get_if<CreateJob>(&(*updates)[i]); c != nullptr && c->spec.epochs > 0) {
      const uint64_t end = uint64_t(c->spec.epochs);
      c->spec.epochs = end > c->spec.first_epoch ? int64_t(end - c->spec.first_epoch) : 1;
    }
  }
}
constexpr size_t kHeaderSize = 12;  // u32 length, u32 CRC of the payload, u32 CRC of those 8 bytes
// No record is larger (a snapshot's lists are cut into records of at most
// kMaxListedPerRecord entries); a length past it is corruption, not a torn write.
constexpr uint32_t kMaxRecordBytes = 1u << 30;
constexpr size_t kMaxListedPerRecord = size_t(1) << 20;

// A snapshot's update, cut into updates of at most kMaxListedPerRecord listed splits
// each (applying the pieces in turn is applying the whole: acks, assignments and
// leases of distinct splits are independent), so that no record nears
// kMaxRecordBytes however large the state. Takes the update's list (a piece copies
// the rest of it, never the whole list: 2^25 splits are 512 MiB).
template <typename T>
void AppendChunks(T&& x, std::vector<Update>* out) {
  const auto all = std::move(x.splits);
  x.splits.clear();
  for (size_t at = 0;; at += kMaxListedPerRecord) {
    T piece = x;
    const size_t end = std::min(all.size(), at + kMaxListedPerRecord);
    piece.splits.assign(all.begin() + ptrdiff_t(at), all.begin() + ptrdiff_t(end));
    out->push_back(std::move(piece));
    if (end == all.size()) break;
  }
}

std::vector<Update> Chunked(Update&& u) {
  std::vector<Update> out;
  if (auto* a = std::get_if<AckSplits>(&u)) AppendChunks(std::move(*a), &out);
  else if (auto* s = std::get_if<AssignSplits>(&u)) AppendChunks(std::move(*s), &out);
  else if (auto* l = std::get_if<LeaseSplits>(&u)) AppendChunks(std::move(*l), &out);
  else out.push_back(std::move(u));
  return out;
}

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

uint32_t Crc32Of(const char* p, size_t n) { return Crc32(std::string(p, n)); }

// A format 2 record: its 12-byte header (the header's own CRC tells a corrupt length
// from a torn write), then the payload.
std::string Record(const std::string& payload) {
  std::string r(kHeaderSize, '\0');
  const uint32_t len = uint32_t(payload.size()), crc = Crc32(payload);
  std::memcpy(r.data(), &len, 4);
  std::memcpy(r.data() + 4, &crc, 4);
  const uint32_t hcrc = Crc32Of(r.data(), 8);
  std::memcpy(r.data() + 8, &hcrc, 4);
  return r + payload;
}

// The records of format 1 (u32 length, u32 CRC of the payload; read only) from `pos`.
// Its header has no checksum of its own: a length running past the end can only be
// taken for a torn write, as format 1 always did.
Status ReadRecordsV1(const std::string& path, const std::string& data, std::vector<Update>* out, off_t* torn_at) {
  size_t pos = 0;
  while (pos < data.size()) {
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
      if (pos + 8 + len == data.size()) {
        *torn_at = off_t(pos);
        return Status::OK();
      }
      return Status::DataLoss(path + ": checksum mismatch at offset " + std::to_string(pos));
    }
    Result<Update> u = DecodeUpdateV1(payload);
    if (!u.ok()) return Status::DataLoss(path + ": bad record at offset " + std::to_string(pos) + ": " + u.status().message());
    out->push_back(std::move(*u));
    pos += 8 + len;
  }
  return Status::OK();
}

// Reads the records of a file into *out. A torn tail, which only a crash during the
// last append can leave, is reported through *torn_at (the offset to cut at): a tail of
// zeros, a header cut short, a valid header whose payload is cut short at the very end
// of the file, or a last record whose payload fails its checksum. Anything else is
// DataLoss naming the offset: a header that fails its own checksum (a flipped bit in a
// length) or a record that fails its checksum before the end, never a silent cut.
// *format is 1, 2 or 3 (0 for an empty file). The jobs of formats 1 and 2 come out
// with format 3's meaning of `epochs`.
Status ReadRecordsAnyFormat(const std::string& path, std::vector<Update>* out, off_t* torn_at, int* format) {
  *torn_at = -1;
  *format = 0;
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
  if (data.empty()) return Status::OK();
  if (data.size() < kMagicSize && data.compare(0, data.size(), kMagic, data.size()) == 0) {
    *torn_at = 0;  // created, and its magic cut short
    return Status::OK();
  }
  if (data.compare(0, kMagicSize, kMagic, kMagicSize) == 0) {
    *format = 3;
  } else if (data.compare(0, kMagicSize, kMagicV2, kMagicSize) == 0) {
    *format = 2;
  } else {
    *format = 1;
    return ReadRecordsV1(path, data, out, torn_at);
  }
  size_t pos = kMagicSize;
  while (pos < data.size()) {
    const size_t left = data.size() - pos;
    if (std::all_of(data.begin() + ptrdiff_t(pos), data.end(), [](char c) { return c == 0; }) ||
        left < kHeaderSize) {
      *torn_at = off_t(pos);
      return Status::OK();
    }
    uint32_t len, crc, hcrc;
    std::memcpy(&len, data.data() + pos, 4);
    std::memcpy(&crc, data.data() + pos + 4, 4);
    std::memcpy(&hcrc, data.data() + pos + 8, 4);
    if (Crc32Of(data.data() + pos, 8) != hcrc || len > kMaxRecordBytes)
      return Status::DataLoss(path + ": corrupt record header at offset " + std::to_string(pos) + " of " +
                              std::to_string(data.size()) + " bytes (the records after it are not replayed)");
    if (left - kHeaderSize < len) {  // a whole header, its payload cut short: the end
      *torn_at = off_t(pos);
      return Status::OK();
    }
    std::string payload = data.substr(pos + kHeaderSize, len);
    if (Crc32(payload) != crc) {
      if (pos + kHeaderSize + len == data.size()) {  // the last write's blocks never reached the disk
        *torn_at = off_t(pos);
        return Status::OK();
      }
      return Status::DataLoss(path + ": checksum mismatch at offset " + std::to_string(pos));
    }
    Result<Update> u = DecodeUpdate(payload);
    if (!u.ok()) return Status::DataLoss(path + ": bad record at offset " + std::to_string(pos) + ": " + u.status().message());
    out->push_back(std::move(*u));
    pos += kHeaderSize + len;
  }
  return Status::OK();
}

Status ReadRecords(const std::string& path, std::vector<Update>* out, off_t* torn_at, int* format) {
  const size_t before = out->size();
  Status s = ReadRecordsAnyFormat(path, out, torn_at, format);
  if (s.ok() && (*format == 1 || *format == 2)) CountEpochs(out, before);
  return s;
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
  bool upgrade = false;
  if (found) {
    off_t torn = -1;
    int format = 0;
    Status s = ReadRecords(GenPath(dir, "snapshot", gen), replay, &torn, &format);
    // Generation 0 starts from nothing; every later one from its snapshot, which
    // Compact() made durable before the journal that names the generation existed.
    if (s.code() == StatusCode::kNotFound && gen > 0)
      return Status::DataLoss("snapshot-" + std::to_string(gen) + " is missing beside journal-" + std::to_string(gen) +
                              ": the state before that generation is lost");
    if (!s.ok() && s.code() != StatusCode::kNotFound) return s;
    if (torn >= 0) return Status::DataLoss("snapshot-" + std::to_string(gen) + " is incomplete");
    upgrade = format == 1 || format == 2;
    const std::string jpath = GenPath(dir, "journal", gen);
    s = ReadRecords(jpath, replay, &torn, &format);
    if (!s.ok() && s.code() != StatusCode::kNotFound) return s;
    upgrade = upgrade || format == 1 || format == 2;
    if (torn >= 0) {
      Log("%s: dropping a torn last record at offset %lld (a crash during its write)", jpath.c_str(),
          (long long)torn);
      if (::truncate(jpath.c_str(), torn) != 0) return Io("truncate " + jpath);
    }
  }
  const std::string jpath = GenPath(dir, "journal", gen);
  const int fd = ::open(jpath.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return Io("open journal in " + dir);
  auto j = std::unique_ptr<Journal>(new Journal(dir, gen, fd));
  const off_t end = ::lseek(fd, 0, SEEK_END);
  if (end < 0) return Io("seek journal in " + dir);
  j->size_ = j->synced_size_ = uint64_t(end);
  j->upgrade_due_ = upgrade;
  if (end == 0) {  // a new file: format 3's magic first, durable before any record
    FERRY_RETURN_IF_ERROR(WriteAll(fd, std::string(kMagic, kMagicSize)));
    if (::fdatasync(fd) != 0) return Io("fdatasync " + jpath);
    j->size_ = j->synced_size_ = kMagicSize;
  }
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
  const int sfd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (sfd < 0) return Io("open " + tmp);
  // Written a record at a time: a large state's snapshot is never held whole as bytes.
  Status s = WriteAll(sfd, std::string(kMagic, kMagicSize));
  for (Update& whole : state.Snapshot()) {
    for (const Update& u : Chunked(std::move(whole))) {
      if (s.ok()) s = WriteAll(sfd, Record(EncodeUpdate(u)));
    }
  }
  if (s.ok() && ::fsync(sfd) != 0) s = Io("fsync " + tmp);
  ::close(sfd);
  if (!s.ok()) {
    ::unlink(tmp.c_str());
    return s;
  }
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
  // Its magic, durable before the directory entry that makes the generation current
  // (a crash before then leaves an empty or short file, which Open() takes as new).
  s = WriteAll(jfd, std::string(kMagic, kMagicSize));
  if (s.ok() && ::fdatasync(jfd) != 0) s = Io("fdatasync " + jnext);
  if (!s.ok()) {
    ::close(jfd);
    ::unlink(jnext.c_str());
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
    size_ = synced_size_ = kMagicSize;
    unsynced_.clear();  // in the snapshot, which is durable
    upgrade_due_ = false;
    return s;
  }
  // Generation `next` is complete on disk: the old one can go.
  ::close(fd_);
  fd_ = jfd;
  ::unlink(GenPath(dir_, "journal", generation_).c_str());
  ::unlink(GenPath(dir_, "snapshot", generation_).c_str());
  generation_ = next;
  records_ = 0;
  size_ = synced_size_ = kMagicSize;
  unsynced_.clear();  // in the snapshot, which is durable
  upgrade_due_ = false;
  return Status::OK();
}

}  // namespace ferry::dispatch
