#include "server/dispatcher_service.h"

#include <utility>  // before Asio (Boost 1.74, C++20)

#include <atomic>
#include <boost/asio.hpp>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <tuple>

#include "core/hash.h"
#include "core/log.h"
#include "data/dataset.h"
#include "dispatch/journal.h"
#include "ferry/internal/connection.h"
#include "server/listen.h"
#include "ferry/internal/control.h"
#include "ferry/internal/wire.h"
#include "ferry/pipeline_spec.h"

namespace ferry {

using internal::FrameConnection;
using internal::InFrame;
using internal::MessageType;
using internal::OutFrame;
namespace asio = boost::asio;
using tcp = asio::ip::tcp;

namespace {

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

dispatch::JobConfig FromMsg(const internal::JobConfigMsg& m) {
  dispatch::JobConfig c;
  c.name = m.name;
  c.dataset = m.dataset;
  c.pipeline_json = m.pipeline_json;
  c.seed = m.seed;
  c.shuffle = m.shuffle;
  c.epochs = m.epochs;
  c.batch_size = m.batch_size;
  c.last_batch = LastBatch(m.last_batch);
  c.mode = dispatch::ProcessingMode(m.mode);
  c.ordering = dispatch::Ordering(m.ordering);
  c.batches_per_split = m.batches_per_split;
  c.num_samples = m.num_samples;
  c.fingerprint = m.fingerprint;
  return c;
}

internal::JobConfigMsg ToMsg(const dispatch::JobConfig& c) {
  internal::JobConfigMsg m;
  m.name = c.name;
  m.dataset = c.dataset;
  m.pipeline_json = c.pipeline_json;
  m.seed = c.seed;
  m.shuffle = c.shuffle;
  m.epochs = c.epochs;
  m.batch_size = c.batch_size;
  m.last_batch = uint8_t(c.last_batch);
  m.mode = uint8_t(c.mode);
  m.ordering = uint8_t(c.ordering);
  m.batches_per_split = c.batches_per_split;
  m.num_samples = c.num_samples;
  m.fingerprint = c.fingerprint;
  return m;
}

// Two requests for the same job name agree when everything but the facts the
// dispatcher fills in (sample count, fingerprint) is equal.
bool SameJob(dispatch::JobConfig a, const dispatch::JobConfig& b) {
  a.num_samples = b.num_samples;
  a.fingerprint = b.fingerprint;
  return a == b;
}

}  // namespace

class DispatcherSession;

class DispatcherService::Impl {
 public:
  explicit Impl(const DispatcherOptions& o) : opts_(o), acceptor_(io_), buffers_(internal::DefaultBufferAllocator()) {}

  Status Init() {
    if (opts_.work_dir.empty()) return Status::InvalidArgument("--work-dir is required");
    std::vector<dispatch::Update> replay;
    FERRY_ASSIGN_OR_RETURN(journal_, dispatch::Journal::Open(opts_.work_dir, &replay));
    journal_->set_sync(false);  // group commit: Flush() syncs
    for (const dispatch::Update& u : replay) {
      Status s = state_.Apply(u);
      if (!s.ok()) return Status::DataLoss("journal replay: " + s.ToString());
    }
    replayed_ = int64_t(replay.size());
    // Every worker the journal knows gets a full timeout to come back.
    const int64_t now = NowMs();
    for (const auto& [id, w] : state_.workers()) last_seen_[id] = now;
    if (!replay.empty())
      Log("replayed %zu journal updates: %zu job(s), %zu worker(s)", replay.size(), state_.jobs().size(),
          state_.workers().size());
    FERRY_ASSIGN_OR_RETURN(address_, Listen(acceptor_, opts_.listen));
    return Status::OK();
  }

  void Run() {
    Accept();
    Tick();
    io_thread_ = std::thread([this] { io_.run(); });
  }

  ~Impl();

  void WaitIdle() {
    std::unique_lock<std::mutex> lock(idle_mu_);
    idle_cv_.wait(lock, [&] { return idle_; });
  }

  // --- Used by sessions (io thread) ---------------------------------------------

  // Applies and journals an update. The replies that depend on it must go through
  // Reply(), which holds them until the journal is synced.
  Status Commit(const dispatch::Update& u) {
    FERRY_RETURN_IF_ERROR(state_.Apply(u));
    Status s = journal_->Append(u);
    if (!s.ok()) {
      // The state moved but the journal did not: the only safe thing is to stop.
      Log("FATAL: cannot journal an update: %s", s.ToString().c_str());
      std::abort();
    }
    ++journal_records_;
    dirty_ = true;
    return Status::OK();
  }

  void Reply(const std::shared_ptr<FrameConnection>& conn, OutFrame frame) {
    if (!dirty_) {
      conn->Send(std::move(frame));
      return;
    }
    pending_.push_back({conn, std::move(frame)});
    if (!flush_posted_) {
      flush_posted_ = true;
      asio::post(io_, [this] { Flush(); });
    }
  }

  void Flush() {
    flush_posted_ = false;
    if (opts_.sync) {
      Status s = journal_->Sync();
      if (!s.ok()) {
        Log("FATAL: cannot sync the journal: %s", s.ToString().c_str());
        std::abort();
      }
    }
    dirty_ = false;
    auto pending = std::move(pending_);
    pending_.clear();
    for (auto& [conn, frame] : pending) conn->Send(std::move(frame));
    if (journal_->records_since_snapshot() > opts_.compact_every) {
      Status s = journal_->Compact(state_);
      if (!s.ok()) Log("journal compaction failed (will retry): %s", s.ToString().c_str());
    }
  }

  void Heard(const std::string& worker) { last_seen_[worker] = NowMs(); }

  // Every job has finished: those in the state, and at least one was run (garbage
  // collection may already have removed the finished ones).
  bool Idle() const {
    bool any = jobs_collected_ > 0;
    for (const auto& [name, j] : state_.jobs()) {
      if (!j.finished()) return false;
      any = true;
    }
    return any;
  }

  void SessionClosed(const std::shared_ptr<DispatcherSession>& s) {
    asio::post(io_, [this, s] { sessions_.erase(s); });
  }

  const DispatcherOptions opts_;
  asio::io_context io_;
  tcp::acceptor acceptor_;
  std::shared_ptr<internal::BufferAllocator> buffers_;
  asio::thread_pool blocking_{1};
  std::string address_;
  dispatch::DispatcherState state_;
  std::unique_ptr<dispatch::Journal> journal_;
  std::map<std::string, int64_t> last_seen_;
  std::set<std::shared_ptr<DispatcherSession>> sessions_;
  std::set<std::string> creating_;  // jobs whose dataset is being listed
  std::atomic<int64_t> requests_{0}, leases_{0}, acks_{0}, workers_removed_{0}, journal_records_{0};
  int64_t replayed_ = 0;
  int64_t jobs_collected_ = 0;  // finished jobs removed since start
  int64_t idle_since_ms_ = -1;
  std::set<std::string> told_idle_;  // workers whose heartbeat reply said idle

 private:
  void Accept();
  void Tick();

  std::thread io_thread_;
  bool dirty_ = false, flush_posted_ = false;
  std::vector<std::pair<std::shared_ptr<FrameConnection>, OutFrame>> pending_;
  std::unique_ptr<asio::steady_timer> tick_;
  std::mutex idle_mu_;
  std::condition_variable idle_cv_;
  bool idle_ = false;  // GUARDED_BY(idle_mu_)
};

class DispatcherSession : public std::enable_shared_from_this<DispatcherSession> {
 public:
  DispatcherSession(DispatcherService::Impl* svc, tcp::socket socket)
      : svc_(svc), conn_(std::make_shared<FrameConnection>(std::move(socket), svc->opts_.limits, svc->buffers_)) {}

  void Start() {
    nonce_ = internal::RandomNonce();
    conn_->Send(internal::EncodeChallenge({nonce_, !svc_->opts_.token.empty(), svc_->opts_.id}));
    auto self = shared_from_this();
    conn_->StartReading([self](const Status& s, InFrame f) { self->OnFrame(s, std::move(f)); });
  }

  void Close() { conn_->Close(); }
  const std::set<std::string>& jobs() const { return jobs_; }

 private:
  void OnFrame(const Status& s, const InFrame& f) {
    if (!s.ok()) {
      if (s.code() == StatusCode::kInvalidArgument || s.code() == StatusCode::kResourceExhausted)
        Log("closing %s: %s", conn_->peer().c_str(), s.ToString().c_str());
      svc_->SessionClosed(shared_from_this());
      return;
    }
    if (!authenticated_) return OnHello(f);
    ++svc_->requests_;
    switch (f.header.type) {
      case MessageType::kRegisterWorker: return OnRegister(f);
      case MessageType::kHeartbeat: return OnHeartbeat(f);
      case MessageType::kGetOrCreateJob: return OnGetOrCreateJob(f);
      case MessageType::kGetWorkers: return OnGetWorkers(f);
      case MessageType::kAckSplits: return OnAck(f);
      case MessageType::kGetJobStatus: return OnJobStatus(f);
      case MessageType::kRestoreConsumer: return OnRestore(f);
      case MessageType::kReportWorker: return OnReport(f);
      default:
        return Refuse(Status::InvalidArgument(std::string("unexpected ") + MessageTypeName(f.header.type)));
    }
  }

  void OnHello(const InFrame& f) {
    Result<internal::HelloMsg> h = internal::DecodeHello(f);
    if (!h.ok()) return Refuse(h.status());
    if (!svc_->opts_.token.empty() && !internal::MacEquals(h->mac, internal::HelloMac(svc_->opts_.token, nonce_))) {
      Log("refusing %s: %s", conn_->peer().c_str(), h->mac.empty() ? "no token presented" : "wrong token");
      return Refuse(Status(StatusCode::kUnauthenticated, h->mac.empty() ? "this dispatcher requires a token" : "wrong token"));
    }
    authenticated_ = true;
    conn_->Send(internal::EncodeHelloOk(svc_->opts_.id));
  }

  void OnRegister(const InFrame& f) {
    auto r = internal::DecodeRegisterWorker(f);
    if (!r.ok()) return Refuse(r.status());
    const auto& [id, address] = *r;
    auto it = svc_->state_.workers().find(id);
    if (it == svc_->state_.workers().end() || it->second.address != address) {
      if (it == svc_->state_.workers().end()) Log("worker %s registered at %s", id.c_str(), address.c_str());
      Status s = svc_->Commit(dispatch::RegisterWorker{id, address});
      if (!s.ok()) return Refuse(s);
    }
    svc_->Heard(id);
    svc_->Reply(conn_, internal::EncodeRegisterWorkerOk(uint32_t(svc_->opts_.heartbeat_interval_ms)));
  }

  void OnHeartbeat(const InFrame& f) {
    auto h = internal::DecodeHeartbeat(f);
    if (!h.ok()) return Refuse(h.status());
    auto& state = svc_->state_;
    auto it = state.workers().find(h->worker_id);
    internal::HeartbeatOkMsg reply;
    if (it == state.workers().end()) {
      reply.known = false;  // declared dead, or unknown after all: re-register
      return svc_->Reply(conn_, internal::EncodeHeartbeatOk(reply));
    }
    if (h->leaving) {
      Log("worker %s is leaving", h->worker_id.c_str());
      Status s = svc_->Commit(dispatch::RemoveWorker{h->worker_id});
      if (!s.ok()) return Refuse(s);
      svc_->last_seen_.erase(h->worker_id);
      reply.known = false;
      return svc_->Reply(conn_, internal::EncodeHeartbeatOk(reply));
    }
    svc_->Heard(h->worker_id);
    if (h->draining && !it->second.draining) {
      Log("worker %s is draining", h->worker_id.c_str());
      Status s = svc_->Commit(dispatch::DrainWorker{h->worker_id});
      if (!s.ok()) return Refuse(s);
    }
    if (h->want_leases && !h->draining) {
      for (dispatch::LeaseSplits& l : dispatch::DecideLeases(state, h->worker_id, svc_->opts_.lease)) {
        Status s = svc_->Commit(l);
        if (!s.ok()) {
          Log("lease refused by the state (a bug in the decisions): %s", s.ToString().c_str());
          continue;
        }
        for (const auto& x : l.splits) reply.leases.push_back({l.job, x.ref.epoch, x.ref.split, x.consumer});
        svc_->leases_ += int64_t(l.splits.size());
      }
    }
    // Then every other split it still holds: the reply carries the whole set.
    reply.new_leases = uint32_t(reply.leases.size());
    std::set<std::tuple<std::string, uint64_t, int64_t>> fresh;
    for (const auto& l : reply.leases) fresh.insert({l.job, l.epoch, l.split});
    std::set<std::string> jobs;
    for (const auto& [job, held] : state.LeasesOf(h->worker_id)) {
      jobs.insert(job);
      for (const auto& x : held) {
        if (!fresh.count({job, x.ref.epoch, x.ref.split}))
          reply.leases.push_back({job, x.ref.epoch, x.ref.split, x.consumer});
      }
    }
    for (const std::string& j : h->want_jobs) {
      if (state.job(j) != nullptr) jobs.insert(j);  // a client waits on this worker for it
    }
    for (const std::string& j : jobs) reply.jobs.push_back(ToMsg(state.job(j)->config));
    reply.idle = svc_->Idle();
    if (reply.idle) svc_->told_idle_.insert(h->worker_id);
    svc_->Reply(conn_, internal::EncodeHeartbeatOk(reply));
  }

  void OnGetOrCreateJob(const InFrame& f) {
    auto r = internal::DecodeGetOrCreateJob(f);
    if (!r.ok()) return Refuse(r.status());
    dispatch::JobConfig want = FromMsg(r->first);
    const std::string consumer = r->second;
    if (want.name.empty() || consumer.empty()) return Refuse(Status::InvalidArgument("job name and consumer id are required"));
    if (want.batch_size <= 0 || want.batches_per_split <= 0)
      return Refuse(Status::InvalidArgument("batch_size and batches_per_split must be > 0"));
    if (const dispatch::JobState* j = svc_->state_.job(want.name)) return Join(*j, want, consumer);
    if (svc_->creating_.count(want.name)) {
      // Another client is creating it: ask again shortly.
      auto self = shared_from_this();
      auto timer = std::make_shared<asio::steady_timer>(svc_->io_, std::chrono::milliseconds(20));
      auto frame = std::make_shared<InFrame>(f);
      timer->async_wait([self, timer, frame](const boost::system::error_code&) { self->OnGetOrCreateJob(*frame); });
      return;
    }
    svc_->creating_.insert(want.name);
    jobs_.insert(want.name);
    // Listing can take a second: off the io thread.
    std::weak_ptr<DispatcherSession> weak = weak_from_this();
    DispatcherService::Impl* svc = svc_;
    asio::post(svc_->blocking_, [weak, svc, want, consumer]() mutable {
      Status status;
      if (want.dataset.rfind("synthetic:", 0) == 0) {
        // Workers hold an epoch's permutation (8 bytes a sample): keep it sane.
        if (want.num_samples <= 0 || want.num_samples > (int64_t(1) << 26))
          status = Status::InvalidArgument("a synthetic dataset needs num_samples in [1, 2^26]");
      } else {
        auto spec = PipelineSpec::FromJson(want.pipeline_json);
        auto ds = spec.ok() ? OpenDataset(want.dataset) : Result<std::unique_ptr<Dataset>>(spec.status());
        if (!ds.ok()) {
          status = ds.status();
        } else {
          want.num_samples = (*ds)->size();
          Fingerprinter fp;
          fp.AddU64((*ds)->fingerprint());
          fp.AddU64(spec->Fingerprint());
          want.fingerprint = fp.Finish();
        }
      }
      asio::post(svc->io_, [weak, svc, want, consumer, status] {
        svc->creating_.erase(want.name);
        auto self = weak.lock();
        if (!status.ok()) {
          if (self) self->Refuse(status);
          return;
        }
        Status s = svc->Commit(dispatch::CreateJob{want});
        if (s.ok()) {
          Log("job %s: %s, %lld samples, %lld splits per epoch", want.name.c_str(), want.dataset.c_str(),
              (long long)want.num_samples, (long long)want.SplitsPerEpoch());
        }
        if (!self) return;
        const dispatch::JobState* j = svc->state_.job(want.name);
        if (!s.ok() || j == nullptr) return self->Refuse(s.ok() ? Status::Internal("job vanished") : s);
        self->Join(*j, want, consumer);
      });
    });
  }

  void Join(const dispatch::JobState& j, const dispatch::JobConfig& want, const std::string& consumer) {
    if (!SameJob(want, j.config))
      return Refuse(Status::FailedPrecondition("job " + want.name + " exists with a different configuration"));
    if (!j.HasConsumer(consumer)) {
      Log("job %s: consumer %s joined", want.name.c_str(), consumer.c_str());
      Status s = svc_->Commit(dispatch::AddConsumer{want.name, consumer});
      if (!s.ok()) return Refuse(s);
    }
    jobs_.insert(want.name);
    svc_->Reply(conn_, internal::EncodeJobInfo(ToMsg(j.config)));
  }

  void OnGetWorkers(const InFrame& f) {
    Status s = internal::DecodeGetWorkers(f);
    if (!s.ok()) return Refuse(s);
    SendWorkers();
  }

  void SendWorkers() {
    std::vector<std::string> addresses;
    for (const auto& [id, w] : svc_->state_.workers()) {
      if (!w.draining) addresses.push_back(w.address);
    }
    svc_->Reply(conn_, internal::EncodeWorkerList(addresses));
  }

  void OnAck(const InFrame& f) {
    auto a = internal::DecodeAckSplits(f);
    if (!a.ok()) return Refuse(a.status());
    dispatch::AckSplits u{a->job, a->consumer_id, {}};
    for (const auto& [e, s] : a->splits) u.splits.push_back({e, s});
    Status s = svc_->Commit(u);
    if (!s.ok()) return Refuse(s);
    svc_->acks_ += int64_t(u.splits.size());
    SendStatus(a->job, a->consumer_id, 0);
  }

  void OnRestore(const InFrame& f) {
    auto m = internal::DecodeRestoreConsumer(f);
    if (!m.ok()) return Refuse(m.status());
    dispatch::RestoreConsumer u{m->job, m->consumer_id, m->first_open, {}};
    for (const auto& [e, s] : m->done) u.done.push_back({e, s});
    Status s = svc_->Commit(u);
    if (!s.ok()) return Refuse(s);
    Log("job %s: consumer %s resumed from a saved state at epoch %llu (%zu splits done)", m->job.c_str(),
        m->consumer_id.c_str(), (unsigned long long)m->first_open, m->done.size());
    SendStatus(m->job, m->consumer_id, m->first_open);
  }

  void OnReport(const InFrame& f) {
    auto address = internal::DecodeReportWorker(f);
    if (!address.ok()) return Refuse(address.status());
    // A client's word alone does not kill a worker (the network between them may be
    // at fault): the worker must also have missed a heartbeat.
    std::vector<std::string> gone;
    for (const auto& [id, w] : svc_->state_.workers()) {
      auto seen = svc_->last_seen_.find(id);
      const int64_t quiet = seen == svc_->last_seen_.end() ? 0 : NowMs() - seen->second;
      if (w.address == *address && quiet > svc_->opts_.heartbeat_interval_ms + 50) gone.push_back(id);
    }
    for (const std::string& id : gone) {
      Log("worker %s at %s refuses a client's connections and missed its heartbeat: removed", id.c_str(),
          address->c_str());
      if (svc_->Commit(dispatch::RemoveWorker{id}).ok()) ++svc_->workers_removed_;
      svc_->last_seen_.erase(id);
    }
    SendWorkers();
  }

  void OnJobStatus(const InFrame& f) {
    auto q = internal::DecodeGetJobStatus(f);
    if (!q.ok()) return Refuse(q.status());
    if (svc_->state_.job(q->job) == nullptr) return Refuse(Status::NotFound("no job " + q->job));
    SendStatus(q->job, q->consumer_id, q->epoch);
  }

  void SendStatus(const std::string& job, const std::string& consumer, uint64_t epoch) {
    const dispatch::JobState* j = svc_->state_.job(job);
    internal::JobStatusMsg m;
    if (j != nullptr) {
      m.first_open = j->first_open;
      m.finished = j->finished();
      for (const auto& [split, status] : svc_->state_.SplitsOf(job, consumer, epoch)) m.my_splits.push_back(split);
      if (epoch < j->first_open) {
        m.epoch_fully_assigned = true;
      } else {
        auto it = j->epochs.find(epoch);
        m.epoch_fully_assigned = it != j->epochs.end() &&
                                 std::none_of(it->second.consumer.begin(), it->second.consumer.end(),
                                              [](const std::string& c) { return c.empty(); });
      }
    }
    svc_->Reply(conn_, internal::EncodeJobStatus(m));
  }

  void Refuse(const Status& s) {
    Log("refusing a request from %s: %s", conn_->peer().c_str(), s.ToString().c_str());
    conn_->Send(internal::EncodeError(s));
    conn_->CloseAfterWrites();
  }

  DispatcherService::Impl* svc_;
  std::shared_ptr<FrameConnection> conn_;
  std::string nonce_;
  bool authenticated_ = false;
  std::set<std::string> jobs_;  // jobs this client created or joined
};

DispatcherService::Impl::~Impl() {
  asio::post(io_, [this] {
    boost::system::error_code ec;
    acceptor_.close(ec);
    if (tick_) tick_->cancel();
    auto copy = sessions_;
    for (auto& s : copy) s->Close();
  });
  if (io_thread_.joinable()) io_thread_.join();
  blocking_.join();
}

void DispatcherService::Impl::Accept() {
  AcceptLoop(acceptor_, [] { return true; }, [this](tcp::socket socket) {
    auto s = std::make_shared<DispatcherSession>(this, std::move(socket));
    sessions_.insert(s);
    s->Start();
  });
}

void DispatcherService::Impl::Tick() {
  if (!tick_) tick_ = std::make_unique<asio::steady_timer>(io_);
  tick_->expires_after(std::chrono::milliseconds(std::max(10, opts_.heartbeat_interval_ms / 2)));
  tick_->async_wait([this](const boost::system::error_code& ec) {
    if (ec) return;
    for (const dispatch::RemoveWorker& r :
         dispatch::DecideDeadWorkers(state_, last_seen_, NowMs(), opts_.heartbeat_timeout_ms)) {
      const auto leases = state_.LeasesOf(r.worker);
      size_t n = 0;
      for (const auto& [job, l] : leases) n += l.size();
      Log("worker %s missed its heartbeats: removed, %zu split(s) return to pending", r.worker.c_str(), n);
      if (Commit(r).ok()) ++workers_removed_;
      last_seen_.erase(r.worker);
    }
    std::set<std::string> in_use;
    for (const auto& s : sessions_) in_use.insert(s->jobs().begin(), s->jobs().end());
    for (const dispatch::RemoveJob& r : dispatch::DecideGarbage(state_, in_use)) {
      Log("job %s finished and has no consumer left: removed", r.job.c_str());
      if (Commit(r).ok()) ++jobs_collected_;
    }
    if (dirty_ && !flush_posted_) {
      flush_posted_ = true;
      asio::post(io_, [this] { Flush(); });
    }
    // Idle: exit once every worker has been told so in a heartbeat reply (they exit
    // too, with --exit-when-idle), or after a heartbeat timeout at most.
    if (!Idle()) idle_since_ms_ = -1;
    else if (idle_since_ms_ < 0) idle_since_ms_ = NowMs();
    bool all_told = true;
    for (const auto& [id, w] : state_.workers()) all_told = all_told && told_idle_.count(id) > 0;
    if (opts_.exit_when_idle && idle_since_ms_ >= 0 &&
        (all_told || NowMs() - idle_since_ms_ > opts_.heartbeat_timeout_ms)) {
      std::lock_guard<std::mutex> lock(idle_mu_);
      idle_ = true;
      idle_cv_.notify_all();
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
void DispatcherService::WaitIdle() { impl_->WaitIdle(); }
DispatcherService::Stats DispatcherService::stats() const {
  return {impl_->requests_.load(), impl_->leases_.load(), impl_->acks_.load(), impl_->workers_removed_.load(),
          impl_->journal_records_.load(), impl_->replayed_};
}

}  // namespace ferry
