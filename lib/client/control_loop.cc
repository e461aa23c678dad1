#include "client/control_loop.h"

#include <pthread.h>

#include "core/cpu_set.h"

namespace ferry::client {

ControlLoop::ControlLoop(ControlConfig config, ControlHost* host)
    : config_(std::move(config)),
      host_(host),
      channel_(config_.dispatcher, config_.token, wire::Role::kClient, config_.consumer_id, std::chrono::seconds(10),
               config_.tls),
      restore_(config_.restore) {}

ControlLoop::~ControlLoop() {
  Stop();
  Join();
}

void ControlLoop::Join() {
  if (thread_.joinable()) thread_.join();
}

void ControlLoop::Start() {
  thread_ = std::thread([this] {
    ::pthread_setname_np(::pthread_self(), "ferry-control");
    PinThisThreadOrWarn(config_.cpus, "ferry client control");
    Run();
  });
}

void ControlLoop::Notify() {
  MutexLock lock(&mu_);
  poked_ = true;
  cv_.SignalAll();
}

void ControlLoop::Stop() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
    cv_.SignalAll();
  }
  channel_.Interrupt();
}

bool ControlLoop::stopping() {
  MutexLock lock(&mu_);
  return stop_;
}

bool ControlLoop::Sleep(double seconds) {
  const auto deadline = DeadlineIn(seconds);
  MutexLock lock(&mu_);
  while (!stop_ && !poked_) {
    if (!cv_.WaitUntil(&mu_, deadline)) break;
  }
  poked_ = false;
  return !stop_;
}

void ControlLoop::Run() {
  bool joined = false;
  net::Backoff backoff(config_.retry);
  auto next_workers = std::chrono::steady_clock::now();
  for (;;) {
    if (stopping()) {
      const ControlHost::Pending p = host_->TakePending();
      if (!p.acks.empty() && joined) FinalAcks(p.acks);
      return;
    }
    const Status st = Round(&joined, &next_workers);
    if (stopping()) continue;  // interrupted by Stop(): final acks, then out
    if (st.ok()) {
      backoff.Succeeded();
    } else if (st.IsTransient()) {
      const auto delay = backoff.Failed();
      if (!delay) {
        host_->OnFailed(Status(st.code(), st.message() + " (dispatcher unreachable for " +
                                              std::to_string(int(config_.retry.give_up_after_s)) + " s)"));
        return;
      }
      Sleep(std::chrono::duration<double>(*delay).count());
      continue;
    } else {
      // Name the dispatcher, unless the channel's message already does.
      host_->OnFailed(st.message().find(config_.dispatcher) == std::string::npos
                          ? st.WithContext("dispatcher " + config_.dispatcher)
                          : st);
      return;
    }
    if (host_->Finished()) return;
    Sleep(config_.poll_interval_s);
  }
}

Status ControlLoop::Round(bool* joined, std::chrono::steady_clock::time_point* next_workers) {
  const wire::NamedJob& job = config_.job;
  if (!*joined) {
    FERRY_ASSIGN_OR_RETURN(wire::InFrame r, channel_.Call(wire::EncodeGetOrCreateJob({job, config_.consumer_id, !restore_.has_value()})));
    FERRY_ASSIGN_OR_RETURN(wire::NamedJob info, wire::DecodeJobInfo(r));
    FERRY_RETURN_IF_ERROR(CheckState());
    *joined = true;
    host_->OnJoined(info.job);
  }
  if (restore_) {
    wire::RestoreConsumerMsg m{job.name, config_.consumer_id, restore_->first_open, {}};
    m.done.assign(restore_->done.begin(), restore_->done.end());
    FERRY_ASSIGN_OR_RETURN(wire::InFrame r, channel_.Call(wire::EncodeRestoreConsumer(m)));
    FERRY_RETURN_IF_ERROR(wire::DecodeJobStatus(r).status());
    restore_.reset();
  }
  ControlHost::Pending p = host_->TakePending();
  // Acknowledge, or ask how the job stands.
  if (!p.acks.empty()) {
    auto r = channel_.Call(wire::EncodeAckSplits({job.name, config_.consumer_id, p.acks, p.load}));
    if (!r.ok() && r.status().code() == StatusCode::kNotFound) {
      FERRY_RETURN_IF_ERROR(CheckState());  // gone, or a dispatcher that never knew it?
      host_->OnJobGone();
      return Status::OK();
    }
    FERRY_RETURN_IF_ERROR(r.status());
    FERRY_ASSIGN_OR_RETURN(wire::JobStatusMsg s, wire::DecodeJobStatus(*r));
    host_->OnAcked(p.acks.size(), s.first_open, s.finished);
  }
  if (p.acks.empty() || config_.deterministic) {
    auto r = channel_.Call(wire::EncodeGetJobStatus({job.name, config_.consumer_id, p.status_epoch, p.load}));
    if (!r.ok() && r.status().code() == StatusCode::kNotFound) {
      FERRY_RETURN_IF_ERROR(CheckState());
      host_->OnJobGone();
      return Status::OK();
    }
    FERRY_RETURN_IF_ERROR(r.status());
    FERRY_ASSIGN_OR_RETURN(wire::JobStatusMsg s, wire::DecodeJobStatus(*r));
    host_->OnStatus(p.status_epoch, JobStatus{s.first_open, s.finished, s.my_splits, s.epoch_fully_assigned});
  }
  for (size_t i = 0; i < p.unreachable.size(); ++i) {
    auto r = channel_.Call(wire::EncodeReportWorker(p.unreachable[i]));
    if (!r.ok()) {
      host_->Requeue(std::vector<std::string>(p.unreachable.begin() + std::ptrdiff_t(i), p.unreachable.end()));
      return r.status();
    }
  }
  if (std::chrono::steady_clock::now() >= *next_workers) {
    FERRY_ASSIGN_OR_RETURN(wire::InFrame r, channel_.Call(wire::EncodeGetWorkers({job.name, config_.consumer_id})));
    FERRY_ASSIGN_OR_RETURN(std::vector<std::string> workers, wire::DecodeWorkerList(r));
    host_->OnWorkers(workers);
    *next_workers = std::chrono::steady_clock::now() +
                    std::chrono::microseconds(int64_t(config_.poll_interval_s * 1e6));
  }
  return CheckState();
}

Status ControlLoop::CheckState() {
  const std::string& now = channel_.server_state();
  if (now.empty()) return Status::OK();  // not connected yet, or a dispatcher that has none
  if (state_.empty()) {
    state_ = now;
    return Status::OK();
  }
  if (now == state_) return Status::OK();
  return Status::FailedPrecondition(
      "dispatcher " + config_.dispatcher + " came back with another state (work dir " + now + ", was " + state_ +
      "): it was restarted on an empty or another --work-dir and knows nothing of job " + config_.job.name +
      "'s progress. Restart it on its own work dir; nothing was taken for the job's end");
}

void ControlLoop::FinalAcks(const std::vector<SplitId>& acks) {
  net::ControlChannel ch(config_.dispatcher, config_.token, wire::Role::kClient, config_.consumer_id,
                         std::chrono::seconds(2), config_.tls);
  (void)ch.Call(wire::EncodeAckSplits({config_.job.name, config_.consumer_id, acks}));
}

}  // namespace ferry::client
