#include "worker/worker_core.h"

#include <algorithm>

#include "core/log.h"
#include "core/names.h"
#include "data/job_listing.h"
#include "worker/stream_setup.h"
#include "worker/synthetic_source.h"

namespace ferry {

Result<std::shared_ptr<const Dataset>> DatasetCache::Open(const std::string& path) {
  MutexLock lock(&mu_);
  const auto now = std::chrono::steady_clock::now();
  for (auto k = kept_.begin(); k != kept_.end();)
    k = now - k->second.used > std::chrono::duration<double>(kKeepS) ? kept_.erase(k) : std::next(k);
  auto it = open_.find(path);
  if (it != open_.end()) {
    if (auto ds = it->second.lock()) {
      kept_[path] = {ds, now};
      return ds;
    }
  }
  FERRY_ASSIGN_OR_RETURN(std::unique_ptr<Dataset> ds, OpenDataset(path, roots_));
  std::shared_ptr<const Dataset> shared(std::move(ds));
  kept_[path] = {shared, now};
  // Entries of closed datasets are dropped as others open: the map follows what is
  // open, not every path ever named.
  for (auto e = open_.begin(); e != open_.end();) e = e->second.expired() ? open_.erase(e) : std::next(e);
  open_[path] = shared;
  return shared;
}

Result<std::shared_ptr<const Tokenizer>> DatasetCache::OpenTokenizer(const JobSpec& job) {
  if (job.tokenizer.model.empty()) return std::shared_ptr<const Tokenizer>();
  return tokenizers_.Open(job.tokenizer, roots_);
}

WorkerCore::WorkerCore(WorkerCoreOptions o, WorkerEnv env, DatasetCache* datasets, JobSource* jobs)
    : o_(o), env_(std::move(env)), datasets_(datasets), jobs_(jobs) {}

Result<std::shared_ptr<const PreparedJob>> WorkerCore::Admit(const wire::OpenStreamMsg& m) const {
  if (m.by_name && jobs_ == nullptr)
    return Status::Unimplemented("this worker has no dispatcher (--dispatcher): give the job inline");
  if (draining_) return Status::Unavailable("worker is draining");
  FERRY_RETURN_IF_ERROR(CheckOptionalName("consumer id", m.consumer_id));
  if (m.by_name) {
    if (m.consumer_id.empty()) return Status::InvalidArgument("a stream by job name needs a consumer id");
    FERRY_RETURN_IF_ERROR(CheckName("job name", m.job_name));
    return std::shared_ptr<const PreparedJob>();
  }
  FERRY_ASSIGN_OR_RETURN(std::shared_ptr<const PreparedJob> prepared, PrepareInlineStream(m));
  if (prepared->source() == BatchSource::kSynthetic && !o_.allow_synthetic) return SyntheticRefused();
  if (prepared->runs_python() && env_.python == nullptr) return UserCodeRefused();
  return prepared;
}

DataOpeners WorkerCore::openers() const {
  DataOpeners o;
  o.dataset = [datasets = datasets_](const std::string& spec) { return datasets->Open(spec); };
  if (env_.python != nullptr) {
    o.user_code = [python = env_.python](const JobSpec& job) { return OpenUserCode(python.get(), job); };
    o.check_user_code = [python = env_.python](const JobSpec& job) { return CheckUserCode(python.get(), job); };
  }
  o.allow_synthetic = o_.allow_synthetic;
  return o;
}


Status WorkerCore::Reserve(uint64_t bytes) {
  const uint64_t budget = o_.memory_budget_bytes;
  if (bytes > budget || reserved_ > budget - bytes)
    return Status::ResourceExhausted(
        "this stream needs " + std::to_string(bytes >> 20) + " MiB of batch memory (" + std::to_string(buffers()) +
        " batches) and this worker has " + std::to_string((budget - std::min(budget, reserved_)) >> 20) +
        " MiB of its " + std::to_string(budget >> 20) +
        " MiB left (--max-memory): use a smaller batch_size or image size, or more workers");
  reserved_ += bytes;
  return Status::OK();
}

void WorkerCore::Release(uint64_t bytes) { reserved_ -= std::min(bytes, reserved_); }

int64_t WorkerCore::SyntheticQueueTarget(int64_t credits) const {
  return std::max<int64_t>(2, std::min<int64_t>(credits, buffers()) + 1);
}

DrainPolicy::Next DrainPolicy::Step(int64_t now, bool acknowledged, bool consumer_connected) {
  if (acknowledged) return Next::kDrained;
  if (consumer_connected) last_consumer_ = now;
  if (now >= deadline_) return Next::kTimedOut;
  if (now - last_consumer_ > no_consumer_ns_) return Next::kNoConsumer;
  return Next::kWait;
}

}  // namespace ferry
