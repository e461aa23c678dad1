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
// update, appends it, and only then sends the reply that depends on it. Compact()
// writes snapshot-(G+1) and journal-(G+1) whole under temporary names, makes them
// durable, renames them into place, syncs the directory, and only then renames
// generation G's files to *.replaced. A crash at any point leaves either the old or
// the new generation complete, and never a file that a start could take for a newer
// empty one.
//
// Failures of write() (a full disk) do not lose records: a record that cannot be
// written, and every record since the last successful Sync(), is kept in memory, the
// file is cut back to its last durable size, and the journal is broken (healthy() is
// false) until a Sync() writes them all again and syncs.
//
// A failed fdatasync() is different, and final (failed()): the kernel may have dropped
// the pages it could not write and reported that once, so no later sync proves
// anything (PostgreSQL's lesson of 2018). Every later Append() and Sync() returns the
// error; the dispatcher stops, and a restart recovers from what is truly on disk.
#ifndef FERRY_DISPATCH_JOURNAL_H_
#define FERRY_DISPATCH_JOURNAL_H_

#include <unistd.h>

#include <cstdint>
#include <memory>
#include <string>
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

  // Appends a record; with sync (the default, see set_sync) also fdatasync()s it. On
  // a failure the record is kept in memory (see above) and the error returned; while
  // broken, records are only queued, and the error returned.
  Status Append(const Update& u);
  // Makes every record appended so far durable (group commit: many unsynced
  // Append()s, then one Sync() before the replies that depend on them). When broken,
  // first tries to write again what is queued. The file's header is rewritten first
  // with the length the previous Sync() made durable.
  Status Sync();
  // Makes the header's committed length the whole file (syncing first what is not):
  // from then on a truncation anywhere is DataLoss at start. Costs one fdatasync when
  // the header is behind, none otherwise. The dispatcher seals when idle, and closing
  // does.
  Status Seal();
  // Starts a new generation from `state` (whose updates must all be appended). On
  // failure the current generation goes on.
  Status Compact(const DispatcherState& state);
  bool healthy() const { return !broken_ && sync_error_.ok(); }
  // Whether an fdatasync() failed (see above): nothing more can be made durable.
  bool failed() const { return !sync_error_.ok(); }
  // For /metrics: bytes of the current generation's file, and fdatasync latency.
  uint64_t size() const { return size_; }
  const Histogram& sync_seconds() const { return sync_seconds_; }
  // How long each compaction took (the deciding thread answers nobody meanwhile).
  const Histogram& compaction_seconds() const { return compaction_seconds_; }

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
  // For tests: closes the file as a crash would, without sealing it (the records
  // synced since the header was last written stay past its committed length).
  void TEST_CrashClose() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  Journal(std::string dir, uint64_t generation) : dir_(std::move(dir)), generation_(generation) {}
  // Marks the journal broken with `s`, and cuts the file back to its durable size.
  Status Break(const Status& s);
  // Writes generation `next` from `state` (a snapshot and an empty journal, each made
  // whole and durable under a temporary name, renamed into place, the directory
  // synced). On success *fd is the new journal's, open for writing. On failure the new
  // generation's files are gone, except when the directory could not be synced and the
  // new journal could not be removed either: then *fd is set too (see Compact()).
  Status WriteGeneration(const DispatcherState& state, uint64_t next, int* fd);
  // Generation `g`'s files become *.replaced; any older *.replaced go.
  void Retire(uint64_t g);
  // Switches appends to the new generation's journal `fd`.
  void SwitchTo(uint64_t next, int fd);

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
  std::vector<std::string> unsynced_;  // records since the last good Sync(), encoded
  bool broken_ = false;
  Status last_error_;
  Status sync_error_;  // the failed fdatasync, final
  Histogram sync_seconds_;
  Histogram compaction_seconds_;
};

}  // namespace ferry::dispatch

#endif  // FERRY_DISPATCH_JOURNAL_H_
