// Journal: the dispatcher's write-ahead log, with snapshots.
//
// Files in the work dir, for generation G:
//   snapshot-G   the updates that rebuild the state as of G's start (may be absent for G=0)
//   journal-G    updates applied since, one record each
// Record: u32 payload length, u32 CRC-32 of the payload, payload (EncodeUpdate).
//
// Append() writes and fdatasync()s a record before returning: the service applies an
// update, appends it, and only then sends the reply that depends on it. Compact()
// writes snapshot-(G+1) from the state, fsyncs it, renames it into place, starts
// journal-(G+1) and deletes generation G. A crash at any point leaves either the old
// or the new generation complete. A torn final record (crash mid-append) is dropped
// on open; a corrupt record before the end is an error (DataLoss), never skipped.
#ifndef FERRY_DISPATCH_JOURNAL_H_
#define FERRY_DISPATCH_JOURNAL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dispatch/state.h"
#include "ferry/status.h"

namespace ferry::dispatch {

std::string EncodeUpdate(const Update& u);
Result<Update> DecodeUpdate(const std::string& bytes);

class Journal {
 public:
  // Opens (creating the dir if needed) and returns the updates to replay, in order.
  static Result<std::unique_ptr<Journal>> Open(const std::string& dir, std::vector<Update>* replay);
  ~Journal();

  // Appends a record; with sync (the default, see set_sync) also fdatasync()s it.
  Status Append(const Update& u);
  // Makes every record appended so far durable (group commit: many unsynced
  // Append()s, then one Sync() before the replies that depend on them).
  Status Sync();
  // Starts a new generation from `state` (whose updates must all be appended).
  Status Compact(const DispatcherState& state);

  uint64_t generation() const { return generation_; }
  uint64_t records_since_snapshot() const { return records_; }
  // Whether Append syncs to disk (default true). Tests and benchmarks may turn it off.
  void set_sync(bool sync) { sync_ = sync; }

 private:
  Journal(std::string dir, uint64_t generation, int fd) : dir_(std::move(dir)), generation_(generation), fd_(fd) {}
  std::string dir_;
  uint64_t generation_;
  int fd_;
  uint64_t records_ = 0;
  bool sync_ = true;
};

}  // namespace ferry::dispatch

#endif  // FERRY_DISPATCH_JOURNAL_H_
