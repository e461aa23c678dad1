#include "worker/dispatcher_link.h"

#include <optional>
#include <set>

#include "core/log.h"
#include "data/job_listing.h"
#include "net/backoff.h"
#include "worker/synthetic_source.h"
#include "worker/worker_core.h"

namespace ferry {

DispatcherLink::DispatcherLink(LinkOptions o) : o_(std::move(o)) {
  MutexLock lock(&poke_target_->mu);
  poke_target_->link = this;
}

DispatcherLink::~DispatcherLink() {
  {
    MutexLock lock(&poke_target_->mu);
    poke_target_->link = nullptr;
  }
  {
    MutexLock lock(&mu_);
    stop_ = true;
    cv_.SignalAll();
  }
  if (thread_.joinable()) thread_.join();
}

void DispatcherLink::Start() { thread_ = std::thread([this] { Run(); }); }

std::shared_ptr<const WorkerJob> DispatcherLink::Job(const std::string& name) const {
  MutexLock lock(&mu_);
  auto it = jobs_.find(name);
  return it == jobs_.end() ? nullptr : it->second;
}

std::shared_ptr<SplitFeed> DispatcherLink::Feed(const std::string& job, const std::string& consumer) {
  MutexLock lock(&mu_);
  return FeedLocked(job, consumer);
}

std::shared_ptr<SplitFeed> DispatcherLink::FeedLocked(const std::string& job, const std::string& consumer) {
  auto& f = feeds_[{job, consumer}];
  if (!f) {
    f = std::make_shared<SplitFeed>();
    f->SetStarvedCallback([target = poke_target_] {
      MutexLock lock(&target->mu);
      if (target->link != nullptr) target->link->Poke();
    });
  }
  return f;
}

void DispatcherLink::SetDraining() {
  MutexLock lock(&mu_);
  draining_ = true;
  drain_seen_ = false;
  cv_.SignalAll();  // heartbeat now
}

bool DispatcherLink::WaitDrained(double timeout_s) {
  const auto deadline = DeadlineIn(timeout_s);
  MutexLock lock(&mu_);
  while (!(drain_seen_ && held_ == 0)) {
    if (!cv_.WaitUntil(&mu_, deadline)) break;
  }
  return drain_seen_ && held_ == 0;
}

DispatcherLink::Wake DispatcherLink::WaitIdleOrDrain(bool idle_ends) {
  MutexLock lock(&mu_);
  while (!(idle_ && idle_ends) && !drain_asked_ && !stop_waiting_idle_) cv_.Wait(&mu_);
  if (drain_asked_) return Wake::kDrain;
  return idle_ && idle_ends ? Wake::kIdle : Wake::kStopped;
}

void DispatcherLink::StopWaitingIdle() {
  MutexLock lock(&mu_);
  stop_waiting_idle_ = true;
  cv_.SignalAll();
}

size_t DispatcherLink::jobs_known() const {
  MutexLock lock(&mu_);
  return jobs_.size();
}

size_t DispatcherLink::heartbeat_bytes() const {
  MutexLock lock(&mu_);
  return heartbeat_bytes_;
}

void DispatcherLink::ForgetLocked(const std::vector<std::string>& gone) {
  for (const std::string& name : gone) {
    auto it = jobs_.find(name);
    if (it != jobs_.end() && !it->second->status.ok()) {  // only what it reported unfit
      jobs_.erase(it);
      named_.erase(name);
      digests_.erase(name);
      reported_.erase(name);
    }
  }
  // Feeds that hold nothing and that no stream uses: created again when needed.
  std::set<std::string> busy;
  for (auto it = feeds_.begin(); it != feeds_.end();) {
    if (it->second.use_count() == 1 && it->second->held() == 0) {
      it = feeds_.erase(it);
    } else {
      busy.insert(it->first.first);
      ++it;
    }
  }
  const auto now = std::chrono::steady_clock::now();
  for (auto it = jobs_.begin(); it != jobs_.end();) {
    auto n = named_.find(it->first);
    const bool stale = n == named_.end() || now - n->second > o_.forget_after;
    if (it->second->status.ok() && stale && !busy.count(it->first) && it->second.use_count() == 1) {
      named_.erase(it->first);
      digests_.erase(it->first);
      it = jobs_.erase(it);
    } else {
      ++it;
    }
  }
}

int64_t DispatcherLink::heartbeats() const {
  MutexLock lock(&mu_);
  return heartbeats_;
}

bool DispatcherLink::registered() const {
  MutexLock lock(&mu_);
  return registered_;
}

size_t DispatcherLink::held() const {
  MutexLock lock(&mu_);
  return held_;
}

bool DispatcherLink::stopping() const {
  MutexLock lock(&mu_);
  return stop_;
}

void DispatcherLink::Leave() {
  bool registered;
  {
    MutexLock lock(&mu_);
    stop_ = true;
    registered = registered_;
    cv_.SignalAll();
  }
  if (thread_.joinable()) thread_.join();
  if (!registered) return;
  wire::HeartbeatMsg h;
  h.worker_id = o_.worker_id;
  h.draining = true;
  h.want_leases = false;
  h.leaving = true;
  auto r = [&]() -> Result<wire::InFrame> {
    if (o_.call) return o_.call(wire::EncodeHeartbeat(h));
    net::ControlChannel ch(o_.dispatcher, o_.token, wire::Role::kWorker, o_.worker_id, std::chrono::seconds(2), o_.tls);
    return ch.Call(wire::EncodeHeartbeat(h));
  }();
  if (!r.ok()) LogWarn("could not tell the dispatcher we are leaving: %s", r.status().ToString().c_str());
}

void DispatcherLink::Want(const std::string& job) {
  MutexLock lock(&mu_);
  if (jobs_.count(job) || wanted_.count(job)) return;
  if (wanted_.size() >= kMaxWanted) return;  // the stream waits out its own deadline
  wanted_.emplace(job, std::chrono::steady_clock::now());
  poked_ = true;
  cv_.SignalAll();
}

void DispatcherLink::Refresh(const std::string& job) {
  {
    MutexLock lock(&mu_);
    jobs_.erase(job);
    digests_.erase(job);
  }
  Want(job);
}

void DispatcherLink::Poke() {
  MutexLock lock(&mu_);
  poked_ = true;
  cv_.SignalAll();
}

void DispatcherLink::Sleep(std::chrono::milliseconds d) {
  const auto deadline = std::chrono::steady_clock::now() + d;
  MutexLock lock(&mu_);
  const bool was_draining = draining_;
  while (!stop_ && !poked_ && draining_ == was_draining) {
    if (!cv_.WaitUntil(&mu_, deadline)) break;
  }
  poked_ = false;
}

void DispatcherLink::Run() {
  std::optional<net::ControlChannel> ch;
  Call call = o_.call;
  if (!call) {
    ch.emplace(o_.dispatcher, o_.token, wire::Role::kWorker, o_.worker_id, std::chrono::seconds(5), o_.tls);
    call = [&ch](const wire::OutFrame& f) { return ch->Call(f); };
  }
  // Never give up: a dispatcher that restarts, or starts after the worker, is waited for.
  net::Backoff backoff({/*initial_s=*/0.1, /*max_s=*/1.0, /*max_failures=*/-1, /*give_up_after_s=*/0});
  while (!stopping()) {
    bool registered;
    {
      MutexLock lock(&mu_);
      registered = registered_;
    }
    if (!registered) {
      auto r = call(wire::EncodeRegisterWorker({o_.worker_id, o_.advertise, o_.serves_job, o_.serves_consumer}));
      auto interval = r.ok() ? wire::DecodeRegisterWorkerOk(*r) : Result<uint32_t>(r.status());
      if (!interval.ok()) {
        if (backoff.failures() % 20 == 0)
          LogWarn("cannot register with dispatcher %s (retrying): %s", o_.dispatcher.c_str(),
              interval.status().ToString().c_str());
        Sleep(*backoff.Failed());
        continue;
      }
      Log("registered with dispatcher %s as %s", o_.dispatcher.c_str(), o_.worker_id.c_str());
      backoff.Succeeded();
      MutexLock lock(&mu_);
      registered_ = true;
      interval_ms_ = int(std::max<uint32_t>(10, *interval));
    }
    if (!Heartbeat(call)) {
      Sleep(*backoff.Failed());
      continue;
    }
    backoff.Succeeded();
    int interval;
    {
      MutexLock lock(&mu_);
      interval = interval_ms_;
    }
    Sleep(std::chrono::milliseconds(interval));
  }
}

std::shared_ptr<WorkerJob> DispatcherLink::OpenJob(const wire::NamedJob& j) const {
  auto job = std::make_shared<WorkerJob>();
  job->opened = std::chrono::steady_clock::now();
  job->name = j.name;
  job->spec = j.job;
  // Compiled once here, for every stream of the job on this worker.
  Result<std::shared_ptr<const PreparedJob>> prepared = PreparedJob::Prepare(j.job);
  if (!prepared.ok()) {
    job->status = prepared.status();
    return job;
  }
  job->prepared = std::move(*prepared);
  auto ds = job->prepared->OpenData(o_.data);
  if (!ds.ok()) {
    job->status = ds.status();
    return job;
  }
  if (job->prepared->source() != BatchSource::kDecode && job->prepared->source() != BatchSource::kDecodeThenPython) {
    job->dataset = *ds;  // synthetic and user-code samples: listed by their count alone
    return job;
  }
  job->status = CheckListing(j.job, **ds);
  if (job->status.ok() && !j.job.tokenizer.model.empty()) {
    if (!o_.open_tokenizer) {
      job->status = Status::Unimplemented("this worker loads no tokenizers");
    } else if (auto t = o_.open_tokenizer(j.job); t.ok()) {
      job->tokenizer = std::move(*t);
    } else {
      job->status = t.status();
    }
  }
  if (job->status.ok()) job->dataset = *ds;
  return job;
}

bool DispatcherLink::Heartbeat(const Call& call) {
  wire::HeartbeatMsg h;
  h.worker_id = o_.worker_id;
  if (o_.load) h.load = o_.load();
  {
    MutexLock lock(&mu_);
    h.draining = draining_;
    for (const auto& [name, job] : jobs_) {
      auto d = digests_.find(name);
      if (job->status.ok() && d != digests_.end()) h.have_jobs[name] = d->second;
    }
    // Jobs this worker cannot serve: the dispatcher leases it none of them, and takes
    // back what it holds, rather than let their consumers' streams be refused here.
    for (const auto& [name, job] : jobs_) {
      if (job->status.ok()) continue;
      // The reason once after registering (the dispatcher keeps it), then the name only:
      // a heartbeat costs tens of bytes per job this worker cannot serve.
      h.unfit_jobs[name] = reported_.count(name) ? std::string() : job->status.message().substr(0, 512);
    }
    const auto now = std::chrono::steady_clock::now();
    for (auto it = wanted_.begin(); it != wanted_.end();) {
      if (now - it->second > kWantFor) {
        it = wanted_.erase(it);
      } else {
        h.want_jobs.push_back(it->first);
        ++it;
      }
    }
  }
  h.want_leases = !h.draining;
  wire::OutFrame frame = wire::EncodeHeartbeat(h);
  {
    MutexLock lock(&mu_);
    heartbeat_bytes_ = 0;
    for (const wire::ByteRange& b : frame.ranges()) heartbeat_bytes_ += b.size;
  }
  auto r = call(frame);
  auto ok = r.ok() ? wire::DecodeHeartbeatOk(*r) : Result<wire::HeartbeatOkMsg>(r.status());
  if (!ok.ok()) {
    LogWarn("heartbeat to %s failed (will reconnect): %s", o_.dispatcher.c_str(), ok.status().ToString().c_str());
    MutexLock lock(&mu_);
    registered_ = false;  // a restarted dispatcher may not know us yet: register again
    reported_.clear();    // and it may not have the reasons
    return false;
  }
  if (!ok->known) {
    // Presumed dead (or the dispatcher lost us): everything we held is someone else's
    // now. Forget it all and register again.
    LogWarn("the dispatcher does not know this worker (presumed dead?): registering again");
    MutexLock lock(&mu_);
    registered_ = false;
    reported_.clear();
    for (auto& [key, feed] : feeds_) feed->SetHeld({});
    held_ = 0;
    return true;
  }
  // Open the jobs we have not seen yet (listing may take a while: no lock held).
  for (const wire::NamedJob& c : ok->jobs) {
    // Known and the same: kept. A name reused for another job (the old one was
    // garbage-collected), or a job this worker failed to open a while ago (its
    // dataset may be mounted by now), is opened again.
    if (auto known = Job(c.name); known != nullptr && known->spec.SameJobAs(c.job) &&
                                  known->spec.fingerprint == c.job.fingerprint &&
                                  (known->status.ok() || std::chrono::steady_clock::now() - known->opened <
                                                             std::chrono::seconds(10)))
      continue;
    std::shared_ptr<WorkerJob> job = OpenJob(c);
    if (!job->status.ok()) LogWarn("cannot serve job %s: %s", c.name.c_str(), job->status.ToString().c_str());
    else Log("job %s: %lld samples", c.name.c_str(), (long long)c.job.num_samples);
    MutexLock lock(&mu_);
    jobs_[c.name] = std::move(job);
    wanted_.erase(c.name);
    reported_.erase(c.name);  // opened again: its reason may be another
  }
  std::map<std::pair<std::string, std::string>, std::set<SplitId>> held;
  for (const wire::LeaseMsg& l : ok->leases) held[{l.job, l.consumer}].insert({l.epoch, l.split});
  MutexLock lock(&mu_);
  for (auto& [key, splits] : held) FeedLocked(key.first, key.second);
  size_t total = 0;
  for (auto& [key, feed] : feeds_) {
    auto it = held.find(key);
    total += feed->SetHeld(it == held.end() ? std::set<SplitId>{} : it->second);
  }
  held_ = total;
  const auto now = std::chrono::steady_clock::now();
  for (const wire::NamedJob& c : ok->jobs) {
    named_[c.name] = now;
    auto j = jobs_.find(c.name);
    if (c.digest != 0 && j != jobs_.end() && j->second->status.ok()) digests_[c.name] = c.digest;
    else digests_.erase(c.name);
  }
  // Named without their spec: the worker has them (else the next heartbeat does not
  // name them, and the reply restates them).
  for (const std::string& name : ok->same_jobs) {
    if (jobs_.count(name)) named_[name] = now;
    else digests_.erase(name);
  }
  for (const auto& [name, reason] : h.unfit_jobs) reported_.insert(name);
  ForgetLocked(ok->gone_jobs);
  ++heartbeats_;
  if (h.draining) drain_seen_ = true;
  if (ok->idle) idle_ = true;
  if (ok->drain && !drain_asked_) {
    drain_asked_ = true;
    Log("the dispatcher asks this worker to drain (an operator's ferry-ctl drain)");
  }
  cv_.SignalAll();
  return true;
}

}  // namespace ferry
