#include "server/worker_service.h"

#include <utility>  // before Asio: Boost 1.74 uses std::exchange without it in C++20

#include <atomic>
#include <boost/asio.hpp>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <thread>

#include "core/log.h"
#include "core/mutex.h"
#include "core/names.h"
#include "core/resources.h"
#include "data/data_roots.h"
#include "data/dataset.h"
#include "net/http_server.h"
#include "net/run_io.h"
#include "net/address.h"
#include "net/auth.h"
#include "net/connection.h"
#include "net/handshake.h"
#include "net/listen.h"
#include "pipeline/producer.h"
#include "wire/codec.h"
#include "worker/dispatcher_link.h"
#include "worker/stream_outbox.h"
#include "worker/stream_setup.h"
#include "worker/synthetic_source.h"

namespace ferry {

using net::FrameConnection;
using wire::InFrame;
using wire::MessageType;
using wire::OutFrame;
namespace asio = boost::asio;
using tcp = asio::ip::tcp;

class Session;

class WorkerService::Impl {
 public:
  explicit Impl(const WorkerOptions& o)
      : opts_(o),
        acceptor_(io_),
        buffers_(DefaultBufferAllocator()),
        arena_(MakeDecodeArena(o.threads)),
        memory_budget_(o.max_memory_bytes != 0 ? o.max_memory_bytes : MemoryLimitBytes() / 4 * 3) {}

  // A stream's batch memory, taken when it opens and given back when it closes (io
  // thread only). Refused past the budget: one request must not take the worker down.
  Status ReserveMemory(uint64_t bytes) {
    if (bytes > memory_budget_ || memory_reserved_ > memory_budget_ - bytes)
      return Status::ResourceExhausted(
          "this stream needs " + std::to_string(bytes >> 20) + " MiB of batch memory (" +
          std::to_string(std::max(2, opts_.buffered_batches)) + " batches) and this worker has " +
          std::to_string((memory_budget_ - std::min(memory_budget_, memory_reserved_)) >> 20) + " MiB of its " +
          std::to_string(memory_budget_ >> 20) +
          " MiB left (--max-memory): use a smaller batch_size or image size, or more workers");
    memory_reserved_ += bytes;
    return Status::OK();
  }
  void ReleaseMemory(uint64_t bytes) { memory_reserved_ -= bytes; }

  Status Bind() {
    FERRY_ASSIGN_OR_RETURN(address_, net::Listen(acceptor_, opts_.listen));
    return Status::OK();
  }

  // Dispatcher mode: the link registers this worker under the address clients use.
  void StartLink() {
    if (opts_.dispatcher.empty()) return;
    LinkOptions l;
    l.dispatcher = opts_.dispatcher;
    l.token = opts_.token;
    l.tls = tls_.client;
    l.advertise = opts_.advertise;
    if (l.advertise.empty()) {
      auto hp = net::SplitHostPort(address_);
      std::string host = hp->first;
      if (host == "0.0.0.0" || host == "::") host = asio::ip::host_name();
      l.advertise = host + ":" + std::to_string(hp->second);
    }
    l.worker_id = opts_.worker_id.empty() ? l.advertise + "/" + net::RandomHex(4) : opts_.worker_id;
    l.serves_job = opts_.serves_job;
    l.serves_consumer = opts_.serves_consumer;
    l.open_dataset = [this](const std::string& path) { return OpenDatasetCached(path); };
    l.allow_synthetic = opts_.allow_synthetic;
    l.forget_after = std::chrono::milliseconds(int64_t(opts_.forget_jobs_after_s * 1000));
    l.load = [stats = pipeline_stats_] {
      const Histogram::Snapshot r = stats->read.Read(), d = stats->decode.Read(), a = stats->augment.Read();
      wire::WorkerLoad load{stats->samples.load(std::memory_order_relaxed), stats->BusyNs(), int64_t(r.sum * 1e9),
                            int64_t(d.sum * 1e9), int64_t(a.sum * 1e9), {}};
      for (const auto& [name, c] : stats->ops.Read()) {
        if (load.ops.size() < wire::WorkerLoad::kMaxOpCosts) load.ops.push_back({name.substr(0, 64), c.ns, c.samples});
      }
      return load;
    };
    link_ = std::make_unique<DispatcherLink>(std::move(l));
    link_->Start();
  }

  void Run() {
    StartLink();
    Accept();
    reaper_ = std::thread([this] { Reap(); });
    io_thread_ = std::thread([this] { net::RunIo(io_, "worker"); });
  }

  ~Impl() {
    // Close everything on the io thread, then let it run out of work rather than
    // stop it: the aborted reads must still run, because their handlers hold the
    // sessions (a session and its connection's handler refer to each other until
    // then). Stopping instead leaked every open session with its socket still open,
    // so clients never learned that the worker was gone, and its producer kept
    // posting to a destroyed io_context. The dispatcher link goes last: sessions on
    // the io thread and the drain thread use it until they have stopped.
    closing_ = true;
    if (drain_thread_.joinable()) drain_thread_.join();
    asio::post(io_, [this] { CloseAll(); });
    if (io_thread_.joinable()) io_thread_.join();
    link_.reset();  // no more leases; the dispatcher finds the worker silent
    sessions_.clear();
    {
      MutexLock lock(&reap_mu_);
      reap_stop_ = true;
      reap_cv_.SignalAll();
    }
    if (reaper_.joinable()) reaper_.join();
  }

  void Drain();
  void DrainStreams();
  void WaitDrained() {
    {
      MutexLock lock(&drain_mu_);
      while (!drained_) drain_cv_.Wait(&drain_mu_);
    }
    if (link_) link_->Leave();
  }

  // Stops and destroys a producer off the io thread (Stop waits for its tasks).
  void Retire(std::unique_ptr<BatchProducer> p) {
    if (!p) return;
    MutexLock lock(&reap_mu_);
    reap_queue_.push_back(std::move(p));
    reap_cv_.SignalAll();
  }

  Result<std::shared_ptr<const Dataset>> OpenDatasetCached(const std::string& path) {
    MutexLock lock(&datasets_mu_);
    auto it = datasets_.find(path);
    if (it != datasets_.end()) {
      if (auto ds = it->second.lock()) return ds;
    }
    FERRY_ASSIGN_OR_RETURN(std::unique_ptr<Dataset> ds, OpenDataset(path, roots_));
    std::shared_ptr<const Dataset> shared(std::move(ds));
    datasets_[path] = shared;
    return shared;
  }

  void SessionClosed(const std::shared_ptr<Session>& s);

  const WorkerOptions opts_;
  asio::io_context io_;
  tcp::acceptor acceptor_;
  std::shared_ptr<BufferAllocator> buffers_;
  net::TlsContexts tls_;  // server: sessions; client: the dispatcher link
  DataRoots roots_;       // --data-root; set before Run()
  std::shared_ptr<tbb::task_arena> arena_;
  asio::thread_pool blocking_{1};  // dataset listing off the io thread
  std::string address_;
  bool draining_ = false;  // io thread only
  bool stopping_ = false;  // io thread only: CloseAll() ran, accept nothing more
  std::set<std::shared_ptr<Session>> sessions_;  // io thread only
  std::unique_ptr<DispatcherLink> link_;         // dispatcher mode; fixed after Run()
  std::thread drain_thread_;
  std::atomic<bool> drain_started_{false};
  std::atomic<bool> closing_{false};  // the destructor runs: the drain thread gives up
  std::atomic<int> named_streams_{0};  // open streams by job name (dispatcher mode)

  std::atomic<int64_t> connections_{0}, streams_{0}, batches_sent_{0}, bad_frames_{0}, auth_failures_{0};
  std::atomic<int64_t> open_connections_{0};
  std::atomic<int64_t> bytes_sent_{0};
  // Stage times and skips of every stream's producer, and each batch's time waiting
  // in its stream's outbox for a credit (the send stage).
  const std::shared_ptr<PipelineStats> pipeline_stats_ = std::make_shared<PipelineStats>();
  Histogram send_wait_;
  const uint64_t memory_budget_;
  uint64_t memory_reserved_ = 0;  // io thread only
  uint64_t next_serial_ = 0;      // io thread only
  int64_t refused_connections_ = 0;  // io thread only

 private:
  void Accept();
  void CloseAll();
  void CheckDrained() {
    if (!draining_ || !sessions_.empty()) return;
    MutexLock lock(&drain_mu_);
    drained_ = true;
    drain_cv_.SignalAll();
  }
  void Reap() {
    for (;;) {
      std::unique_ptr<BatchProducer> p;
      {
        MutexLock lock(&reap_mu_);
        while (!reap_stop_ && reap_queue_.empty()) reap_cv_.Wait(&reap_mu_);
        if (reap_queue_.empty()) return;
        p = std::move(reap_queue_.front());
        reap_queue_.pop_front();
      }
      p->Stop();
    }
  }

  std::thread io_thread_;
  std::thread reaper_;
  Mutex reap_mu_;
  CondVar reap_cv_;
  std::deque<std::unique_ptr<BatchProducer>> reap_queue_ GUARDED_BY(reap_mu_);
  bool reap_stop_ GUARDED_BY(reap_mu_) = false;
  Mutex datasets_mu_;
  std::map<std::string, std::weak_ptr<const Dataset>> datasets_ GUARDED_BY(datasets_mu_);
  Mutex drain_mu_;
  CondVar drain_cv_;
  bool drained_ GUARDED_BY(drain_mu_) = false;
  std::unique_ptr<asio::steady_timer> drain_timer_;

  friend class WorkerService;
};

// One client connection and its stream. Lives on the io thread.
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(WorkerService::Impl* svc, tcp::socket socket)
      : svc_(svc),
        conn_(std::make_shared<FrameConnection>(std::move(socket), wire::PreAuthLimits(), svc->buffers_,
                                                svc->tls_.server)),
        serial_(svc->next_serial_++),
        // Only clients: a stream is all a worker serves (and a worker or a tool that
        // opened one would take a consumer's batches).
        handshake_(svc->opts_.client_token.empty() ? svc->opts_.token : svc->opts_.client_token, svc->opts_.id,
                   "this worker", {wire::Role::kClient}),
        timer_(svc->io_) {}

  void Start() {
    auto self = shared_from_this();
    // TLS first (when set), then the token handshake inside it; the deadline covers both.
    conn_->StartTls(/*server=*/true, [self](const Status& tls) {
      if (self->state_ == State::kClosed) return;
      if (!tls.ok()) {
        if (tls.code() == StatusCode::kUnauthenticated) {
          ++self->svc_->auth_failures_;
          LogWarn("refusing %s", tls.message().c_str());
        }
        return self->Closed();
      }
      self->conn_->Send(self->handshake_.Challenge());
      self->conn_->StartReading([self](const Status& s, InFrame f) { self->OnFrame(s, std::move(f)); });
    });
    timer_.expires_after(std::chrono::milliseconds(int64_t(svc_->opts_.handshake_timeout_s * 1000)));
    timer_.async_wait([self](const boost::system::error_code& ec) {
      if (!ec && (self->state_ == State::kHello || self->state_ == State::kOpen)) {
        self->Refuse(Status::FailedPrecondition("handshake timed out"));
      }
    });
  }

  // Drain: no new batches; deliver what is in flight, then end the stream.
  void Drain() {
    draining_ = true;
    if (state_ == State::kStreaming) {
      if (producer_) producer_->StopPlanning();
      if (synthetic_) {
        synthetic_->Stop();
        producer_done_ = true;
        Pump();
      }
    } else if (state_ != State::kClosed) {
      Refuse(Status::Unavailable("worker is draining"));
    }
  }

  void ForceClose() {
    conn_->Close();
    Closed();
  }

  // For net::MakeRoom: before its stream opens, a connection counts as handshaking.
  bool handshaking() const { return state_ == State::kHello || state_ == State::kOpen; }
  uint64_t serial() const { return serial_; }
  void Close() { ForceClose(); }

 private:
  // Peers send a worker control messages only. A Batch header is refused before its
  // body is allocated: otherwise any peer, before authenticating, could make the
  // worker reserve up to limits.max_batch_bytes (4 GiB) per connection with 16 bytes.
  static wire::FrameLimits ReceiveLimits(wire::FrameLimits limits) {
    limits.max_batch_bytes = 0;
    return limits;
  }

  enum class State { kHello, kOpen, kOpening, kStreaming, kEnding, kClosed };

  void OnFrame(const Status& s, InFrame f) {
    if (!s.ok()) {
      if (s.code() == StatusCode::kInvalidArgument || s.code() == StatusCode::kResourceExhausted) {
        ++svc_->bad_frames_;
        LogWarn("closing %s: %s", conn_->peer().c_str(), s.ToString().c_str());
      }
      Closed();
      return;
    }
    switch (state_) {
      case State::kHello: return OnHello(f);
      case State::kOpen: return OnOpenStream(f);
      // The client may grant credits as soon as it has sent OpenStream (its consumer
      // takes batches prefetched before a reconnect), so also while the stream opens.
      case State::kOpening:
      case State::kStreaming:
      case State::kEnding:
        if (f.header.type == MessageType::kCredit) {
          Result<uint32_t> n = wire::DecodeCredit(f);
          if (!n.ok()) return BadFrame(n.status());
          outbox_.Grant(*n);
          return Pump();
        }
        return BadFrame(Status::InvalidArgument(std::string("unexpected ") + wire::MessageTypeName(f.header.type) +
                                                " while streaming"));
      default:
        return BadFrame(Status::InvalidArgument(std::string("unexpected ") + wire::MessageTypeName(f.header.type)));
    }
  }

  void OnHello(const InFrame& f) {
    auto accepted = handshake_.OnHello(f);
    if (!accepted.ok()) {
      if (accepted.status().code() == StatusCode::kUnauthenticated) {
        ++svc_->auth_failures_;
        LogWarn("refusing %s: %s", conn_->peer().c_str(), accepted.status().message().c_str());
        return Refuse(accepted.status());
      }
      return BadFrame(accepted.status());
    }
    conn_->Send(std::move(accepted->reply));
    conn_->SetLimits(ReceiveLimits(svc_->opts_.limits));
    state_ = State::kOpen;
  }

  void OnOpenStream(const InFrame& f) {
    Result<wire::OpenStreamMsg> m = wire::DecodeOpenStream(f);
    if (!m.ok()) return BadFrame(m.status());
    if (m->by_name && !svc_->link_)
      return Refuse(Status::Unimplemented("this worker has no dispatcher (--dispatcher): give the job inline"));
    if (svc_->draining_) return Refuse(Status::Unavailable("worker is draining"));
    msg_ = std::move(*m);
    outbox_.Grant(msg_.credits);
    timer_.cancel();
    state_ = State::kOpening;
    if (Status st = CheckOptionalName("consumer id", msg_.consumer_id); !st.ok()) return Refuse(st);
    if (msg_.by_name) {
      if (msg_.consumer_id.empty()) return Refuse(Status::InvalidArgument("a stream by job name needs a consumer id"));
      if (Status st = CheckName("job name", msg_.job_name); !st.ok()) return Refuse(st);
      feed_ = svc_->link_->Feed(msg_.job_name, msg_.consumer_id);
      svc_->link_->Want(msg_.job_name);
      if (feed_->held() == 0) svc_->link_->Poke();  // a consumer is waiting: ask for splits now
      return WaitForJob();
    }
    if (Status st = CheckInlineStream(msg_); !st.ok()) return Refuse(st);
    if (msg_.job.synthetic()) return svc_->opts_.allow_synthetic ? StartSynthetic() : Refuse(SyntheticRefused());
    // Listing can take a second on ImageNet-sized trees: do it off the io thread.
    std::weak_ptr<Session> weak = weak_from_this();
    WorkerService::Impl* svc = svc_;
    const std::string path = msg_.job.dataset;
    asio::post(svc_->blocking_, [weak, svc, path] {
      auto ds = std::make_shared<Result<std::shared_ptr<const Dataset>>>(svc->OpenDatasetCached(path));
      asio::post(svc->io_, [weak, ds] {
        if (auto self = weak.lock()) self->StartInline(std::move(*ds));
      });
    });
  }

  void StartInline(Result<std::shared_ptr<const Dataset>> ds) {
    if (state_ != State::kOpening) return;
    if (!ds.ok()) return Refuse(ds.status());
    Result<StreamSource> source = InlineStream(msg_, std::move(*ds));
    if (!source.ok()) return Refuse(source.status());
    StartProducer(std::move(*source));
  }

  // A stream by job name (dispatcher mode): it serves the splits leased to this worker
  // for its consumer. The job's facts come with its first lease; until then it waits.
  void WaitForJob() {
    if (state_ != State::kOpening) return;
    std::shared_ptr<const WorkerJob> job = svc_->link_->Job(msg_.job_name);
    if (job == nullptr && ++job_waits_ > 3000)  // 60 s of 20 ms polls
      return Refuse(Status::Unavailable("job " + msg_.job_name +
                                        ": the dispatcher has not named it to this worker within 60 s"));
    if (job != nullptr && msg_.job_config != 0 && job->spec.ConfigFingerprint() != msg_.job_config) {
      svc_->link_->Refresh(msg_.job_name);  // an older job of that name: fetch this one
      job = nullptr;
    }
    if (job == nullptr) {
      auto self = shared_from_this();
      timer_.expires_after(std::chrono::milliseconds(20));
      timer_.async_wait([self](const boost::system::error_code& ec) {
        if (!ec) self->WaitForJob();
      });
      return;
    }
    // This worker cannot serve the job (it told the dispatcher, which sends its
    // consumers elsewhere): a transient refusal, so the client tries the other workers
    // rather than fail.
    if (!job->status.ok())
      return Refuse(Status::Unavailable("this worker cannot serve job " + msg_.job_name + ": " +
                                        job->status.message()));
    StreamSource source = NamedStream(*job, feed_, svc_->link_->worker_id());
    if (source.splits) {
      named_ = true;
      ++svc_->named_streams_;
    }
    StartProducer(std::move(source));
  }

  void StartProducer(StreamSource source) {
    if (Status st = CheckJob(source.job); !st.ok()) return Refuse(st);  // a dispatcher's job, too
    Result<std::shared_ptr<const Pipeline>> compiled = Pipeline::Compile(source.job.pipeline);
    if (!compiled.ok()) return Refuse(compiled.status());
    pipeline_ = std::move(*compiled);
    if (!source.splits) {  // point to point: each batch says what this worker lists
      listing_ = source.job.fingerprint;
      listed_samples_ = source.job.num_samples;
    }
    const int buffers = std::max(2, svc_->opts_.buffered_batches);
    auto allocator = std::make_shared<PooledBatchAllocator>(source.job.batch_size, pipeline_->sample_bytes(), buffers,
                                                            pipeline_->num_classes());
    if (Status st = Reserve(uint64_t(buffers) * allocator->buffer_bytes()); !st.ok()) return Refuse(st);
    outbox_.SetSource(source.splits, source.last_epoch);
    std::weak_ptr<Session> weak = weak_from_this();
    asio::io_context* io = &svc_->io_;
    producer_ = std::make_unique<BatchProducer>(
        std::move(source.dataset), pipeline_, source.job.seed, std::move(source.plan), std::move(allocator),
        svc_->arena_, /*max_in_flight=*/2,
        [weak, io](ProducedBatch&& b) {
          auto shared = std::make_shared<ProducedBatch>(std::move(b));
          asio::post(*io, [weak, shared] {
            if (auto self = weak.lock()) self->OnBatch(std::move(*shared));
          });
        },
        [weak, io](const Status& s) {
          asio::post(*io, [weak, s] {
            if (auto self = weak.lock()) self->OnProducerDone(s);
          });
        });
    producer_->SetSyntheticBatchCost(svc_->opts_.synthetic_cost_us);
    producer_->SetStats(svc_->pipeline_stats_);
    state_ = State::kStreaming;
    ++svc_->streams_;
    producer_->Start();
    if (draining_) producer_->StopPlanning();
  }

  void OnBatch(ProducedBatch&& b) {
    if (state_ != State::kStreaming) return;
    wire::BatchFrameInput in;
    in.provenance = b.plan.provenance();
    in.rows = b.rows;
    in.valid = b.valid;
    const Shape shape = pipeline_->output_shape();
    in.image_dtype = pipeline_->dtype();
    if (in.image_dtype == DType::kUint8) in.image_dims = {shape.height, shape.width, shape.channels};
    else in.image_dims = {shape.channels, shape.height, shape.width};
    in.targets = b.memory.targets;
    in.num_classes = b.memory.targets != nullptr ? pipeline_->num_classes() : 0;
    in.images = b.memory.images;
    in.labels = b.memory.labels;
    in.indices = b.memory.indices;
    in.skipped = std::move(b.skipped);
    in.owner = std::move(b.memory.owner);
    if (named_) in.job = msg_.job_name;
    in.listing = listing_;
    in.listed_samples = listed_samples_;
    outbox_.AddBatch(wire::EncodeBatch(in), in.provenance, b.valid);
    Pump();
  }

  void OnProducerDone(const Status& s) {
    producer_done_ = true;
    producer_status_ = s;
    Pump();
  }

  // Sends what the outbox releases; once the source is done and all is sent, the
  // stream's last frame (stream_outbox.h decides which), then a graceful close.
  void Pump() {
    if (state_ == State::kClosed) return;
    if (synthetic_) SyntheticFill();
    StreamOutbox::Sendable now = outbox_.TakeSendable();
    svc_->batches_sent_ += now.batches;
    svc_->bytes_sent_ += now.bytes;
    for (int64_t ns : now.waited_ns) svc_->send_wait_.ObserveNs(ns);
    for (OutFrame& f : now.frames) conn_->Send(std::move(f));
    if (producer_done_ && outbox_.queued() == 0 && state_ == State::kStreaming) {
      state_ = State::kEnding;
      if (!producer_status_.ok())
        LogWarn("stream for %s failed: %s", conn_->peer().c_str(), producer_status_.ToString().c_str());
      if (std::optional<OutFrame> last = outbox_.Final(producer_status_, draining_)) conn_->Send(std::move(*last));
      conn_->CloseAfterWrites();
    }
  }

  // Synthetic source (ferry-bench transport): ready-made batches, no producer.
  void StartSynthetic() {
    auto source = SyntheticSource::Create(msg_);
    if (!source.ok()) return Refuse(source.status());
    if (Status st = Reserve((*source)->batch_bytes()); !st.ok())
      return Refuse(st);
    synthetic_ = std::move(*source);
    outbox_.SetSource(/*splits=*/false, /*last_epoch=*/-1);  // its EndOfEpochs are its own
    state_ = State::kStreaming;
    ++svc_->streams_;
    Pump();
  }

  void SyntheticFill() {
    // Keep a few frames queued beyond the credits, like the real producer does, and no
    // more than the stream's buffers hold, whatever the client granted (a client that
    // granted 2^32 credits and never read grew this queue until the OOM killer came).
    const int64_t buffers = std::max(2, svc_->opts_.buffered_batches);
    while (!synthetic_->done() &&
           int64_t(outbox_.queued()) < std::max<int64_t>(2, std::min(outbox_.credits(), buffers) + 1)) {
      std::optional<SyntheticSource::Frame> f = synthetic_->Next();
      if (!f) break;
      outbox_.AddFrame(std::move(f->frame), f->needs_credit, f->last);
    }
    if (synthetic_->done()) producer_done_ = true;
  }

  void BadFrame(const Status& s) {
    ++svc_->bad_frames_;
    LogWarn("bad frame from %s: %s", conn_->peer().c_str(), s.ToString().c_str());
    Refuse(s);
  }

  // Sends an Error and closes after it is written.
  void Refuse(const Status& s) {
    if (state_ == State::kClosed || state_ == State::kEnding) return;
    state_ = State::kEnding;
    timer_.cancel();
    conn_->Send(wire::EncodeError(s));
    conn_->CloseAfterWrites();
    if (producer_) svc_->Retire(std::move(producer_));
  }

  Status Reserve(uint64_t bytes) {
    FERRY_RETURN_IF_ERROR(svc_->ReserveMemory(bytes));
    reserved_ += bytes;
    return Status::OK();
  }

  void Closed() {
    if (state_ == State::kClosed) return;
    if (named_) --svc_->named_streams_;
    svc_->ReleaseMemory(std::exchange(reserved_, 0));
    state_ = State::kClosed;
    timer_.cancel();
    outbox_ = StreamOutbox();  // frees the queued frames' memory now
    svc_->Retire(std::move(producer_));  // frees the stream's memory off the io thread
    svc_->SessionClosed(shared_from_this());
  }

  WorkerService::Impl* svc_;
  std::shared_ptr<FrameConnection> conn_;
  const uint64_t serial_;  // order of acceptance
  net::ServerHandshake handshake_;
  asio::steady_timer timer_;
  State state_ = State::kHello;
  wire::OpenStreamMsg msg_;
  std::shared_ptr<const Pipeline> pipeline_;
  std::unique_ptr<BatchProducer> producer_;
  std::unique_ptr<SyntheticSource> synthetic_;
  std::shared_ptr<SplitFeed> feed_;  // named streams
  bool named_ = false;
  uint64_t listing_ = 0;  // point to point: what this worker lists (0: synthetic, or by name)
  int64_t listed_samples_ = 0;

 public:
  // For /metrics (io thread): batches queued for credits, and credits unspent.
  size_t queued() const { return outbox_.queued(); }
  int64_t credits() const { return outbox_.credits(); }

 private:
  StreamOutbox outbox_;
  bool producer_done_ = false, draining_ = false;
  Status producer_status_;
  uint64_t reserved_ = 0;  // of the worker's batch memory (ReserveMemory)
  int job_waits_ = 0;      // polls for a named job's facts
};

void WorkerService::Impl::Accept() {
  net::AcceptLoop(acceptor_, [this] { return !draining_ && !stopping_; }, [this](tcp::socket socket) {
    if (!net::MakeRoom(sessions_, {opts_.max_connections, opts_.max_handshaking, 0}, &refused_connections_)) {
      boost::system::error_code ec;
      socket.close(ec);
      return;
    }
    ++connections_;
    auto s = std::make_shared<Session>(this, std::move(socket));
    sessions_.insert(s);
    open_connections_ = int64_t(sessions_.size());
    s->Start();
  });
}

void WorkerService::Impl::SessionClosed(const std::shared_ptr<Session>& s) {
  // Deferred: the session may be deep in its own call stack.
  asio::post(io_, [this, s] {
    sessions_.erase(s);
    open_connections_ = int64_t(sessions_.size());
    CheckDrained();
  });
}

void WorkerService::Impl::CloseAll() {
  stopping_ = true;
  boost::system::error_code ec;
  acceptor_.close(ec);
  if (drain_timer_) drain_timer_->cancel();
  auto copy = sessions_;
  for (auto& s : copy) s->ForceClose();
}

void WorkerService::Impl::Drain() {
  if (link_) {
    // Dispatcher mode: take no new leases, serve the ones held until their consumers
    // acknowledge them, then end the streams.
    if (drain_started_.exchange(true)) return;
    link_->SetDraining();
    Log("draining: taking no new leases; serving the splits held");
    drain_thread_ = std::thread([this] {
      // Wait for the consumers to acknowledge what this worker holds, as long as some
      // consumer is connected to take it (none for a second: nobody will; the splits
      // go back to the dispatcher when the worker leaves).
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(int64_t(opts_.drain_timeout_s * 1000));
      auto last_consumer = std::chrono::steady_clock::now();
      bool drained = false;
      while (!drained && !closing_ && std::chrono::steady_clock::now() < deadline) {
        drained = link_->WaitDrained(0.1);
        if (named_streams_ > 0) last_consumer = std::chrono::steady_clock::now();
        if (!drained && std::chrono::steady_clock::now() - last_consumer > std::chrono::seconds(1)) {
          LogWarn("draining: no consumer is connected to take the splits held: they go back to the dispatcher");
          break;
        }
      }
      if (!drained && std::chrono::steady_clock::now() >= deadline)
        LogWarn("drain timed out with splits unacknowledged: they go back to the dispatcher");
      DrainStreams();
    });
    return;
  }
  DrainStreams();
}

void WorkerService::Impl::DrainStreams() {
  asio::post(io_, [this] {
    if (draining_) return;
    draining_ = true;
    Log("draining: %zu connection(s) open", sessions_.size());
    boost::system::error_code ec;
    acceptor_.close(ec);
    auto copy = sessions_;
    for (auto& s : copy) s->Drain();
    drain_timer_ = std::make_unique<asio::steady_timer>(io_);
    drain_timer_->expires_after(std::chrono::milliseconds(int64_t(opts_.drain_timeout_s * 1000)));
    drain_timer_->async_wait([this](const boost::system::error_code& e) {
      if (e) return;
      if (!sessions_.empty()) LogWarn("drain timed out: closing %zu connection(s)", sessions_.size());
      CloseAll();
      asio::post(io_, [this] { CheckDrained(); });
    });
    CheckDrained();
  });
}

Result<std::unique_ptr<WorkerService>> WorkerService::Start(const WorkerOptions& options) {
  if (options.serves_job.empty() != options.serves_consumer.empty())
    return Status::InvalidArgument("serves_job and serves_consumer go together");
  if (!options.serves_job.empty() && options.dispatcher.empty())
    return Status::InvalidArgument("a worker that serves one consumer (hybrid) needs a dispatcher");
  auto impl = std::make_unique<Impl>(options);
  FERRY_ASSIGN_OR_RETURN(impl->tls_, net::TlsContextsFor(options.tls, /*need_server=*/true,
                                                         /*need_client=*/!options.dispatcher.empty()));
  FERRY_ASSIGN_OR_RETURN(impl->roots_, DataRoots::Make(options.data_roots));
  if (!impl->roots_.confined())
    Log("no --data-root: jobs may name any path this worker can read (see SECURITY.md)");
  FERRY_RETURN_IF_ERROR(impl->Bind());
  impl->Run();
  return std::unique_ptr<WorkerService>(new WorkerService(std::move(impl)));
}

WorkerService::WorkerService(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
WorkerService::~WorkerService() = default;
std::string WorkerService::address() const { return impl_->address_; }
void WorkerService::Drain() { impl_->Drain(); }
void WorkerService::WaitDrained() { impl_->WaitDrained(); }
bool WorkerService::WaitIdle() { return impl_->link_ ? impl_->link_->WaitIdle() : false; }
DispatcherLink::Wake WorkerService::WaitIdleOrDrain(bool idle_ends) {
  return impl_->link_ ? impl_->link_->WaitIdleOrDrain(idle_ends) : DispatcherLink::Wake::kStopped;
}
void WorkerService::Leave() {
  if (impl_->link_) impl_->link_->Leave();
}
void WorkerService::StopWaiting() {
  if (impl_->link_) impl_->link_->StopWaitingIdle();
}
std::string WorkerService::MetricsText() const {
  const Impl& i = *impl_;
  net::PromText t;
  t.One("ferry_worker_connections_total", "counter", "Connections accepted.", double(i.connections_.load()));
  t.One("ferry_worker_streams_total", "counter", "Streams opened by clients.", double(i.streams_.load()));
  t.One("ferry_worker_batches_sent_total", "counter", "Batches sent to clients.", double(i.batches_sent_.load()));
  t.One("ferry_worker_bytes_sent_total", "counter", "Bytes of frames sent to clients (batches and stream ends).",
        double(i.bytes_sent_.load()));
  const PipelineStats& ps = *i.pipeline_stats_;
  t.One("ferry_worker_samples_total", "counter", "Samples decoded and augmented into batches.",
        double(ps.samples.load(std::memory_order_relaxed)));
  t.Family("ferry_worker_skipped_samples_total", "counter",
           "Samples skipped (reported to the client by path and reason), by reason.");
  for (int r = 0; r < PipelineStats::kNumReasons; ++r)
    t.Sample("ferry_worker_skipped_samples_total", {{"reason", std::string(PipelineStats::kReasonNames[size_t(r)])}},
             double(ps.skipped[size_t(r)].load(std::memory_order_relaxed)));
  t.Family("ferry_worker_stage_seconds", "histogram",
           "Time per stage: read, decode and augment per sample; assemble (waiting for batch memory, compacting) "
           "and send (waiting in the stream for the client's credit) per batch.");
  t.HistogramSamples("ferry_worker_stage_seconds", {{"stage", "read"}}, ps.read.Read());
  t.HistogramSamples("ferry_worker_stage_seconds", {{"stage", "decode"}}, ps.decode.Read());
  t.HistogramSamples("ferry_worker_stage_seconds", {{"stage", "augment"}}, ps.augment.Read());
  t.HistogramSamples("ferry_worker_stage_seconds", {{"stage", "assemble"}}, ps.assemble.Read());
  t.HistogramSamples("ferry_worker_stage_seconds", {{"stage", "send"}}, i.send_wait_.Read());
  const std::map<std::string, OpCosts::Cost> ops = ps.ops.Read();
  t.Family("ferry_worker_op_seconds_total", "counter",
           "Time per pipeline step (read, decode, each op by name, output), summed over the samples timed step by "
           "step (one in " + std::to_string(PipelineStats::kOpSampling) + "): the steps' shares of a sample's time.");
  for (const auto& [name, c] : ops) t.Sample("ferry_worker_op_seconds_total", {{"op", name}}, double(c.ns) / 1e9);
  t.Family("ferry_worker_op_timed_samples_total", "counter", "Samples timed step by step, per step.");
  for (const auto& [name, c] : ops) t.Sample("ferry_worker_op_timed_samples_total", {{"op", name}}, double(c.samples));
  struct Queues {
    int64_t batches = 0, credits = 0;
  };
  Impl* impl = impl_.get();
  const Queues q = net::OnIo<Queues>(
      impl->io_,
      [impl] {
        Queues q;
        for (const auto& s : impl->sessions_) {
          q.batches += int64_t(s->queued());
          q.credits += s->credits();
        }
        return q;
      },
      Queues{-1, -1});
  t.One("ferry_worker_queued_batches", "gauge",
        "Batches produced and waiting in their streams for a credit (-1: the io thread did not answer).",
        double(q.batches));
  t.One("ferry_worker_unspent_credits", "gauge",
        "Credits clients granted that no batch has used yet: batches the clients wait for.", double(q.credits));
  t.One("ferry_worker_bad_frames_total", "counter", "Malformed frames (each closed its connection).",
        double(i.bad_frames_.load()));
  t.One("ferry_worker_auth_failures_total", "counter", "Handshakes refused (token or TLS).",
        double(i.auth_failures_.load()));
  t.One("ferry_worker_open_connections", "gauge", "Open connections.", double(i.open_connections_.load()));
  t.One("ferry_worker_named_streams", "gauge", "Open streams of dispatcher jobs.", double(i.named_streams_.load()));
  t.One("ferry_worker_memory_budget_bytes", "gauge", "Batch memory the worker may reserve (--max-memory).",
        double(i.memory_budget_));
  t.One("ferry_worker_draining", "gauge", "1 once SIGTERM started a drain.", i.drain_started_.load() ? 1 : 0);
  if (i.link_) {
    t.One("ferry_worker_registered", "gauge", "1 while registered with the dispatcher.", i.link_->registered() ? 1 : 0);
    t.One("ferry_worker_leases_held", "gauge", "Splits leased to this worker, by the last heartbeat reply.",
          double(i.link_->held()));
    t.One("ferry_worker_heartbeats_total", "counter", "Heartbeats answered by the dispatcher.",
          double(i.link_->heartbeats()));
    t.One("ferry_worker_jobs_known", "gauge", "Jobs whose facts this worker holds (finished ones are forgotten).",
          double(i.link_->jobs_known()));
    t.One("ferry_worker_heartbeat_bytes", "gauge", "Bytes of the last heartbeat sent to the dispatcher.",
          double(i.link_->heartbeat_bytes()));
  }
  return t.str();
}

bool WorkerService::Ready() const {
  const Impl& i = *impl_;
  if (i.drain_started_.load()) return false;
  return !i.link_ || i.link_->registered();
}

WorkerService::Stats WorkerService::stats() const {
  return {impl_->connections_.load(), impl_->streams_.load(), impl_->batches_sent_.load(), impl_->bad_frames_.load(),
          impl_->auth_failures_.load(), impl_->open_connections_.load()};
}

}  // namespace ferry
