#include "server/worker_service.h"

#include <atomic>
#include <utility>  // before Asio: Boost 1.74 uses std::exchange without it in C++20

#include <boost/asio.hpp>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "core/hash.h"
#include "core/log.h"
#include "data/dataset.h"
#include "ferry/internal/connection.h"
#include "server/listen.h"
#include "ferry/internal/wire.h"
#include "ferry/pipeline_spec.h"
#include "pipeline/producer.h"
#include "pipeline/split_plan.h"
#include "server/dispatcher_link.h"

namespace ferry {

using internal::FrameConnection;
using internal::InFrame;
using internal::MessageType;
using internal::OutFrame;
namespace asio = boost::asio;
using tcp = asio::ip::tcp;

class Session;

class WorkerService::Impl {
 public:
  explicit Impl(const WorkerOptions& o)
      : opts_(o), acceptor_(io_), buffers_(internal::DefaultBufferAllocator()), arena_(MakeDecodeArena(o.threads)) {}

  Status Bind() {
    FERRY_ASSIGN_OR_RETURN(address_, Listen(acceptor_, opts_.listen));
    return Status::OK();
  }

  // Dispatcher mode: the link registers this worker under the address clients use.
  void StartLink() {
    if (opts_.dispatcher.empty()) return;
    LinkOptions l;
    l.dispatcher = opts_.dispatcher;
    l.token = opts_.token;
    l.advertise = opts_.advertise;
    if (l.advertise.empty()) {
      auto hp = internal::SplitHostPort(address_);
      std::string host = hp->first;
      if (host == "0.0.0.0" || host == "::") host = asio::ip::host_name();
      l.advertise = host + ":" + std::to_string(hp->second);
    }
    l.worker_id = opts_.worker_id.empty() ? l.advertise + "/" + RandomSuffix()
                                          : opts_.worker_id;
    l.open_dataset = [this](const std::string& path) { return OpenDatasetCached(path); };
    link_ = std::make_unique<DispatcherLink>(std::move(l));
    link_->Start();
  }

  static std::string RandomSuffix() {
    static const char* hex = "0123456789abcdef";
    std::string n = internal::RandomNonce(), out;
    for (size_t i = 0; i < 4 && i < n.size(); ++i) {
      out += hex[uint8_t(n[i]) >> 4];
      out += hex[uint8_t(n[i]) & 15];
    }
    return out;
  }

  void Run() {
    StartLink();
    Accept();
    reaper_ = std::thread([this] { Reap(); });
    io_thread_ = std::thread([this] { io_.run(); });
  }

  ~Impl() {
    // Close everything on the io thread, then let it run out of work rather than
    // stop it: the aborted reads must still run, because their handlers hold the
    // sessions (a session and its connection's handler refer to each other until
    // then). Stopping instead leaked every open session with its socket still open,
    // so clients never learned that the worker was gone, and its producer kept
    // posting to a destroyed io_context.
    link_.reset();  // no more leases
    if (drain_thread_.joinable()) drain_thread_.join();
    asio::post(io_, [this] { CloseAll(); });
    if (io_thread_.joinable()) io_thread_.join();
    sessions_.clear();
    {
      std::lock_guard<std::mutex> lock(reap_mu_);
      reap_stop_ = true;
      reap_cv_.notify_all();
    }
    if (reaper_.joinable()) reaper_.join();
  }

  void Drain();
  void DrainStreams();
  void WaitDrained() {
    {
      std::unique_lock<std::mutex> lock(drain_mu_);
      drain_cv_.wait(lock, [&] { return drained_; });
    }
    if (link_) link_->Leave();
  }

  // Stops and destroys a producer off the io thread (Stop waits for its tasks).
  void Retire(std::unique_ptr<BatchProducer> p) {
    if (!p) return;
    std::lock_guard<std::mutex> lock(reap_mu_);
    reap_queue_.push_back(std::move(p));
    reap_cv_.notify_all();
  }

  Result<std::shared_ptr<const Dataset>> OpenDatasetCached(const std::string& path) {
    std::lock_guard<std::mutex> lock(datasets_mu_);
    auto it = datasets_.find(path);
    if (it != datasets_.end()) {
      if (auto ds = it->second.lock()) return ds;
    }
    FERRY_ASSIGN_OR_RETURN(std::unique_ptr<Dataset> ds, OpenDataset(path));
    std::shared_ptr<const Dataset> shared(std::move(ds));
    datasets_[path] = shared;
    return shared;
  }

  void SessionClosed(const std::shared_ptr<Session>& s);

  const WorkerOptions opts_;
  asio::io_context io_;
  tcp::acceptor acceptor_;
  std::shared_ptr<internal::BufferAllocator> buffers_;
  std::shared_ptr<tbb::task_arena> arena_;
  asio::thread_pool blocking_{1};  // dataset listing off the io thread
  std::string address_;
  bool draining_ = false;  // io thread only
  bool stopping_ = false;  // io thread only: CloseAll() ran, accept nothing more
  std::set<std::shared_ptr<Session>> sessions_;  // io thread only
  std::unique_ptr<DispatcherLink> link_;         // dispatcher mode; fixed after Run()
  std::thread drain_thread_;
  std::atomic<bool> drain_started_{false};
  std::atomic<int> named_streams_{0};  // open streams by job name (dispatcher mode)

  std::atomic<int64_t> connections_{0}, streams_{0}, batches_sent_{0}, bad_frames_{0}, auth_failures_{0};
  std::atomic<int64_t> open_connections_{0};

 private:
  void Accept();
  void CloseAll();
  void CheckDrained() {
    if (!draining_ || !sessions_.empty()) return;
    std::lock_guard<std::mutex> lock(drain_mu_);
    drained_ = true;
    drain_cv_.notify_all();
  }
  void Reap() {
    for (;;) {
      std::unique_ptr<BatchProducer> p;
      {
        std::unique_lock<std::mutex> lock(reap_mu_);
        reap_cv_.wait(lock, [&] { return reap_stop_ || !reap_queue_.empty(); });
        if (reap_queue_.empty()) return;
        p = std::move(reap_queue_.front());
        reap_queue_.pop_front();
      }
      p->Stop();
    }
  }

  std::thread io_thread_;
  std::thread reaper_;
  std::mutex reap_mu_;
  std::condition_variable reap_cv_;
  std::deque<std::unique_ptr<BatchProducer>> reap_queue_;  // GUARDED_BY(reap_mu_)
  bool reap_stop_ = false;                                   // GUARDED_BY(reap_mu_)
  std::mutex datasets_mu_;
  std::map<std::string, std::weak_ptr<const Dataset>> datasets_;  // GUARDED_BY(datasets_mu_)
  std::mutex drain_mu_;
  std::condition_variable drain_cv_;
  bool drained_ = false;  // GUARDED_BY(drain_mu_)
  std::unique_ptr<asio::steady_timer> drain_timer_;

  friend class WorkerService;
};

// One client connection and its stream. Lives on the io thread.
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(WorkerService::Impl* svc, tcp::socket socket)
      : svc_(svc),
        conn_(std::make_shared<FrameConnection>(std::move(socket), ReceiveLimits(svc->opts_.limits),
                                                svc->buffers_)),
        timer_(svc->io_) {}

  void Start() {
    nonce_ = internal::RandomNonce();
    conn_->Send(internal::EncodeChallenge({nonce_, !svc_->opts_.token.empty(), svc_->opts_.id}));
    auto self = shared_from_this();
    conn_->StartReading([self](const Status& s, InFrame f) { self->OnFrame(s, std::move(f)); });
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
        synth_left_ = 0;
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

 private:
  // Peers send a worker control messages only. A Batch header is refused before its
  // body is allocated: otherwise any peer, before authenticating, could make the
  // worker reserve up to limits.max_batch_bytes (4 GiB) per connection with 16 bytes.
  static internal::FrameLimits ReceiveLimits(internal::FrameLimits limits) {
    limits.max_batch_bytes = 0;
    return limits;
  }

  enum class State { kHello, kOpen, kOpening, kStreaming, kEnding, kClosed };

  struct Outgoing {
    OutFrame frame;
    bool needs_credit;
  };

  void OnFrame(const Status& s, InFrame f) {
    if (!s.ok()) {
      if (s.code() == StatusCode::kInvalidArgument || s.code() == StatusCode::kResourceExhausted) {
        ++svc_->bad_frames_;
        Log("closing %s: %s", conn_->peer().c_str(), s.ToString().c_str());
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
          Result<uint32_t> n = internal::DecodeCredit(f);
          if (!n.ok()) return BadFrame(n.status());
          credits_ += *n;
          return Pump();
        }
        return BadFrame(Status::InvalidArgument(std::string("unexpected ") + MessageTypeName(f.header.type) +
                                                " while streaming"));
      default:
        return BadFrame(Status::InvalidArgument(std::string("unexpected ") + MessageTypeName(f.header.type)));
    }
  }

  void OnHello(const InFrame& f) {
    Result<internal::HelloMsg> h = internal::DecodeHello(f);
    if (!h.ok()) return BadFrame(h.status());
    if (!svc_->opts_.token.empty() && !internal::MacEquals(h->mac, internal::HelloMac(svc_->opts_.token, nonce_))) {
      ++svc_->auth_failures_;
      Log("refusing %s: %s", conn_->peer().c_str(), h->mac.empty() ? "no token presented" : "wrong token");
      return Refuse(Status(StatusCode::kUnauthenticated,
                           h->mac.empty() ? "this worker requires a token (--token-file or FERRY_TOKEN)"
                                          : "wrong token"));
    }
    peer_id_ = h->peer_id;
    conn_->Send(internal::EncodeHelloOk(svc_->opts_.id));
    state_ = State::kOpen;
  }

  void OnOpenStream(const InFrame& f) {
    Result<internal::OpenStreamMsg> m = internal::DecodeOpenStream(f);
    if (!m.ok()) return BadFrame(m.status());
    if (m->by_name && !svc_->link_)
      return Refuse(Status::Unimplemented("this worker has no dispatcher (--dispatcher): give the job inline"));
    if (svc_->draining_) return Refuse(Status::Unavailable("worker is draining"));
    msg_ = *m;
    credits_ = msg_.credits;
    timer_.cancel();
    state_ = State::kOpening;
    if (m->by_name) {
      if (msg_.consumer_id.empty()) return Refuse(Status::InvalidArgument("a stream by job name needs a consumer id"));
      feed_ = svc_->link_->Feed(msg_.job_name, msg_.consumer_id);
      svc_->link_->Want(msg_.job_name);
      if (feed_->held() == 0) svc_->link_->Poke();  // a consumer is waiting: ask for splits now
      return WaitForJob();
    }
    const internal::JobSpecMsg& j = msg_.job;
    if (j.batch_size == 0) return Refuse(Status::InvalidArgument("batch_size must be > 0"));
    if (j.num_workers == 0 || j.worker_index >= j.num_workers)
      return Refuse(Status::InvalidArgument("worker_index must be in [0, num_workers)"));
    if (j.dataset_path.rfind("synthetic:", 0) == 0) return StartSynthetic();
    Result<PipelineSpec> spec = PipelineSpec::FromJson(j.pipeline_json);
    if (!spec.ok()) return Refuse(spec.status());
    spec_ = *spec;
    // Listing can take a second on ImageNet-sized trees: do it off the io thread.
    std::weak_ptr<Session> weak = weak_from_this();
    WorkerService::Impl* svc = svc_;
    const std::string path = j.dataset_path;
    asio::post(svc_->blocking_, [weak, svc, path] {
      auto ds = std::make_shared<Result<std::shared_ptr<const Dataset>>>(svc->OpenDatasetCached(path));
      asio::post(svc->io_, [weak, ds] {
        if (auto self = weak.lock()) self->StartStream(std::move(*ds));
      });
    });
  }

  void StartStream(Result<std::shared_ptr<const Dataset>> ds) {
    if (state_ != State::kOpening) return;
    if (!ds.ok()) return Refuse(ds.status());
    const internal::JobSpecMsg& j = msg_.job;
    LoaderOptions o;
    o.data = j.dataset_path;
    o.pipeline = spec_;
    o.batch_size = int(j.batch_size);
    o.seed = j.seed;
    o.shuffle = j.shuffle;
    o.last_batch = j.last_batch == internal::WireLastBatch::kDrop  ? LastBatch::kDrop
                   : j.last_batch == internal::WireLastBatch::kPad ? LastBatch::kPad
                                                                   : LastBatch::kKeep;
    o.epochs = j.epochs;
    o.first_epoch = j.first_epoch;
    o.shard_index = int(j.worker_index);
    o.num_shards = int(j.num_workers);
    if (j.fingerprint != 0) {
      Fingerprinter f;
      f.AddU64((*ds)->fingerprint());
      f.AddU64(spec_.Fingerprint());
      if (f.Finish() != j.fingerprint)
        return Refuse(Status::FailedPrecondition("dataset fingerprint mismatch: this worker lists " + j.dataset_path +
                                                 " differently from the client"));
    }
    std::unique_ptr<PlanSource> plan = std::make_unique<StaticShardPlan>((*ds)->size(), o);
    if (msg_.resume_epoch > j.first_epoch || msg_.resume_batches_done > 0)
      plan = std::make_unique<ResumePlan>(std::move(plan), msg_.resume_epoch, msg_.resume_batches_done);
    last_epoch_ = j.epochs > 0 ? int64_t(j.first_epoch) + j.epochs - 1 : -1;
    StartProducer(*ds, o.seed, o.batch_size, std::move(plan));
  }

  // A stream by job name (dispatcher mode): it serves the splits leased to this worker
  // for its consumer. The job's facts come with its first lease; until then it waits.
  void WaitForJob() {
    if (state_ != State::kOpening) return;
    std::shared_ptr<const WorkerJob> job = svc_->link_->Job(msg_.job_name);
    if (job == nullptr) {
      auto self = shared_from_this();
      timer_.expires_after(std::chrono::milliseconds(20));
      timer_.async_wait([self](const boost::system::error_code& ec) {
        if (!ec) self->WaitForJob();
      });
      return;
    }
    if (!job->status.ok()) return Refuse(job->status);
    spec_ = job->spec;
    if (job->config.mode == 1) return StartParallelEpochs(*job);
    named_ = true;
    ++svc_->named_streams_;
    auto plan = std::make_unique<SplitPlan>(job->geometry(), feed_, feed_->Attach());
    StartProducer(job->dataset, job->config.seed, job->config.batch_size, std::move(plan));
  }

  // parallel_epochs: this worker yields every epoch of the job by itself, its
  // augmentation drawn from the job's seed mixed with the worker's id (so that workers
  // differ, and a worker given a fixed --worker-id repeats itself).
  void StartParallelEpochs(const WorkerJob& job) {
    const internal::JobConfigMsg& c = job.config;
    LoaderOptions o;
    o.data = c.dataset;
    o.pipeline = job.spec;
    o.batch_size = c.batch_size;
    Fingerprinter f;
    f.AddU64(c.seed);
    f.Add(svc_->link_->worker_id());
    o.seed = f.Finish();
    o.shuffle = c.shuffle;
    o.last_batch = LastBatch(c.last_batch);
    o.epochs = c.epochs;
    last_epoch_ = c.epochs > 0 ? c.epochs - 1 : -1;
    StartProducer(job.dataset, o.seed, o.batch_size, std::make_unique<StaticShardPlan>(job.dataset->size(), o));
  }

  void StartProducer(std::shared_ptr<const Dataset> dataset, uint64_t seed, int64_t batch_size,
                     std::unique_ptr<PlanSource> plan) {
    auto allocator = std::make_shared<PooledBatchAllocator>(batch_size, spec_.sample_bytes(),
                                                            std::max(2, svc_->opts_.buffered_batches));
    std::weak_ptr<Session> weak = weak_from_this();
    asio::io_context* io = &svc_->io_;
    producer_ = std::make_unique<BatchProducer>(
        std::move(dataset), spec_, seed, std::move(plan), std::move(allocator), svc_->arena_, /*max_in_flight=*/2,
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
    state_ = State::kStreaming;
    ++svc_->streams_;
    producer_->Start();
    if (draining_) producer_->StopPlanning();
  }

  void OnBatch(ProducedBatch&& b) {
    if (state_ != State::kStreaming) return;
    internal::BatchFrameInput in;
    in.provenance = b.plan.provenance();
    in.rows = b.rows;
    in.valid = b.valid;
    in.image_dtype = spec_.dtype();
    if (spec_.output == PipelineSpec::Output::kUint8NHWC) in.image_dims = {spec_.size, spec_.size, spec_.channels()};
    else in.image_dims = {spec_.channels(), spec_.size, spec_.size};
    in.images = b.memory.images;
    in.labels = b.memory.labels;
    in.indices = b.memory.indices;
    in.skipped = std::move(b.skipped);
    in.owner = std::move(b.memory.owner);
    if (named_) in.job = msg_.job_name;
    epoch_batches_ = b.plan.batch_in_epoch + 1;
    epoch_samples_ += b.valid;
    // Even an empty batch (all its files bad) goes out: it carries the skips.
    out_.push_back({internal::EncodeBatch(in), true});
    // Named streams carry splits, not whole epochs: the client tracks epochs itself.
    if (b.plan.last_in_epoch && !named_) QueueEndOfEpoch(b.plan.epoch);
    Pump();
  }

  void QueueEndOfEpoch(uint64_t epoch) {
    internal::EndOfEpochMsg e{epoch, epoch_batches_, epoch_samples_, int64_t(epoch) == last_epoch_};
    if (e.last) final_eoe_queued_ = true;
    out_.push_back({internal::EncodeEndOfEpoch(e), false});
    epoch_batches_ = epoch_samples_ = 0;
  }

  void OnProducerDone(const Status& s) {
    producer_done_ = true;
    producer_status_ = s;
    Pump();
  }

  void Pump() {
    if (state_ == State::kClosed) return;
    if (synthetic_) SyntheticFill();
    while (!out_.empty() && (!out_.front().needs_credit || credits_ > 0)) {
      if (out_.front().needs_credit) {
        --credits_;
        ++svc_->batches_sent_;
      }
      conn_->Send(std::move(out_.front().frame));
      out_.pop_front();
    }
    if (producer_done_ && out_.empty() && state_ == State::kStreaming) {
      state_ = State::kEnding;
      if (!producer_status_.ok()) {
        Log("stream for %s failed: %s", conn_->peer().c_str(), producer_status_.ToString().c_str());
        conn_->Send(internal::EncodeError(producer_status_));
      } else if (named_ && !draining_) {
        // Its feed was taken over by a newer stream of the same consumer.
        conn_->Send(internal::EncodeError(Status::Cancelled("superseded by a newer stream of the same consumer")));
      } else if (draining_ && !final_eoe_queued_) {
        conn_->Send(internal::EncodeError(Status::Unavailable("worker is draining; stream ended early")));
      } else if (!final_eoe_queued_) {
        conn_->Send(internal::EncodeEndOfEpoch({last_epoch_ >= 0 ? uint64_t(last_epoch_) : 0, 0, 0, true}));
      }
      conn_->CloseAfterWrites();
    }
  }

  // Synthetic source (ferry-bench transport): "synthetic:BYTES:BATCHES" serves ready-made
  // batches of BYTES image bytes, BATCHES per epoch, from one pre-filled buffer: the
  // transport measured without any decoding.
  void StartSynthetic() {
    const internal::JobSpecMsg& j = msg_.job;
    unsigned long long bytes = 0, batches = 0;
    if (std::sscanf(j.dataset_path.c_str(), "synthetic:%llu:%llu", &bytes, &batches) != 2 || bytes == 0 ||
        batches == 0 || batches > (1ull << 40) || bytes % j.batch_size != 0 || bytes > (1ull << 32))
      return Refuse(Status::InvalidArgument("synthetic dataset must be synthetic:BYTES:BATCHES, BYTES a multiple of batch_size"));
    synthetic_ = true;
    synth_bytes_ = bytes;
    synth_per_epoch_ = int64_t(batches);
    synth_left_ =
        j.epochs > 0 && synth_per_epoch_ <= INT64_MAX / j.epochs ? synth_per_epoch_ * j.epochs : INT64_MAX;
    last_epoch_ = j.epochs > 0 ? int64_t(j.first_epoch) + j.epochs - 1 : -1;
    const size_t rows = j.batch_size;
    // [images | labels | indices], each part 64-byte aligned: EncodeBatch needs each
    // tensor word-aligned (Cap'n Proto refuses, with an exception, to reference
    // unaligned external data) and readable up to its last whole word.
    synth_labels_offset_ = (bytes + 63) / 64 * 64;
    const size_t total = synth_labels_offset_ + 2 * rows * sizeof(int64_t);
    void* p = std::aligned_alloc(64, (total + 63) / 64 * 64);
    if (p == nullptr) return Refuse(Status::ResourceExhausted("cannot allocate the synthetic batch"));
    std::memset(p, 0x5a, bytes);
    synth_buf_ = std::shared_ptr<void>(p, [](void* q) { std::free(q); });
    std::memset(static_cast<uint8_t*>(p) + bytes, 0, synth_labels_offset_ - bytes);
    auto* ints = reinterpret_cast<int64_t*>(static_cast<uint8_t*>(p) + synth_labels_offset_);
    for (size_t i = 0; i < rows; ++i) ints[i] = ints[rows + i] = int64_t(i);
    state_ = State::kStreaming;
    ++svc_->streams_;
    Pump();
  }

  void SyntheticFill() {
    const internal::JobSpecMsg& j = msg_.job;
    // Keep a few frames queued beyond the credits, like the real producer does.
    while (synth_left_ > 0 && int64_t(out_.size()) < std::max<int64_t>(2, credits_ + 1)) {
      internal::BatchFrameInput in;
      const int64_t rows = j.batch_size;
      in.provenance.epoch = j.first_epoch + uint64_t(synth_sent_ / synth_per_epoch_);
      in.provenance.batch_in_epoch = synth_sent_ % synth_per_epoch_;
      in.provenance.last_in_epoch = in.provenance.batch_in_epoch + 1 == synth_per_epoch_;
      in.rows = in.valid = rows;
      in.image_dtype = DType::kUint8;
      in.image_dims = {1, 1, int64_t(synth_bytes_) / rows};
      auto* base = static_cast<uint8_t*>(synth_buf_.get());
      in.images = base;
      in.labels = reinterpret_cast<const int64_t*>(base + synth_labels_offset_);
      in.indices = in.labels + rows;
      in.owner = synth_buf_;
      out_.push_back({internal::EncodeBatch(in), true});
      epoch_batches_ = in.provenance.batch_in_epoch + 1;
      epoch_samples_ += rows;
      if (in.provenance.last_in_epoch) QueueEndOfEpoch(in.provenance.epoch);
      ++synth_sent_;
      --synth_left_;
    }
    if (synth_left_ == 0) producer_done_ = true;
  }

  void BadFrame(const Status& s) {
    ++svc_->bad_frames_;
    Log("bad frame from %s: %s", conn_->peer().c_str(), s.ToString().c_str());
    Refuse(s);
  }

  // Sends an Error and closes after it is written.
  void Refuse(const Status& s) {
    if (state_ == State::kClosed || state_ == State::kEnding) return;
    state_ = State::kEnding;
    timer_.cancel();
    conn_->Send(internal::EncodeError(s));
    conn_->CloseAfterWrites();
    if (producer_) svc_->Retire(std::move(producer_));
  }

  void Closed() {
    if (state_ == State::kClosed) return;
    if (named_) --svc_->named_streams_;
    state_ = State::kClosed;
    timer_.cancel();
    out_.clear();
    svc_->Retire(std::move(producer_));  // frees the stream's memory off the io thread
    svc_->SessionClosed(shared_from_this());
  }

  WorkerService::Impl* svc_;
  std::shared_ptr<FrameConnection> conn_;
  asio::steady_timer timer_;
  State state_ = State::kHello;
  std::string nonce_, peer_id_;
  internal::OpenStreamMsg msg_;
  PipelineSpec spec_;
  std::unique_ptr<BatchProducer> producer_;
  std::shared_ptr<SplitFeed> feed_;  // named streams
  bool named_ = false;
  std::deque<Outgoing> out_;
  int64_t credits_ = 0;
  bool producer_done_ = false, draining_ = false, final_eoe_queued_ = false;
  Status producer_status_;
  int64_t last_epoch_ = -1, epoch_batches_ = 0, epoch_samples_ = 0;
  // Synthetic source.
  bool synthetic_ = false;
  size_t synth_bytes_ = 0, synth_labels_offset_ = 0;
  int64_t synth_per_epoch_ = 1, synth_left_ = 0, synth_sent_ = 0;
  std::shared_ptr<void> synth_buf_;
};

void WorkerService::Impl::Accept() {
  AcceptLoop(acceptor_, [this] { return !draining_ && !stopping_; }, [this](tcp::socket socket) {
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
      while (!drained && std::chrono::steady_clock::now() < deadline) {
        drained = link_->WaitDrained(0.1);
        if (named_streams_ > 0) last_consumer = std::chrono::steady_clock::now();
        if (!drained && std::chrono::steady_clock::now() - last_consumer > std::chrono::seconds(1)) {
          Log("draining: no consumer is connected to take the splits held: they go back to the dispatcher");
          break;
        }
      }
      if (!drained && std::chrono::steady_clock::now() >= deadline)
        Log("drain timed out with splits unacknowledged: they go back to the dispatcher");
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
      if (!sessions_.empty()) Log("drain timed out: closing %zu connection(s)", sessions_.size());
      CloseAll();
      asio::post(io_, [this] { CheckDrained(); });
    });
    CheckDrained();
  });
}

Result<std::unique_ptr<WorkerService>> WorkerService::Start(const WorkerOptions& options) {
  auto impl = std::make_unique<Impl>(options);
  FERRY_RETURN_IF_ERROR(impl->Bind());
  impl->Run();
  return std::unique_ptr<WorkerService>(new WorkerService(std::move(impl)));
}

WorkerService::WorkerService(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
WorkerService::~WorkerService() = default;
std::string WorkerService::address() const { return impl_->address_; }
void WorkerService::Drain() { impl_->Drain(); }
void WorkerService::WaitDrained() { impl_->WaitDrained(); }
void WorkerService::WaitIdle() {
  if (impl_->link_) impl_->link_->WaitIdle();
}
WorkerService::Stats WorkerService::stats() const {
  return {impl_->connections_.load(), impl_->streams_.load(), impl_->batches_sent_.load(), impl_->bad_frames_.load(),
          impl_->auth_failures_.load(), impl_->open_connections_.load()};
}

}  // namespace ferry
