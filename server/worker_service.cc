#include "server/worker_service.h"

#include <utility>  // before Asio: Boost 1.74 uses std::exchange without it in C++20

#include <atomic>
#include <boost/asio.hpp>
#include <deque>
#include <set>
#include <thread>

#include "core/histogram.h"
#include "core/log.h"
#include "core/mutex.h"
#include "core/resources.h"
#include "data/data_roots.h"
#include "net/address.h"
#include "net/auth.h"
#include "net/connection.h"
#include "net/handshake.h"
#include "net/listen.h"
#include "net/run_io.h"
#include "pipeline/producer.h"
#include "wire/codec.h"
#include "worker/dispatcher_link.h"
#include "worker/stream.h"
#include "worker/worker_core.h"
#include "worker/worker_metrics.h"

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
  explicit Impl(const WorkerOptions& o) : opts_(o), acceptor_(io_) {}

  // Once bound (the link advertises the address): the dataset cache, the link to the
  // dispatcher (dispatcher mode; started by Run) and the core the streams decide with.
  void Make(DataRoots roots) {
    datasets_ = std::make_unique<DatasetCache>(std::move(roots));
    WorkerEnv env;
    // A batch made in Python holds an arena thread while it waits for its process:
    // one more thread per process, so that decoding goes on meanwhile.
    env.arena = MakeDecodeArena(!opts_.allow_user_code ? opts_.threads
                                                       : (opts_.threads > 0 ? opts_.threads : AvailableCpus()) +
                                                             opts_.python.processes);
    env.post = [io = &io_](std::function<void()> fn) { asio::post(*io, std::move(fn)); };
    env.run_blocking = [pool = &blocking_](std::function<void()> fn) { asio::post(*pool, std::move(fn)); };
    env.retire = [this](std::unique_ptr<BatchProducer> p) { Retire(std::move(p)); };
    if (opts_.share_window_bytes > 0) env.window = std::make_shared<BatchWindow>(opts_.share_window_bytes);
    env.scheduler = FairScheduler::Make(env.arena, env.arena->max_concurrency());
    if (opts_.allow_user_code) {
      env.python = std::make_shared<PythonPool>(opts_.python);
      env.python->Warm();  // their imports overlap the worker's start, not a job's
    }
    if (!opts_.dispatcher.empty()) link_ = std::make_unique<DispatcherLink>(LinkOptionsFor(env.stats, env.python, env.scheduler));
    WorkerCoreOptions c;
    c.buffered_batches = opts_.buffered_batches;
    c.memory_budget_bytes = opts_.max_memory_bytes != 0 ? opts_.max_memory_bytes : MemoryLimitBytes() / 4 * 3;
    c.allow_synthetic = opts_.allow_synthetic;
    c.synthetic_cost_us = opts_.synthetic_cost_us;
    core_ = std::make_unique<WorkerCore>(c, std::move(env), datasets_.get(), link_.get());
  }

  Status Bind() {
    FERRY_ASSIGN_OR_RETURN(address_, net::Listen(acceptor_, opts_.listen));
    return Status::OK();
  }

  // Dispatcher mode: the link registers this worker under the address clients use.
  LinkOptions LinkOptionsFor(std::shared_ptr<PipelineStats> stats, std::shared_ptr<PythonPool> python,
                             std::shared_ptr<FairScheduler> scheduler) {
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
    l.data.dataset = [datasets = datasets_.get()](const std::string& path) { return datasets->Open(path); };
    l.open_tokenizer = [datasets = datasets_.get()](const JobSpec& job) { return datasets->OpenTokenizer(job); };
    l.data.allow_synthetic = opts_.allow_synthetic;
    if (python != nullptr) {
      l.data.user_code = [python](const JobSpec& job) { return OpenUserCode(python.get(), job); };
      l.data.check_user_code = [python](const JobSpec& job) { return CheckUserCode(python.get(), job); };
    }
    l.forget_after = std::chrono::milliseconds(int64_t(opts_.forget_jobs_after_s * 1000));
    l.load = [stats = std::move(stats), scheduler = std::move(scheduler)] { return WorkerLoadOf(*stats, scheduler.get()); };
    return l;
  }

  void Run() {
    if (link_) link_->Start();
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
    sessions_.clear();
    link_.reset();  // no more leases; the dispatcher finds the worker silent
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

  void SessionClosed(const std::shared_ptr<Session>& s);
  WorkerQueues Queues();

  const WorkerOptions opts_;
  asio::io_context io_;
  tcp::acceptor acceptor_;
  const std::shared_ptr<BufferAllocator> buffers_ = DefaultBufferAllocator();
  net::TlsContexts tls_;  // server: sessions; client: the dispatcher link
  asio::thread_pool blocking_{1};  // dataset listing off the io thread
  std::unique_ptr<DatasetCache> datasets_;
  std::unique_ptr<DispatcherLink> link_;  // dispatcher mode; fixed after Run()
  std::unique_ptr<WorkerCore> core_;      // io thread only, but for its counters; fixed after Run()
  std::string address_;
  bool stopping_ = false;  // io thread only: CloseAll() ran, accept nothing more
  std::set<std::shared_ptr<Session>> sessions_;  // io thread only
  std::thread drain_thread_;
  std::atomic<bool> drain_started_{false};
  std::atomic<bool> closing_{false};  // the destructor runs: the drain thread gives up
  uint64_t next_serial_ = 0;          // io thread only
  int64_t refused_connections_ = 0;   // io thread only

 private:
  void Accept();
  void CloseAll();
  void CheckDrained() {
    if (!core_->draining() || !sessions_.empty()) return;
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
  Mutex drain_mu_;
  CondVar drain_cv_;
  bool drained_ GUARDED_BY(drain_mu_) = false;
  std::unique_ptr<asio::steady_timer> drain_timer_;

  friend class WorkerService;
};

// One client connection: TLS, the token handshake, then its stream (worker/stream.h),
// whose frames it reads and writes. Lives on the io thread.
class Session : public std::enable_shared_from_this<Session>, public StreamHost {
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
          ++self->counters().auth_failures;
          LogWarn("refusing %s", tls.message().c_str());
        }
        return self->Closed();
      }
      self->conn_->Send(self->handshake_.Challenge());
      self->conn_->StartReading([self](const Status& s, InFrame f) { self->OnFrame(s, std::move(f)); });
    });
    timer_.expires_after(std::chrono::milliseconds(int64_t(svc_->opts_.handshake_timeout_s * 1000)));
    timer_.async_wait([self](const boost::system::error_code& ec) {
      if (!ec && self->state_ != State::kStream && self->state_ != State::kClosed)
        self->Refuse(Status::FailedPrecondition("handshake timed out"));
    });
  }

  void Drain() {
    if (state_ == State::kStream) return stream_->Drain();
    if (state_ != State::kClosed) Refuse(Status::Unavailable("worker is draining"));
  }
  void ForceClose() {
    conn_->Close();
    Closed();
  }
  // For net::MakeRoom: before its stream opens, a connection counts as handshaking.
  bool handshaking() const { return state_ == State::kHello || state_ == State::kOpen; }
  uint64_t serial() const { return serial_; }
  void Close() { ForceClose(); }
  const WorkerStream* stream() const { return stream_.get(); }

  // StreamHost.
  void Send(OutFrame f) override { conn_->Send(std::move(f)); }
  void CloseAfterWrites() override { conn_->CloseAfterWrites(); }
  void WakeAt(int64_t at_ns) override {
    timer_.expires_after(std::chrono::nanoseconds(std::max<int64_t>(0, at_ns - MonoNs())));
    timer_.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
      if (!ec && self->stream_) self->stream_->OnTimer(MonoNs());
    });
  }
  void CancelWake() override { timer_.cancel(); }
  std::string peer() const override { return conn_->peer(); }

 private:
  enum class State { kHello, kOpen, kStream, kEnding, kClosed };
  WorkerCounters& counters() { return svc_->core_->counters(); }

  void OnFrame(const Status& s, InFrame f) {
    if (!s.ok()) {
      if (s.code() == StatusCode::kInvalidArgument || s.code() == StatusCode::kResourceExhausted) {
        ++counters().bad_frames;
        LogWarn("closing %s: %s", conn_->peer().c_str(), s.ToString().c_str());
      }
      return Closed();
    }
    if (state_ == State::kHello) return OnHello(f);
    if (state_ == State::kOpen && f.header.type == MessageType::kOpenStream) {
      Result<wire::OpenStreamMsg> m = wire::DecodeOpenStream(f);
      if (!m.ok()) return BadFrame(m.status());
      timer_.cancel();
      state_ = State::kStream;
      stream_ = std::make_shared<WorkerStream>(svc_->core_.get(), this);
      return stream_->Open(std::move(*m), MonoNs());
    }
    if (state_ == State::kStream && f.header.type == MessageType::kCredit) {
      Result<uint32_t> n = wire::DecodeCredit(f);
      if (!n.ok()) return BadFrame(n.status());
      return stream_->Credit(*n);
    }
    BadFrame(Status::InvalidArgument(std::string("unexpected ") + wire::MessageTypeName(f.header.type) +
                                     (state_ == State::kStream ? " while streaming" : "")));
  }

  void OnHello(const InFrame& f) {
    auto accepted = handshake_.OnHello(f);
    if (!accepted.ok()) {
      if (accepted.status().code() != StatusCode::kUnauthenticated) return BadFrame(accepted.status());
      ++counters().auth_failures;
      LogWarn("refusing %s: %s", conn_->peer().c_str(), accepted.status().message().c_str());
      return Refuse(accepted.status());
    }
    conn_->Send(std::move(accepted->reply));
    // Peers send a worker control messages only. A Batch header is refused before its
    // body is allocated: otherwise any peer, before authenticating, could make the
    // worker reserve up to limits.max_batch_bytes (4 GiB) per connection with 16 bytes.
    wire::FrameLimits limits = svc_->opts_.limits;
    limits.max_batch_bytes = 0;
    conn_->SetLimits(limits);
    state_ = State::kOpen;
  }

  void BadFrame(const Status& s) {
    ++counters().bad_frames;
    LogWarn("bad frame from %s: %s", conn_->peer().c_str(), s.ToString().c_str());
    Refuse(s);
  }

  // Sends an Error and closes after it is written.
  void Refuse(const Status& s) {
    if (state_ == State::kStream) return stream_->Refuse(s);
    if (state_ == State::kClosed || state_ == State::kEnding) return;
    state_ = State::kEnding;
    timer_.cancel();
    conn_->Send(wire::EncodeError(s));
    conn_->CloseAfterWrites();
  }

  void Closed() {
    if (state_ == State::kClosed) return;
    state_ = State::kClosed;
    timer_.cancel();
    if (stream_) stream_->Closed();
    svc_->SessionClosed(shared_from_this());
  }

  WorkerService::Impl* svc_;
  std::shared_ptr<FrameConnection> conn_;
  const uint64_t serial_;  // order of acceptance
  net::ServerHandshake handshake_;
  asio::steady_timer timer_;
  State state_ = State::kHello;
  std::shared_ptr<WorkerStream> stream_;
};

void WorkerService::Impl::Accept() {
  net::AcceptLoop(acceptor_, [this] { return !core_->draining() && !stopping_; }, [this](tcp::socket socket) {
    if (!net::MakeRoom(sessions_, {opts_.max_connections, opts_.max_handshaking, 0}, &refused_connections_)) {
      boost::system::error_code ec;
      socket.close(ec);
      return;
    }
    ++core_->counters().connections;
    auto s = std::make_shared<Session>(this, std::move(socket));
    sessions_.insert(s);
    core_->counters().open_connections = int64_t(sessions_.size());
    s->Start();
  });
}

void WorkerService::Impl::SessionClosed(const std::shared_ptr<Session>& s) {
  // Deferred: the session may be deep in its own call stack.
  asio::post(io_, [this, s] {
    sessions_.erase(s);
    core_->counters().open_connections = int64_t(sessions_.size());
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

WorkerQueues WorkerService::Impl::Queues() {
  return net::OnIo<WorkerQueues>(
      io_,
      [this] {
        WorkerQueues q{0, 0};
        for (const auto& s : sessions_) {
          if (const WorkerStream* st = s->stream()) {
            q.batches += int64_t(st->queued());
            q.credits += st->credits();
          }
        }
        return q;
      },
      WorkerQueues{});
}

void WorkerService::Impl::Drain() {
  if (drain_started_.exchange(true)) return;
  core_->counters().draining = true;
  if (!link_) return DrainStreams();
  // Dispatcher mode: take no new leases, serve the ones held until their consumers
  // acknowledge them (DrainPolicy), then end the streams.
  link_->SetDraining();
  Log("draining: taking no new leases; serving the splits held");
  drain_thread_ = std::thread([this] {
    DrainPolicy policy(MonoNs(), int64_t(opts_.drain_timeout_s * 1e9));
    DrainPolicy::Next next = DrainPolicy::Next::kWait;
    while (next == DrainPolicy::Next::kWait && !closing_) {
      const bool acknowledged = link_->WaitDrained(0.1);
      next = policy.Step(MonoNs(), acknowledged, core_->counters().named_streams > 0);
    }
    if (next == DrainPolicy::Next::kNoConsumer)
      LogWarn("draining: no consumer is connected to take the splits held: they go back to the dispatcher");
    if (next == DrainPolicy::Next::kTimedOut)
      LogWarn("drain timed out with splits unacknowledged: they go back to the dispatcher");
    DrainStreams();
  });
}

void WorkerService::Impl::DrainStreams() {
  asio::post(io_, [this] {
    if (core_->draining()) return;
    core_->SetDraining();
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
  FERRY_ASSIGN_OR_RETURN(DataRoots roots, DataRoots::Make(options.data_roots));
  if (!roots.confined()) Log("no --data-root: jobs may name any path this worker can read (see SECURITY.md)");
  else Log("jobs may read only under: %s", roots.Describe().c_str());
  FERRY_RETURN_IF_ERROR(impl->Bind());
  impl->Make(std::move(roots));
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
  const WorkerCore& core = *impl_->core_;
  return WorkerMetricsText(core.counters(), *core.pipeline_stats(), impl_->Queues(), core.memory_budget(),
                           impl_->link_.get(), core.env().window.get(), core.env().scheduler.get());
}
bool WorkerService::Ready() const { return !impl_->drain_started_.load() && (!impl_->link_ || impl_->link_->registered()); }
WorkerService::Stats WorkerService::stats() const {
  const WorkerCounters& c = impl_->core_->counters();
  return {c.connections.load(), c.streams.load(), c.batches_sent.load(), c.bad_frames.load(), c.auth_failures.load(),
          c.open_connections.load()};
}

}  // namespace ferry
