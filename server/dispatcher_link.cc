#include "server/dispatcher_link.h"

#include <chrono>
#include <set>

#include "core/hash.h"
#include "core/log.h"
#include "ferry/internal/control_channel.h"

namespace ferry {

SplitGeometry WorkerJob::geometry() const {
  SplitGeometry g;
  g.num_samples = config.num_samples;
  g.batch_size = config.batch_size;
  g.batches_per_split = config.batches_per_split;
  g.last_batch = LastBatch(config.last_batch);
  g.seed = config.seed;
  g.shuffle = config.shuffle;
  return g;
}

DispatcherLink::DispatcherLink(LinkOptions o) : o_(std::move(o)) { poke_target_->link = this; }

DispatcherLink::~DispatcherLink() {
  {
    std::lock_guard<std::mutex> lock(poke_target_->mu);
    poke_target_->link = nullptr;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    cv_.notify_all();
  }
  if (thread_.joinable()) thread_.join();
}

void DispatcherLink::Start() { thread_ = std::thread([this] { Run(); }); }

std::shared_ptr<const WorkerJob> DispatcherLink::Job(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = jobs_.find(name);
  return it == jobs_.end() ? nullptr : it->second;
}

std::shared_ptr<SplitFeed> DispatcherLink::Feed(const std::string& job, const std::string& consumer) {
  std::lock_guard<std::mutex> lock(mu_);
  return FeedLocked(job, consumer);
}

std::shared_ptr<SplitFeed> DispatcherLink::FeedLocked(const std::string& job, const std::string& consumer) {
  auto& f = feeds_[{job, consumer}];
  if (!f) {
    f = std::make_shared<SplitFeed>();
    f->SetStarvedCallback([target = poke_target_] {
      std::lock_guard<std::mutex> lock(target->mu);
      if (target->link != nullptr) target->link->Poke();
    });
  }
  return f;
}

void DispatcherLink::SetDraining() {
  std::lock_guard<std::mutex> lock(mu_);
  draining_ = true;
  drain_seen_ = false;
  cv_.notify_all();  // heartbeat now
}

bool DispatcherLink::WaitDrained(double timeout_s) {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_for(lock, std::chrono::milliseconds(int64_t(timeout_s * 1000)),
                      [&] { return drain_seen_ && held_ == 0; });
}

void DispatcherLink::WaitIdle() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return idle_; });
}

int64_t DispatcherLink::heartbeats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return heartbeats_;
}

void DispatcherLink::Leave() {
  bool registered;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    registered = registered_;
    cv_.notify_all();
  }
  if (thread_.joinable()) thread_.join();
  if (!registered) return;
  internal::ControlChannel ch(o_.dispatcher, o_.token, internal::Role::kWorker, o_.worker_id,
                              std::chrono::seconds(2));
  internal::HeartbeatMsg h;
  h.worker_id = o_.worker_id;
  h.draining = true;
  h.want_leases = false;
  h.leaving = true;
  auto r = ch.Call(internal::EncodeHeartbeat(h));
  if (!r.ok()) Log("could not tell the dispatcher we are leaving: %s", r.status().ToString().c_str());
}

void DispatcherLink::Want(const std::string& job) {
  std::lock_guard<std::mutex> lock(mu_);
  if (jobs_.count(job) || wanted_.count(job)) return;
  wanted_.insert(job);
  poked_ = true;
  cv_.notify_all();
}

void DispatcherLink::Poke() {
  std::lock_guard<std::mutex> lock(mu_);
  poked_ = true;
  cv_.notify_all();
}

void DispatcherLink::Sleep(int ms) {
  std::unique_lock<std::mutex> lock(mu_);
  const bool was_draining = draining_;
  cv_.wait_for(lock, std::chrono::milliseconds(ms), [&] { return stop_ || poked_ || draining_ != was_draining; });
  poked_ = false;
}

void DispatcherLink::Run() {
  internal::ControlChannel ch(o_.dispatcher, o_.token, internal::Role::kWorker, o_.worker_id,
                              std::chrono::seconds(5));
  int failures = 0;
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) return;
    }
    bool registered;
    {
      std::lock_guard<std::mutex> lock(mu_);
      registered = registered_;
    }
    if (!registered) {
      auto r = ch.Call(internal::EncodeRegisterWorker(o_.worker_id, o_.advertise));
      auto interval = r.ok() ? internal::DecodeRegisterWorkerOk(*r) : Result<uint32_t>(r.status());
      if (!interval.ok()) {
        if (failures++ % 20 == 0)
          Log("cannot register with dispatcher %s (retrying): %s", o_.dispatcher.c_str(),
              interval.status().ToString().c_str());
        Sleep(std::min(1000, 50 << std::min(failures, 4)));
        continue;
      }
      Log("registered with dispatcher %s as %s", o_.dispatcher.c_str(), o_.worker_id.c_str());
      failures = 0;
      std::lock_guard<std::mutex> lock(mu_);
      registered_ = true;
      interval_ms_ = int(std::max<uint32_t>(10, *interval));
    }
    const bool ok = Heartbeat(ch);
    int interval;
    {
      std::lock_guard<std::mutex> lock(mu_);
      interval = interval_ms_;
    }
    if (!ok) {
      ++failures;
      Sleep(std::min(1000, 50 << std::min(failures, 4)));
      continue;
    }
    failures = 0;
    Sleep(interval);
  }
}

bool DispatcherLink::Heartbeat(internal::ControlChannel& ch) {
  internal::HeartbeatMsg h;
  h.worker_id = o_.worker_id;
  {
    std::lock_guard<std::mutex> lock(mu_);
    h.draining = draining_;
    h.want_jobs.assign(wanted_.begin(), wanted_.end());
  }
  h.want_leases = !h.draining;
  auto r = ch.Call(internal::EncodeHeartbeat(h));
  auto ok = r.ok() ? internal::DecodeHeartbeatOk(*r) : Result<internal::HeartbeatOkMsg>(r.status());
  if (!ok.ok()) {
    Log("heartbeat to %s failed (will reconnect): %s", o_.dispatcher.c_str(), ok.status().ToString().c_str());
    std::lock_guard<std::mutex> lock(mu_);
    registered_ = false;  // a restarted dispatcher may not know us yet: register again
    return false;
  }
  if (!ok->known) {
    // Presumed dead (or the dispatcher lost us): everything we held is someone else's
    // now. Forget it all and register again.
    Log("the dispatcher does not know this worker (presumed dead?): registering again");
    std::lock_guard<std::mutex> lock(mu_);
    registered_ = false;
    for (auto& [key, feed] : feeds_) feed->SetHeld({});
    held_ = 0;
    return true;
  }
  // Open the jobs we have not seen yet (listing may take a while: no lock held).
  for (const internal::JobConfigMsg& c : ok->jobs) {
    if (Job(c.name) != nullptr) continue;
    auto job = std::make_shared<WorkerJob>();
    job->config = c;
    auto spec = PipelineSpec::FromJson(c.pipeline_json);
    if (c.dataset.rfind("synthetic:", 0) == 0) {
      job->dataset = std::shared_ptr<const Dataset>(MakeSyntheticDataset(c.num_samples));
      job->spec = spec.ok() ? *spec : PipelineSpec{};
    } else if (!spec.ok()) {
      job->status = spec.status();
    } else {
      job->spec = *spec;
      auto ds = o_.open_dataset(c.dataset);
      if (!ds.ok()) {
        job->status = ds.status();
      } else {
        job->dataset = *ds;
        Fingerprinter f;
        f.AddU64((*ds)->fingerprint());
        f.AddU64(spec->Fingerprint());
        if ((*ds)->size() != c.num_samples || f.Finish() != c.fingerprint)
          job->status = Status::FailedPrecondition("this worker lists " + c.dataset +
                                                   " differently from the dispatcher (fingerprint mismatch)");
      }
    }
    if (!job->status.ok()) Log("cannot serve job %s: %s", c.name.c_str(), job->status.ToString().c_str());
    else Log("job %s: %lld samples", c.name.c_str(), (long long)c.num_samples);
    std::lock_guard<std::mutex> lock(mu_);
    jobs_[c.name] = std::move(job);
    wanted_.erase(c.name);
  }
  std::map<std::pair<std::string, std::string>, std::set<SplitKey>> held;
  for (const internal::LeaseMsg& l : ok->leases) held[{l.job, l.consumer}].insert({l.epoch, l.split});
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [key, splits] : held) FeedLocked(key.first, key.second);
  size_t total = 0;
  for (auto& [key, feed] : feeds_) {
    auto it = held.find(key);
    total += feed->SetHeld(it == held.end() ? std::set<SplitKey>{} : it->second);
  }
  held_ = total;
  ++heartbeats_;
  if (h.draining) drain_seen_ = true;
  if (ok->idle) idle_ = true;
  cv_.notify_all();
  return true;
}

}  // namespace ferry
