// Ledger: the client's bookkeeping of what arrived, what was yielded, what to drop,
// what to acknowledge, and what deterministic order releases next. This is where
// exactly-once lives on the client's side, so it has no sockets, no threads and no
// clock: the client feeds it arrivals and the dispatcher's status, and asks it what
// Next() may return. Thread-compatible (the client guards it with its mutex).
//
// Glossary (see include/ferry/job.h and lib/dispatch/state.h)
//   arrival     a batch a worker stream delivered, with the stream it came on (its
//               credit goes back to that stream when the batch leaves the queue).
//   yielded     a batch Next() returned. Batches are identified by their provenance
//               (epoch, split, batch_in_split).
//   duplicate   an arrival already yielded: a re-sent split (its first worker died,
//               or a stream reconnected). Dropped, never yielded twice.
//   done split  every batch of it yielded: to be acknowledged to the dispatcher.
//   first_open  the dispatcher's word that every split of earlier epochs is done (by
//               every consumer); state of those epochs is dropped.
//   my splits   the splits the dispatcher has assigned to this consumer in an epoch,
//               in order (deterministic ordering releases them in that order).
//
// Modes
//   point to point   a plain FIFO: batches are yielded in arrival order, nothing is
//                    accounted (each worker stream resumes itself after a reconnect).
//   dispatcher       accounting as above; arrival or deterministic order. In arrival
//                    order a batch of an epoch after first_open waits until the job
//                    closes the epochs before it, so that epochs come one after the
//                    other to a job's consumers too (the first batch of an epoch says
//                    the one before has ended; an arriving worker's lease-ahead into
//                    the next epoch does not jump the queue).
//
// Deterministic order: the next batch is the lowest un-yielded batch of the lowest
// split of mine not done, in the lowest epoch not complete for me. Splits are
// assigned in order within an epoch, so once the dispatcher has listed my splits
// up to some point, none below it can appear later.
//
// Ranks (SetRanked): a rank of a ranked job gets the same number of batches every
// epoch as every other rank, and yields them one epoch at a time: a batch of the next
// epoch waits until this epoch's share is all yielded, so that a pass over an epoch
// is exactly the rank's share, whatever order the workers' batches arrive in. No batch
// is swallowed, not even one whose every file was bad (the rank must still take its
// step). A rank's splits are known from the job's geometry (split s is rank s % W's),
// so deterministic order needs no list from the dispatcher.
#ifndef FERRY_CLIENT_LEDGER_H_
#define FERRY_CLIENT_LEDGER_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "ferry/batch.h"
#include "ferry/client.h"
#include "ferry/job.h"

namespace ferry::client {


// What the dispatcher says of the job, for this consumer and one epoch (the one
// Ledger::StatusEpoch() asked about).
struct JobStatus {
  uint64_t first_open = 0;
  bool finished = false;
  std::vector<int64_t> my_splits;     // this consumer's splits of the epoch, in order
  bool epoch_fully_assigned = false;  // no split of the epoch is without a consumer
};

class Ledger {
 public:
  enum class Mode { kPointToPoint, kArrival, kDeterministic };
  explicit Ledger(Mode mode) : mode_(mode) {}

  // Starts from a saved state (dispatcher modes). REQUIRES: nothing arrived yet.
  void Restore(const IteratorState& st);
  // This consumer is rank `rank` of a ranked job (see above), from epoch
  // `first_epoch`. `job`: the job with its listing (dispatcher mode, after joining); null
  // point to point, where each batch says how many batches its epoch has. Call after
  // Restore() and before any batch arrives.
  void SetRanked(const JobSpec* job, int64_t rank, uint64_t first_epoch = 0);
  bool ranked() const { return rank_ >= 0; }
  // The epoch whose batches are being released (ranked).
  uint64_t epoch_cursor() const { return cursor_; }
  // The state after the last batch yielded (job and consumer left empty).
  IteratorState Save() const;

  // A batch arrived on `stream`. What to do with its stream's credit:
  //   kQueued     it waits in the queue; its credit returns when Take() takes it.
  //   kHeld       it waits for batches before it (another epoch's, or a later one in
  //               deterministic order): its credit returns now. Through a dispatcher a
  //               worker's lease budget bounds what it can send ahead, so returning the
  //               credit costs bounded memory, and it keeps the stream that must
  //               deliver the missing batches from being starved of credits by those
  //               held (a dead worker's splits re-leased to a worker whose window is
  //               full of later batches would otherwise wait forever).
  //   kAccounted  an empty batch (every file bad) in arrival order: counted at once,
  //               nothing queued; its credit returns now.
  enum class Arrival { kQueued, kHeld, kAccounted };
  Arrival Arrive(Batch batch, size_t stream);

  // Whether Take() has something: a batch to yield or a duplicate to drop.
  bool Releasable() const { return Pick().has_value(); }

  struct Taken {
    Batch batch;
    size_t stream = 0;
    bool credit = true;      // return one credit to `stream` now (not if it was held)
    bool duplicate = false;  // drop it: it was yielded before
  };
  // The arrival Take() would take (nullptr: none is releasable), and whether it is a
  // duplicate (yielded before). The pointer is valid until the ledger changes.
  const Batch* Peek(bool* duplicate) const;
  // Takes the releasable arrival. A non-duplicate is now yielded (accounted); a
  // batch with no rows is accounted but not for the trainer. Ranked, the batch that
  // completes the rank's epoch is marked last_in_epoch (and no other). REQUIRES:
  // Releasable().
  Taken Take();

  // Arrivals from `stream` still queued (they hold its credits).
  int64_t QueuedFrom(size_t stream) const;
  size_t queued() const { return ready_.size(); }

  // Splits done and not yet acknowledged, oldest first.
  const std::vector<SplitId>& to_ack() const { return to_ack_; }
  // The first `n` of to_ack() were acknowledged.
  void Acked(size_t n);

  // The epoch whose status to ask the dispatcher about next.
  uint64_t StatusEpoch() const { return std::max(first_open_, order_epoch_); }
  // The dispatcher's answer to a status request for `epoch`.
  void OnStatus(uint64_t epoch, const JobStatus& status);
  // The job's progress alone (the answer to an acknowledgement).
  void OnProgress(uint64_t first_open, bool finished);

  bool finished() const { return finished_; }
  // The job is gone (finished and garbage-collected): nothing more will come.
  void SetFinished() { finished_ = true; }
  uint64_t first_open() const { return first_open_; }
  int64_t duplicates() const { return duplicates_; }

 private:
  struct Queued {
    Batch batch;
    size_t stream;
    bool credited;  // its credit went back when it arrived
  };
  // Whether a batch that is not a duplicate must wait for others before it.
  bool MustWait(const BatchProvenance& p) const;
  bool accounting() const { return mode_ != Mode::kPointToPoint; }
  bool Yielded(const BatchProvenance& p) const;
  // Records a batch as yielded; a split whose every batch is yielded is done.
  void Account(const BatchProvenance& p);
  // Deterministic order: the next (split, batch) to yield, as far as known.
  std::optional<std::pair<SplitId, int64_t>> NextInOrder() const;
  // The first batch of split k this consumer has not yielded.
  int64_t FirstUnyielded(const SplitId& k) const;
  // Ranked: the next (split, batch) of mine in the cursor's epoch, from the geometry.
  std::optional<std::pair<SplitId, int64_t>> NextRankedInOrder() const;
  // Ranked: moves the cursor past epochs whose share is all yielded.
  void AdvanceCursor();
  // The position in ready_ of what Take() would return.
  std::optional<size_t> Pick() const;

  const Mode mode_;
  std::deque<Queued> ready_;
  uint64_t first_open_ = 0;   // epochs before it are complete (the dispatcher says)
  uint64_t order_epoch_ = 0;  // deterministic: epochs before it are complete for me
  std::set<SplitId> done_;    // done splits of open epochs
  std::map<SplitId, std::set<int64_t>> partial_;  // yielded batches of open splits
  std::vector<SplitId> to_ack_;
  // Deterministic: epoch -> (my splits so far, whether the epoch is fully assigned).
  std::map<uint64_t, std::pair<std::vector<int64_t>, bool>> my_splits_;
  bool finished_ = false;
  int64_t duplicates_ = 0;
  // Ranked, see SetRanked().
  int64_t rank_ = -1;
  std::optional<JobSpec> job_;    // dispatcher mode
  int64_t per_epoch_ = 0;         // the rank's batches an epoch; 0 until known
  uint64_t cursor_ = 0;
  std::map<uint64_t, int64_t> yielded_;  // per open epoch, batches yielded
};

}  // namespace ferry::client

#endif  // FERRY_CLIENT_LEDGER_H_
