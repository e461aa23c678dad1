#include "dispatch/dispatcher.h"

#include <algorithm>
#include <cstdlib>
#include <tuple>

#include "ops/pipeline.h"
#include "core/log.h"
#include "core/names.h"
#include "wire/codec.h"

namespace ferry::dispatch {

Result<std::unique_ptr<Dispatcher>> Dispatcher::Open(const DispatcherConfig& config, int64_t now_ms) {
  if (config.work_dir.empty()) return Status::InvalidArgument("--work-dir is required");
  std::unique_ptr<Dispatcher> d(new Dispatcher(config));
  std::vector<Update> replay;
  // Reads and checks the work dir, replays it into the state, upgrades an older format;
  // refuses (DataLoss, naming the file and offset) with the work dir untouched.
  FERRY_ASSIGN_OR_RETURN(d->journal_, Journal::Open(config.work_dir, &replay, &d->state_));
  d->state_id_ = d->journal_->state_id();
  d->journal_->set_sync(false);  // group commit: Sync() syncs
  d->replayed_ = int64_t(replay.size());
  for (const auto& [id, w] : d->state_.workers()) d->last_seen_ms_[id] = now_ms;
  d->UpdatePlacement();  // the replayed jobs on the replayed workers, before the first tick
  if (!replay.empty())
    Log("replayed %zu journal updates: %zu job(s), %zu worker(s)", replay.size(), d->state_.jobs().size(),
        d->state_.workers().size());
  return d;
}

Status Dispatcher::Commit(const Update& u) {
  if (!fatal_.ok()) return fatal_;
  if (!journal_->healthy()) {
    Status again = journal_->Sync();  // what is queued, written again if the disk allows now
    if (!again.ok()) return JournalDown(again);
    JournalUp();
  }
  if (const auto* gone = std::get_if<RemoveJob>(&u)) {
    if (const JobState* j = state_.job(gone->job)) job_wire_.erase(j);
  }
  FERRY_RETURN_IF_ERROR(state_.Apply(u));
  ++journal_records_;
  dirty_ = true;
  // Should the append fail, the update stays applied and queued in the journal, and
  // the caller's reply is this error: nothing that depends on it goes out until the
  // journal has it on disk.
  Status s = journal_->Append(u);
  if (!s.ok()) return JournalDown(s);
  return Status::OK();
}

Status Dispatcher::JournalDown(const Status& s) {
  if (!journal_down_) {
    LogError("cannot write the journal in %s (%s): refusing changes until it can be written; reads go on",
             config_.work_dir.c_str(), s.ToString().c_str());
    journal_down_ = true;
  }
  return Status::Unavailable("the dispatcher cannot write its journal (" + s.message() +
                             "): changes are refused until it can; retry later");
}

void Dispatcher::JournalUp() {
  if (journal_down_) Log("the journal in %s can be written again: accepting changes", config_.work_dir.c_str());
  journal_down_ = false;
}

Status Dispatcher::Sync() {
  if (!fatal_.ok()) return fatal_;
  if (config_.sync || !journal_->healthy()) {
    Status s = journal_->Sync();
    if (journal_->failed()) {
      // Final: the replies waiting on this sync never go out, nor any other (dirty_
      // stays set), and the service stops; a restart replays what is on disk.
      fatal_ = s;
      LogError("%s: stopping, so that a restart recovers from what is on disk", s.ToString().c_str());
      return fatal_;
    }
    if (!s.ok()) {
      // The replies waiting on this sync must not go out; the updates stay queued in
      // the journal, and reads need no sync meanwhile.
      dirty_ = false;
      return JournalDown(s);
    }
    JournalUp();
    synced_since_tick_ = true;
  } else if (Status s = journal_->Write(); !s.ok()) {
    // No fdatasync (tests), but the records are written all the same: the replies
    // waiting on them must not go out when they could not be.
    dirty_ = false;
    return JournalDown(s);
  }
  dirty_ = false;
  // A snapshot when the journal holds compact_every records, or twice the last
  // snapshot's, whichever is more: the journal stays within three snapshots' size, and
  // a large state (a thousand jobs) is not written out every second under load.
  // The snapshot is written beside (Journal::StartCompaction); a sync after it is
  // written switches to the new generation.
  if (journal_->compacting()) {
    Status s = journal_->FinishCompaction();
    if (!s.ok()) LogWarn("journal compaction failed (will retry): %s", s.ToString().c_str());
  } else if (journal_->records_since_snapshot() >
             std::max<uint64_t>(config_.compact_every, 2 * journal_->snapshot_records())) {
    journal_->StartCompaction(state_);
  }
  return Status::OK();
}

Dispatcher::Stats Dispatcher::stats() const {
  return {leases_.load(), acks_.load(), workers_removed_.load(), journal_records_.load(), replayed_, returned_.load()};
}

int64_t Dispatcher::LeasedTo(const std::string& worker, const std::string& job) const {
  int64_t n = 0;
  if (const auto* refs = state_.LeaseRefs(worker))
    for (const auto& [j, l] : *refs)
      if (job.empty() || j == job) n += int64_t(l.size());
  return n;
}

// --- Workers -------------------------------------------------------------------------

Result<uint32_t> Dispatcher::RegisterWorker(const wire::RegisterWorkerMsg& m, int64_t now_ms) {
  FERRY_RETURN_IF_ERROR(CheckName("worker id", m.worker_id));
  FERRY_RETURN_IF_ERROR(CheckName("worker address", m.address));
  FERRY_RETURN_IF_ERROR(CheckOptionalName("the job a worker serves", m.serves_job));
  FERRY_RETURN_IF_ERROR(CheckOptionalName("the consumer a worker serves", m.serves_consumer));
  auto it = state_.workers().find(m.worker_id);
  if (it == state_.workers().end() || it->second.address != m.address || it->second.serves_job != m.serves_job ||
      it->second.serves_consumer != m.serves_consumer) {
    if (it == state_.workers().end()) {
      if (m.serves_job.empty())
        Log("worker %s registered at %s", m.worker_id.c_str(), m.address.c_str());
      else
        Log("worker %s registered at %s, serving only %s of job %s", m.worker_id.c_str(), m.address.c_str(),
            m.serves_consumer.c_str(), m.serves_job.c_str());
    }
    FERRY_RETURN_IF_ERROR(
        Commit(dispatch::RegisterWorker{m.worker_id, m.address, m.serves_job, m.serves_consumer}));
  }
  last_seen_ms_[m.worker_id] = now_ms;
  return uint32_t(config_.heartbeat_interval_ms);
}

bool Dispatcher::RemoveWorker(const std::string& id) {
  const int64_t held = LeasedTo(id);
  if (!Commit(dispatch::RemoveWorker{id}).ok()) return false;  // (the journal is down: the next tick tries again)
  returned_ += held;
  ++workers_removed_;
  last_seen_ms_.erase(id);
  told_idle_.erase(id);
  unfit_.erase(id);
  return true;
}

Result<wire::HeartbeatOkMsg> Dispatcher::Heartbeat(const wire::HeartbeatMsg& m, int64_t now_ms) {
  wire::HeartbeatOkMsg reply;
  auto it = state_.workers().find(m.worker_id);
  if (it == state_.workers().end()) {
    reply.known = false;  // declared dead, or unknown after all: re-register
    return reply;
  }
  if (m.leaving) {
    Log("worker %s is leaving", m.worker_id.c_str());
    const int64_t held = LeasedTo(m.worker_id);
    FERRY_RETURN_IF_ERROR(Commit(dispatch::RemoveWorker{m.worker_id}));
    returned_ += held;
    last_seen_ms_.erase(m.worker_id);
    told_idle_.erase(m.worker_id);
    unfit_.erase(m.worker_id);
    reply.known = false;
    return reply;
  }
  last_seen_ms_[m.worker_id] = now_ms;
  load_.Worker(m.worker_id, m.load, now_ms);
  // Drained by an operator (DrainWorker) and not yet draining itself: tell it.
  reply.drain = it->second.draining && !m.draining;
  if (m.draining && !it->second.draining) {
    Log("worker %s is draining", m.worker_id.c_str());
    FERRY_RETURN_IF_ERROR(Commit(dispatch::DrainWorker{m.worker_id}));
  }
  // Jobs the worker cannot serve (its dataset is missing there, or lists otherwise):
  // what it holds of them returns to pending, it takes no more, and clients of them are
  // not sent to it. Restated by every heartbeat: kept in memory only. (Most heartbeats
  // name none, and had none before: nothing to do, and no set built.)
  std::set<std::string> skip;
  auto had = unfit_.find(m.worker_id);
  if (!m.unfit_jobs.empty() || had != unfit_.end()) {
    std::map<std::string, std::string> unfit;
    static const std::map<std::string, std::string> kNoReasons;
    const std::map<std::string, std::string>& before = had != unfit_.end() ? had->second : kNoReasons;
    for (const auto& [job, reason] : m.unfit_jobs) {
      if (state_.job(job) == nullptr) {
        reply.gone_jobs.push_back(job);  // finished and collected (or never was): the worker forgets it
        continue;
      }
      // A worker states its reason once after registering, then only the name.
      auto was = before.find(job);
      unfit[job] = reason.empty() && was != before.end() ? was->second : reason;
    }
    // (A copy of the job names: the commits below change the index.)
    std::set<std::string> held_before;
    if (const auto* refs = state_.LeaseRefs(m.worker_id))
      for (const auto& [job, held] : *refs) held_before.insert(job);
    for (const auto& [job, reason] : unfit) {
      if (!before.count(job))
        LogWarn("worker %s cannot serve job %s (%s): it takes no splits of it", m.worker_id.c_str(), job.c_str(),
                reason.c_str());
      if (held_before.count(job)) {  // (if refused: the next heartbeat)
        const int64_t held = LeasedTo(m.worker_id, job);
        if (Commit(ReturnSplits{job, m.worker_id}).ok()) returned_ += held;
      }
    }
    for (const auto& [job, reason] : before) {
      if (!unfit.count(job) && state_.job(job) != nullptr)
        Log("worker %s can serve job %s now", m.worker_id.c_str(), job.c_str());
    }
    for (const auto& [job, reason] : unfit) skip.insert(job);
    if (unfit.empty()) unfit_.erase(m.worker_id);
    else unfit_[m.worker_id] = std::move(unfit);
  }
  if (m.want_leases && !m.draining) {
    // Placed: the jobs placed on this worker only (a trainer's own worker: its job).
    std::set<std::string> placed;
    const bool by_placement = placement_.active() && !it->second.ServesOnly();
    if (by_placement) placed = placement_.JobsOf(state_, m.worker_id);
    for (LeaseSplits& l : DecideLeases(state_, m.worker_id, config_.lease, skip, by_placement ? &placed : nullptr)) {
      Status s = Commit(l);
      if (!s.ok() && !journal_->healthy()) break;  // no new leases until the journal takes them
      if (!s.ok()) {
        LogError("lease refused by the state (a bug in the decisions): %s", s.ToString().c_str());
        continue;
      }
      for (const auto& x : l.splits) reply.leases.push_back({l.job, x.ref.epoch, x.ref.split, x.consumer});
      leases_ += int64_t(l.splits.size());
      if (LogEnabled(LogLevel::kDebug)) {
        std::string list;
        for (const auto& x : l.splits) {
          list.append(" ").append(std::to_string(x.ref.epoch)).append("/").append(std::to_string(x.ref.split));
          list.append(":").append(x.consumer);
        }
        LogDebug("job %s: leased to worker %s (epoch/split:consumer):%s", l.job.c_str(), m.worker_id.c_str(),
                 list.c_str());
      }
    }
  }
  // Then every other split it still holds: the reply carries the whole set. (Read
  // from the lease index as it is; the new leases, a few per job, are the first
  // entries of the reply, grouped by job.)
  reply.new_leases = uint32_t(reply.leases.size());
  std::set<std::string> jobs;
  if (const auto* refs = state_.LeaseRefs(m.worker_id)) {
    for (const auto& [job, held] : *refs) {
      jobs.insert(job);
      size_t fresh_from = 0, fresh_to = 0;  // this job's new leases: reply.leases[fresh_from, fresh_to)
      while (fresh_from < reply.new_leases && reply.leases[fresh_from].job != job) ++fresh_from;
      fresh_to = fresh_from;
      while (fresh_to < reply.new_leases && reply.leases[fresh_to].job == job) ++fresh_to;
      const JobState* js = state_.job(job);
      for (const SplitId& ref : held) {
        bool fresh = false;
        for (size_t i = fresh_from; i < fresh_to && !fresh; ++i)
          fresh = reply.leases[i].epoch == ref.epoch && reply.leases[i].split == ref.split;
        if (fresh) continue;
        reply.leases.push_back({job, ref.epoch, ref.split, js->epochs.at(ref.epoch).consumer[size_t(ref.split)]});
      }
    }
  }
  for (const std::string& j : m.want_jobs) {
    if (state_.job(j) != nullptr) jobs.insert(j);  // a client waits on this worker for it
  }
  // A job the worker has with this spec (it names the digest it came with) goes by name.
  for (const std::string& j : jobs) {
    const JobState* js = state_.job(j);
    const JobWire& w = WireOf(*js);
    auto have = m.have_jobs.find(j);
    if (have != m.have_jobs.end() && have->second == w.digest) {
      reply.same_jobs.push_back(j);
      continue;
    }
    reply.jobs.push_back({js->name, js->spec, w.pipeline_json, w.digest});
  }
  reply.idle = Idle();
  if (reply.idle) told_idle_.insert(m.worker_id);
  return reply;
}

void Dispatcher::UpdatePlacement() {
  placement_.Update(state_, [this](const std::string& w, const std::string& j) { return UnfitFor(w, j) != nullptr; });
}

const Dispatcher::JobWire& Dispatcher::WireOf(const JobState& j) {
  // Keyed by the job's state (a job's spec never changes; a job removed and made again
  // under its name is another JobState, and Commit() forgets the entry of a removed one).
  auto it = job_wire_.find(&j);
  if (it != job_wire_.end()) return it->second;
  JobWire w;
  w.pipeline_json = std::make_shared<const std::string>(j.spec.pipeline.ToJson());
  // FNV-1a over the job's wire encoding: equal digests, equal jobs (to 2^-64).
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : wire::EncodeJobBytes(j.spec)) h = (h ^ c) * 0x100000001b3ull;
  w.digest = h == 0 ? 1 : h;
  return job_wire_[&j] = std::move(w);
}

std::vector<std::string> Dispatcher::Workers(const std::string& job, const std::string& consumer) const {
  std::vector<std::string> addresses;
  // Placed (placement.h): the workers the job is placed on, and any that holds splits of
  // it (placed there before), not the whole fleet.
  const JobState* placed = placement_.active() && !job.empty() ? state_.job(job) : nullptr;
  for (const auto& [id, w] : state_.workers()) {
    if (w.draining) continue;
    // A trainer's own worker (hybrid) is for its trainer: no one else can reach it, or
    // would get anything from it.
    if (w.ServesOnly() && (w.serves_job != job || w.serves_consumer != consumer)) continue;
    if (UnfitFor(id, job) != nullptr) continue;
    if (placed != nullptr && !w.ServesOnly() && !placement_.WorkersOf(*placed).count(id)) {
      const auto* refs = state_.LeaseRefs(id);
      if (refs == nullptr || !refs->count(job)) continue;
    }
    addresses.push_back(w.address);
  }
  return addresses;
}

Result<wire::ClusterStatusMsg> Dispatcher::DrainWorker(const std::string& who, int64_t now_ms) {
  // An id names one worker; an address may name several (a worker restarted there
  // under a new id before the old one was declared dead): then the id is needed.
  std::string id;
  if (state_.workers().count(who)) {
    id = who;
  } else {
    std::string ids;
    for (const auto& [wid, w] : state_.workers()) {
      if (w.address != who) continue;
      ids += (ids.empty() ? "" : ", ") + wid;
      if (!id.empty()) {
        return Status::FailedPrecondition("several workers are registered at " + who + " (" + ids +
                                          "...): drain one by its id");
      }
      id = wid;
    }
  }
  if (id.empty()) return Status::NotFound("no worker " + who + " is registered (ferry-ctl status lists them)");
  if (state_.workers().at(id).ServesOnly())
    return Status::FailedPrecondition("worker " + id + " is a trainer's own cores (local_threads): it serves only " +
                                      state_.workers().at(id).serves_consumer + " of job " +
                                      state_.workers().at(id).serves_job + " and stops with that trainer");
  if (!state_.workers().at(id).draining) {
    FERRY_RETURN_IF_ERROR(Commit(dispatch::DrainWorker{id}));
    Log("worker %s (%s) drained by an operator: it takes no new leases", id.c_str(),
        state_.workers().at(id).address.c_str());
  }
  return ClusterStatus(now_ms);
}

wire::ClusterStatusMsg Dispatcher::ClusterStatus(int64_t now_ms) const {
  wire::ClusterStatusMsg m;
  m.state_id = state_id_;
  m.journal_writable = journal_->healthy();
  for (const auto& [name, j] : state_.jobs()) {
    wire::JobSummaryMsg x;
    x.name = name;
    x.dataset = j.spec.dataset;
    x.num_samples = j.spec.num_samples;
    x.consumers = j.consumers;
    x.first_open = j.first_open;
    x.epochs = j.spec.epochs;
    x.splits_per_epoch = j.spec.SplitsPerEpoch();
    x.finished = j.finished();
    x.ranks = j.spec.ranked() ? j.spec.num_consumers : 0;
    const LoadTracker::Advice a = Advice(name);
    x.input_wait = a.input_wait;
    x.demand = a.demand;
    x.recommended_workers = a.recommended_workers;
    x.limited_by = a.limited_by;
    x.thread_share = a.thread_share;
    x.weight = j.spec.weight;
    x.priority = j.spec.priority;
    for (const auto& [epoch, e] : j.epochs) {
      x.leased += e.leased;
      x.done += e.done;
      x.pending += int64_t(e.status.size()) - e.leased - e.done;
    }
    m.jobs.push_back(std::move(x));
  }
  for (const auto& [id, w] : state_.workers()) {
    wire::WorkerStatusMsg x;
    x.id = id;
    x.address = w.address;
    x.draining = w.draining;
    x.leases = uint32_t(state_.LeaseCount(id));
    auto seen = last_seen_ms_.find(id);
    x.silent_ms = seen == last_seen_ms_.end() ? 0 : now_ms - seen->second;
    x.serves_job = w.serves_job;
    x.serves_consumer = w.serves_consumer;
    if (auto u = unfit_.find(id); u != unfit_.end()) x.unfit_jobs = u->second;
    const LoadTracker::WorkerRate r = load_.RateOf(id);
    x.samples_per_second = r.rate;
    x.capacity = r.capacity;
    m.workers.push_back(std::move(x));
  }
  return m;
}

const std::string* Dispatcher::UnfitFor(const std::string& worker, const std::string& job) const {
  if (job.empty()) return nullptr;
  auto it = unfit_.find(worker);
  if (it == unfit_.end()) return nullptr;
  auto jt = it->second.find(job);
  return jt == it->second.end() ? nullptr : &jt->second;
}

Result<std::vector<std::string>> Dispatcher::WorkersFor(const std::string& job, const std::string& consumer) const {
  std::vector<std::string> addresses = Workers(job, consumer);
  if (!addresses.empty() || job.empty()) return addresses;
  // None listed: if workers are there and every one said it cannot serve the job, say
  // so, rather than let the client wait for splits no one will ever lease.
  std::string why;
  for (const auto& [id, w] : state_.workers()) {
    if (w.draining || (w.ServesOnly() && (w.serves_job != job || w.serves_consumer != consumer))) continue;
    const std::string* reason = UnfitFor(id, job);
    if (reason == nullptr) return addresses;  // (cannot happen: it would be listed)
    why += (why.empty() ? "" : "; ") + id + ": " + *reason;
  }
  if (why.empty()) return addresses;  // no worker yet: wait for one
  return Status::FailedPrecondition("no worker can serve job " + job + ": " + why);
}

std::vector<std::string> Dispatcher::ReportWorker(const std::string& address, int64_t now_ms) {
  std::vector<std::string> gone;
  for (const auto& [id, w] : state_.workers()) {
    auto seen = last_seen_ms_.find(id);
    const int64_t quiet = seen == last_seen_ms_.end() ? 0 : now_ms - seen->second;
    if (w.address == address && quiet > config_.heartbeat_interval_ms + 50) gone.push_back(id);
  }
  for (const std::string& id : gone) {
    if (RemoveWorker(id)) {
      LogWarn("worker %s at %s refuses a client's connections and missed its heartbeat: removed", id.c_str(),
              address.c_str());
    }
  }
  return Workers();
}

// --- Jobs ----------------------------------------------------------------------------

Result<Dispatcher::JoinResult> Dispatcher::GetOrCreateJob(const wire::GetOrCreateJobMsg& m) {
  FERRY_RETURN_IF_ERROR(CheckName("job name", m.job.name));
  FERRY_RETURN_IF_ERROR(CheckName("consumer id", m.consumer_id));
  FERRY_RETURN_IF_ERROR(CheckJob(m.job.job));  // the ops and their parameters too
  if (m.job.job.ranked()) {
    const int64_t rank = ConsumerRank(m.consumer_id);
    if (rank < 0 || rank >= m.job.job.num_consumers)
      return Status::InvalidArgument("a job of " + std::to_string(m.job.job.num_consumers) +
                                     " ranks is joined as rank-0.." + RankConsumer(m.job.job.num_consumers - 1) +
                                     ", not " + m.consumer_id);
  }
  JoinResult r;
  if (const JobState* j = state_.job(m.job.name)) {
    FERRY_ASSIGN_OR_RETURN(r.job, Join(*j, m.job.job, m.consumer_id, m.fresh));
    return r;
  }
  if (creating_.count(m.job.name)) {
    r.kind = JoinResult::kBusy;
    return r;
  }
  creating_.insert(m.job.name);
  r.kind = JoinResult::kNeedsListing;
  return r;
}

Result<wire::NamedJob> Dispatcher::CreateJob(const wire::GetOrCreateJobMsg& m, const Result<JobSpec>& listed) {
  creating_.erase(m.job.name);
  FERRY_RETURN_IF_ERROR(listed.status());
  FERRY_RETURN_IF_ERROR(Commit(dispatch::CreateJob{m.job.name, *listed}));
  if (listed->mixed())
    Log("job %s: a mixture of %zu sources, %lld samples, %lld drawn an epoch, %lld splits per epoch", m.job.name.c_str(),
        listed->mixture.size(), (long long)listed->num_samples, (long long)listed->mixture_epoch,
        (long long)listed->SplitsPerEpoch());
  else
    Log("job %s: %s, %lld samples, %lld splits per epoch", m.job.name.c_str(), listed->dataset.c_str(),
        (long long)listed->num_samples, (long long)listed->SplitsPerEpoch());
  const JobState* j = state_.job(m.job.name);
  if (j == nullptr) return Status::Internal("job " + m.job.name + " vanished");
  UpdatePlacement();  // its workers now, not at the next tick
  return Join(*j, m.job.job, m.consumer_id, m.fresh);
}

Result<wire::NamedJob> Dispatcher::Join(const JobState& j, const JobSpec& want, const std::string& consumer,
                                        bool fresh) {
  if (!want.SameJobAs(j.spec))
    return Status::FailedPrecondition("job " + j.name + " exists with a different configuration");
  if (j.spec.ranked()) {
    const int64_t rank = ConsumerRank(consumer);
    if (rank < 0 || rank >= j.spec.num_consumers)
      return Status::InvalidArgument("job " + j.name + " has " + std::to_string(j.spec.num_consumers) +
                                     " ranks: its consumers are rank-0.." + RankConsumer(j.spec.num_consumers - 1) +
                                     ", not " + consumer);
    if (fresh && j.HasConsumer(consumer) && j.ConsumerStarted(consumer))
      return Status::FailedPrecondition(
          "job " + j.name + ": " + consumer +
          " has read part of it already, and this client has no saved state (a restarted rank?): resume from the "
          "checkpoint's state (ferry: load_state_dict), or start a new job under another name");
  }
  if (!j.HasConsumer(consumer)) {
    Log("job %s: consumer %s joined", j.name.c_str(), consumer.c_str());
    FERRY_RETURN_IF_ERROR(Commit(AddConsumer{j.name, consumer}));
  }
  return wire::NamedJob{j.name, j.spec};
}

wire::JobStatusMsg Dispatcher::StatusOf(const std::string& job, const std::string& consumer, uint64_t epoch) const {
  wire::JobStatusMsg m;
  const JobState* j = state_.job(job);
  if (j == nullptr) return m;
  m.first_open = j->first_open;
  m.finished = j->finished();
  for (const auto& [split, status] : state_.SplitsOf(job, consumer, epoch)) m.my_splits.push_back(split);
  if (epoch < j->first_open) {
    m.epoch_fully_assigned = true;
  } else {
    auto it = j->epochs.find(epoch);
    m.epoch_fully_assigned = it != j->epochs.end() &&
                             std::none_of(it->second.consumer.begin(), it->second.consumer.end(),
                                          [](const std::string& c) { return c.empty(); });
  }
  return m;
}

Result<wire::JobStatusMsg> Dispatcher::AckSplits(const wire::AckSplitsMsg& m) {
  dispatch::AckSplits u{m.job, m.consumer_id, {}};
  const JobState* j = state_.job(m.job);
  for (const auto& [e, s] : m.splits) {
    // Splits are leased at most one epoch ahead of the first open one, so no honest
    // ack is further ahead; a far-future one would make the state hold whole epochs
    // (journaled: the memory would come back at every restart). Checked here, not in
    // the state: a snapshot's acks may be further ahead (see ApplyAck).
    if (j != nullptr && e > j->first_open + 1) return Status::OutOfRange("ack: an epoch not yet open");
    u.splits.push_back({e, s});
  }
  FERRY_RETURN_IF_ERROR(Commit(u));
  acks_ += int64_t(u.splits.size());
  if (LogEnabled(LogLevel::kDebug)) {
    std::string list;
    for (const auto& x : u.splits) {
      list.append(" ").append(std::to_string(x.epoch)).append("/").append(std::to_string(x.split));
    }
    LogDebug("job %s: %s acknowledged%s", m.job.c_str(), m.consumer_id.c_str(), list.c_str());
  }
  // What an acknowledging consumer reads of the reply: the first open epoch and whether
  // the job finished (client/control_loop.cc). Not its splits of an epoch: that walk,
  // a string comparison per split, was a twentieth of the deciding thread with 1,000
  // jobs; GetJobStatus answers it.
  wire::JobStatusMsg reply;
  if (const JobState* after = state_.job(m.job)) {
    reply.first_open = after->first_open;
    reply.finished = after->finished();
  }
  return reply;
}

Result<wire::JobStatusMsg> Dispatcher::RestoreConsumer(const wire::RestoreConsumerMsg& m) {
  // A saved state comes from a file a person may have edited: its numbers are checked
  // here, where they enter, before any of them sizes a loop or a table.
  if (m.first_open > kMaxEpoch)
    return Status::OutOfRange("restore: first_open " + std::to_string(m.first_open) +
                              " is past the largest epoch number, " + std::to_string(kMaxEpoch));
  if (const JobState* j = state_.job(m.job); j != nullptr && m.first_open + kMaxReopenedEpochs < j->first_open)
    return Status::OutOfRange("restore: first_open " + std::to_string(m.first_open) + " is " +
                              std::to_string(j->first_open - m.first_open) + " epochs behind job " + m.job +
                              " (at epoch " + std::to_string(j->first_open) + "): a state may reopen at most " +
                              std::to_string(kMaxReopenedEpochs) + " finished epochs");
  dispatch::RestoreConsumer u{m.job, m.consumer_id, m.first_open, {}};
  for (const auto& [e, s] : m.done) {
    if (e > kMaxEpoch)
      return Status::OutOfRange("restore: done epoch " + std::to_string(e) + " is past the largest epoch number, " +
                                std::to_string(kMaxEpoch));
    u.done.push_back({e, s});
  }
  FERRY_RETURN_IF_ERROR(Commit(u));
  Log("job %s: consumer %s resumed from a saved state at epoch %llu (%zu splits done)", m.job.c_str(),
      m.consumer_id.c_str(), (unsigned long long)m.first_open, m.done.size());
  return StatusOf(m.job, m.consumer_id, m.first_open);
}

Result<wire::JobStatusMsg> Dispatcher::GetJobStatus(const wire::GetJobStatusMsg& m) const {
  const JobState* j = state_.job(m.job);
  if (j == nullptr) return Status::NotFound("no job " + m.job);
  if (!m.consumer_id.empty() && !j->HasConsumer(m.consumer_id) && !j->spec.ranked())
    return Status::FailedPrecondition("job " + m.job + ": consumer " + m.consumer_id +
                                      " was declared gone (silent past the consumer timeout) and its unfinished "
                                      "splits went to the other consumers");
  return StatusOf(m.job, m.consumer_id, m.epoch);
}

// --- Time ----------------------------------------------------------------------------

bool Dispatcher::Idle() const {
  if (state_.jobs().empty()) return jobs_collected_ > 0;
  return AllJobsFinished(state_);
}

void Dispatcher::ConsumerSeen(const std::string& job, const std::string& consumer, int64_t now_ms) {
  if (job.empty() || consumer.empty()) return;
  const JobState* j = state_.job(job);
  if (j == nullptr || !j->HasConsumer(consumer)) return;  // only what Tick prunes: no growth from strangers
  consumer_seen_ms_[{job, consumer}] = now_ms;
}

void Dispatcher::ConsumerSeen(const std::string& job, const std::string& consumer, const wire::ConsumerLoad& load,
                              int64_t now_ms) {
  ConsumerSeen(job, consumer, now_ms);
  if (consumer_seen_ms_.count({job, consumer})) load_.Consumer(job, consumer, load, now_ms);  // known ones only
}

namespace {

// Where a dataset's samples are read from, for the advice: "S3 (s3://bucket)",
// "HTTPS (host)", or "files".
std::string StorageOf(const std::string& dataset) {
  for (const auto& [scheme, name] : {std::pair<std::string_view, std::string_view>{"s3://", "S3"},
                                     {"https://", "HTTPS"},
                                     {"http://", "HTTP"}}) {
    const size_t at = dataset.find(scheme);
    if (at == std::string::npos) continue;
    const size_t host = at + scheme.size();
    const size_t end = dataset.find_first_of("/\",\"}", host);
    return std::string(name) + " (" + dataset.substr(at, (end == std::string::npos ? dataset.size() : end) - at) + ")";
  }
  return "files";
}

}  // namespace

LoadTracker::Advice Dispatcher::Advice(const std::string& job) const {
  const JobState* j = state_.job(job);
  if (j == nullptr) return {};
  std::vector<std::string> workers;  // those that may serve it
  for (const auto& [id, w] : state_.workers()) {
    if (w.draining || UnfitFor(id, job) != nullptr || (w.ServesOnly() && w.serves_job != job)) continue;
    workers.push_back(id);
  }
  return load_.AdviceFor(job, j->consumers, workers, StorageOf(j->spec.dataset));
}

bool Dispatcher::JournalTick(int64_t now_ms) {
  // A journal that could not be written: try again now and then, so that what is
  // queued reaches the disk once there is room, changes or not.
  if (!fatal_.ok()) return false;  // stopping: nothing changes any more
  if (!journal_->healthy() && now_ms - journal_retry_ms_ >= 1000) {
    journal_retry_ms_ = now_ms;
    if (journal_->Sync().ok()) JournalUp();
  }
  // Idle for a tick (nothing synced since the last one): seal the journal, so that its
  // header's committed length covers the last group commit too (Journal::Seal; under
  // load each sync's header covers the one before it).
  if (config_.sync && !dirty_ && !synced_since_tick_ && journal_->healthy() && !journal_->sealed()) {
    Status s = journal_->Seal();
    if (journal_->failed()) {
      fatal_ = s;
      LogError("%s: stopping, so that a restart recovers from what is on disk", s.ToString().c_str());
      return false;
    }
  }
  synced_since_tick_ = false;
  return true;
}

void Dispatcher::Sweep(int64_t now_ms, const std::set<std::string>& jobs_in_use) {
  if (!fatal_.ok()) return;
  UpdatePlacement();
  // Consumers: the known ones get a full timeout from the first tick that sees them
  // (after a restart, too); entries of removed jobs and consumers go.
  std::map<std::pair<std::string, std::string>, int64_t> seen;
  for (const auto& [name, j] : state_.jobs()) {
    for (const std::string& c : j.consumers) {
      auto it = consumer_seen_ms_.find({name, c});
      seen[{name, c}] = it == consumer_seen_ms_.end() ? now_ms : it->second;
    }
  }
  consumer_seen_ms_ = std::move(seen);
  {
    std::set<std::pair<std::string, std::string>> consumers;
    for (const auto& [key, at] : consumer_seen_ms_) consumers.insert(key);
    load_.Keep(consumers, state_.workers());
  }
  for (const dispatch::RemoveConsumer& r :
       DecideGoneConsumers(state_, consumer_seen_ms_, now_ms, config_.consumer_timeout_ms)) {
    int64_t splits = 0;
    for (const auto& [epoch, e] : state_.job(r.job)->epochs) {
      for (size_t s = 0; s < e.status.size(); ++s)
        splits += e.status[s] != SplitStatus::kDone && e.consumer[s] == r.consumer ? 1 : 0;
    }
    if (!Commit(r).ok()) continue;
    consumer_seen_ms_.erase({r.job, r.consumer});
    LogWarn("job %s: consumer %s silent for %d ms: removed; its %lld unfinished split(s) go to the live consumers",
            r.job.c_str(), r.consumer.c_str(), config_.consumer_timeout_ms, (long long)splits);
  }
  for (const dispatch::RemoveWorker& r :
       DecideDeadWorkers(state_, last_seen_ms_, now_ms, config_.heartbeat_timeout_ms)) {
    const size_t n = state_.LeaseCount(r.worker);
    if (RemoveWorker(r.worker))
      LogWarn("worker %s missed its heartbeats: removed, %zu split(s) return to pending", r.worker.c_str(), n);
  }
  for (const RemoveJob& r : DecideGarbage(state_, jobs_in_use)) {
    Log("job %s finished and has no consumer left: removed", r.job.c_str());
    if (Commit(r).ok()) ++jobs_collected_;
  }
  // Idle: exit once every worker has been told so in a heartbeat reply (they exit too,
  // with --exit-when-idle), or after a heartbeat timeout at most.
  if (!Idle()) idle_since_ms_ = -1;
  else if (idle_since_ms_ < 0) idle_since_ms_ = now_ms;
  bool all_told = true;
  for (const auto& [id, w] : state_.workers()) all_told = all_told && told_idle_.count(id) > 0;
  if (config_.exit_when_idle && idle_since_ms_ >= 0 &&
      (all_told || now_ms - idle_since_ms_ > config_.heartbeat_timeout_ms))
    should_exit_ = true;
}

}  // namespace ferry::dispatch
