// WorkerStream: the client's stream from one worker, on the client's io thread.
//
//   connect -> handshake (net/handshake.h) -> OpenStream -> Batch... [EndOfEpoch]
//
// It grants credits (the prefetch window, less what this stream has queued in the
// client), hands every batch to its host, and on a transient failure reconnects with
// the one back-off policy (net/backoff.h). Point to point, a reconnect resumes after
// the last batch received; through a dispatcher, the worker re-sends every split not
// yet acknowledged and the host's ledger drops what was yielded already.
//
// Threading: every method, and every host callback, runs on the io thread.
#ifndef FERRY_CLIENT_WORKER_STREAM_H_
#define FERRY_CLIENT_WORKER_STREAM_H_

#include <utility>  // before Asio: Boost 1.74 uses std::exchange without it in C++20

#include <atomic>
#include <boost/asio.hpp>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ferry/batch.h"
#include "ferry/buffer.h"
#include "ferry/iterator.h"
#include "core/mutex.h"
#include "net/backoff.h"
#include "net/connection.h"
#include "net/handshake.h"
#include "wire/codec.h"

namespace ferry::client {

// What a stream reports to the client that owns it (on the io thread).
class StreamHost {
 public:
  virtual ~StreamHost() = default;
  virtual void OnBatch(size_t stream, Batch batch, std::vector<SkippedSample> skipped) = 0;
  // Point to point: the worker finished sending `epoch`.
  virtual void OnEpochDone(size_t stream, uint64_t epoch) = 0;
  // Point to point: the worker sent its last epoch.
  virtual void OnStreamEnd(size_t stream) = 0;
  // Dispatcher mode: the stream stood down (a newer stream of this consumer took
  // over, or the worker is gone; the dispatcher re-leases its splits).
  virtual void OnRetired(size_t stream) = 0;
  // A worker this stream had streamed from now refuses connections.
  virtual void OnUnreachable(const std::string& address) = 0;
  // A permanent failure: the iterator fails with it.
  virtual void OnFailed(const Status& s) = 0;
  // Batches of this stream waiting in the client (they hold its credits).
  virtual int64_t QueuedFrom(size_t stream) = 0;
};

// Point to point, every worker lists the dataset itself; workers that see different
// files would each serve their own epoch. The first batch of each stream says what
// its worker lists; the first one seen is the reference, and a stream whose worker
// lists otherwise fails the client, naming both (thread-safe).
class ListingCheck {
 public:
  Status Check(const std::string& worker, const wire::BatchListing& l) LOCKS_EXCLUDED(mu_);

 private:
  Mutex mu_;
  std::string first_ GUARDED_BY(mu_);
  wire::BatchListing seen_ GUARDED_BY(mu_);
};

struct StreamConfig {
  wire::OpenStreamMsg open;  // the job (inline or by name), consumer and share; credits are the window
  bool dispatched = false;  // a dispatcher job (the stream opens it by name)
  bool splits = false;      // it carries leased splits (distributed_epoch): no EndOfEpoch frames
  std::string token;
  std::shared_ptr<net::TlsContext> tls;  // a client TLS context, or null
  wire::FrameLimits limits;
  std::shared_ptr<BufferAllocator> buffers;
  net::RetryPolicy retry;
  std::atomic<int64_t>* reconnects = nullptr;  // counts every reconnect
  std::shared_ptr<ListingCheck> listing = std::make_shared<ListingCheck>();
};

class WorkerStream : public std::enable_shared_from_this<WorkerStream> {
 public:
  // `host` and `config` outlive the stream's callbacks (the client drains its io
  // context before it goes).
  WorkerStream(boost::asio::io_context& io, StreamHost* host, const StreamConfig* config, size_t index,
               std::string address);

  void Begin() { Connect(); }
  // The consumer took one of this stream's batches: the worker may send `n` more.
  void Grant(uint32_t n);
  // Stops for good: cancels timers, closes the connection.
  void Shutdown();

  const std::string& address() const { return address_; }
  bool retired() const { return done_; }

 private:
  enum class State { kChallenge, kHelloOk, kStreaming };

  void Connect();
  void Connected(boost::asio::ip::tcp::socket socket);
  void OnFrame(const Status& s, wire::InFrame f);
  void SendOpen();
  void OnStreamFrame(const wire::InFrame& f);
  void Transient(const Status& s);
  void Retire();
  void Permanent(const Status& s);

  boost::asio::io_context& io_;
  StreamHost* const host_;
  const StreamConfig* const config_;
  const size_t index_;
  const std::string address_;
  boost::asio::steady_timer timer_;
  net::Backoff backoff_;
  std::optional<net::ClientHandshake> handshake_;
  std::shared_ptr<net::FrameConnection> conn_;
  std::shared_ptr<boost::asio::ip::tcp::resolver> resolver_;
  std::shared_ptr<boost::asio::ip::tcp::socket> connecting_;
  State state_ = State::kChallenge;
  bool streaming_ = false;
  bool streamed_ = false;  // reached streaming at least once
  bool listing_checked_ = false;  // this connection's worker said what it lists (ListingCheck)
  bool done_ = false;
  uint32_t owed_credits_ = 0;
  uint64_t resume_epoch_ = 0;
  int64_t resume_batches_ = 0;
};

}  // namespace ferry::client

#endif  // FERRY_CLIENT_WORKER_STREAM_H_
