#include "test_cluster.h"

#include <chrono>
#include <string>
#include <string_view>
#include <thread>

#include "core/hash.h"

namespace ferry::testing {

std::string BatchDigest(const Batch& b) {
  Fingerprinter f;
  f.Add(std::string_view(static_cast<const char*>(b.images.data), b.images.num_bytes()));
  f.Add(std::string_view(static_cast<const char*>(b.indices.data), b.indices.num_bytes()));
  f.Add(std::string_view(static_cast<const char*>(b.labels.data), b.labels.num_bytes()));
  return std::to_string(b.provenance.epoch) + "/" + std::to_string(b.provenance.batch_in_epoch) + " " + f.Hex();
}

namespace {

DispatcherOptions DispatcherOpts(const TestClusterOptions& o, const std::string& listen, const std::string& dir) {
  DispatcherOptions d;
  d.listen = listen;
  d.token = o.token;
  d.core.work_dir = dir;
  d.core.heartbeat_interval_ms = o.heartbeat_interval_ms;
  d.core.heartbeat_timeout_ms = o.heartbeat_timeout_ms;
  d.core.lease.max_outstanding = o.leases_ahead;
  d.core.exit_when_idle = o.exit_when_idle;
  d.core.sync = false;  // no power loss in a test
  d.core.compact_every = o.compact_every;
  d.core.workers_per_job = o.workers_per_job;
  return d;
}

}  // namespace

Result<std::unique_ptr<TestCluster>> TestCluster::Start(const TestClusterOptions& options) {
  std::unique_ptr<TestCluster> c(new TestCluster());
  c->o_ = options;
  FERRY_ASSIGN_OR_RETURN(c->dispatcher_,
                         DispatcherService::Start(DispatcherOpts(options, "127.0.0.1:0", c->work_dir_ / "journal")));
  c->dispatcher_address_ = c->dispatcher_->address();
  for (int i = 0; i < options.workers; ++i) FERRY_RETURN_IF_ERROR(c->AddWorker().status());
  return c;
}

TestCluster::~TestCluster() {
  workers_.clear();
  dispatcher_.reset();
}

WorkerOptions TestCluster::WorkerOpts() const {
  WorkerOptions w;
  w.listen = "127.0.0.1:0";
  w.threads = o_.threads_per_worker;
  w.token = o_.token;
  w.dispatcher = dispatcher_address_;
  w.drain_timeout_s = 20;
  w.allow_synthetic = true;  // the tests' synthetic: jobs
  return w;
}

Result<size_t> TestCluster::AddWorker() {
  FERRY_ASSIGN_OR_RETURN(std::unique_ptr<WorkerService> w, WorkerService::Start(WorkerOpts()));
  worker_addresses_.push_back(w->address());
  workers_.push_back(std::move(w));
  return workers_.size() - 1;
}

void TestCluster::StopWorker(size_t i) { workers_[i].reset(); }

void TestCluster::DrainWorker(size_t i) {
  workers_[i]->Drain();
  workers_[i]->WaitDrained();
  workers_[i].reset();
}

Status TestCluster::RestartDispatcher() {
  dispatcher_.reset();
  // The port was ours a moment ago; a rare race with another process for it is retried.
  Status last;
  for (int attempt = 0; attempt < 50; ++attempt) {
    auto d = DispatcherService::Start(DispatcherOpts(o_, dispatcher_address_, work_dir_ / "journal"));
    if (d.ok()) {
      dispatcher_ = std::move(*d);
      return Status::OK();
    }
    last = d.status();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return last;
}

ClientOptions TestCluster::ClientFor(const std::string& job_name, const JobSpec& job) const {
  ClientOptions o;
  o.dispatcher = dispatcher_address_;
  o.job_name = job_name;
  o.job = job;
  o.token = o_.token;
  o.poll_interval_s = 0.02;
  o.backoff_initial_s = 0.02;
  o.backoff_max_s = 0.2;
  o.dispatcher_timeout_s = 30;
  return o;
}

}  // namespace ferry::testing
