#include "dispatch/journal.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <set>
#include <system_error>

#include "core/log.h"
#include "dispatch/journal_codec.h"
#include "dispatch/journal_file.h"

namespace ferry::dispatch {

namespace {

using internal::FileContents;
using internal::FileHeader;
using internal::FileKind;
using internal::kFileHeaderSize;

// A snapshot's lists are cut into records of at most this many entries, so that no
// record nears the largest a reader accepts (journal_file.cc) however large the state.
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

Status WriteAllAt(int fd, const char* bytes, size_t size, uint64_t at) {
  size_t off = 0;
  while (off < size) {
    const ssize_t n = ::pwrite(fd, bytes + off, size - off, off_t(at + off));
    if (n < 0) {
      if (errno == EINTR) continue;
      return Io("journal write");
    }
    off += size_t(n);
  }
  return Status::OK();
}
Status WriteAllAt(int fd, const std::string& bytes, uint64_t at) { return WriteAllAt(fd, bytes.data(), bytes.size(), at); }

std::string GenName(const char* kind, uint64_t g) { return std::string(kind) + "-" + std::to_string(g); }
std::string GenPath(const std::string& dir, const char* kind, uint64_t g) { return dir + "/" + GenName(kind, g); }
constexpr char kReplaced[] = ".replaced";

// A work dir entry of a generation: "journal-G" or "snapshot-G", with `suffix` after
// (".replaced", ".tmp" or nothing). False for anything else.
bool ParseGenName(const std::string& name, const char** kind, uint64_t* g, std::string* suffix) {
  for (const char* k : {"journal-", "snapshot-"}) {
    const size_t n = std::strlen(k);
    if (name.compare(0, n, k) != 0 || name.size() == n || !std::isdigit(uint8_t(name[n]))) continue;
    size_t end = n;
    while (end < name.size() && std::isdigit(uint8_t(name[end]))) ++end;
    *kind = k;
    *g = std::strtoull(name.c_str() + n, nullptr, 10);
    *suffix = name.substr(end);
    return true;
  }
  return false;
}

Status SyncDir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Io("open " + dir);
  const bool ok = ::fsync(fd) == 0;
  Status s = ok ? Status::OK() : Io("fsync " + dir);
  ::close(fd);
  return s;
}

// Writes `bytes` as `path`, whole and durable: a temporary file, fsync, rename. Does
// not sync the directory. On failure nothing is left under either name.
Status WriteFileDurably(const std::string& path, const std::string& bytes, int* keep_open = nullptr) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Io("open " + tmp);
  Status s = WriteAllAt(fd, bytes, 0);
  if (s.ok() && ::fsync(fd) != 0) s = Io("fsync " + tmp);
  if (s.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) s = Io("rename " + tmp);
  if (!s.ok() || keep_open == nullptr) ::close(fd);
  if (!s.ok()) {
    ::unlink(tmp.c_str());
    return s;
  }
  if (keep_open != nullptr) *keep_open = fd;
  return Status::OK();
}

std::string NewStateId() {
  std::random_device rd;
  char buf[17];
  std::snprintf(buf, sizeof buf, "%08x%08x", unsigned(rd()), unsigned(rd()));
  return buf;
}

// Writes snapshot-`next` in `dir` from `snapshot`: records a megabyte at a time (a
// large state's snapshot is never held whole as bytes, nor written with a system call
// per record: a thousand jobs' were ten thousand), then its header with the length,
// then fsync and rename into place. Does not sync the directory. *records: how many
// it holds. On failure nothing is left under either name. Runs on the compaction's
// thread: it touches nothing but its arguments.
Status WriteSnapshot(const std::string& dir, uint64_t next, std::vector<Update> snapshot, uint64_t* records) {
  const std::string snap = GenPath(dir, "snapshot", next), tmp = snap + ".tmp";
  const int sfd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (sfd < 0) return Io("open " + tmp);
  uint64_t at = kFileHeaderSize;
  Status s = WriteAllAt(sfd, FileHeader(0), 0);
  uint64_t written = 0;
  std::string pending;
  auto flush = [&] {
    if (s.ok() && !pending.empty()) s = WriteAllAt(sfd, pending, at);
    at += pending.size();
    pending.clear();
  };
  for (Update& whole : snapshot) {
    for (const Update& u : Chunked(std::move(whole))) {
      if (!s.ok()) break;
      pending += internal::Record(EncodeUpdate(u));
      ++written;
      if (pending.size() >= (size_t(1) << 20)) flush();
    }
  }
  flush();
  *records = written;
  if (s.ok()) s = WriteAllAt(sfd, FileHeader(at), 0);
  if (s.ok() && ::fsync(sfd) != 0) s = Io("fsync " + tmp);
  ::close(sfd);
  if (s.ok() && ::rename(tmp.c_str(), snap.c_str()) != 0) s = Io("rename " + tmp);
  if (!s.ok()) ::unlink(tmp.c_str());
  return s;
}

// The files Open() read, with their paths, in replay order.
struct Source {
  std::string path;
  FileContents contents;
};

}  // namespace

struct Journal::Compaction {
  uint64_t next = 0;                  // the generation it makes
  std::thread thread;                 // writes the snapshot
  std::atomic<bool> written{false};   // set by the thread when done, with:
  Status status;                      //   how writing the snapshot went
  uint64_t records = 0;               //   the records it holds
  int64_t write_ns = 0;               //   how long it took
  std::vector<std::string> since;     // records appended since the snapshot was taken
  int64_t held_ns = 0;                // the caller's time so far
  std::vector<Update> snapshot;       // taken by the caller; written, and freed, by the thread

  // The thread's work (or the caller's, when no thread can be had).
  static void Write(Compaction* c, const std::string& dir) {
    const int64_t t = MonoNs();
    c->status = WriteSnapshot(dir, c->next, std::move(c->snapshot), &c->records);
    c->snapshot = {};
    c->write_ns = MonoNs() - t;
    c->written.store(true, std::memory_order_release);
  }
};

Result<std::unique_ptr<Journal>> Journal::Open(const std::string& dir, std::vector<Update>* replay,
                                               DispatcherState* state) {
  replay->clear();
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    std::filesystem::create_directories(dir, ec);
    if (ec) return Status::Unavailable("cannot create " + dir + ": " + ec.message());
  }
  // 1. What is there. The newest generation with a journal file is current.
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) names.push_back(entry.path().filename().string());
  if (ec) return Status::Unavailable("cannot list " + dir + ": " + ec.message());
  uint64_t gen = 0;
  bool found = false;
  for (const std::string& name : names) {
    const char* kind;
    uint64_t g;
    std::string suffix;
    if (ParseGenName(name, &kind, &g, &suffix) && kind[0] == 'j' && suffix.empty() && (!found || g > gen)) {
      gen = g;
      found = true;
    }
  }
  const auto present = [&](const std::string& name) { return std::find(names.begin(), names.end(), name) != names.end(); };
  const std::string id_path = dir + "/state-id";
  Result<std::string> id_bytes = internal::ReadWhole(id_path);
  if (!id_bytes.ok() && id_bytes.status().code() != StatusCode::kNotFound) return id_bytes.status();
  const bool has_id = id_bytes.ok();

  // 2. Read and check everything, changing nothing.
  std::vector<Source> sources;  // the snapshot (if any), then the journal
  bool journal_remnant = false;
  if (!found && has_id) {
    return Status::DataLoss(id_path + ": offset 0: the work dir has an identity but no journal-N file beside it: "
                            "its journal is missing (deleted or lost), and with it every job's progress; nothing "
                            "was changed");
  }
  if (found) {
    const std::string spath = GenPath(dir, "snapshot", gen);
    Result<std::string> sbytes = internal::ReadWhole(spath);
    if (!sbytes.ok() && (sbytes.status().code() != StatusCode::kNotFound || gen > 0)) {
      // Generation 0 starts from nothing; every later one from its snapshot, which
      // is durable before the journal that names the generation exists.
      if (sbytes.status().code() == StatusCode::kNotFound)
        return Status::DataLoss(spath + ": offset 0: missing beside journal-" + std::to_string(gen) +
                                ": the state before that generation is lost");
      return sbytes.status();
    }
    if (sbytes.ok()) {
      Source snap{spath, {}};
      FERRY_RETURN_IF_ERROR(internal::ParseFile(spath, *sbytes, FileKind::kSnapshot, &snap.contents));
      if (snap.contents.remnant)
        return Status::DataLoss(spath + ": offset " + std::to_string(sbytes->size()) +
                                ": empty or cut short inside its header (a snapshot is renamed into place whole)");
      sources.push_back(std::move(snap));
    }
    const std::string jpath = GenPath(dir, "journal", gen);
    Result<std::string> jbytes = internal::ReadWhole(jpath);
    if (!jbytes.ok()) return jbytes.status();
    Source jour{jpath, {}};
    FERRY_RETURN_IF_ERROR(internal::ParseFile(jpath, *jbytes, FileKind::kJournal, &jour.contents));
    if (jour.contents.remnant) {
      // What a crash while the journal was being created leaves (versions before
      // format 4 wrote a new journal's magic in place): possible only where nothing can
      // have been journaled in it, i.e. in a new work dir (no state-id yet: it is made
      // after the journal) or beside the generation whose compaction made it.
      const bool creating = (gen == 0 && !has_id) || (gen > 0 && present(GenName("journal", gen - 1)));
      if (!creating)
        return Status::DataLoss(jpath + ": offset " + std::to_string(jbytes->size()) +
                                ": the journal is empty or cut short inside its header, yet this work dir has " +
                                (gen > 0 ? "a snapshot" : "an identity") +
                                ": it was truncated, and its records are lost; nothing was changed");
      journal_remnant = true;
    } else {
      sources.push_back(std::move(jour));
    }
  }
  int format = 4;
  for (const Source& src : sources) format = std::min(format, src.contents.format);
  std::string id;
  bool legacy_id = false;
  if (has_id) {
    FERRY_ASSIGN_OR_RETURN(id, internal::ParseStateId(id_path, *id_bytes, &legacy_id));
  } else if (found && format == 4 && (gen > 0 || !sources.empty())) {
    // A format 4 work dir always has one (made right after its first journal).
    return Status::DataLoss(id_path + ": offset 0: missing beside journal-" + std::to_string(gen) +
                            ": the work dir's identity is lost (clients would take a new one for a lost state); "
                            "nothing was changed");
  }
  const bool upgrade = found && format < 4;
  DispatcherState local;
  DispatcherState* into = state != nullptr ? state : upgrade ? &local : nullptr;
  for (const Source& src : sources) {
    for (size_t i = 0; i < src.contents.updates.size(); ++i) {
      if (into != nullptr) {
        Status s = into->Apply(src.contents.updates[i]);
        if (!s.ok())
          return Status::DataLoss(src.path + ": offset " + std::to_string(src.contents.offsets[i]) +
                                  ": a record the state replayed before it refuses: " + s.ToString());
      }
      replay->push_back(src.contents.updates[i]);
    }
  }

  // 3. Everything read and accepted: only now is anything changed.
  auto j = std::unique_ptr<Journal>(new Journal(dir, gen));
  j->format_read_ = found ? format : 4;
  std::set<std::string> keep;  // files this start must not remove
  if (upgrade) {
    int fd = -1;
    Status s = j->WriteGeneration(*into, gen + 1, &fd);
    if (!s.ok()) {
      if (fd >= 0) ::close(fd);
      return Status(s.code(), "upgrading the journal in " + dir + " from format " + std::to_string(format) +
                                  " to format 4: " + s.message() + " (the work dir is as it was)");
    }
    j->Retire(gen);
    keep = {GenName("journal", gen) + kReplaced, GenName("snapshot", gen) + kReplaced};
    j->SwitchTo(gen + 1, fd, kFileHeaderSize, 0);
    Log("the journal in %s was of format %d: upgraded to format 4 (generation %llu); the files it was read from "
        "are kept as *%s until the next start",
        dir.c_str(), format, (unsigned long long)j->generation_, kReplaced);
  } else if (!found || journal_remnant) {
    int fd = -1;
    FERRY_RETURN_IF_ERROR(WriteFileDurably(GenPath(dir, "journal", gen), FileHeader(kFileHeaderSize), &fd));
    j->SwitchTo(gen, fd, kFileHeaderSize, 0);
  } else {
    const Source& jour = sources.back();
    const std::string& jpath = jour.path;
    uint64_t end = jour.contents.size;
    if (jour.contents.torn_at >= 0) {
      end = uint64_t(jour.contents.torn_at);
      Log("%s: dropping a torn last record at offset %llu, past the %llu bytes committed (a crash during its "
          "write)",
          jpath.c_str(), (unsigned long long)end, (unsigned long long)jour.contents.committed);
      if (::truncate(jpath.c_str(), off_t(end)) != 0) return Io("truncate " + jpath);
    }
    j->fd_ = ::open(jpath.c_str(), O_WRONLY | O_CLOEXEC);
    if (j->fd_ < 0) return Io("open " + jpath);
    j->size_ = j->synced_size_ = end;
    j->header_committed_ = jour.contents.committed;
    j->records_ = jour.contents.updates.size();
  }
  // What earlier crashes and compactions left, now that the current generation has
  // been read whole: temporaries, older generations (the generation read is the proof
  // that their successor is good) and a newer snapshot whose journal was never made.
  for (const std::string& name : names) {
    const char* kind;
    uint64_t g;
    std::string suffix;
    const bool tmp = name.size() > 4 && name.compare(name.size() - 4, 4, ".tmp") == 0;
    const bool stale = ParseGenName(name, &kind, &g, &suffix) && g != j->generation_ && !keep.count(name);
    if (tmp || stale) std::filesystem::remove(dir + "/" + name, ec);
  }
  if (!has_id) id = NewStateId();
  // A new work dir's identity (after its journal: a state-id never stands without one),
  // or an older one written again with its checksum.
  if (!has_id || legacy_id) FERRY_RETURN_IF_ERROR(WriteFileDurably(id_path, internal::FormatStateId(id)));
  j->state_id_ = id;
  FERRY_RETURN_IF_ERROR(SyncDir(dir));
  return j;
}

Journal::Journal(std::string dir, uint64_t generation) : dir_(std::move(dir)), generation_(generation) {}

Journal::~Journal() {
  if (compaction_ != nullptr) {
    // Not switched to: its snapshot goes (a start would remove it, having no journal).
    if (compaction_->thread.joinable()) compaction_->thread.join();
    if (compaction_->status.ok()) ::unlink(GenPath(dir_, "snapshot", compaction_->next).c_str());
    compaction_.reset();
  }
  if (fd_ < 0) return;
  (void)Seal();
  ::close(fd_);
}

void Journal::SwitchTo(uint64_t next, int fd, uint64_t size, uint64_t records) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
  generation_ = next;
  records_ = records;
  size_ = synced_size_ = header_committed_ = size;
  ClearQueued();  // in the snapshot or the new journal, both durable
}

Status Journal::Append(const Update& u) {
  if (failed()) return sync_error_;
  const size_t at = unsynced_.size();
  internal::AppendRecord(EncodeUpdate(u), &unsynced_);
  ++records_;
  if (compaction_ != nullptr) compaction_->since.emplace_back(unsynced_, at);  // for the next generation
  if (broken_) return last_error_;  // queued: written by the next Sync() that can
  if (sync_) return Sync();
  // Group commit: the records wait here for Sync(), which writes them in one call
  // (a write each was a sixth of the deciding thread with one job at 10,000 workers:
  // bench/results/run-2026-11-29/journal_batch_ab.txt). A burst larger than this is
  // written as it comes, so that memory stays bounded between commits.
  if (unsynced_.size() - size_t(size_ - synced_size_) >= kWriteAhead) return WriteQueued();
  return Status::OK();
}

Status Journal::WriteQueued() {
  const size_t written = size_t(size_ - synced_size_);  // of unsynced_, in the file already
  if (written == unsynced_.size()) return Status::OK();
  // A failure (a full disk) may leave part of the bytes on disk: Break() cuts the file
  // back to its durable size (shrinking needs no space), so that it ends with whole
  // records; the records wait in memory.
  Status s = WriteAllAt(fd_, unsynced_.data() + written, unsynced_.size() - written, size_);
  if (!s.ok()) return Break(s);
  size_ = synced_size_ + unsynced_.size();
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
  }
  FERRY_RETURN_IF_ERROR(WriteQueued());
  // The header claims what the previous fdatasync made durable, never a length whose
  // bytes this one may still be writing: pages reach the disk in no set order, and a
  // crash mid-sync must not leave a header that promises more than is there.
  const uint64_t committed = synced_size_;
  if (committed != header_committed_) {
    Status s = WriteAllAt(fd_, FileHeader(committed), 0);
    if (!s.ok()) return Break(s);
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
  header_committed_ = committed;
  synced_size_ = size_;
  ClearQueued();
  broken_ = false;
  last_error_ = Status::OK();
  return Status::OK();
}

Status Journal::Seal() {
  if (failed()) return sync_error_;
  if (!unsynced_.empty() || broken_) FERRY_RETURN_IF_ERROR(Sync());
  if (header_committed_ == synced_size_) return Status::OK();
  // Everything up to synced_size_ is durable: the header may now say so.
  return Sync();
}

Status Journal::WriteGeneration(const DispatcherState& state, uint64_t next, int* fd) {
  *fd = -1;
  FERRY_RETURN_IF_ERROR(WriteSnapshot(dir_, next, state.Snapshot(), &snapshot_records_));
  return WriteJournalOf(next, {}, fd);
}

Status Journal::WriteJournalOf(uint64_t next, const std::vector<std::string>& records, int* fd) {
  *fd = -1;
  const std::string snap = GenPath(dir_, "snapshot", next);
  const std::string jnext = GenPath(dir_, "journal", next);
  // The records are durable in it before it has its name: its header commits them all.
  size_t bytes = kFileHeaderSize;
  for (const std::string& r : records) bytes += r.size();
  std::string whole = FileHeader(bytes);
  whole.reserve(bytes);
  for (const std::string& r : records) whole += r;
  if (Status s = WriteFileDurably(jnext, whole, fd); !s.ok()) {
    ::unlink(snap.c_str());
    return s;
  }
  if (Status s = SyncDir(dir_); !s.ok()) {
    // Start-up reads the newest journal: journal-(G+1) must go, or appends to G would
    // be lost behind it. Should it not go, the caller switches to it (its snapshot is
    // complete, and it holds every record appended since).
    if (::unlink(jnext.c_str()) == 0) {
      ::close(*fd);
      *fd = -1;
      ::unlink(snap.c_str());
    }
    return s;
  }
  return Status::OK();
}

void Journal::Retire(uint64_t g) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir_, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.size() > std::strlen(kReplaced) &&
        name.compare(name.size() - std::strlen(kReplaced), std::strlen(kReplaced), kReplaced) == 0)
      std::filesystem::remove(entry.path(), ec);
  }
  for (const char* kind : {"journal", "snapshot"}) {
    const std::string path = GenPath(dir_, kind, g);
    if (::rename(path.c_str(), (path + kReplaced).c_str()) != 0 && errno != ENOENT)
      LogWarn("cannot rename %s to %s%s: %s (the next start removes it)", path.c_str(), path.c_str(), kReplaced,
              std::strerror(errno));
  }
}

void Journal::StartCompaction(const DispatcherState& state) {
  if (compaction_ != nullptr || !healthy()) return;
  const int64_t t0 = MonoNs();
  auto c = std::make_unique<Compaction>();
  c->next = generation_ + 1;
  c->snapshot = state.Snapshot();
  c->held_ns = MonoNs() - t0;
  try {
    c->thread = std::thread([c = c.get(), dir = dir_] {
      pthread_setname_np(pthread_self(), "ferry-snapshot");
      Compaction::Write(c, dir);
    });
  } catch (const std::system_error&) {
    // No thread to be had: written here, as before. (The snapshot stays in *c until
    // a thread has it: a failed start moves nothing out.)
    Compaction::Write(c.get(), dir_);
  }
  compaction_ = std::move(c);
}

Status Journal::FinishCompaction(bool wait) {
  if (compaction_ == nullptr) return Status::OK();
  Compaction& c = *compaction_;
  if (!wait && !c.written.load(std::memory_order_acquire)) return Status::OK();
  if (c.thread.joinable()) {
    c.thread.join();
    snapshot_write_seconds_.ObserveNs(c.write_ns);
  }
  const std::string snap = GenPath(dir_, "snapshot", c.next);
  auto abandon = [&](Status s) {
    if (c.status.ok()) ::unlink(snap.c_str());  // never a journal beside it: a start would remove it
    compaction_.reset();
    return s;
  };
  if (!c.status.ok()) return abandon(c.status);
  if (failed()) return abandon(sync_error_);
  if (broken_) {
    // The records since the last good Sync() are on disk in neither generation yet.
    if (!wait) return Status::OK();
    return abandon(Status::FailedPrecondition("compaction needs a journal that can be written"));
  }
  const int64_t t0 = MonoNs();
  int fd = -1;
  Status s = WriteJournalOf(c.next, c.since, &fd);
  compaction_seconds_.ObserveNs(c.held_ns + (MonoNs() - t0));
  uint64_t bytes = kFileHeaderSize;
  for (const std::string& r : c.since) bytes += r.size();
  const uint64_t next = c.next, records = c.since.size(), snapshot_records = c.records;
  compaction_.reset();
  if (!s.ok()) {
    if (fd < 0) return s;
    // The new generation could not be removed: it is the one a start reads, so
    // appends must go there (its snapshot is complete, its journal holds the rest).
    SwitchTo(next, fd, bytes, records);
    snapshot_records_ = snapshot_records;
    return s;
  }
  // Generation `next` is complete on disk: the old one is kept, renamed, until the
  // next compaction or start.
  const uint64_t old = generation_;
  SwitchTo(next, fd, bytes, records);
  snapshot_records_ = snapshot_records;
  Retire(old);
  return Status::OK();
}

void Journal::TEST_WaitForSnapshot() const {
  while (compaction_ != nullptr && !compaction_->written.load(std::memory_order_acquire))
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

Status Journal::Compact(const DispatcherState& state) {
  if (failed()) return sync_error_;
  if (broken_) return Status::FailedPrecondition("compaction needs a journal that can be written");
  (void)FinishCompaction(/*wait=*/true);  // one under way is finished (or abandoned) first
  StartCompaction(state);
  return FinishCompaction(/*wait=*/true);
}

}  // namespace ferry::dispatch
