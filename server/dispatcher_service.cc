#include "server/dispatcher_service.h"

#include <pthread.h>

#include <utility>  // before Asio (Boost 1.74, C++20)

#include <atomic>
#include <boost/asio.hpp>
#include <algorithm>
#include <chrono>
#include <future>
#include <map>
#include <set>
#include <thread>

#include "core/log.h"
#include "core/mutex.h"
#include "data/data_roots.h"
#include "data/job_listing.h"
#include "net/http_server.h"
#include "net/run_io.h"
#include "net/connection.h"
#include "net/handshake.h"
#include "net/listen.h"
#include "wire/codec.h"
#include "wire/control.h"

namespace ferry {

using wire::InFrame;
using wire::MessageType;
using wire::OutFrame;
namespace asio = boost::asio;
using tcp = asio::ip::tcp;

namespace {

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

class DispatcherSession;

class DispatcherService::Impl {
 public:
  explicit Impl(const DispatcherOptions& o) : opts_(o), acceptor_(io_), buffers_(DefaultBufferAllocator()) {
    const int n = o.io_threads >= 0 ? o.io_threads : DefaultIoThreads();
    for (int i = 0; i < n; ++i) net_.push_back(std::make_unique<NetThread>());
  }

  // Threads for the connections' reads and writes besides the one that decides: one
  // per core past the first, at most four (a dispatcher at 10,000 workers spent about
  // half of its io thread in the socket system calls and their wake-ups).
  static int DefaultIoThreads() {
    const int cores = int(std::thread::hardware_concurrency());
    return std::clamp(cores - 1, 1, 4);
  }

  Status Init() {
    FERRY_ASSIGN_OR_RETURN(tls_, net::TlsContextsFor(opts_.tls, /*need_server=*/true, /*need_client=*/false));
    FERRY_ASSIGN_OR_RETURN(roots_, DataRoots::Make(opts_.data_roots));
    if (!roots_.confined()) Log("no --data-root: new jobs may name any path this dispatcher can list (see SECURITY.md)");
    else Log("new jobs may name only paths under: %s", roots_.Describe().c_str());
    FERRY_ASSIGN_OR_RETURN(core_, dispatch::Dispatcher::Open(opts_.core, NowMs()));
    FERRY_ASSIGN_OR_RETURN(address_, net::Listen(acceptor_, opts_.listen));
    return Status::OK();
  }

  void Run() {
    // Named, so that top -H and ferry-bench dispatcher-load tell the deciding thread
    // (whose CPU bounds the fleet one dispatcher holds) from the connections'.
    for (size_t i = 0; i < net_.size(); ++i) {
      NetThread* n = net_[i].get();
      n->thread = std::thread([n] { net::RunIo(n->io, "dispatcher connections"); });
      pthread_setname_np(n->thread.native_handle(), ("ferry-conn-" + std::to_string(i)).c_str());
    }
    Accept();
    Tick();
    io_thread_ = std::thread([this] { net::RunIo(io_, "dispatcher"); });
    pthread_setname_np(io_thread_.native_handle(), "ferry-decide");
  }

  ~Impl();

  bool WaitIdle() {
    MutexLock lock(&idle_mu_);
    while (!idle_ && !stop_waiting_) idle_cv_.Wait(&idle_mu_);
    return idle_;
  }

  void StopWaiting() {
    MutexLock lock(&idle_mu_);
    stop_waiting_ = true;
    idle_cv_.SignalAll();
  }

  // Sends the answer `encode` makes once every update it depends on is durable (io
  // thread); the connection's thread encodes it.
  using Encoder = std::function<OutFrame()>;
  void Reply(const std::shared_ptr<DispatcherSession>& to, Encoder encode);

  void PostFlush() {
    if (flush_posted_) return;
    flush_posted_ = true;
    asio::post(io_, [this] { Flush(); });
  }

  void Flush() {
    flush_posted_ = false;
    // Replies never go out ahead of the journal: should it fail to sync (a full disk),
    // the connections waiting on it are closed, and their peers retry.
    const bool durable = core_->Sync().ok();
    auto pending = std::move(pending_);
    pending_.clear();
    SendOrClose(pending, durable);
    if (!core_->fatal().ok()) Stop(core_->fatal());
  }
  void SendOrClose(std::vector<std::pair<std::shared_ptr<DispatcherSession>, Encoder>>& replies, bool durable);

  // The journal cannot be made durable any more: no reply goes out from here on, and
  // the process is told to exit (DispatcherOptions::on_fatal).
  void Stop(const Status& why);
  // Stops listening and ticking and closes every session (io thread).
  void Shutdown();

  void SessionClosed(const std::shared_ptr<DispatcherSession>& s) {
    asio::post(io_, [this, s] { sessions_.erase(s); });
  }

  // The connections' threads (DispatcherOptions::io_threads): each connection's reads,
  // writes, TLS and handshake run on one of them; none is touched by two. Declared
  // before io_: sessions that io_'s queue still holds at destruction own sockets of
  // these contexts.
  struct NetThread {
    asio::io_context io;
    asio::executor_work_guard<asio::io_context::executor_type> guard = asio::make_work_guard(io);
    std::thread thread;
  };
  std::vector<std::unique_ptr<NetThread>> net_;
  size_t next_net_ = 0;  // io thread only: the next connection's thread, round robin

  const DispatcherOptions opts_;
  asio::io_context io_;  // "the io thread": the dispatcher's state, decisions, journal, accept, ticks
  tcp::acceptor acceptor_;
  std::shared_ptr<BufferAllocator> buffers_;
  net::TlsContexts tls_;  // server only
  DataRoots roots_;       // --data-root: where new jobs' datasets are listed
  asio::thread_pool blocking_{1};  // dataset listing, off the io thread
  std::string address_;
  std::unique_ptr<dispatch::Dispatcher> core_;  // io thread only, after Init()
  std::set<std::shared_ptr<DispatcherSession>> sessions_;
  std::atomic<int64_t> requests_{0};
  bool stopping_ = false;  // io thread: the service is being destroyed; arm no timer
  uint64_t next_serial_ = 0;         // io thread only
  int64_t refused_connections_ = 0;  // io thread only
  std::atomic<int64_t> paused_reads_{0};  // peers not read for not reading (connections' threads)

 private:
  void Accept();
  void Tick();

  std::thread io_thread_;
  bool flush_posted_ = false;
  std::vector<std::pair<std::shared_ptr<DispatcherSession>, Encoder>> pending_;
  std::unique_ptr<asio::steady_timer> tick_;
  int64_t last_sweep_ms_ = 0;  // io thread: the last Dispatcher::Sweep
  Mutex idle_mu_;
  CondVar idle_cv_;
  bool idle_ GUARDED_BY(idle_mu_) = false;
  bool stop_waiting_ GUARDED_BY(idle_mu_) = false;
};

// One connection: the handshake, then requests, each of which decodes, calls the
// dispatcher, and encodes its reply (or an Error, and the connection closes).
//
// Threads: the connection itself (reads, writes, TLS, the handshake, its deadline)
// runs on its executor, one of the service's connection threads; each request is
// handed to the io thread, which owns the dispatcher, and the reply comes back to the
// connection's thread to be written. A connection's requests are answered in order
// (one io thread takes them in order; one connection thread writes the replies in the
// order it is handed them).
// Replies queued to one peer at most before its requests stop being read.
constexpr size_t kMaxQueuedReplyBytes = size_t(1) << 20;
// Requests of one peer handed to the io thread and not yet answered, at most, before
// its requests stop being read: a peer that sends without waiting for answers (an
// honest one waits) cannot queue unbounded work on the io thread.
constexpr int kMaxRequestsInFlight = 16;

class DispatcherSession : public std::enable_shared_from_this<DispatcherSession> {
 public:
  using Encoder = DispatcherService::Impl::Encoder;
  DispatcherSession(DispatcherService::Impl* svc, tcp::socket socket)
      : svc_(svc),
        executor_(socket.get_executor()),
        conn_(std::make_shared<net::FrameConnection>(std::move(socket), wire::PreAuthLimits(), svc->buffers_,
                                                     svc->tls_.server)),
        serial_(svc->next_serial_++),
        handshake_(svc->opts_.token, svc->opts_.id, "this dispatcher",
                   {wire::Role::kClient, wire::Role::kWorker, wire::Role::kTool}),
        deadline_(executor_) {
    handshake_.set_state_id(svc->core_->state_id());
    if (!svc->opts_.worker_token.empty()) handshake_.set_role_token(wire::Role::kWorker, svc->opts_.worker_token);
  }

  // Any thread.
  void Start() {
    asio::post(executor_, [self = shared_from_this()] { self->StartHere(); });
  }

  // Any thread: closes the connection now.
  void Close() {
    gone_ = true;  // no longer handshaking: net::MakeRoom closes the next oldest, not this again
    asio::post(executor_, [self = shared_from_this()] {
      self->deadline_.cancel();
      self->conn_->Close();
    });
  }

  // Any thread: encodes and writes an answer (the io thread's), in the order handed.
  void Deliver(Encoder encode) {
    asio::post(executor_, [self = shared_from_this(), encode = std::move(encode)] {
      self->conn_->Send(encode());
      self->Answered();  // may hand on a request read already: after this reply
    });
  }

  // For net::MakeRoom and /metrics (any thread).
  bool handshaking() const { return role_label_.load() < 0 && !gone_.load(); }
  uint64_t serial() const { return serial_; }
  // "handshaking", or the peer's role once authenticated.
  const char* RoleLabel() const {
    const int r = role_label_.load();
    return r < 0 ? "handshaking" : wire::RoleName(wire::Role(r));
  }
  // Io thread: the jobs this connection created or joined (in use while it lives).
  const std::set<std::string>& jobs() const { return jobs_; }

 private:
  // ---- on the connection's thread ----

  void StartHere() {
    auto self = shared_from_this();
    // TLS first (when set), then the token handshake inside it; the deadline covers both.
    conn_->StartTls(/*server=*/true, [self](const Status& tls) {
      if (!tls.ok()) {
        if (tls.code() == StatusCode::kUnauthenticated) LogWarn("refusing %s", tls.message().c_str());
        self->deadline_.cancel();
        self->gone_ = true;
        return self->svc_->SessionClosed(self);
      }
      self->conn_->Send(self->handshake_.Challenge());
      // A peer that sends requests and never reads the replies: past 1 MiB of replies
      // queued to it, its requests are not read until it reads (the queue grew without
      // bound before: gigabytes from one peer).
      self->conn_->SetWriteBound(kMaxQueuedReplyBytes, [svc = self->svc_] { ++svc->paused_reads_; });
      self->conn_->StartReading([self](const Status& s, InFrame f) { self->OnFrame(s, std::move(f)); });
    });
    deadline_.expires_after(std::chrono::milliseconds(int64_t(svc_->opts_.handshake_timeout_s * 1000)));
    deadline_.async_wait([self](const boost::system::error_code& ec) {
      if (!ec && !self->authenticated_ && !self->refused_) {
        LogWarn("closing %s: no Hello within %.1f s", self->conn_->peer().c_str(), self->svc_->opts_.handshake_timeout_s);
        self->deadline_.cancel();
        self->conn_->Close();
      }
    });
  }

  void OnFrame(const Status& s, InFrame f) {
    if (!s.ok()) {
      if (s.code() == StatusCode::kInvalidArgument || s.code() == StatusCode::kResourceExhausted)
        LogWarn("closing %s: %s", conn_->peer().c_str(), s.ToString().c_str());
      deadline_.cancel();
      gone_ = true;
      svc_->SessionClosed(shared_from_this());
      return;
    }
    if (refused_) return;
    if (!authenticated_) return OnHello(f);
    if (Status st = MayAsk(f.header.type); !st.ok()) return RefuseHere(st);
    using D = dispatch::Dispatcher;
    switch (f.header.type) {
      case MessageType::kRegisterWorker:
        return ToCore(wire::DecodeRegisterWorker(f), [](D& d, const auto& m, int64_t now) { return d.RegisterWorker(m, now); },
                      wire::EncodeRegisterWorkerOk);
      case MessageType::kHeartbeat:
        return ToCore(wire::DecodeHeartbeat(f), [](D& d, const auto& m, int64_t now) { return d.Heartbeat(m, now); },
                      wire::EncodeHeartbeatOk);
      case MessageType::kGetOrCreateJob: {
        auto m = wire::DecodeGetOrCreateJob(f);
        if (!m.ok()) return RefuseHere(m.status());
        Sent();
        return asio::post(svc_->io_, [self = shared_from_this(), m = std::move(*m)] {
          if (self->core_refused_) return;
          ++self->svc_->requests_;
          self->OnGetOrCreateJob(m);
        });
      }
      case MessageType::kGetWorkers:
        return ToCore(wire::DecodeGetWorkersMsg(f),
                      [](D& d, const auto& m, int64_t now) -> Result<std::vector<std::string>> {
                        d.ConsumerSeen(m.job, m.consumer_id, now);
                        return d.WorkersFor(m.job, m.consumer_id);
                      },
                      wire::EncodeWorkerList);
      case MessageType::kAckSplits:
        return ToCore(wire::DecodeAckSplits(f),
                      [](D& d, const auto& m, int64_t now) {
                        d.ConsumerSeen(m.job, m.consumer_id, m.load, now);
                        return d.AckSplits(m);
                      },
                      wire::EncodeJobStatus);
      case MessageType::kGetJobStatus:
        return ToCore(wire::DecodeGetJobStatus(f),
                      [](D& d, const auto& m, int64_t now) {
                        d.ConsumerSeen(m.job, m.consumer_id, m.load, now);
                        return d.GetJobStatus(m);
                      },
                      wire::EncodeJobStatus);
      case MessageType::kRestoreConsumer:
        return ToCore(wire::DecodeRestoreConsumer(f),
                      [](D& d, const auto& m, int64_t now) {
                        d.ConsumerSeen(m.job, m.consumer_id, now);
                        return d.RestoreConsumer(m);
                      },
                      wire::EncodeJobStatus);
      case MessageType::kGetClusterStatus: {
        const Status req = wire::DecodeGetClusterStatus(f);
        return ToCore(req.ok() ? Result<bool>(true) : Result<bool>(req),
                      [](D& d, bool, int64_t now) -> Result<wire::ClusterStatusMsg> { return d.ClusterStatus(now); },
                      wire::EncodeClusterStatus);
      }
      case MessageType::kDrainWorker:
        return ToCore(wire::DecodeDrainWorker(f), [](D& d, const std::string& w, int64_t now) { return d.DrainWorker(w, now); },
                      wire::EncodeClusterStatus);
      case MessageType::kReportWorker:
        return ToCore(wire::DecodeReportWorker(f),
                      [](D& d, const std::string& a, int64_t now) -> Result<std::vector<std::string>> {
                        return d.ReportWorker(a, now);
                      },
                      wire::EncodeWorkerList);
      default:
        return RefuseHere(Status::InvalidArgument(std::string("unexpected ") + wire::MessageTypeName(f.header.type)));
    }
  }

  // A request decoded here goes to the io thread, which calls the dispatcher (`call`);
  // its reply comes back here to be encoded and written. Decoding and encoding (and
  // the copies they make) stay off the io thread, whose time bounds the fleet.
  template <typename Req, typename Call, typename Enc>
  void ToCore(Result<Req> req, Call call, Enc encode) {
    if (!req.ok()) return RefuseHere(req.status());
    Sent();
    asio::post(svc_->io_, [self = shared_from_this(), m = std::move(*req), call, encode] {
      if (self->core_refused_) return;
      ++self->svc_->requests_;
      self->Answer(call(*self->svc_->core_, m, NowMs()), encode);
    });
  }

  // A request is handed to the io thread: past kMaxRequestsInFlight unanswered, stop
  // reading this peer.
  void Sent() {
    if (++in_flight_ >= kMaxRequestsInFlight && !held_) {
      held_ = true;
      conn_->HoldReads();
    }
  }

  void Answered() {
    --in_flight_;
    if (held_ && in_flight_ < kMaxRequestsInFlight / 2) {
      held_ = false;
      conn_->ResumeReads();
    }
  }

  // Who may ask what: only workers register and heartbeat (a client that could would
  // take leases, or drain a worker by its id); only clients join jobs, acknowledge,
  // restore and report workers (those change a job's state); a tool (a status CLI, a
  // benchmark) may read, and drain a worker (ferry-ctl drain, with the cluster's token).
  Status MayAsk(MessageType t) const {
    bool ok = false;
    switch (t) {
      case MessageType::kRegisterWorker:
      case MessageType::kHeartbeat:
        ok = role_ == wire::Role::kWorker;
        break;
      case MessageType::kGetOrCreateJob:
      case MessageType::kAckSplits:
      case MessageType::kRestoreConsumer:
      case MessageType::kReportWorker:
        ok = role_ == wire::Role::kClient;
        break;
      case MessageType::kGetWorkers:
      case MessageType::kGetJobStatus:
      case MessageType::kGetClusterStatus:
        ok = role_ == wire::Role::kClient || role_ == wire::Role::kTool;
        break;
      case MessageType::kDrainWorker:  // an operator's (ferry-ctl drain)
        ok = role_ == wire::Role::kTool;
        break;
      default:
        return Status::InvalidArgument(std::string("unexpected ") + wire::MessageTypeName(t));
    }
    if (ok) return Status::OK();
    return Status::PermissionDenied(std::string("a ") + wire::RoleName(role_) + " may not send " +
                                    wire::MessageTypeName(t));
  }

  void OnHello(const InFrame& f) {
    auto accepted = handshake_.OnHello(f);
    if (!accepted.ok()) {
      if (accepted.status().code() == StatusCode::kUnauthenticated)
        LogWarn("refusing %s: %s", conn_->peer().c_str(), accepted.status().message().c_str());
      return RefuseHere(accepted.status());
    }
    authenticated_ = true;
    role_ = accepted->role;
    role_label_ = int(role_);
    deadline_.cancel();
    conn_->SetLimits(ReceiveLimits(svc_->opts_.limits));
    conn_->Send(std::move(accepted->reply));
  }

  // Peers send a dispatcher control messages only: a Batch header is refused before
  // its body is read.
  static wire::FrameLimits ReceiveLimits(wire::FrameLimits limits) {
    limits.max_batch_bytes = 0;
    return limits;
  }

  void RefuseHere(const Status& s) {
    if (refused_) return;
    refused_ = true;  // frames that arrive after a refusal are not handled
    deadline_.cancel();
    LogWarn("refusing a request from %s: %s", conn_->peer().c_str(), s.ToString().c_str());
    conn_->Send(wire::EncodeError(s));
    conn_->CloseAfterWrites();
  }

  // ---- on the io thread ----

  template <typename Rep, typename Enc>
  void Answer(Result<Rep> reply, Enc encode) {
    if (!reply.ok()) return Refuse(reply.status());
    svc_->Reply(shared_from_this(), [rep = std::move(*reply), encode] { return encode(rep); });
  }

  void OnGetOrCreateJob(const wire::GetOrCreateJobMsg& req) {
    const auto* m = &req;
    auto join = svc_->core_->GetOrCreateJob(*m);
    if (!join.ok()) return Refuse(join.status());
    switch (join->kind) {
      case dispatch::Dispatcher::JoinResult::kJoined:
        jobs_.insert(m->job.name);
        svc_->core_->ConsumerSeen(m->job.name, m->consumer_id, NowMs());
        return Answer(Result<wire::NamedJob>(std::move(join->job)), wire::EncodeJobInfo);
      case dispatch::Dispatcher::JoinResult::kBusy: {
        // Another client is creating it: ask again shortly.
        auto self = shared_from_this();
        auto timer = std::make_shared<asio::steady_timer>(svc_->io_, std::chrono::milliseconds(20));
        timer->async_wait([self, timer, req](const boost::system::error_code& ec) {
          if (!ec && !self->svc_->stopping_) self->OnGetOrCreateJob(req);
        });
        return;
      }
      case dispatch::Dispatcher::JoinResult::kNeedsListing:
        break;
    }
    jobs_.insert(m->job.name);
    // Listing can take a second: off the io thread.
    std::weak_ptr<DispatcherSession> weak = weak_from_this();
    DispatcherService::Impl* svc = svc_;
    asio::post(svc_->blocking_, [weak, svc, req = *m] {
      Result<JobSpec> listed = ListJob(req.job.job, svc->roots_);
      asio::post(svc->io_, [weak, svc, req, listed] {
        auto created = svc->core_->CreateJob(req, listed);
        svc->core_->ConsumerSeen(req.job.name, req.consumer_id, NowMs());
        auto self = weak.lock();
        if (!self) return;
        self->Answer(created, wire::EncodeJobInfo);
      });
    });
  }

  // The io thread's refusal: nothing more of this peer is handled there, and the
  // connection's thread sends the Error and closes.
  void Refuse(const Status& s) {
    if (core_refused_) return;
    core_refused_ = true;
    asio::post(executor_, [self = shared_from_this(), s] { self->RefuseHere(s); });
  }

  DispatcherService::Impl* svc_;
  const asio::any_io_executor executor_;  // the connection's thread
  std::shared_ptr<net::FrameConnection> conn_;
  const uint64_t serial_;  // order of acceptance
  // The connection's thread's:
  net::ServerHandshake handshake_;
  asio::steady_timer deadline_;  // the handshake's
  bool authenticated_ = false;
  wire::Role role_ = wire::Role::kClient;  // once authenticated
  bool refused_ = false;
  int in_flight_ = 0;   // requests handed to the io thread, not yet answered
  bool held_ = false;   // reads held for in_flight_
  // Read from any thread:
  std::atomic<int> role_label_{-1};  // the role once authenticated; -1 before
  std::atomic<bool> gone_{false};    // the connection has ended, or is told to
  // The io thread's:
  bool core_refused_ = false;
  std::set<std::string> jobs_;
};

void DispatcherService::Impl::Reply(const std::shared_ptr<DispatcherSession>& to, Encoder encode) {
  if (!core_->NeedsSync()) return to->Deliver(std::move(encode));
  pending_.push_back({to, std::move(encode)});
  PostFlush();
}

void DispatcherService::Impl::SendOrClose(std::vector<std::pair<std::shared_ptr<DispatcherSession>, Encoder>>& replies,
                                          bool durable) {
  for (auto& [to, encode] : replies) {
    if (durable) to->Deliver(std::move(encode));
    else to->Close();
  }
}

DispatcherService::Impl::~Impl() {
  // The io thread closes the listening socket and every connection, and ends; then the
  // connections' threads, once their connections are closed.
  asio::post(io_, [this] { Shutdown(); });
  if (io_thread_.joinable()) io_thread_.join();
  for (auto& n : net_) n->guard.reset();
  for (auto& n : net_)
    if (n->thread.joinable()) n->thread.join();
  blocking_.join();
}

void DispatcherService::Impl::Shutdown() {
  // A tick whose timer had already fired when cancel() ran still runs: it must not
  // arm the timer again, or the io thread never runs out of work.
  stopping_ = true;
  boost::system::error_code ec;
  acceptor_.close(ec);
  if (tick_) tick_->cancel();
  auto copy = sessions_;
  for (auto& s : copy) s->Close();
}

void DispatcherService::Impl::Stop(const Status& why) {
  if (stopping_) return;
  Shutdown();
  if (opts_.on_fatal) opts_.on_fatal(why);
}

void DispatcherService::Impl::Accept() {
  net::AcceptLoop(acceptor_, [] { return true; }, [this](tcp::socket socket) {
    if (!net::MakeRoom(sessions_, {opts_.max_connections, opts_.max_handshaking, 0}, &refused_connections_)) {
      boost::system::error_code ec;
      socket.close(ec);
      return;
    }
    auto s = std::make_shared<DispatcherSession>(this, std::move(socket));
    sessions_.insert(s);
    s->Start();
  }, net_.empty() ? std::function<asio::any_io_executor()>() : [this]() -> asio::any_io_executor {
    return net_[next_net_++ % net_.size()]->io.get_executor();
  });
}

void DispatcherService::Impl::Tick() {
  if (!tick_) tick_ = std::make_unique<asio::steady_timer>(io_);
  tick_->expires_after(std::chrono::milliseconds(std::max(10, opts_.core.heartbeat_interval_ms / 2)));
  tick_->async_wait([this](const boost::system::error_code& ec) {
    if (ec || stopping_) return;
    const int64_t now = NowMs();
    if (now - last_sweep_ms_ >= core_->SweepIntervalMs()) {
      last_sweep_ms_ = now;
      std::set<std::string> in_use;
      for (const auto& s : sessions_) in_use.insert(s->jobs().begin(), s->jobs().end());
      core_->Tick(now, in_use);
    } else {
      core_->JournalTick(now);
    }
    if (!core_->fatal().ok()) {  // the journal could not be sealed (Dispatcher::Tick)
      Stop(core_->fatal());
      return;
    }
    if (core_->NeedsSync()) PostFlush();
    if (core_->ShouldExit()) {
      MutexLock lock(&idle_mu_);
      idle_ = true;
      idle_cv_.SignalAll();
    }
    Tick();
  });
}

Result<std::unique_ptr<DispatcherService>> DispatcherService::Start(const DispatcherOptions& options) {
  auto impl = std::make_unique<Impl>(options);
  FERRY_RETURN_IF_ERROR(impl->Init());
  impl->Run();
  return std::unique_ptr<DispatcherService>(new DispatcherService(std::move(impl)));
}

DispatcherService::DispatcherService(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
DispatcherService::~DispatcherService() = default;
std::string DispatcherService::address() const { return impl_->address_; }
bool DispatcherService::WaitIdle() { return impl_->WaitIdle(); }
void DispatcherService::StopWaiting() { impl_->StopWaiting(); }
DispatcherService::Stats DispatcherService::stats() const {
  return {impl_->requests_.load(), impl_->core_->stats()};
}

using net::OnIo;

std::string DispatcherService::MetricsText() const {
  Impl* impl = impl_.get();
  return OnIo<std::string>(
      impl->io_,
      [impl] {
        const dispatch::Dispatcher& d = *impl->core_;
        const dispatch::DispatcherState& st = d.state();
        const dispatch::Dispatcher::Stats s = d.stats();
        net::PromText t;
        t.One("ferry_dispatcher_requests_total", "counter", "Control-plane requests answered.",
              double(impl->requests_.load()));
        t.One("ferry_dispatcher_leases_total", "counter", "Splits leased to workers (re-leases included).",
              double(s.leases));
        t.One("ferry_dispatcher_acks_total", "counter", "Split acknowledgements received from consumers (a split acknowledged again counts again).", double(s.acks));
        t.One("ferry_dispatcher_workers_removed_total", "counter", "Workers declared dead or gone.",
              double(s.workers_removed));
        t.One("ferry_dispatcher_journal_records_total", "counter", "Updates written to the journal since start.",
              double(s.journal_records));
        t.One("ferry_dispatcher_paused_reads_total", "counter",
              "Times a peer's requests stopped being read because more than 1 MiB of replies to it were unread.",
              double(impl->paused_reads_.load()));
        t.One("ferry_dispatcher_refused_connections_total", "counter",
              "Connections closed at accept (--max-connections, --max-handshaking).",
              double(impl->refused_connections_));
        t.One("ferry_dispatcher_journal_writable", "gauge", "1 while the journal can be written (0: a full disk).",
              d.journal_healthy() ? 1 : 0);
        t.One("ferry_dispatcher_connections", "gauge", "Open control-plane connections.",
              double(impl->sessions_.size()));
        std::map<std::string, int64_t> roles = {{"client", 0}, {"worker", 0}, {"tool", 0}, {"handshaking", 0}};
        for (const auto& s : impl->sessions_) ++roles[s->RoleLabel()];
        t.Family("ferry_dispatcher_connections_by_role", "gauge",
                 "Open control-plane connections by the peer's role (handshaking: not yet authenticated).");
        for (const auto& [role, n] : roles) t.Sample("ferry_dispatcher_connections_by_role", {{"role", role}}, double(n));
        t.One("ferry_dispatcher_splits_returned_total", "counter",
              "Leased splits that went back to pending (their worker dead, gone, drained away or unfit): each is "
              "leased again.",
              double(s.returned));
        t.One("ferry_dispatcher_journal_bytes", "gauge", "Bytes of the journal's current generation (compacted now and then).",
              double(d.journal().size()));
        t.Family("ferry_dispatcher_journal_sync_seconds", "histogram", "fdatasync latency of the journal.");
        t.HistogramSamples("ferry_dispatcher_journal_sync_seconds", {}, d.journal().sync_seconds().Read());
        t.Family("ferry_dispatcher_journal_compaction_seconds", "histogram",
                 "Time each journal compaction held the deciding thread (taking a snapshot of the whole state, and "
                 "switching to the new generation); no request is answered meanwhile.");
        t.HistogramSamples("ferry_dispatcher_journal_compaction_seconds", {}, d.journal().compaction_seconds().Read());
        t.Family("ferry_dispatcher_journal_snapshot_write_seconds", "histogram",
                 "Time each compaction's snapshot took to encode and write, on a thread of its own.");
        t.HistogramSamples("ferry_dispatcher_journal_snapshot_write_seconds", {},
                           d.journal().snapshot_write_seconds().Read());
        int64_t live = 0, draining = 0;
        for (const auto& [id, w] : st.workers()) (w.draining ? draining : live) += 1;
        t.Family("ferry_workers", "gauge", "Registered workers, by state.");
        t.Sample("ferry_workers", {{"state", "serving"}}, double(live));
        t.Sample("ferry_workers", {{"state", "draining"}}, double(draining));
        t.One("ferry_jobs", "gauge", "Jobs the dispatcher holds (finished ones until collected).",
              double(st.jobs().size()));
        // Per-job series are labelled ferry_job, not job: Prometheus gives every
        // scraped series its target's `job` label, and would rename ours exported_job.
        t.Family("ferry_job_consumers", "gauge", "Consumers of each job.");
        for (const auto& [name, j] : st.jobs()) t.Sample("ferry_job_consumers", {{"ferry_job", name}}, double(j.consumers.size()));
        t.Family("ferry_job_workers", "gauge",
                 "Workers that lease each job's splits: its placement (--workers-per-job), else every live one.");
        for (const auto& [name, j] : st.jobs()) t.Sample("ferry_job_workers", {{"ferry_job", name}}, double(d.JobWorkers(j)));
        t.Family("ferry_job_epoch", "gauge", "Each job's first epoch not yet complete.");
        for (const auto& [name, j] : st.jobs()) t.Sample("ferry_job_epoch", {{"ferry_job", name}}, double(j.first_open));
        t.Family("ferry_job_splits", "gauge", "Splits of each job's open epochs, by status.");
        for (const auto& [name, j] : st.jobs()) {
          int64_t pending = 0, leased = 0, done = 0;
          for (const auto& [epoch, e] : j.epochs) {
            leased += e.leased;
            done += e.done;
            pending += int64_t(e.status.size()) - e.leased - e.done;
          }
          t.Sample("ferry_job_splits", {{"ferry_job", name}, {"status", "pending"}}, double(pending));
          t.Sample("ferry_job_splits", {{"ferry_job", name}, {"status", "leased"}}, double(leased));
          t.Sample("ferry_job_splits", {{"ferry_job", name}, {"status", "done"}}, double(done));
        }
        // The advice (dispatch/advice.h), over the last window; absent until known.
        std::map<std::string, dispatch::LoadTracker::Advice> advice;
        for (const auto& [name, j] : st.jobs()) advice[name] = d.Advice(name);
        t.Family("ferry_job_input_wait_ratio", "gauge",
                 "Fraction of its consumers' time spent waiting for input (blocked in Next()), last 10 s.");
        for (const auto& [name, a] : advice)
          if (a.known) t.Sample("ferry_job_input_wait_ratio", {{"ferry_job", name}}, a.input_wait);
        t.Family("ferry_job_input_bound", "gauge", "1 when the input wait is 10% or more.");
        for (const auto& [name, a] : advice)
          if (a.known)
            t.Sample("ferry_job_input_bound", {{"ferry_job", name}},
                     a.input_wait >= dispatch::LoadTracker::kInputBound ? 1 : 0);
        t.Family("ferry_job_demand_samples_per_second", "gauge",
                 "Samples per second the job's consumers would take if they never waited.");
        for (const auto& [name, a] : advice)
          if (a.known) t.Sample("ferry_job_demand_samples_per_second", {{"ferry_job", name}}, a.demand);
        t.Family("ferry_job_recommended_workers", "gauge",
                 "Workers that would serve the job's demand at their measured capacity (scale on this).");
        for (const auto& [name, a] : advice)
          if (a.recommended_workers > 0)
            t.Sample("ferry_job_recommended_workers", {{"ferry_job", name}}, double(a.recommended_workers));
        t.Family("ferry_job_thread_share", "gauge",
                 "The job's share of its workers' decode-thread time, last 10 s (the workers share their threads "
                 "among jobs by weight and priority).");
        for (const auto& [name, a] : advice)
          if (a.thread_share >= 0) t.Sample("ferry_job_thread_share", {{"ferry_job", name}}, a.thread_share);
        t.Family("ferry_job_op_share", "gauge",
                 "Each pipeline step's share of a sample's time on the job's workers (read, decode, each op, output), "
                 "last 10 s, from the workers' sampled op costs.");
        for (const auto& [name, a] : advice)
          for (const auto& [op, share] : a.op_shares) t.Sample("ferry_job_op_share", {{"ferry_job", name}, {"op", op}}, share);
        t.Family("ferry_dispatcher_worker_capacity_samples_per_second", "gauge",
                 "Samples a worker produces per busy second (from its heartbeats), last 10 s.");
        for (const auto& [id, w] : st.workers()) {
          const dispatch::LoadTracker::WorkerRate r = d.RateOf(id);
          if (r.known && r.capacity > 0)
            t.Sample("ferry_dispatcher_worker_capacity_samples_per_second", {{"worker", id}}, r.capacity);
        }
        return t.str();
      },
      std::string("# the dispatcher's io thread did not answer within 2 s\n"));
}

bool DispatcherService::Ready() const {
  Impl* impl = impl_.get();
  return OnIo<bool>(impl->io_, [impl] { return impl->core_->journal_healthy(); }, false);
}

}  // namespace ferry
