// ReadAheadDataset (data/read_ahead.h).
#include "data/read_ahead.h"

#include <algorithm>
#include <chrono>
#include <deque>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/log.h"
#include "core/mutex.h"
#include "core/thread_annotations.h"
#include "data/dataset_bases.h"

namespace ferry {
namespace {

class ReadAheadDataset final : public ForwardingDataset {
 public:
  ReadAheadDataset(std::unique_ptr<Dataset> inner, const ReadAheadOptions& o)
      : ForwardingDataset(std::move(inner)), inner_(&ForwardingDataset::inner()), opts_(o) {
    if (opts_.requests < 1) opts_.requests = 1;
    for (int i = 0; i < opts_.requests; ++i) threads_.emplace_back([this] { Run(); });
  }
  ~ReadAheadDataset() override {
    {
      MutexLock lock(&mu_);
      stop_ = true;
      cv_.SignalAll();
    }
    for (std::thread& t : threads_) t.join();
    MutexLock lock(&mu_);
    LogDebug("read-ahead of %s: %llu samples found fetched, %llu read when taken", inner_->size() > 0 ? inner_->Path(0).c_str() : "",
             (unsigned long long)hits_, (unsigned long long)misses_);
  }

  void Prefetch(const std::vector<int64_t>& indices) const override {
    MutexLock lock(&mu_);
    for (int64_t i : indices) {
      if (i < 0 || i >= inner_->size()) continue;  // a padding row, or not a sample
      Entry& e = entries_[i];
      if (e.wanted++ == 0) {
        e.state = State::kQueued;
        queue_.push_back(i);
      }
    }
    cv_.SignalAll();
  }

  Status ReadSample(int64_t index, std::string* out) const override {
    {
      MutexLock lock(&mu_);
      auto it = entries_.find(index);
      if (it != entries_.end()) {
        Entry* e = &it->second;  // stable: an unordered_map moves no element on rehash
        if (e->state == State::kQueued) {
          // Not started: this thread reads it (the queue's entry is skipped when popped).
          if (--e->wanted == 0) entries_.erase(it);
        } else {
          while (e->state == State::kFetching) cv_.Wait(&mu_);
          if (e->state == State::kReady) {
            const Status s = e->status;
            if (--e->wanted == 0) {
              held_ -= e->bytes.size();
              *out = std::move(e->bytes);
              entries_.erase(index);
              cv_.SignalAll();  // room for more
            } else {
              *out = e->bytes;  // another planned read of the same sample (another epoch's)
            }
            ++hits_;
            return s;
          }
          // Dropped (kept too long) meanwhile: read it here.
        }
      }
      ++misses_;
    }
    return inner_->ReadSample(index, out);
  }

 private:
  enum class State { kQueued, kFetching, kReady };
  struct Entry {
    State state = State::kQueued;
    int wanted = 0;  // planned reads not yet taken
    std::string bytes;
    Status status;
    std::chrono::steady_clock::time_point ready_at;
  };

  void Run() {
    for (;;) {
      int64_t index = -1;
      uint64_t hint = 0;
      Entry* e = nullptr;
      {
        MutexLock lock(&mu_);
        for (;;) {
          if (stop_) return;
          DropStale();
          // An entry the queue names may have been taken (read by its taker) meanwhile.
          while (!queue_.empty()) {
            auto it = entries_.find(queue_.front());
            if (it != entries_.end() && it->second.state == State::kQueued) break;
            queue_.pop_front();
          }
          if (!queue_.empty() && (held_ < opts_.bytes || held_ == 0)) break;  // one over the budget alone
          cv_.WaitFor(&mu_, std::min(1.0, opts_.keep_s));
        }
        index = queue_.front();
        queue_.pop_front();
        e = &entries_.find(index)->second;
        e->state = State::kFetching;
        hint = inner_->SizeHint(index);
        held_ += hint;
        ++fetching_;
      }
      std::string bytes;
      Status s = inner_->ReadSample(index, &bytes);
      MutexLock lock(&mu_);
      held_ += bytes.size();
      held_ -= hint;
      e->bytes = std::move(bytes);
      e->status = std::move(s);
      e->state = State::kReady;
      e->ready_at = std::chrono::steady_clock::now();
      --fetching_;
      cv_.SignalAll();
    }
  }

  // Fetched samples nobody took within keep_s: their stream stopped or their split
  // moved; their bytes go.
  void DropStale() EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const auto now = std::chrono::steady_clock::now();
    if (now - last_sweep_ < std::chrono::duration<double>(std::min(1.0, opts_.keep_s))) return;
    last_sweep_ = now;
    const auto limit = std::chrono::duration<double>(opts_.keep_s);
    for (auto it = entries_.begin(); it != entries_.end();) {
      if (it->second.state == State::kReady && now - it->second.ready_at > limit) {
        held_ -= it->second.bytes.size();
        it = entries_.erase(it);
      } else {
        ++it;
      }
    }
  }

  const Dataset* const inner_;  // the forwarded dataset
  ReadAheadOptions opts_;
  mutable Mutex mu_;
  mutable CondVar cv_;
  mutable std::unordered_map<int64_t, Entry> entries_ GUARDED_BY(mu_);
  mutable std::deque<int64_t> queue_ GUARDED_BY(mu_);
  mutable uint64_t held_ GUARDED_BY(mu_) = 0;  // bytes fetched or being fetched (by hint), not yet taken
  mutable int fetching_ GUARDED_BY(mu_) = 0;
  mutable bool stop_ GUARDED_BY(mu_) = false;
  mutable uint64_t hits_ GUARDED_BY(mu_) = 0, misses_ GUARDED_BY(mu_) = 0;
  mutable std::chrono::steady_clock::time_point last_sweep_ GUARDED_BY(mu_);
  std::vector<std::thread> threads_;
};

}  // namespace

std::unique_ptr<Dataset> WithReadAhead(std::unique_ptr<Dataset> inner, const ReadAheadOptions& options) {
  return std::make_unique<ReadAheadDataset>(std::move(inner), options);
}

}  // namespace ferry
