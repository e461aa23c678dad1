// ferry::Client: the remote iterator a trainer links. Header-only; it links the wire
// codec (ferry::wire) through the CMake INTERFACE target ferry::client.
//
// It connects to each worker named in ClientOptions, authenticates (HMAC challenge,
// when a token is set), opens one stream per worker with the job inline, and grants
// `credits` batches of prefetch per worker. Each batch frame is read into one
// 64-byte-aligned buffer (from a pool, or from a user allocator, e.g. pinned
// memory) and yielded as views into that buffer: no copy. Next() returns whichever
// batch arrived first across workers.
//
//   ferry::ClientOptions o;
//   o.workers = {"10.0.0.5:7000", "10.0.0.6:7000"};
//   o.data = "/datasets/imagenet/train";     // as the workers see it
//   o.pipeline = ferry::PipelineSpec::ImagenetTrain();
//   auto client = ferry::Client::Connect(o);  // same BatchIterator API as Loader
//
// Sharding: with N workers, worker i serves every N-th sample of each epoch's
// permutation (static sharding), so together they cover each epoch exactly once.
// Failures: a transient failure (connection lost, worker draining) reconnects with
// exponential back-off and resumes the stream after the last batch received; the
// content is deterministic, so nothing is lost or repeated. Permanent failures
// (refused token, bad job) surface from Next() as a Status.
#ifndef FERRY_CLIENT_H_
#define FERRY_CLIENT_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "ferry/internal/connection.h"
#include "ferry/internal/wire.h"
#include "ferry/iterator.h"
#include "ferry/pipeline_spec.h"

namespace ferry {

struct ClientOptions {
  std::vector<std::string> workers;  // HOST:PORT of each worker
  // The job, run by the workers.
  std::string data;                  // dataset path on the workers' filesystem
  PipelineSpec pipeline = PipelineSpec::ImagenetTrain();
  int batch_size = 256;
  uint64_t seed = 0;
  bool shuffle = true;
  LastBatch last_batch = LastBatch::kKeep;
  int64_t epochs = 1;                // <= 0: forever
  uint64_t first_epoch = 0;
  uint64_t fingerprint = 0;          // expected (listing, pipeline) fingerprint; 0 = unchecked

  int credits = 4;                   // prefetch depth per worker, in batches
  std::string token;                 // shared token; empty = $FERRY_TOKEN, or none
  std::string token_file;            // read the token from here instead
  // Receive buffers; null = 64-byte-aligned heap buffers recycled by the client. Use
  // internal::FunctionBufferAllocator for pinned memory.
  std::shared_ptr<internal::BufferAllocator> buffers;
  internal::FrameLimits limits;
  int max_retries = 6;               // consecutive failed (re)connects per worker
  double backoff_initial_s = 0.1;
  double backoff_max_s = 2.0;
  std::string consumer_id = "ferry-client";
};

class Client : public BatchIterator {
 public:
  static Result<std::unique_ptr<Client>> Connect(const ClientOptions& options) {
    if (options.workers.empty()) return Status::InvalidArgument("no workers given");
    if (options.batch_size <= 0) return Status::InvalidArgument("batch_size must be > 0");
    if (options.credits <= 0) return Status::InvalidArgument("credits must be > 0");
    FERRY_RETURN_IF_ERROR(options.pipeline.Validate());
    ClientOptions o = options;
    if (o.token.empty()) {
      FERRY_ASSIGN_OR_RETURN(o.token, internal::LoadToken(o.token_file));
    }
    if (!o.buffers) o.buffers = internal::DefaultBufferAllocator();
    for (const std::string& w : o.workers) FERRY_RETURN_IF_ERROR(internal::SplitHostPort(w).status());
    std::unique_ptr<Client> c(new Client(std::move(o)));
    c->Start();
    return c;
  }

  ~Client() override {
    // Close every socket and timer, then let the io thread run out of work: all
    // handlers complete (aborted) before anything they reference is destroyed.
    internal::asio::post(io_, [this] {
      for (auto& s : streams_) s->Shutdown();
    });
    work_.reset();
    if (io_thread_.joinable()) io_thread_.join();
  }

  Result<Batch> Next() override {
    const auto t0 = std::chrono::steady_clock::now();
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return !ready_.empty() || !error_.ok() || finished_streams_ == int(opts_.workers.size()); });
    stats_.wait_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (ready_.empty()) {
      if (!error_.ok()) return error_;
      return Status::OutOfRange("end of data");
    }
    Item item = std::move(ready_.front());
    ready_.pop_front();
    ++stats_.batches;
    stats_.samples += item.batch.valid;
    lock.unlock();
    // The batch leaves the prefetch window: grant its worker one more.
    const size_t stream = item.stream;
    internal::asio::post(io_, [this, stream] { streams_[stream]->Grant(1); });
    return std::move(item.batch);
  }

  std::vector<SkippedSample> TakeSkipped() override {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<SkippedSample> out;
    out.swap(skipped_);
    return out;
  }

  IteratorStats stats() const override {
    std::lock_guard<std::mutex> lock(mu_);
    IteratorStats s = stats_;
    s.skipped = total_skipped_;
    return s;
  }

  // Epochs every worker has finished sending (their EndOfEpoch arrived).
  int64_t epochs_completed() const {
    std::lock_guard<std::mutex> lock(mu_);
    int64_t m = INT64_MAX;
    for (int64_t e : epochs_done_) m = std::min(m, e);
    return m == INT64_MAX ? 0 : m;
  }

  // Reconnects made after transient failures, over all workers.
  int64_t reconnects() const { return reconnects_.load(); }

 private:
  struct Item {
    Batch batch;
    size_t stream;
  };

  // One worker's stream. Lives on the io thread.
  class Stream : public std::enable_shared_from_this<Stream> {
   public:
    Stream(Client* c, size_t index) : c_(c), index_(index), timer_(c->io_) {}

    void Begin() { Connect(); }

    void Grant(uint32_t n) {
      if (conn_ && streaming_) conn_->Send(internal::EncodeCredit(n));
      else owed_credits_ += n;  // granted after a reconnect, with the OpenStream credits
    }

    void Shutdown() {
      done_ = true;
      timer_.cancel();
      if (resolver_) resolver_->cancel();
      if (connecting_) {
        boost::system::error_code ec;
        connecting_->close(ec);
      }
      if (conn_) conn_->Close();
    }

   private:
    void Connect() {
      if (done_) return;
      auto hp = internal::SplitHostPort(c_->opts_.workers[index_]);
      auto self = shared_from_this();
      resolver_ = std::make_shared<internal::tcp::resolver>(c_->io_);
      resolver_->async_resolve(
          hp->first, std::to_string(hp->second),
          [self](const boost::system::error_code& ec, internal::tcp::resolver::results_type results) {
            if (self->done_) return;
            if (ec) return self->Transient(Status::Unavailable("cannot resolve " + self->Address() + ": " + ec.message()));
            self->connecting_ = std::make_shared<internal::tcp::socket>(self->c_->io_);
            internal::asio::async_connect(
                *self->connecting_, results, [self](const boost::system::error_code& ec2, const internal::tcp::endpoint&) {
                  if (self->done_) return;
                  if (ec2)
                    return self->Transient(Status::Unavailable("cannot connect to " + self->Address() + ": " + ec2.message()));
                  auto socket = std::move(self->connecting_);
                  self->Connected(std::move(*socket));
                });
          });
    }

    std::string Address() const { return c_->opts_.workers[index_]; }

    void Connected(internal::tcp::socket socket) {
      if (done_) return;
      conn_ = std::make_shared<internal::FrameConnection>(std::move(socket), c_->opts_.limits, c_->opts_.buffers);
      state_ = State::kChallenge;
      streaming_ = false;
      auto self = shared_from_this();
      auto conn = conn_;
      conn_->StartReading([self, conn](const Status& s, internal::InFrame f) {
        if (conn != self->conn_) return;  // a stale connection
        self->OnFrame(s, std::move(f));
      });
    }

    void OnFrame(const Status& s, internal::InFrame f) {
      if (done_) return;
      if (!s.ok()) return Transient(s.WithContext("worker " + Address()));
      if (f.header.type == internal::MessageType::kError) {
        auto e = internal::DecodeError(f);
        const Status st = e.ok() ? e->status : e.status();
        if (st.IsTransient()) return Transient(st.WithContext("worker " + Address()));
        return Permanent(st.WithContext("worker " + Address()));
      }
      switch (state_) {
        case State::kChallenge: {
          auto ch = internal::DecodeChallenge(f);
          if (!ch.ok()) return Permanent(ch.status());
          internal::HelloMsg h;
          h.role = internal::Role::kClient;
          h.peer_id = c_->opts_.consumer_id;
          if (ch->auth_required) {
            if (c_->opts_.token.empty())
              return Permanent(Status(StatusCode::kUnauthenticated,
                                      "worker " + Address() + " requires a token (token_file or FERRY_TOKEN)"));
            h.mac = internal::HelloMac(c_->opts_.token, ch->nonce);
          }
          conn_->Send(internal::EncodeHello(h));
          state_ = State::kHelloOk;
          return;
        }
        case State::kHelloOk: {
          auto ok = internal::DecodeHelloOk(f);
          if (!ok.ok()) return Permanent(ok.status());
          SendOpen();
          return;
        }
        case State::kStreaming:
          return OnStreamFrame(f);
      }
    }

    void SendOpen() {
      const ClientOptions& o = c_->opts_;
      internal::OpenStreamMsg m;
      m.job.dataset_path = o.data;
      m.job.pipeline_json = o.pipeline.ToJson();
      m.job.seed = o.seed;
      m.job.shuffle = o.shuffle;
      m.job.epochs = o.epochs;
      m.job.first_epoch = o.first_epoch;
      m.job.batch_size = uint32_t(o.batch_size);
      m.job.last_batch = o.last_batch == LastBatch::kDrop  ? internal::WireLastBatch::kDrop
                         : o.last_batch == LastBatch::kPad ? internal::WireLastBatch::kPad
                                                           : internal::WireLastBatch::kKeep;
      m.job.worker_index = uint32_t(index_);
      m.job.num_workers = uint32_t(o.workers.size());
      m.job.fingerprint = o.fingerprint;
      m.consumer_id = o.consumer_id;
      // Credits: the window minus what this stream has in the client's queue.
      m.credits = uint32_t(std::max<int64_t>(0, int64_t(o.credits) - Queued())) + 0;
      owed_credits_ = 0;
      m.resume_epoch = resume_epoch_;
      m.resume_batches_done = resume_batches_;
      conn_->Send(internal::EncodeOpenStream(m));
      state_ = State::kStreaming;
      streaming_ = true;
    }

    int64_t Queued() {
      std::lock_guard<std::mutex> lock(c_->mu_);
      int64_t n = 0;
      for (const Item& it : c_->ready_) n += it.stream == index_ ? 1 : 0;
      return n;
    }

    void OnStreamFrame(const internal::InFrame& f) {
      if (f.header.type == internal::MessageType::kBatch) {
        std::vector<SkippedSample> skipped;
        Result<Batch> b = internal::DecodeBatch(f, &skipped);
        if (!b.ok()) return Permanent(b.status().WithContext("worker " + Address()));
        failures_ = 0;  // progress: the back-off starts over
        resume_epoch_ = b->provenance.epoch;
        resume_batches_ = b->provenance.batch_in_epoch + 1;
        c_->Deliver(index_, std::move(*b), std::move(skipped));
        return;
      }
      if (f.header.type == internal::MessageType::kEndOfEpoch) {
        auto e = internal::DecodeEndOfEpoch(f);
        if (!e.ok()) return Permanent(e.status());
        resume_epoch_ = e->epoch + 1;
        resume_batches_ = 0;
        c_->EpochDone(index_, e->epoch);
        if (e->last) {
          done_ = true;
          conn_->Close();
          c_->StreamFinished();
        }
        return;
      }
      Permanent(Status::InvalidArgument(std::string("unexpected ") + MessageTypeName(f.header.type) + " from worker " +
                                        Address()));
    }

    void Transient(const Status& s) {
      if (done_) return;
      streaming_ = false;
      if (conn_) conn_->Close();
      conn_.reset();
      if (++failures_ > c_->opts_.max_retries) {
        return Permanent(Status(s.code(), s.message() + " (gave up after " + std::to_string(c_->opts_.max_retries) +
                                              " retries)"));
      }
      double delay = c_->opts_.backoff_initial_s;
      for (int i = 1; i < failures_; ++i) delay = std::min(delay * 2, c_->opts_.backoff_max_s);
      ++c_->reconnects_;
      auto self = shared_from_this();
      timer_.expires_after(std::chrono::milliseconds(int64_t(delay * 1000)));
      timer_.async_wait([self](const boost::system::error_code& ec) {
        if (!ec) self->Connect();
      });
    }

    void Permanent(const Status& s) {
      if (done_) return;
      done_ = true;
      if (conn_) conn_->Close();
      c_->Fail(s);
    }

    enum class State { kChallenge, kHelloOk, kStreaming };
    Client* c_;
    const size_t index_;
    internal::asio::steady_timer timer_;
    std::shared_ptr<internal::FrameConnection> conn_;
    std::shared_ptr<internal::tcp::resolver> resolver_;
    std::shared_ptr<internal::tcp::socket> connecting_;
    State state_ = State::kChallenge;
    bool streaming_ = false;
    bool done_ = false;
    int failures_ = 0;
    uint32_t owed_credits_ = 0;
    uint64_t resume_epoch_ = 0;
    int64_t resume_batches_ = 0;

    friend class Client;
  };

  explicit Client(ClientOptions o)
      : opts_(std::move(o)), work_(std::make_unique<WorkGuard>(io_.get_executor())) {
    epochs_done_.assign(opts_.workers.size(), 0);
  }

  void Start() {
    for (size_t i = 0; i < opts_.workers.size(); ++i) {
      streams_.push_back(std::make_shared<Stream>(this, i));
      streams_.back()->resume_epoch_ = opts_.first_epoch;
    }
    internal::asio::post(io_, [this] {
      for (auto& s : streams_) s->Begin();
    });
    io_thread_ = std::thread([this] { io_.run(); });
  }

  void Deliver(size_t stream, Batch b, std::vector<SkippedSample> skipped) {
    std::lock_guard<std::mutex> lock(mu_);
    total_skipped_ += int64_t(skipped.size());
    for (auto& s : skipped) skipped_.push_back(std::move(s));
    if (b.rows() == 0) {
      // Nothing to yield (every file of it was bad): keep the window full.
      internal::asio::post(io_, [this, stream] { streams_[stream]->Grant(1); });
      return;
    }
    ready_.push_back({std::move(b), stream});
    cv_.notify_one();
  }

  void EpochDone(size_t stream, uint64_t epoch) {
    std::lock_guard<std::mutex> lock(mu_);
    epochs_done_[stream] = std::max<int64_t>(epochs_done_[stream], int64_t(epoch - opts_.first_epoch) + 1);
  }

  void StreamFinished() {
    std::lock_guard<std::mutex> lock(mu_);
    ++finished_streams_;
    cv_.notify_all();
  }

  void Fail(const Status& s) {
    std::lock_guard<std::mutex> lock(mu_);
    if (error_.ok()) error_ = s;
    cv_.notify_all();
  }

  using WorkGuard = internal::asio::executor_work_guard<internal::asio::io_context::executor_type>;

  const ClientOptions opts_;
  internal::asio::io_context io_;
  std::unique_ptr<WorkGuard> work_;
  std::thread io_thread_;
  std::vector<std::shared_ptr<Stream>> streams_;  // io thread (fixed after Start)
  std::atomic<int64_t> reconnects_{0};

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Item> ready_;               // GUARDED_BY(mu_)
  std::vector<SkippedSample> skipped_;   // GUARDED_BY(mu_)
  int64_t total_skipped_ = 0;            // GUARDED_BY(mu_)
  IteratorStats stats_;                  // GUARDED_BY(mu_)
  std::vector<int64_t> epochs_done_;     // GUARDED_BY(mu_)
  int finished_streams_ = 0;             // GUARDED_BY(mu_)
  Status error_;                         // GUARDED_BY(mu_)
};

}  // namespace ferry

#endif  // FERRY_CLIENT_H_
