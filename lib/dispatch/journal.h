// Journal: the dispatcher's write-ahead log, with snapshots, and the work dir's identity.
//
// Files in the work dir, for generation G:
//   snapshot-G   the updates that rebuild the state as of G's start (absent for G=0)
//   journal-G    updates applied since, one record each
//   state-id     the work dir's identity (sent to clients: a dispatcher restarted on
//                another work dir has another one)
//   *.replaced   the generation a compaction or an upgrade replaced, kept until the next
//                compaction or successful start
// The bytes of each, and the rules by which they are read, are in journal_file.h
// (format 4: a header with the committed length, then checksummed records). Files of
// formats 1 to 3 (older Ferry versions) are read and upgraded at once.
//
// Opening is two phases. First everything is read and checked, and the updates are
// replayed into the caller's state, changing nothing: a file that is no journal of a
// known format, a record that fails its checksum before the true tail, a file cut
// short before its committed length, a missing snapshot or journal, a state-id that
// fails its checksum, or an update the state refuses is DataLoss naming the file and
// the offset, and the work dir is left exactly as it was. Only then are changes made:
// an upgrade (a new generation written and made durable, then its sources renamed to
// *.replaced), a torn tail cut, what earlier crashes and compactions left removed, a
// state-id drawn for a new work dir.
//
// Append() writes and fdatasync()s a record before returning: the service applies an
// update, appends it, and only then sends the reply that depends on it. With
// set_sync(false) (the dispatcher's group commit) Append() keeps the record in memory,
// and Sync() writes every record kept in one write, then fdatasync()s: a write a
// record was a sixth of the deciding thread with one job (see journal.cc). So a write
// that fails shows at Sync() (or at an Append() past kWriteAhead bytes kept), and the
// replies waiting on that Sync() do not go out.
//
// Compaction runs beside the appends. StartCompaction() takes the state's snapshot (a
// copy: the caller's thread goes on changing the state) and hands it to a thread of the
// journal's own, which writes snapshot-(G+1) whole under a temporary name, makes it
// durable and renames it into place; appends meanwhile go on to journal-G, which stays
// the generation a start reads, and are also kept in memory. FinishCompaction(), once
// the snapshot is written, writes journal-(G+1) whole under a temporary name with
// those records (its header committing all of them), makes it durable, renames it
// into place, syncs the directory, and only then renames generation G's files to
// *.replaced. A crash at any point leaves either the old or the new generation
// complete (a snapshot without its journal is removed at start), and never a file
// that a start could take for a newer empty one. Compact() is both, waiting.
//
// Why a thread: with a thousand jobs a snapshot is 50 ms of encoding and writing, and
// the thread that appends is the dispatcher's deciding thread, which answers nobody
// meanwhile (it was the p99 of every heartbeat at a thousand jobs).
//
// Failures of write() (a full disk) do not lose records: every record since the last
// successful Sync() is kept in memory (written or not), the file is cut back to its
// last durable size, and the journal is broken (healthy() is false) until a Sync()
// writes them all again and syncs.
//
// A failed fdatasync() is different, and final (failed()): the kernel may have dropped
// the pages it could not write and reported that once, so no later sync proves
// anything (PostgreSQL's lesson of 2018). Every later Append() and Sync() returns the
// error; the dispatcher stops, and a restart recovers from what is truly on disk.
#ifndef FERRY_DISPATCH_JOURNAL_H_
#define FERRY_DISPATCH_JOURNAL_H_

#include <unistd.h>

#include <cstdint>
#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/histogram.h"
#include "dispatch/journal_codec.h"
#include "dispatch/state.h"
#include "ferry/status.h"

namespace ferry::dispatch {


class Journal {
 public:
  // Opens the work dir `dir` (creating it if needed; see "opening" above): the updates
  // replayed, in order, go to *replay and, when `state` is given (a fresh one), are
  // applied to it. On an error nothing in the work dir has changed.
  static Result<std::unique_ptr<Journal>> Open(const std::string& dir, std::vector<Update>* replay,
                                               DispatcherState* state = nullptr);
  ~Journal();  // seals (see Seal())

  // Appends a record; with sync (the default, see set_sync) also writes and
  // fdatasync()s it, else keeps it for the next Sync() (written before then only past
  // kWriteAhead bytes kept). On a failure the record is kept in memory (see above) and
  // the error returned; while broken, records are only queued, and the error returned.
  Status Append(const Update& u);
  // Makes every record appended so far durable (group commit: many unsynced
  // Append()s, then one Sync() before the replies that depend on them): writes those
  // not yet written, in one call, then fdatasync()s. When broken, first writes again
  // every record since the last good Sync(). The file's header is rewritten first
  // with the length the previous Sync() made durable.
  Status Sync();
  // Writes the records not yet written, without fdatasync (a dispatcher with
  // DispatcherConfig::sync off: a killed process loses nothing the page cache holds).
  Status Write() { return failed() ? sync_error_ : broken_ ? last_error_ : WriteQueued(); }
  // Bytes of records an Append() without sync keeps before writing them.
  static constexpr size_t kWriteAhead = size_t(256) << 10;
  // Makes the header's committed length the whole file (syncing first what is not):
  // from then on a truncation anywhere is DataLoss at start. Costs one fdatasync when
  // the header is behind, none otherwise. The dispatcher seals when idle, and closing
  // does.
  Status Seal();
  // Starts a new generation from `state` (whose updates must all be appended), and
  // waits for it. On failure the current generation goes on.
  Status Compact(const DispatcherState& state);
  // Starts a compaction from `state` (see above) and returns once its snapshot is
  // taken; nothing when one is under way, or the journal is broken or failed.
  void StartCompaction(const DispatcherState& state);
  // Whether a compaction is under way (started and not finished or abandoned).
  bool compacting() const { return compaction_ != nullptr; }
  // When the snapshot of the compaction under way is written (or `wait`, once it
  // is), switches to the new generation (see above) and returns how that went; OK at
  // once when no compaction is under way or its snapshot is still being written.
  // While the journal is broken the switch waits (the records since the last good
  // Sync() are not yet on disk in either generation). A failure abandons the
  // compaction: the current generation goes on, and a later one may start.
  Status FinishCompaction(bool wait = false);
  bool healthy() const { return !broken_ && sync_error_.ok(); }
  // Whether an fdatasync() failed (see above): nothing more can be made durable.
  bool failed() const { return !sync_error_.ok(); }
  // For /metrics: bytes of the current generation's file, and fdatasync latency.
  uint64_t size() const { return size_; }
  const Histogram& sync_seconds() const { return sync_seconds_; }
  // The time each compaction held the caller's thread (taking the snapshot, and
  // switching to the new generation: the deciding thread answers nobody meanwhile),
  // and how long its snapshot took to write beside.
  const Histogram& compaction_seconds() const { return compaction_seconds_; }
  const Histogram& snapshot_write_seconds() const { return snapshot_write_seconds_; }

  uint64_t generation() const { return generation_; }
  // The work dir's identity: drawn when the work dir was first used, kept in state-id.
  const std::string& state_id() const { return state_id_; }
  // The format Open() read (1 to 4; 4 for a new work dir). Below 4, Open() upgraded it.
  int format_read() const { return format_read_; }
  uint64_t records_since_snapshot() const { return records_; }
  // Records the last snapshot this process wrote holds (0 before its first).
  uint64_t snapshot_records() const { return snapshot_records_; }
  // Whether Append syncs to disk (default true). Tests and benchmarks may turn it off.
  void set_sync(bool sync) { sync_ = sync; }
  // Whether the header's committed length is the whole file (see Seal()).
  bool sealed() const { return header_committed_ == size_; }
  // For tests: waits until the snapshot of the compaction under way is on disk (not
  // switched to: that is FinishCompaction()'s).
  void TEST_WaitForSnapshot() const;
  // For tests: closes the file as a crash would, without sealing it (the records
  // synced since the header was last written stay past its committed length).
  void TEST_CrashClose() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  Journal(std::string dir, uint64_t generation);
  // Marks the journal broken with `s`, and cuts the file back to its durable size.
  Status Break(const Status& s);
  // Writes the records of unsynced_ not yet in the file, in one call (Break()s on a
  // failure).
  Status WriteQueued();
  // Forgets unsynced_ (all durable now), and its memory after a large burst.
  void ClearQueued() {
    if (unsynced_.capacity() > 4 * kWriteAhead) unsynced_ = std::string();
    else unsynced_.clear();
  }
  // Writes generation `next` from `state` (a snapshot and an empty journal, each made
  // whole and durable under a temporary name, renamed into place, the directory
  // synced). On success *fd is the new journal's, open for writing. On failure the new
  // generation's files are gone, except when the directory could not be synced and the
  // new journal could not be removed either: then *fd is set too (see Compact()).
  // Used by upgrades at Open(); compactions write the snapshot beside.
  Status WriteGeneration(const DispatcherState& state, uint64_t next, int* fd);
  // Writes journal-`next` holding `records`, then syncs the directory: the second half
  // of WriteGeneration(), with the same outcomes.
  Status WriteJournalOf(uint64_t next, const std::vector<std::string>& records, int* fd);
  // Generation `g`'s files become *.replaced; any older *.replaced go.
  void Retire(uint64_t g);
  // Switches appends to the new generation's journal `fd`, of `size` bytes holding
  // `records` records, all durable and committed by its header.
  void SwitchTo(uint64_t next, int fd, uint64_t size, uint64_t records);

  std::string dir_;
  uint64_t generation_;
  int fd_ = -1;
  std::string state_id_;
  int format_read_ = 4;
  uint64_t records_ = 0;
  uint64_t snapshot_records_ = 0;
  bool sync_ = true;
  uint64_t size_ = 0;              // bytes of whole records in the file
  uint64_t synced_size_ = 0;       // of which known durable
  uint64_t header_committed_ = 0;  // what the file's header says (durable)
  // The records since the last good Sync(), encoded, one after another: the first
  // size_ - synced_size_ bytes are in the file, the rest not yet written.
  std::string unsynced_;
  bool broken_ = false;
  Status last_error_;
  Status sync_error_;  // the failed fdatasync, final
  Histogram sync_seconds_;
  Histogram compaction_seconds_;
  Histogram snapshot_write_seconds_;
  // The compaction under way: written by its thread until `written` is set, read by
  // the journal's owner only after.
  struct Compaction;
  std::unique_ptr<Compaction> compaction_;
};

}  // namespace ferry::dispatch

#endif  // FERRY_DISPATCH_JOURNAL_H_
