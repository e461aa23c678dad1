#include "worker/stream_outbox.h"

#include "core/histogram.h"
#include "wire/codec.h"

namespace ferry {

void StreamOutbox::AddBatch(wire::OutFrame frame, const BatchProvenance& p, int64_t valid) {
  epoch_batches_ = p.batch_in_epoch + 1;
  epoch_samples_ += valid;
  // Even an empty batch (every file of it bad) goes out: it carries the skips.
  out_.push_back({std::move(frame), true, MonoNs()});
  if (!p.last_in_epoch || splits_) return;
  wire::EndOfEpochMsg e{p.epoch, epoch_batches_, epoch_samples_, int64_t(p.epoch) == last_epoch_};
  AddFrame(wire::EncodeEndOfEpoch(e), false, e.last);
  epoch_batches_ = epoch_samples_ = 0;
}

void StreamOutbox::AddFrame(wire::OutFrame frame, bool needs_credit, bool final_end_of_epoch) {
  if (final_end_of_epoch) final_end_of_epoch_ = true;
  out_.push_back({std::move(frame), needs_credit, needs_credit ? MonoNs() : 0});
}

StreamOutbox::Sendable StreamOutbox::TakeSendable() {
  Sendable s;
  while (!out_.empty() && (!out_.front().needs_credit || credits_ > 0)) {
    if (out_.front().needs_credit) {
      --credits_;
      ++s.batches;
      s.waited_ns.push_back(MonoNs() - out_.front().queued_ns);
    }
    s.bytes += int64_t(out_.front().frame.size());
    s.frames.push_back(std::move(out_.front().frame));
    out_.pop_front();
  }
  return s;
}

std::optional<wire::OutFrame> StreamOutbox::Final(const Status& source_status, bool draining) const {
  if (!source_status.ok()) return wire::EncodeError(source_status);
  if (splits_ && !draining)
    return wire::EncodeError(Status::Cancelled("superseded by a newer stream of the same consumer"));
  if (draining && !final_end_of_epoch_)
    return wire::EncodeError(Status::Unavailable("worker is draining; stream ended early"));
  if (!final_end_of_epoch_) return wire::EncodeEndOfEpoch({last_epoch_ >= 0 ? uint64_t(last_epoch_) : 0, 0, 0, true});
  return std::nullopt;
}

}  // namespace ferry
