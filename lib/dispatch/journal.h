// Journal: the dispatcher's write-ahead log, with snapshots.
//
// Files in the work dir, for generation G:
//   snapshot-G   the updates that rebuild the state as of G's start (may be absent for G=0)
//   journal-G    updates applied since, one record each
// A file starts with "FERRYJ3\n". Record: u32 payload length, u32 CRC-32 of the payload,
// u32 CRC-32 of those 8 bytes, payload (EncodeUpdate: a Cap'n Proto Update,
// schemas/journal.capnp). Older files are read, and compacted into format 3 at once
// (upgrade_due()): format 2 ("FERRYJ2\n", the same records, a job's `epochs` an end
// epoch rather than a count) and format 1 (no magic, no header checksum, hand-kept
// varints).
//
// Append() writes and fdatasync()s a record before returning: the service applies an
// update, appends it, and only then sends the reply that depends on it. Compact()
// writes snapshot-(G+1) from the state, fsyncs it, renames it into place, starts
// journal-(G+1) and deletes generation G. A crash at any point leaves either the old
// or the new generation complete. A torn final record (crash mid-append: a header cut
// short, or a valid header whose payload is cut short at the very end) is dropped on
// open, and so is a tail of zeros; a header that fails its checksum, or a record that
// fails its checksum before the end, is an error (DataLoss, naming the offset), never
// a silent cut. A generation past 0 without its snapshot is DataLoss too. Open
// removes *.tmp files a crash left.
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
  // Opens (creating the dir if needed) and returns the updates to replay, in order.
  static Result<std::unique_ptr<Journal>> Open(const std::string& dir, std::vector<Update>* replay);
  ~Journal();

  // Appends a record; with sync (the default, see set_sync) also fdatasync()s it. On
  // a failure the record is kept in memory (see above) and the error returned; while
  // broken, records are only queued, and the error returned.
  Status Append(const Update& u);
  // Makes every record appended so far durable (group commit: many unsynced
  // Append()s, then one Sync() before the replies that depend on them). When broken,
  // first tries to write again what is queued.
  Status Sync();
  // Starts a new generation from `state` (whose updates must all be appended). On
  // failure the current generation goes on.
  Status Compact(const DispatcherState& state);
  bool healthy() const { return !broken_ && sync_error_.ok(); }
  // Whether an fdatasync() failed (see above): nothing more can be made durable.
  bool failed() const { return !sync_error_.ok(); }
  // For /metrics: bytes of the current generation's file, and fdatasync latency.
  uint64_t size() const { return size_; }
  const Histogram& sync_seconds() const { return sync_seconds_; }

  uint64_t generation() const { return generation_; }
  // Whether what Open() read was of format 1 or 2: the caller compacts at once
  // (Compact() writes format 3), since a file holds records of one format.
  bool upgrade_due() const { return upgrade_due_; }
  uint64_t records_since_snapshot() const { return records_; }
  // Whether Append syncs to disk (default true). Tests and benchmarks may turn it off.
  void set_sync(bool sync) { sync_ = sync; }

 private:
  Journal(std::string dir, uint64_t generation, int fd) : dir_(std::move(dir)), generation_(generation), fd_(fd) {}
  // Marks the journal broken with `s`, and cuts the file back to its durable size.
  Status Break(const Status& s);
  std::string dir_;
  uint64_t generation_;
  int fd_;
  uint64_t records_ = 0;
  bool sync_ = true;
  uint64_t size_ = 0;         // bytes of whole records in the file
  uint64_t synced_size_ = 0;  // of which known durable
  std::vector<std::string> unsynced_;  // records since the last good Sync(), encoded
  bool broken_ = false;
  Status last_error_;
  Status sync_error_;  // the failed fdatasync, final
  bool upgrade_due_ = false;
  Histogram sync_seconds_;
};

}  // namespace ferry::dispatch

#endif  // FERRY_DISPATCH_JOURNAL_H_
