#include "pipeline/batch_window.h"

#include <algorithm>
#include <utility>

namespace ferry {

std::shared_ptr<BatchWindow::Made> BatchWindow::Made::Allocate(int64_t capacity, size_t sample_bytes,
                                                               int num_classes) {
  auto m = std::make_shared<Made>();
  m->capacity = capacity;
  m->sample_bytes = sample_bytes;
  m->num_classes = num_classes;
  const size_t n = size_t(std::max<int64_t>(capacity, 1));
  m->images.reset(new uint8_t[n * std::max<size_t>(sample_bytes, 1)]);  // default-initialized: filled by its maker
  m->labels.reset(new int64_t[n]);
  m->indices.reset(new int64_t[n]);
  if (num_classes > 0) m->targets.reset(new float[n * size_t(num_classes)]);
  return m;
}

std::shared_ptr<const BatchWindow::Made> BatchWindow::Take(const Key& key, Waiter waiter, bool* make) {
  MutexLock lock(&mu_);
  *make = false;
  auto [it, inserted] = entries_.try_emplace(key);
  if (inserted) {
    *make = true;  // nobody has it, nobody is making it: the caller makes it
    return nullptr;
  }
  Entry& e = it->second;
  if (e.made != nullptr) {
    ++counters_.served;
    lru_.splice(lru_.end(), lru_, e.lru);  // used: the newest again
    return e.made;
  }
  e.waiters.push_back(std::move(waiter));
  return nullptr;
}

void BatchWindow::Put(const Key& key, std::shared_ptr<const Made> made) {
  std::vector<Waiter> waiters;
  {
    MutexLock lock(&mu_);
    auto it = entries_.find(key);
    if (it == entries_.end()) return;  // not asked for (cannot happen: the maker asked)
    Entry& e = it->second;
    waiters = std::move(e.waiters);
    e.waiters.clear();
    ++counters_.made;
    counters_.served += waiters.size();
    const uint64_t bytes = made->bytes();
    if (bytes > max_bytes_) {
      entries_.erase(it);  // larger than the whole window: handed to its waiters only
    } else {
      e.made = made;
      e.lru = lru_.insert(lru_.end(), key);
      counters_.bytes += bytes;
      // The oldest made batches go while the window is over its bytes (entries being
      // made are not in the list: they are never dropped under their waiters).
      while (counters_.bytes > max_bytes_ && !lru_.empty()) {
        auto old = entries_.find(lru_.front());
        lru_.pop_front();
        counters_.bytes -= old->second.made->bytes();
        ++counters_.evicted;
        entries_.erase(old);
      }
    }
  }
  for (Waiter& w : waiters) w(made);  // outside the lock: a waiter finishes its batch
}

void BatchWindow::Abandon(const Key& key) {
  std::vector<Waiter> waiters;
  {
    MutexLock lock(&mu_);
    auto it = entries_.find(key);
    if (it == entries_.end() || it->second.made != nullptr) return;
    waiters = std::move(it->second.waiters);
    entries_.erase(it);
    ++counters_.abandoned;
  }
  for (Waiter& w : waiters) w(nullptr);
}

BatchWindow::Counters BatchWindow::counters() const {
  MutexLock lock(&mu_);
  return counters_;
}

}  // namespace ferry
