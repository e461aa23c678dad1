// Client::Impl: the parts of include/ferry/client.h put together.
//
//   consumer thread   Next(): takes what the ledger releases, returns its credit
//   io thread         one WorkerStream per worker (client/worker_stream.h)
//   control thread    dispatcher mode: the ControlLoop (client/control_loop.h)
//
// The ledger (client/ledger.h) holds the bookkeeping; this file only moves batches,
// credits and dispatcher answers between the parts, under one mutex.
#include "ferry/client.h"

#include <utility>  // before Asio: Boost 1.74 uses std::exchange without it in C++20

#include <algorithm>
#include <atomic>
#include <boost/asio.hpp>
#include <chrono>
#include <climits>
#include <map>
#include <memory>
#include <optional>
#include <pthread.h>
#include <thread>
#include <vector>

#include "client/control_loop.h"
#include "client/ledger.h"
#include "client/worker_stream.h"
#include "core/cpu_set.h"
#include "core/log.h"
#include "core/mutex.h"
#include "net/run_io.h"
#include "net/address.h"
#include "net/auth.h"

namespace ferry {

namespace asio = boost::asio;
using client::Ledger;

class Client::Impl : public client::StreamHost, public client::ControlHost {
 public:
  Impl(ClientOptions o, std::optional<IteratorState> resume, std::shared_ptr<net::TlsContext> tls)
      : opts_(std::move(o)),
        work_(asio::make_work_guard(io_)),
        ledger_(!dispatched()                                  ? Ledger::Mode::kPointToPoint
                : opts_.job.mode == ProcessingMode::kParallelEpochs ? Ledger::Mode::kPointToPoint
                : opts_.job.ordering == Ordering::kDeterministic    ? Ledger::Mode::kDeterministic
                                                                    : Ledger::Mode::kArrival) {
    stream_config_.dispatched = dispatched();
    stream_config_.splits = sharded();
    stream_config_.token = opts_.token;
    stream_config_.tls = tls;
    stream_config_.limits.max_batch_bytes = opts_.max_batch_bytes;
    stream_config_.buffers = opts_.buffers;
    stream_config_.retry = {opts_.backoff_initial_s, opts_.backoff_max_s, opts_.max_retries, 0};
    stream_config_.reconnects = &reconnects_;
    wire::OpenStreamMsg& m = stream_config_.open;
    m.consumer_id = opts_.consumer_id;
    m.credits = uint32_t(opts_.credits);
    if (dispatched()) {
      m.by_name = true;
      m.job_name = opts_.job_name;
      m.job_config = opts_.job.ConfigFingerprint();
    } else {
      m.job = opts_.job;
      m.num_shards = uint32_t(opts_.workers.size());
      m.first_epoch = opts_.first_epoch;
      m.rank = uint32_t(opts_.rank);
    }
    MutexLock lock(&mu_);
    if (resume && sharded()) ledger_.Restore(*resume);
    // Point to point, a rank's share of an epoch comes with its batches.
    if (!dispatched() && opts_.job.ranked()) ledger_.SetRanked(nullptr, opts_.rank, opts_.first_epoch);
    for (size_t i = 0; i < opts_.workers.size(); ++i) epochs_done_[i] = 0;
    streams_opened_ = opts_.workers.size();
    if (dispatched()) {
      client::ControlConfig c;
      c.dispatcher = opts_.dispatcher;
      c.token = opts_.token;
      c.tls = tls;
      c.consumer_id = opts_.consumer_id;
      c.job = {opts_.job_name, opts_.job};
      // Told to the dispatcher after joining (RestoreConsumer): the state's done splits
      // are acknowledged (the process that saved it may have stopped before its
      // acknowledgements went out), and any other split of this consumer acknowledged
      // since (the trainer went on past its checkpoint) is delivered again.
      if (sharded()) c.restore = resume;
      c.deterministic = opts_.job.ordering == Ordering::kDeterministic;
      c.poll_interval_s = opts_.poll_interval_s;
      c.cpus = opts_.io_cpus;
      c.retry = {opts_.backoff_initial_s, opts_.backoff_max_s, /*max_failures=*/-1, opts_.dispatcher_timeout_s};
      control_ = std::make_unique<client::ControlLoop>(std::move(c), this);
    }
  }

  void Start() {
    // Point to point, stream i serves shard i of each epoch: one stream per entry, in
    // order (the same address twice is two shards). Through a dispatcher, streams are
    // opened as the dispatcher lists workers (EnsureStreams).
    asio::post(io_, [this] {
      for (size_t i = 0; i < opts_.workers.size(); ++i) AddStream(opts_.workers[i]);
    });
    io_thread_ = std::thread([this] {
      ::pthread_setname_np(::pthread_self(), "ferry-recv");  // as top -H and /proc/<pid>/task list it
      PinThisThreadOrWarn(opts_.io_cpus, "ferry client receiving");
      net::RunIo(io_, "ferry client");
    });
    if (control_) control_->Start();
  }

  ~Impl() override {
    // The control loop first (it sends the final acknowledgements), then every socket
    // and timer on the io thread, which then runs out of work: every handler completes
    // (aborted) before anything it refers to is destroyed. The loop object itself goes
    // last: the io thread's callbacks may Notify() it until the io thread has ended.
    if (control_) {
      control_->Stop();
      control_->Join();
    }
    asio::post(io_, [this] {
      for (auto& s : streams_) s->Shutdown();
    });
    work_.reset();
    if (io_thread_.joinable()) io_thread_.join();
    control_.reset();
  }

  Result<Batch> Next() {
    const auto t0 = std::chrono::steady_clock::now();
    MutexLock lock(&mu_);
    if (!first_next_) first_next_ = t0;
    auto waited = [&] {
      mu_.AssertHeld();
      last_return_ = std::chrono::steady_clock::now();
      stats_.wait_seconds += std::chrono::duration<double>(last_return_ - t0).count();
    };
    for (;;) {
      DropDiscardable();
      while (!ledger_.Releasable() && error_.ok() && !Ended()) {
        cv_.Wait(&mu_);
        DropDiscardable();
      }
      if (!ledger_.Releasable()) {
        waited();
        if (!error_.ok()) return error_;
        return Status::OutOfRange("end of data");
      }
      Ledger::Taken t = TakeFront();
      if (t.duplicate || Discardable(t.batch)) continue;  // (DropDiscardable dropped these already)
      waited();
      ++stats_.batches;
      stats_.samples += t.batch.valid;
      return std::move(t.batch);
    }
  }

  // Waiting here is waiting for input too (the Python binding waits here, with the GIL
  // released, before it calls Next()): it counts in wait_seconds and the load.
  bool WaitReady(double seconds) {
    const auto t0 = std::chrono::steady_clock::now();
    const auto deadline = DeadlineIn(seconds);
    MutexLock lock(&mu_);
    if (!first_next_) first_next_ = t0;
    // Ready means a batch Next() yields: those it would drop are dropped here, so that
    // Next() after a true never waits (the Python binding relies on it to answer Ctrl-C).
    DropDiscardable();
    while (!ledger_.Releasable() && error_.ok() && !Ended()) {
      if (!cv_.WaitUntil(&mu_, deadline)) break;
      DropDiscardable();
    }
    last_return_ = std::chrono::steady_clock::now();
    stats_.wait_seconds += std::chrono::duration<double>(last_return_ - t0).count();
    return ledger_.Releasable() || !error_.ok() || Ended();
  }

  std::vector<SkippedSample> TakeSkipped() {
    MutexLock lock(&mu_);
    std::vector<SkippedSample> out;
    out.swap(skipped_);
    return out;
  }

  IteratorStats stats() {
    MutexLock lock(&mu_);
    IteratorStats s = stats_;
    s.skipped = total_skipped_;
    return s;
  }

  std::optional<JobSpec> JobInfo(double seconds) {
    if (!dispatched()) return std::nullopt;
    const auto deadline = DeadlineIn(seconds);
    MutexLock lock(&mu_);
    while (!job_ && error_.ok()) {
      if (!cv_.WaitUntil(&mu_, deadline)) break;
    }
    return job_;
  }

  int64_t epochs_completed() {
    MutexLock lock(&mu_);
    if (sharded()) return int64_t(ledger_.first_open());
    int64_t m = INT64_MAX;
    for (const auto& [stream, e] : epochs_done_) m = std::min(m, e);
    return m == INT64_MAX ? 0 : m;
  }

  IteratorState SaveState() {
    MutexLock lock(&mu_);
    IteratorState st = ledger_.Save();
    st.job = opts_.job_name;
    st.consumer = opts_.consumer_id;
    st.config = opts_.job.ConfigFingerprint();
    return st;
  }

  int64_t duplicates_dropped() {
    MutexLock lock(&mu_);
    return ledger_.duplicates();
  }

  size_t workers_seen() {
    MutexLock lock(&mu_);
    return workers_seen_;
  }

  const ClientOptions opts_;
  std::atomic<int64_t> reconnects_{0};

 private:
  bool dispatched() const { return !opts_.dispatcher.empty(); }
  // Dynamic sharding: splits, acknowledgements, dedup (dispatcher, distributed_epoch).
  bool sharded() const { return dispatched() && opts_.job.mode == ProcessingMode::kDistributedEpoch; }

  // Takes the releasable arrival: it leaves the prefetch window, so its worker may send
  // one more (unless its credit went back when it arrived: see Ledger::Arrival), and
  // the splits it completes are acknowledged.
  Ledger::Taken TakeFront() EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const size_t acks = ledger_.to_ack().size();
    Ledger::Taken t = ledger_.Take();
    if (t.credit) GrantLater(t.stream);
    if (ledger_.to_ack().size() > acks && control_) control_->Notify();
    return t;
  }

  // An empty batch of a consumer that is not a rank: accounted for, nothing to yield (a
  // rank yields it all the same: it must take its step, as every other rank does).
  bool Discardable(const Batch& b) EXCLUSIVE_LOCKS_REQUIRED(mu_) { return b.rows() == 0 && !ledger_.ranked(); }

  // Takes and drops the releasable arrivals Next() would not yield: batches of a re-sent
  // split yielded before (duplicates), and Discardable ones.
  void DropDiscardable() EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (;;) {
      bool duplicate = false;
      const Batch* b = ledger_.Peek(&duplicate);
      if (b == nullptr || !(duplicate || Discardable(*b))) return;
      TakeFront();
    }
  }

  // Nothing more will come: Next() returns OutOfRange once the queue is empty.
  bool Ended() EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (sharded()) return ledger_.finished();
    // Point to point, or parallel epochs: every stream opened has ended (a dead
    // worker's stream counts as ended: parallel epochs are at most once).
    return finished_streams_ > 0 && finished_streams_ == streams_opened_;
  }

  void GrantLater(size_t stream) {
    asio::post(io_, [this, stream] { streams_[stream]->Grant(1); });
  }

  void AddStream(const std::string& address) {
    const size_t index = streams_.size();
    streams_.push_back(std::make_shared<client::WorkerStream>(io_, this, &stream_config_, index, address));
    streams_.back()->Begin();
  }

  // Dispatcher mode: opens a stream to every listed worker that has none (io thread).
  void EnsureStreams(const std::vector<std::string>& addresses) {
    for (const std::string& a : addresses) {
      if (stream_of_.count(a)) continue;
      const bool parallel = opts_.job.mode == ProcessingMode::kParallelEpochs;
      {
        MutexLock lock(&mu_);
        if (parallel && Ended()) continue;  // every stream has ended: too late to join
        ++workers_seen_;
        if (parallel) {
          ++streams_opened_;
          epochs_done_[streams_.size()] = 0;
        }
      }
      stream_of_[a] = streams_.size();
      AddStream(a);
    }
  }

  // --- StreamHost (io thread) ------------------------------------------------------

  void OnBatch(size_t stream, Batch batch, std::vector<SkippedSample> skipped) override {
    MutexLock lock(&mu_);
    total_skipped_ += int64_t(skipped.size());
    for (auto& s : skipped) skipped_.push_back(std::move(s));
    const size_t acks = ledger_.to_ack().size();
    const Ledger::Arrival a = ledger_.Arrive(std::move(batch), stream);
    if (a != Ledger::Arrival::kQueued) GrantLater(stream);  // held or accounted: keep the window full
    if (a != Ledger::Arrival::kAccounted) cv_.Signal();
    if (ledger_.to_ack().size() > acks && control_) control_->Notify();
  }

  void OnEpochDone(size_t stream, uint64_t epoch) override {
    MutexLock lock(&mu_);
    int64_t& done = epochs_done_[stream];
    done = std::max<int64_t>(done, int64_t(epoch - opts_.first_epoch) + 1);
  }

  void OnStreamEnd(size_t stream) override {
    MutexLock lock(&mu_);
    ++finished_streams_;
    cv_.SignalAll();
  }

  void OnRetired(size_t stream) override {
    stream_of_.erase(streams_[stream]->address());
    if (opts_.job.mode == ProcessingMode::kParallelEpochs) OnStreamEnd(stream);
  }

  void OnUnreachable(const std::string& address) override {
    if (!sharded()) return;
    {
      MutexLock lock(&mu_);
      unreachable_.push_back(address);
    }
    control_->Notify();
  }

  void OnFailed(const Status& s) override {
    MutexLock lock(&mu_);
    if (error_.ok()) error_ = s;
    cv_.SignalAll();
  }

  int64_t QueuedFrom(size_t stream) override {
    MutexLock lock(&mu_);
    return ledger_.QueuedFrom(stream);
  }

  // --- ControlHost (control thread) ------------------------------------------------

  Pending TakePending() override {
    MutexLock lock(&mu_);
    Pending p;
    p.acks = ledger_.to_ack();
    p.status_epoch = ledger_.StatusEpoch();
    p.unreachable.swap(unreachable_);
    if (first_next_) {
      p.load.wait_ns = int64_t(stats_.wait_seconds * 1e9);
      p.load.elapsed_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(last_return_ - *first_next_).count();
      p.load.samples = stats_.samples;
    }
    return p;
  }

  void Requeue(std::vector<std::string> unreachable) override {
    MutexLock lock(&mu_);
    unreachable_.insert(unreachable_.begin(), unreachable.begin(), unreachable.end());
  }

  void OnJoined(const JobSpec& job) override {
    MutexLock lock(&mu_);
    job_ = job;
    if (job.ranked() && sharded()) ledger_.SetRanked(&job, opts_.rank);
    cv_.SignalAll();
  }

  void OnAcked(size_t n, uint64_t first_open, bool finished) override {
    MutexLock lock(&mu_);
    ledger_.Acked(n);
    ledger_.OnProgress(first_open, finished);
    cv_.SignalAll();
  }

  void OnStatus(uint64_t epoch, const client::JobStatus& status) override {
    MutexLock lock(&mu_);
    ledger_.OnStatus(epoch, status);
    cv_.SignalAll();
  }

  void OnJobGone() override {
    MutexLock lock(&mu_);
    ledger_.SetFinished();
    cv_.SignalAll();
  }

  void OnWorkers(const std::vector<std::string>& addresses) override {
    asio::post(io_, [this, addresses] { EnsureStreams(addresses); });
  }

  bool Finished() override {
    MutexLock lock(&mu_);
    return ledger_.finished();
  }

  client::StreamConfig stream_config_;  // fixed before Start()
  asio::io_context io_;
  asio::executor_work_guard<asio::io_context::executor_type> work_;
  std::thread io_thread_;
  std::unique_ptr<client::ControlLoop> control_;  // dispatcher mode; fixed before Start()
  // The io thread's alone:
  std::vector<std::shared_ptr<client::WorkerStream>> streams_;
  std::map<std::string, size_t> stream_of_;  // dispatcher mode: live streams by address

  Mutex mu_;
  CondVar cv_;  // the consumer waits here for a batch, the end, or an error
  Ledger ledger_ GUARDED_BY(mu_);
  std::vector<SkippedSample> skipped_ GUARDED_BY(mu_);
  int64_t total_skipped_ GUARDED_BY(mu_) = 0;
  IteratorStats stats_ GUARDED_BY(mu_);
  // The first Next() call and the last return: the consumer's time, of which
  // stats_.wait_seconds was spent waiting (reported to the dispatcher as its load).
  std::optional<std::chrono::steady_clock::time_point> first_next_ GUARDED_BY(mu_);
  std::chrono::steady_clock::time_point last_return_ GUARDED_BY(mu_);
  std::map<size_t, int64_t> epochs_done_ GUARDED_BY(mu_);  // point to point: per stream
  size_t streams_opened_ GUARDED_BY(mu_) = 0;
  size_t finished_streams_ GUARDED_BY(mu_) = 0;
  Status error_ GUARDED_BY(mu_);
  std::optional<JobSpec> job_ GUARDED_BY(mu_);  // as the dispatcher has it
  std::vector<std::string> unreachable_ GUARDED_BY(mu_);  // workers to report
  size_t workers_seen_ GUARDED_BY(mu_) = 0;
};

Result<std::unique_ptr<Client>> Client::Connect(const ClientOptions& options) {
  const bool dispatched = !options.dispatcher.empty();
  if (dispatched == !options.workers.empty())
    return Status::InvalidArgument("give either workers (point to point) or a dispatcher, not both or neither");
  FERRY_RETURN_IF_ERROR(options.job.Validate());
  if (options.credits <= 0) return Status::InvalidArgument("credits must be > 0");
  if (options.job.ranked() && (options.rank < 0 || options.rank >= options.job.num_consumers))
    return Status::InvalidArgument("rank " + std::to_string(options.rank) + " is not in [0, " +
                                   std::to_string(options.job.num_consumers) + ")");
  ClientOptions o = options;
  if (o.token.empty()) {
    FERRY_ASSIGN_OR_RETURN(o.token, net::LoadToken(o.token_file));
  }
  if (!o.buffers) o.buffers = DefaultBufferAllocator();
  if (o.io_cpus.empty()) {
    if (const char* env = std::getenv("FERRY_IO_CPUS"); env != nullptr && *env != '\0') {
      Result<std::vector<int>> cpus = ParseCpuList(env);
      if (!cpus.ok()) return Status::InvalidArgument("$FERRY_IO_CPUS: " + cpus.status().message());
      o.io_cpus = *std::move(cpus);
    }
  }
  FERRY_RETURN_IF_ERROR(CheckPlaceable(o.io_cpus, "io_cpus"));
  for (const std::string& w : o.workers) FERRY_RETURN_IF_ERROR(net::SplitHostPort(w).status());
  std::optional<IteratorState> resume;
  if (dispatched) {
    FERRY_RETURN_IF_ERROR(net::SplitHostPort(o.dispatcher).status());
    if (o.job.sharing == Sharing::kEvery && !o.job_name.empty()) {
      // A sweep: this trainer's lane, a job of its own whose lanes share what workers make.
      if (o.trainer_id.empty() && o.job.ranked())
        return Status::InvalidArgument("a sweep of trainers with ranks needs trainer_id: its ranks share one lane");
      if (o.trainer_id.empty() && o.consumer_id.empty()) o.consumer_id = "consumer-" + net::RandomHex(6);
      o.job_name += '/';
      o.job_name += o.trainer_id.empty() ? o.consumer_id : o.trainer_id;
    }
    if (!o.resume_state.empty()) {
      if (o.job.mode == ProcessingMode::kParallelEpochs)
        return Status::InvalidArgument("a parallel_epochs job is at most once: it has no state to resume");
      FERRY_ASSIGN_OR_RETURN(resume, IteratorState::Parse(o.resume_state));
      if (!o.job_name.empty() && o.job_name != resume->job)
        return Status::InvalidArgument("the resume state is of job " + resume->job + ", not " + o.job_name);
      if (!o.consumer_id.empty() && o.consumer_id != resume->consumer)
        return Status::InvalidArgument("the resume state is of consumer " + resume->consumer + ", not " +
                                       o.consumer_id);
      if (resume->config != 0 && resume->config != o.job.ConfigFingerprint())
        return Status::FailedPrecondition(
            "the resume state is of job " + resume->job +
            " with other settings (dataset, pipeline, seed, shuffle, batch or split size, ranks or order): its "
            "positions would name other samples. Resume with the settings it was saved with, or start afresh");
      o.job_name = resume->job;
      o.consumer_id = resume->consumer;
    }
    if (o.job_name.empty()) return Status::InvalidArgument("a dispatcher job needs a job_name");
    if (o.job.ranked()) {
      // A rank is its job's consumer rank-<rank>.
      const std::string rank_id = RankConsumer(o.rank);
      if (!o.consumer_id.empty() && o.consumer_id != rank_id)
        return Status::InvalidArgument("rank " + std::to_string(o.rank) + " of a ranked job is consumer " + rank_id +
                                       ", not " + o.consumer_id);
      o.consumer_id = rank_id;
    }
    if (o.consumer_id.empty()) o.consumer_id = "consumer-" + net::RandomHex(6);
    for (const std::string* n : {&o.job_name, &o.consumer_id}) {
      if (n->find_first_of(" \t\r\n") != std::string::npos)
        return Status::InvalidArgument("job and consumer names hold no whitespace: '" + *n + "'");
    }
  } else {
    if (o.job.ordering != Ordering::kArrival || o.job.mode != ProcessingMode::kDistributedEpoch)
      return Status::InvalidArgument(
          "deterministic ordering and parallel_epochs are a dispatcher job's: give a dispatcher, or leave them at "
          "their defaults point to point");
    if (o.consumer_id.empty()) o.consumer_id = "ferry-client";
  }
  std::shared_ptr<net::TlsContext> tls;
  if (!o.tls_ca.empty() || !o.tls_cert.empty() || !o.tls_key.empty()) {
    FERRY_ASSIGN_OR_RETURN(tls, net::ClientTlsContext({o.tls_cert, o.tls_key, o.tls_ca}));
  }
  auto impl = std::make_unique<Impl>(std::move(o), std::move(resume), std::move(tls));
  impl->Start();
  return std::unique_ptr<Client>(new Client(std::move(impl)));
}

Client::Client(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Client::~Client() = default;
Result<Batch> Client::Next() { return impl_->Next(); }
bool Client::WaitReady(double seconds) { return impl_->WaitReady(seconds); }
std::vector<SkippedSample> Client::TakeSkipped() { return impl_->TakeSkipped(); }
IteratorStats Client::stats() const { return impl_->stats(); }
std::optional<JobSpec> Client::JobInfo(double seconds) const { return impl_->JobInfo(seconds); }
int64_t Client::epochs_completed() const { return impl_->epochs_completed(); }
IteratorState Client::SaveState() const { return impl_->SaveState(); }
const std::string& Client::consumer_id() const { return impl_->opts_.consumer_id; }
int64_t Client::reconnects() const { return impl_->reconnects_.load(); }
int64_t Client::duplicates_dropped() const { return impl_->duplicates_dropped(); }
size_t Client::workers_seen() const { return impl_->workers_seen(); }

}  // namespace ferry
