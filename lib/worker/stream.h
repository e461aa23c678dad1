// WorkerStream: one client's stream on a worker, from its OpenStream to its last
// frame, with no socket. The service's session runs the TLS and token handshake, then
// hands the stream the OpenStream, each Credit, a drain and the connection's end; the
// stream decides what is served (WorkerCore::Admit, stream_setup.h), reserves its
// batch memory, waits for a dispatcher job's facts (a deadline, not a count of polls),
// runs a BatchProducer or a synthetic source, and sends what its StreamOutbox releases
// through its StreamHost.
//
//   Open -> (listing off the io thread | waiting for the job | synthetic)
//        -> streaming: Batch per credit, EndOfEpoch per epoch of an epoch stream
//        -> the last frame (StreamOutbox::Final) and a close after it is written;
//   or an Error frame and a close (Refuse), at any point before the end.
//
// Thread-compatible: the io thread calls every method; the producer's and the
// listing's results come back through WorkerEnv::post.
#ifndef FERRY_WORKER_STREAM_H_
#define FERRY_WORKER_STREAM_H_

#include <cstdint>
#include <memory>
#include <string>

#include "ferry/status.h"
#include "pipeline/producer.h"
#include "wire/frame.h"
#include "wire/codec.h"
#include "worker/stream_outbox.h"
#include "worker/stream_setup.h"
#include "worker/synthetic_source.h"
#include "worker/worker_core.h"

namespace ferry {

class Pipeline;

// The stream's connection and timer (the service's session implements it).
class StreamHost {
 public:
  virtual ~StreamHost() = default;
  virtual void Send(wire::OutFrame f) = 0;
  // Closes the connection once everything sent is written.
  virtual void CloseAfterWrites() = 0;
  // Calls WorkerStream::OnTimer at `at_ns` (MonoNs), replacing an earlier wake.
  virtual void WakeAt(int64_t at_ns) = 0;
  virtual void CancelWake() = 0;
  // The peer, for logs.
  virtual std::string peer() const = 0;
};

class WorkerStream : public std::enable_shared_from_this<WorkerStream> {
 public:
  // `core` and `host` outlive the stream.
  WorkerStream(WorkerCore* core, StreamHost* host) : core_(core), host_(host) {}
  ~WorkerStream();

  // The client's OpenStream (once). `now_ns` starts a named stream's wait for its job.
  void Open(wire::OpenStreamMsg m, int64_t now_ns);
  // A Credit frame: batches the client will take.
  void Credit(uint32_t n);
  // No new batches: deliver what is in flight, then end (Unavailable for a stream cut
  // short, so that its client goes on elsewhere).
  void Drain();
  // The wake asked for with StreamHost::WakeAt.
  void OnTimer(int64_t now_ns);
  // Sends an Error and closes after it is written (no-op once ending).
  void Refuse(const Status& s);
  // The connection is gone: gives back the stream's memory and retires its producer.
  void Closed();

  bool ending() const { return state_ == State::kEnding || state_ == State::kClosed; }
  bool named() const { return named_; }
  // For /metrics: batches queued for credits, and credits unspent.
  size_t queued() const { return outbox_.queued(); }
  int64_t credits() const { return outbox_.credits(); }

 private:
  enum class State { kNew, kOpening, kStreaming, kEnding, kClosed };

  void StartInline(Result<std::shared_ptr<const Dataset>> ds, Result<std::shared_ptr<const Tokenizer>> tokenizer);
  void WaitForJob(int64_t now_ns);
  void StartProducer(StreamSource source);
  void StartSynthetic();
  void SyntheticFill();
  void OnBatch(ProducedBatch&& b);
  void OnProducerDone(const Status& s);
  void Pump();
  Status Reserve(uint64_t bytes);

  WorkerCore* const core_;
  StreamHost* const host_;
  State state_ = State::kNew;
  wire::OpenStreamMsg msg_;
  std::shared_ptr<const PreparedJob> prepared_;  // an inline job's, from Admit
  std::shared_ptr<const Pipeline> pipeline_;
  std::vector<std::string> targets_;  // the job's (JobSpec::targets)
  bool user_code_ = false;            // the job's batches are its Python code's
  int32_t token_length_ = 0, token_pad_ = 0;  // the "tokens" field's row length and padding
  std::unique_ptr<BatchProducer> producer_;
  std::unique_ptr<SyntheticSource> synthetic_;
  std::shared_ptr<SplitFeed> feed_;  // named streams
  bool named_ = false;               // counted in WorkerCounters::named_streams
  uint64_t listing_ = 0;  // point to point: what this worker lists (0: synthetic, or by name)
  int64_t listed_samples_ = 0;
  StreamOutbox outbox_;
  bool producer_done_ = false, draining_ = false;
  Status producer_status_;
  uint64_t reserved_ = 0;       // of the worker's batch memory (WorkerCore::Reserve)
  int64_t job_deadline_ns_ = 0; // a named stream refuses past this without its job
};

}  // namespace ferry

#endif  // FERRY_WORKER_STREAM_H_
