// StreamOutbox: what a worker's stream sends, and when, with no socket. The session
// (server/worker_service.cc) adds the frames its source produces and sends what the
// outbox releases; the credit rule and the decision of how a stream ends live here.
//
//   credits    a Batch goes out only against a credit the client granted (OpenStream's,
//              then one per Credit frame); frames queue in order behind it. An
//              EndOfEpoch needs none.
//   epochs     a stream of whole epochs (point to point, parallel_epochs) follows the
//              last batch of each epoch with an EndOfEpoch; the last epoch's is marked
//              last. A stream of leased splits sends none: its client counts splits.
//   the end    once the source is done and everything queued went out, Final() says
//              what closes the stream: the source's error; for a split stream that was
//              not drained, Cancelled (a newer stream of its consumer took the feed
//              over); for a drain that cut an epoch short, Unavailable (the client
//              reconnects elsewhere); else the final EndOfEpoch if it is still due.
//
// Thread-compatible (the session's io thread owns it).
#ifndef FERRY_WORKER_STREAM_OUTBOX_H_
#define FERRY_WORKER_STREAM_OUTBOX_H_

#include <algorithm>
#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

#include "ferry/batch.h"
#include "ferry/status.h"
#include "wire/message.h"

namespace ferry {

class StreamOutbox {
 public:
  // Credits may come before the stream knows its source (while it opens).
  // A client's grants add up to at most kMaxCredits: more than any worker buffers
  // (--buffered-batches is at most 64), and no number a peer sends sizes anything here.
  static constexpr int64_t kMaxCredits = 1024;
  void Grant(uint32_t n) { credits_ = std::min<int64_t>(credits_ + int64_t(n), kMaxCredits); }
  // The source is known. `splits`: the stream carries leased splits. `last_epoch`: an
  // epoch stream's last epoch (-1: it runs forever). Before any frame is added.
  void SetSource(bool splits, int64_t last_epoch) {
    splits_ = splits;
    last_epoch_ = last_epoch;
  }
  // A produced batch (encoded) with its provenance and valid rows. Closes its epoch
  // on an epoch stream when it is the epoch's last.
  void AddBatch(wire::OutFrame frame, const BatchProvenance& p, int64_t valid);
  // A ready-made frame (the synthetic source's), which brings its own EndOfEpochs.
  void AddFrame(wire::OutFrame frame, bool needs_credit, bool final_end_of_epoch);

  struct Sendable {
    std::vector<wire::OutFrame> frames;  // in order
    int64_t batches = 0;                 // of them, batches (each spent a credit)
    int64_t bytes = 0;                   // of all the frames
    std::vector<int64_t> waited_ns;      // each batch's time in the outbox (credits, order)
  };
  // Everything that may go now.
  Sendable TakeSendable();
  // The stream's last frame, if any. REQUIRES: the source is done and queued() == 0.
  std::optional<wire::OutFrame> Final(const Status& source_status, bool draining) const;

  size_t queued() const { return out_.size(); }
  int64_t credits() const { return credits_; }

 private:
  struct Outgoing {
    wire::OutFrame frame;
    bool needs_credit;
    int64_t queued_ns = 0;  // MonoNs() when added, for a batch
  };
  bool splits_ = false;
  int64_t last_epoch_ = -1;
  std::deque<Outgoing> out_;
  int64_t credits_ = 0;
  bool final_end_of_epoch_ = false;  // the last epoch's EndOfEpoch is queued or sent
  int64_t epoch_batches_ = 0, epoch_samples_ = 0;
};

}  // namespace ferry

#endif  // FERRY_WORKER_STREAM_OUTBOX_H_
