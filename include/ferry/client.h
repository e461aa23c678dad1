// ferry::Client: the remote iterator a trainer links. Header-only; it links the wire
// codec (ferry::wire) through the CMake INTERFACE target ferry::client.
//
// Two ways to find the data:
//
// Point to point (ClientOptions::workers). The client connects to each worker named,
// authenticates (HMAC challenge, when a token is set), opens one stream per worker
// with the job inline, and grants `credits` batches of prefetch per worker. With N
// workers, worker i serves every N-th sample of each epoch's permutation (static
// sharding). A transient failure (connection lost, worker draining) reconnects with
// exponential back-off and resumes the stream after the last batch received.
//
//   ferry::ClientOptions o;
//   o.workers = {"10.0.0.5:7000", "10.0.0.6:7000"};
//   o.data = "/datasets/imagenet/train";     // as the workers see it
//   o.pipeline = ferry::PipelineSpec::ImagenetTrain();
//   auto client = ferry::Client::Connect(o);  // same BatchIterator API as Loader
//
// Through a dispatcher (ClientOptions::dispatcher + job_name). The client gets or joins
// the named job (a second client naming it shares its epochs, each sample going to
// one of them), learns the job's workers from the dispatcher as they come and go, and
// opens a stream to each by job name. Workers push the batches of the splits leased to
// them for this consumer. The client acknowledges each split once it has yielded all
// of its batches, and drops any batch it has already yielded: a split whose worker
// died is leased again and re-sent from its start, and content is deterministic, so
// the epoch arrives exactly once. SaveState() returns the iterator's state (job,
// consumer, completed splits, the yielded batches of open splits); a new client given
// it as `resume_state` continues with exactly the batches not yet yielded.
//
//   o.dispatcher = "10.0.0.2:7100";
//   o.job_name = "resnet50-run7";
//
// Each batch frame is read into one 64-byte-aligned buffer (from a pool, or from a
// user allocator, e.g. pinned memory) and yielded as views into that buffer: no copy.
// Next() returns whichever batch arrived first across workers (`arrival`), or, with
// `deterministic`, this consumer's batches in (epoch, split, batch) order.
#ifndef FERRY_CLIENT_H_
#define FERRY_CLIENT_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "ferry/internal/connection.h"
#include "ferry/internal/control.h"
#include "ferry/internal/control_channel.h"
#include "ferry/internal/wire.h"
#include "ferry/iterator.h"
#include "ferry/pipeline_spec.h"

namespace ferry {

struct ClientOptions {
  std::vector<std::string> workers;  // point to point: HOST:PORT of each worker
  std::string dispatcher;            // or: HOST:PORT of ferry-dispatcher ...
  std::string job_name;              // ... and the job to get or join there

  // The job (inline to the workers, or the named job's configuration).
  std::string data;                  // dataset path on the workers' filesystem
  PipelineSpec pipeline = PipelineSpec::ImagenetTrain();
  int batch_size = 256;
  uint64_t seed = 0;
  bool shuffle = true;
  LastBatch last_batch = LastBatch::kKeep;
  int64_t epochs = 1;                // <= 0: forever
  uint64_t first_epoch = 0;          // point to point only
  uint64_t fingerprint = 0;          // point to point: expected (listing, pipeline) fingerprint; 0 = unchecked
  int batches_per_split = 4;         // dispatcher: the unit of leasing and acknowledgement
  bool deterministic = false;        // dispatcher: yield in (epoch, split, batch) order
  // Dispatcher: every worker yields every epoch of the job (no sharding, no
  // exactly-once: tf.data's parallel_epochs), each with its own augmentation draws.
  bool parallel_epochs = false;
  std::string resume_state;          // dispatcher: a SaveState() to continue after
  int64_t num_samples = 0;           // dispatcher, "synthetic:" datasets only: their size

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
  double poll_interval_s = 0.1;      // dispatcher: how often to look for workers and job status
  double dispatcher_timeout_s = 120; // dispatcher: give up after this long unreachable
  // Point to point: "ferry-client" when empty. Dispatcher: a random id when empty (a
  // resumed state brings its own).
  std::string consumer_id;
};

// What a dispatcher-mode client has yielded, enough to resume exactly: every split of
// epochs before `first_open` is complete; of later epochs, `done` splits are complete
// and `partial` ones have the listed batches (batch_in_split) yielded.
struct IteratorState {
  std::string job, consumer;
  uint64_t first_open = 0;
  std::set<std::pair<uint64_t, int64_t>> done;
  std::map<std::pair<uint64_t, int64_t>, std::set<int64_t>> partial;

  // A small line-oriented text form (names hold no whitespace).
  std::string Serialize() const {
    std::ostringstream o;
    o << "ferry-iterator-state 1\njob " << job << "\nconsumer " << consumer << "\nfirst_open " << first_open << "\n";
    for (const auto& [e, sp] : done) o << "done " << e << " " << sp << "\n";
    for (const auto& [k, bs] : partial) {
      o << "partial " << k.first << " " << k.second;
      for (int64_t b : bs) o << " " << b;
      o << "\n";
    }
    return o.str();
  }

  static Result<IteratorState> Parse(const std::string& text) {
    std::istringstream in(text);
    std::string line, word;
    IteratorState st;
    if (!std::getline(in, line) || line != "ferry-iterator-state 1")
      return Status::InvalidArgument("not a ferry iterator state (bad first line)");
    while (std::getline(in, line)) {
      if (line.empty()) continue;
      std::istringstream l(line);
      l >> word;
      if (word == "job") {
        l >> st.job;
      } else if (word == "consumer") {
        l >> st.consumer;
      } else if (word == "first_open") {
        l >> st.first_open;
      } else if (word == "done") {
        uint64_t e;
        int64_t sp;
        if (!(l >> e >> sp)) return Status::InvalidArgument("iterator state: bad line '" + line + "'");
        st.done.insert({e, sp});
      } else if (word == "partial") {
        uint64_t e;
        int64_t sp, b;
        if (!(l >> e >> sp)) return Status::InvalidArgument("iterator state: bad line '" + line + "'");
        auto& bs = st.partial[{e, sp}];
        while (l >> b) bs.insert(b);
      } else {
        return Status::InvalidArgument("iterator state: unknown line '" + line + "'");
      }
      if (l.fail() && !l.eof()) return Status::InvalidArgument("iterator state: bad line '" + line + "'");
    }
    if (st.job.empty() || st.consumer.empty()) return Status::InvalidArgument("iterator state: no job or consumer");
    return st;
  }
};

class Client : public BatchIterator {
 public:
  static Result<std::unique_ptr<Client>> Connect(const ClientOptions& options) {
    const bool dispatched = !options.dispatcher.empty();
    if (dispatched == !options.workers.empty())
      return Status::InvalidArgument("give either workers (point to point) or a dispatcher, not both or neither");
    if (options.batch_size <= 0) return Status::InvalidArgument("batch_size must be > 0");
    if (options.credits <= 0) return Status::InvalidArgument("credits must be > 0");
    FERRY_RETURN_IF_ERROR(options.pipeline.Validate());
    ClientOptions o = options;
    if (o.token.empty()) {
      FERRY_ASSIGN_OR_RETURN(o.token, internal::LoadToken(o.token_file));
    }
    if (!o.buffers) o.buffers = internal::DefaultBufferAllocator();
    for (const std::string& w : o.workers) FERRY_RETURN_IF_ERROR(internal::SplitHostPort(w).status());
    IteratorState resume;
    if (dispatched) {
      FERRY_RETURN_IF_ERROR(internal::SplitHostPort(o.dispatcher).status());
      if (o.batches_per_split <= 0) return Status::InvalidArgument("batches_per_split must be > 0");
      if (!o.resume_state.empty()) {
        FERRY_ASSIGN_OR_RETURN(resume, IteratorState::Parse(o.resume_state));
        if (!o.job_name.empty() && o.job_name != resume.job)
          return Status::InvalidArgument("the resume state is of job " + resume.job + ", not " + o.job_name);
        if (!o.consumer_id.empty() && o.consumer_id != resume.consumer)
          return Status::InvalidArgument("the resume state is of consumer " + resume.consumer + ", not " + o.consumer_id);
        o.job_name = resume.job;
        o.consumer_id = resume.consumer;
      }
      if (o.job_name.empty()) return Status::InvalidArgument("a dispatcher job needs a job_name");
      if (o.consumer_id.empty()) o.consumer_id = "consumer-" + RandomHex();
      for (const std::string* n : {&o.job_name, &o.consumer_id}) {
        if (n->find_first_of(" \t\r\n") != std::string::npos)
          return Status::InvalidArgument("job and consumer names hold no whitespace: '" + *n + "'");
      }
    } else if (o.consumer_id.empty()) {
      o.consumer_id = "ferry-client";
    }
    std::unique_ptr<Client> c(new Client(std::move(o)));
    if (dispatched) c->Restore(resume);
    c->Start();
    return c;
  }

  ~Client() override {
    if (control_thread_.joinable()) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        stop_ = true;
      }
      control_cv_.notify_all();
      {
        // A call in flight to an unresponsive dispatcher returns within 50 ms.
        std::lock_guard<std::mutex> lock(channel_mu_);
        if (channel_ != nullptr) channel_->Interrupt();
      }
      control_thread_.join();
    }
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
    auto waited = [&] {
      stats_.wait_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    };
    for (;;) {
      cv_.wait(lock, [&] { return Releasable() || !error_.ok() || Finished(); });
      if (!Releasable()) {
        waited();
        if (!error_.ok()) return error_;
        return Status::OutOfRange("end of data");
      }
      Item item = TakeReleasable();
      const size_t stream = item.stream;
      // The batch leaves the prefetch window: grant its worker one more.
      internal::asio::post(io_, [this, stream] { streams_[stream]->Grant(1); });
      if (sharded() && !Account(item.batch.provenance)) {
        ++duplicates_;
        continue;  // already yielded (a re-sent split): drop it
      }
      if (item.batch.rows() == 0) continue;  // accounted for; nothing to yield
      waited();
      ++stats_.batches;
      stats_.samples += item.batch.valid;
      return std::move(item.batch);
    }
  }

  bool WaitReady(double seconds) override {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, std::chrono::microseconds(int64_t(seconds * 1e6)),
                        [&] { return Releasable() || !error_.ok() || Finished(); });
  }

  // Dispatcher mode: the job's configuration once the dispatcher has answered (its
  // num_samples gives the epoch's length); waits up to `seconds`.
  std::optional<internal::JobConfigMsg> JobInfo(double seconds) const {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, std::chrono::microseconds(int64_t(seconds * 1e6)), [&] { return joined_ || !error_.ok(); });
    if (!joined_) return std::nullopt;
    return job_;
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

  // Point to point: epochs every worker has finished sending. Dispatcher: epochs the
  // whole job has completed.
  int64_t epochs_completed() const {
    std::lock_guard<std::mutex> lock(mu_);
    if (sharded()) return int64_t(first_open_);
    int64_t m = INT64_MAX;
    for (const auto& [stream, e] : epochs_done_) m = std::min(m, e);
    return m == INT64_MAX ? 0 : m;
  }

  // Dispatcher mode: the iterator's state after the last batch Next() returned.
  IteratorState SaveState() const {
    std::lock_guard<std::mutex> lock(mu_);
    IteratorState st;
    st.job = opts_.job_name;
    st.consumer = opts_.consumer_id;
    st.first_open = first_open_;
    for (const auto& k : done_) {
      if (k.first >= first_open_) st.done.insert(k);
    }
    for (const auto& [k, bs] : partial_) {
      if (k.first >= first_open_) st.partial[k] = bs;
    }
    return st;
  }

  const std::string& consumer_id() const { return opts_.consumer_id; }
  // Reconnects made after transient failures, over all workers.
  int64_t reconnects() const { return reconnects_.load(); }
  // Dispatcher mode: re-sent batches dropped because they had been yielded already.
  int64_t duplicates_dropped() const {
    std::lock_guard<std::mutex> lock(mu_);
    return duplicates_;
  }
  // Dispatcher mode: the workers streamed from so far.
  size_t workers_seen() const {
    std::lock_guard<std::mutex> lock(mu_);
    return workers_seen_;
  }

 private:
  using SplitId = std::pair<uint64_t, int64_t>;  // (epoch, split)

  struct Item {
    Batch batch;
    size_t stream;
  };

  // One worker's stream. Lives on the io thread.
  class Stream : public std::enable_shared_from_this<Stream> {
   public:
    Stream(Client* c, size_t index, std::string address)
        : c_(c), index_(index), address_(std::move(address)), timer_(c->io_) {}

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

    bool retired() const { return done_; }
    const std::string& Address() const { return address_; }

   private:
    void Connect() {
      if (done_) return;
      auto hp = internal::SplitHostPort(address_);
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
                  if (ec2) {
                    // A worker we streamed from now refuses connections: its process
                    // is gone. Tell the dispatcher, so that its splits move on now.
                    if (ec2 == internal::asio::error::connection_refused && self->streamed_)
                      self->c_->ReportUnreachable(self->Address());
                    return self->Transient(Status::Unavailable("cannot connect to " + self->Address() + ": " + ec2.message()));
                  }
                  auto socket = std::move(self->connecting_);
                  self->Connected(std::move(*socket));
                });
          });
    }

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
        // Another stream of this consumer took over (dispatcher mode): stand down.
        if (c_->dispatched() && st.code() == StatusCode::kCancelled) return Retire();
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
      if (c_->dispatched()) {
        m.by_name = true;
        m.job_name = o.job_name;
      } else {
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
        m.resume_epoch = resume_epoch_;
        m.resume_batches_done = resume_batches_;
      }
      m.consumer_id = o.consumer_id;
      // Credits: the window minus what this stream has in the client's queue.
      m.credits = uint32_t(std::max<int64_t>(0, int64_t(o.credits) - Queued()));
      owed_credits_ = 0;
      conn_->Send(internal::EncodeOpenStream(m));
      state_ = State::kStreaming;
      streaming_ = true;
      streamed_ = true;
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
      if (f.header.type == internal::MessageType::kEndOfEpoch && !c_->sharded()) {
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
        // Dispatcher mode: the worker is gone; the dispatcher leases its splits to
        // others, and lists it again should it come back.
        if (c_->dispatched()) return Retire();
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

    void Retire() {
      Shutdown();
      c_->Retired(index_);
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
    const std::string address_;
    internal::asio::steady_timer timer_;
    std::shared_ptr<internal::FrameConnection> conn_;
    std::shared_ptr<internal::tcp::resolver> resolver_;
    std::shared_ptr<internal::tcp::socket> connecting_;
    State state_ = State::kChallenge;
    bool streaming_ = false;
    bool streamed_ = false;  // reached streaming at least once
    bool done_ = false;
    int failures_ = 0;
    uint32_t owed_credits_ = 0;
    uint64_t resume_epoch_ = 0;
    int64_t resume_batches_ = 0;

    friend class Client;
  };

  explicit Client(ClientOptions o)
      : opts_(std::move(o)), work_(std::make_unique<WorkGuard>(io_.get_executor())) {
    for (size_t i = 0; i < opts_.workers.size(); ++i) epochs_done_[i] = 0;
    streams_opened_ = opts_.workers.size();
  }

  bool dispatched() const { return !opts_.dispatcher.empty(); }
  // Dynamic sharding: splits, acknowledgements, dedup (dispatcher, distributed_epoch).
  bool sharded() const { return dispatched() && !opts_.parallel_epochs; }

  static std::string RandomHex() {
    static const char* hex = "0123456789abcdef";
    const std::string n = internal::RandomNonce();
    std::string out;
    for (size_t i = 0; i < 6 && i < n.size(); ++i) {
      out += hex[uint8_t(n[i]) >> 4];
      out += hex[uint8_t(n[i]) & 15];
    }
    return out;
  }

  void Restore(const IteratorState& st) {
    first_open_ = st.first_open;
    done_ = st.done;
    partial_ = st.partial;
    // Told to the dispatcher after joining (RestoreConsumer): the state's complete
    // splits are acknowledged (the process that saved it may have stopped before its
    // acknowledgements went out), and any other split of this consumer acknowledged
    // since (the trainer went on past its checkpoint) is delivered again.
    if (!st.job.empty()) restore_ = std::make_unique<IteratorState>(st);
  }

  void Start() {
    for (size_t i = 0; i < opts_.workers.size(); ++i) {
      streams_.push_back(std::make_shared<Stream>(this, i, opts_.workers[i]));
      streams_.back()->resume_epoch_ = opts_.first_epoch;
    }
    internal::asio::post(io_, [this] {
      for (auto& s : streams_) s->Begin();
    });
    io_thread_ = std::thread([this] { io_.run(); });
    if (dispatched()) control_thread_ = std::thread([this] { ControlLoop(); });
  }

  // --- Release (mu_ held) -----------------------------------------------------------

  bool Finished() const {
    if (sharded()) return job_finished_;
    // Point to point, or parallel epochs: every stream opened has ended (a dead
    // worker's stream counts as ended: parallel epochs are at most once).
    return finished_streams_ > 0 && finished_streams_ == int(streams_opened_);
  }

  // Deterministic order: the next batch this consumer must yield, as far as known.
  // Every split of epochs before first_open_ is complete; within an epoch the splits
  // are leased in order, so all of this consumer's splits below the lowest one it has
  // not completed are known from the dispatcher's list (my_splits_).
  bool NextInOrder(SplitId* split, int64_t* batch) const {
    uint64_t epoch = std::max(first_open_, order_epoch_);
    for (;; ++epoch) {
      auto it = my_splits_.find(epoch);
      if (it == my_splits_.end()) return false;
      for (int64_t s : it->second.first) {
        const SplitId k{epoch, s};
        if (done_.count(k)) continue;
        int64_t b = 0;
        auto p = partial_.find(k);
        if (p != partial_.end()) {
          while (p->second.count(b)) ++b;
        }
        *split = k;
        *batch = b;
        return true;
      }
      if (!it->second.second) return false;  // more of my splits may yet be assigned
    }
  }

  // Whether a batch was yielded already (a re-sent split's).
  bool Yielded(const BatchProvenance& p) const {
    if (p.epoch < first_open_ || done_.count({p.epoch, p.split})) return true;
    auto q = partial_.find({p.epoch, p.split});
    return q != partial_.end() && q->second.count(p.batch_in_split) > 0;
  }

  // The position in ready_ of the batch Next() may release now, if any: the first one
  // in arrival order; in deterministic order a duplicate (to drop) or the next batch
  // in order.
  std::optional<size_t> Pick() const {
    if (ready_.empty()) return std::nullopt;
    if (!sharded() || !opts_.deterministic) return size_t(0);
    SplitId k{};
    int64_t b = -1;
    const bool known = NextInOrder(&k, &b);
    for (size_t i = 0; i < ready_.size(); ++i) {
      const auto& p = ready_[i].batch.provenance;
      if (Yielded(p) || (known && p.epoch == k.first && p.split == k.second && p.batch_in_split == b)) return i;
    }
    return std::nullopt;
  }

  bool Releasable() const { return Pick().has_value(); }

  Item TakeReleasable() {
    const size_t pick = *Pick();
    Item item = std::move(ready_[pick]);
    ready_.erase(ready_.begin() + std::ptrdiff_t(pick));
    return item;
  }

  // Records a batch as yielded; false if it was yielded before (a re-sent split). A
  // split whose every batch is yielded is complete and queued for acknowledgement.
  bool Account(const BatchProvenance& p) {
    if (Yielded(p)) return false;
    const SplitId k{p.epoch, p.split};
    std::set<int64_t>& yielded = partial_[k];
    yielded.insert(p.batch_in_split);
    if (int64_t(yielded.size()) >= p.batches_in_split) {
      partial_.erase(k);
      done_.insert(k);
      to_ack_.push_back(k);
      control_cv_.notify_all();
    }
    return true;
  }

  // --- io thread callbacks ---------------------------------------------------------

  void Deliver(size_t stream, Batch b, std::vector<SkippedSample> skipped) {
    std::lock_guard<std::mutex> lock(mu_);
    total_skipped_ += int64_t(skipped.size());
    for (auto& s : skipped) skipped_.push_back(std::move(s));
    if (b.rows() == 0 && !(sharded() && opts_.deterministic)) {
      // Nothing to yield (every file of it was bad): keep the window full. It still
      // counts towards its split.
      if (sharded()) Account(b.provenance);
      internal::asio::post(io_, [this, stream] { streams_[stream]->Grant(1); });
      return;
    }
    ready_.push_back({std::move(b), stream});
    cv_.notify_one();
  }

  void EpochDone(size_t stream, uint64_t epoch) {
    std::lock_guard<std::mutex> lock(mu_);
    int64_t& done = epochs_done_[stream];
    done = std::max<int64_t>(done, int64_t(epoch - opts_.first_epoch) + 1);
  }

  void StreamFinished() {
    std::lock_guard<std::mutex> lock(mu_);
    ++finished_streams_;
    cv_.notify_all();
  }

  void Retired(size_t stream) {
    stream_of_.erase(streams_[stream]->Address());
    if (opts_.parallel_epochs) StreamFinished();
  }

  void ReportUnreachable(const std::string& address) {
    if (!sharded()) return;
    std::lock_guard<std::mutex> lock(mu_);
    unreachable_.push_back(address);
    control_cv_.notify_all();
  }

  void Fail(const Status& s) {
    std::lock_guard<std::mutex> lock(mu_);
    if (error_.ok()) error_ = s;
    cv_.notify_all();
  }

  // Opens a stream to every listed worker that has none (io thread).
  void EnsureStreams(const std::vector<std::string>& addresses) {
    for (const std::string& a : addresses) {
      if (stream_of_.count(a)) continue;
      if (opts_.parallel_epochs) {
        std::lock_guard<std::mutex> lock(mu_);
        if (Finished()) continue;  // every stream has ended: too late to join
      }
      const size_t index = streams_.size();
      streams_.push_back(std::make_shared<Stream>(this, index, a));
      stream_of_[a] = index;
      {
        std::lock_guard<std::mutex> lock(mu_);
        ++workers_seen_;
        if (opts_.parallel_epochs) {
          ++streams_opened_;
          epochs_done_[index] = 0;
        }
      }
      streams_.back()->Begin();
    }
  }

  // --- The control loop (dispatcher mode, its own thread) ---------------------------

  internal::JobConfigMsg JobConfig() const {
    internal::JobConfigMsg c;
    c.name = opts_.job_name;
    c.dataset = opts_.data;
    c.pipeline_json = opts_.pipeline.ToJson();
    c.seed = opts_.seed;
    c.shuffle = opts_.shuffle;
    c.epochs = opts_.epochs;
    c.batch_size = opts_.batch_size;
    c.last_batch = uint8_t(opts_.last_batch);
    c.mode = opts_.parallel_epochs ? 1 : 0;
    c.ordering = opts_.deterministic ? 1 : 0;
    c.batches_per_split = opts_.batches_per_split;
    c.num_samples = opts_.num_samples;
    return c;
  }

  // Waits up to `seconds`, or until there is something to acknowledge or a stop.
  bool ControlWait(double seconds) {
    std::unique_lock<std::mutex> lock(mu_);
    control_cv_.wait_for(lock, std::chrono::microseconds(int64_t(seconds * 1e6)),
                         [&] { return stop_ || !to_ack_.empty() || !unreachable_.empty(); });
    return !stop_;
  }

  void ControlLoop() {
    internal::ControlChannel ch(opts_.dispatcher, opts_.token, internal::Role::kClient, opts_.consumer_id);
    {
      std::lock_guard<std::mutex> lock(channel_mu_);
      channel_ = &ch;
    }
    struct Unpublish {
      Client* c;
      ~Unpublish() {
        std::lock_guard<std::mutex> lock(c->channel_mu_);
        c->channel_ = nullptr;
      }
    } unpublish{this};
    bool joined = false;
    auto unreachable_since = std::chrono::steady_clock::now();
    int failures = 0;
    auto next_workers = std::chrono::steady_clock::now();
    std::vector<SplitId> acks;
    for (;;) {
      bool stopping;
      {
        std::lock_guard<std::mutex> lock(mu_);
        stopping = stop_;
        acks.assign(to_ack_.begin(), to_ack_.end());
      }
      if (stopping) {
        if (!acks.empty() && joined) FinalAcks(acks);
        return;
      }
      Status st = ControlStep(ch, &joined, acks, &next_workers);
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (stop_) continue;  // interrupted by the destructor: final acks, then out
      }
      if (st.ok()) {
        failures = 0;
        unreachable_since = std::chrono::steady_clock::now();
      } else if (st.IsTransient()) {
        if (std::chrono::steady_clock::now() - unreachable_since >
            std::chrono::milliseconds(int64_t(opts_.dispatcher_timeout_s * 1000))) {
          Fail(Status(st.code(), st.message() + " (dispatcher unreachable for " +
                                     std::to_string(int(opts_.dispatcher_timeout_s)) + " s)"));
          return;
        }
        double delay = opts_.backoff_initial_s;
        for (int i = 0; i < failures; ++i) delay = std::min(delay * 2, opts_.backoff_max_s);
        ++failures;
        ControlWait(delay);
        continue;
      } else {
        // Name the dispatcher, unless the channel's message already does.
        Fail(st.message().find(opts_.dispatcher) == std::string::npos ? st.WithContext("dispatcher " + opts_.dispatcher)
                                                                      : st);
        return;
      }
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (job_finished_) return;
      }
      ControlWait(opts_.poll_interval_s);
    }
  }

  Status ControlStep(internal::ControlChannel& ch, bool* joined, const std::vector<SplitId>& acks,
                     std::chrono::steady_clock::time_point* next_workers) {
    if (!*joined) {
      FERRY_ASSIGN_OR_RETURN(internal::InFrame r, ch.Call(internal::EncodeGetOrCreateJob(JobConfig(), opts_.consumer_id)));
      FERRY_ASSIGN_OR_RETURN(internal::JobConfigMsg info, internal::DecodeJobInfo(r));
      *joined = true;
      std::lock_guard<std::mutex> lock(mu_);
      job_ = info;
      joined_ = true;
      cv_.notify_all();
    }
    if (restore_) {
      internal::RestoreConsumerMsg m{opts_.job_name, opts_.consumer_id, restore_->first_open, {}};
      m.done.assign(restore_->done.begin(), restore_->done.end());
      FERRY_ASSIGN_OR_RETURN(internal::InFrame r, ch.Call(internal::EncodeRestoreConsumer(m)));
      FERRY_RETURN_IF_ERROR(internal::DecodeJobStatus(r).status());
      restore_.reset();
    }
    // Acknowledge, or ask how the job stands.
    internal::JobStatusMsg status;
    uint64_t epoch;
    {
      std::lock_guard<std::mutex> lock(mu_);
      epoch = std::max(first_open_, order_epoch_);
    }
    if (!acks.empty()) {
      internal::AckSplitsMsg m{opts_.job_name, opts_.consumer_id, acks};
      auto r = ch.Call(internal::EncodeAckSplits(m));
      if (!r.ok() && r.status().code() == StatusCode::kNotFound) return JobGone();
      FERRY_RETURN_IF_ERROR(r.status());
      FERRY_ASSIGN_OR_RETURN(status, internal::DecodeJobStatus(*r));
      std::lock_guard<std::mutex> lock(mu_);
      to_ack_.erase(to_ack_.begin(), to_ack_.begin() + std::ptrdiff_t(acks.size()));
    }
    if (acks.empty() || opts_.deterministic) {
      auto r = ch.Call(internal::EncodeGetJobStatus(opts_.job_name, opts_.consumer_id, epoch));
      if (!r.ok() && r.status().code() == StatusCode::kNotFound) return JobGone();
      FERRY_RETURN_IF_ERROR(r.status());
      FERRY_ASSIGN_OR_RETURN(status, internal::DecodeJobStatus(*r));
      std::lock_guard<std::mutex> lock(mu_);
      if (epoch >= status.first_open) my_splits_[epoch] = {status.my_splits, status.epoch_fully_assigned};
      // Deterministic order moves to the next epoch once every split of mine in this
      // one is known and complete.
      if (status.epoch_fully_assigned) {
        bool all = true;
        for (int64_t s : status.my_splits) all = all && done_.count({epoch, s}) > 0;
        if (all && epoch + 1 > order_epoch_) order_epoch_ = epoch + 1;
      }
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (status.first_open > first_open_) {
        first_open_ = status.first_open;
        for (auto it = done_.begin(); it != done_.end();) it = it->first < first_open_ ? done_.erase(it) : std::next(it);
        for (auto it = partial_.begin(); it != partial_.end();)
          it = it->first.first < first_open_ ? partial_.erase(it) : std::next(it);
        for (auto it = my_splits_.begin(); it != my_splits_.end();)
          it = it->first < first_open_ ? my_splits_.erase(it) : std::next(it);
      }
      if (status.finished) job_finished_ = true;
      cv_.notify_all();
    }
    std::vector<std::string> unreachable;
    {
      std::lock_guard<std::mutex> lock(mu_);
      unreachable.swap(unreachable_);
    }
    for (const std::string& a : unreachable) {
      auto r = ch.Call(internal::EncodeReportWorker(a));
      if (!r.ok()) {
        std::lock_guard<std::mutex> lock(mu_);
        unreachable_.push_back(a);  // again next time
        return r.status();
      }
    }
    if (std::chrono::steady_clock::now() >= *next_workers) {
      FERRY_ASSIGN_OR_RETURN(internal::InFrame r, ch.Call(internal::EncodeGetWorkers()));
      FERRY_ASSIGN_OR_RETURN(std::vector<std::string> workers, internal::DecodeWorkerList(r));
      internal::asio::post(io_, [this, workers] { EnsureStreams(workers); });
      *next_workers = std::chrono::steady_clock::now() + std::chrono::milliseconds(int64_t(opts_.poll_interval_s * 1000));
    }
    return Status::OK();
  }

  // The dispatcher no longer knows the job: it finished and was garbage-collected.
  Status JobGone() {
    std::lock_guard<std::mutex> lock(mu_);
    job_finished_ = true;
    cv_.notify_all();
    return Status::OK();
  }

  // On destruction: acknowledge what was yielded, briefly and at most once.
  void FinalAcks(const std::vector<SplitId>& acks) {
    internal::ControlChannel ch(opts_.dispatcher, opts_.token, internal::Role::kClient, opts_.consumer_id,
                                std::chrono::seconds(2));
    (void)ch.Call(internal::EncodeAckSplits({opts_.job_name, opts_.consumer_id, acks}));
  }

  using WorkGuard = internal::asio::executor_work_guard<internal::asio::io_context::executor_type>;

  const ClientOptions opts_;
  internal::asio::io_context io_;
  std::unique_ptr<WorkGuard> work_;
  std::thread io_thread_;
  std::thread control_thread_;
  std::unique_ptr<IteratorState> restore_;        // control thread: to tell the dispatcher
  std::mutex channel_mu_;
  internal::ControlChannel* channel_ = nullptr;   // GUARDED_BY(channel_mu_): the control thread's
  std::vector<std::shared_ptr<Stream>> streams_;  // io thread (appended in dispatcher mode)
  std::map<std::string, size_t> stream_of_;       // io thread: live streams by address
  std::atomic<int64_t> reconnects_{0};

  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  std::condition_variable control_cv_;
  std::deque<Item> ready_;               // GUARDED_BY(mu_)
  std::vector<SkippedSample> skipped_;   // GUARDED_BY(mu_)
  int64_t total_skipped_ = 0;            // GUARDED_BY(mu_)
  IteratorStats stats_;                  // GUARDED_BY(mu_)
  std::map<size_t, int64_t> epochs_done_;  // GUARDED_BY(mu_): per stream
  size_t streams_opened_ = 0;            // GUARDED_BY(mu_)
  int finished_streams_ = 0;             // GUARDED_BY(mu_)
  Status error_;                         // GUARDED_BY(mu_)
  // Dispatcher mode, GUARDED_BY(mu_):
  bool stop_ = false;
  bool job_finished_ = false;
  bool joined_ = false;
  internal::JobConfigMsg job_;
  uint64_t first_open_ = 0;              // epochs before it are complete (the dispatcher says)
  uint64_t order_epoch_ = 0;             // deterministic: epochs before it are complete for me
  std::set<SplitId> done_;               // complete splits of open epochs
  std::map<SplitId, std::set<int64_t>> partial_;  // yielded batches of open splits
  std::vector<SplitId> to_ack_;          // complete, not yet acknowledged
  std::vector<std::string> unreachable_;  // workers to report to the dispatcher
  std::map<uint64_t, std::pair<std::vector<int64_t>, bool>> my_splits_;  // deterministic: epoch -> (mine, all assigned)
  int64_t duplicates_ = 0;
  size_t workers_seen_ = 0;
};

}  // namespace ferry

#endif  // FERRY_CLIENT_H_
