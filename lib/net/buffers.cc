// The receive buffer allocators of include/ferry/buffer.h.
#include "ferry/buffer.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "core/mutex.h"

namespace ferry {

namespace {

using AllocFn = std::function<void*(size_t)>;
using FreeFn = std::function<void(void*, size_t)>;

class PooledBuffer : public InBuffer {
 public:
  PooledBuffer(void* p, size_t n, size_t cap, std::shared_ptr<const FreeFn> free)
      : p_(p), n_(n), cap_(cap), free_(std::move(free)) {}
  ~PooledBuffer() override {
    if (p_ != nullptr) (*free_)(p_, cap_);
  }
  uint8_t* data() override { return static_cast<uint8_t*>(p_); }
  size_t size() const override { return n_; }
  size_t capacity() const { return cap_; }
  void* release() {
    void* p = p_;
    p_ = nullptr;
    return p;
  }

 private:
  void* p_;
  size_t n_, cap_;
  std::shared_ptr<const FreeFn> free_;  // a buffer may outlive its allocator
};

// Recycles a few buffers by size class (powers of two from 4 KiB) so that steady
// streaming allocates nothing: with plain heap memory, and with a user's (pinned
// memory costs milliseconds to allocate, and must not be had per frame). At most 16
// buffers and 1 GiB are kept: a burst of large frames must not pin memory forever.
class RecyclingAllocator : public BufferAllocator, public std::enable_shared_from_this<RecyclingAllocator> {
 public:
  RecyclingAllocator(AllocFn alloc, FreeFn free)
      : alloc_(std::move(alloc)), free_(std::make_shared<const FreeFn>(std::move(free))) {}

  std::shared_ptr<InBuffer> Allocate(size_t bytes) override {
    const size_t cap = RoundUp(std::max<size_t>(bytes, 64));
    void* p = nullptr;
    {
      MutexLock lock(&mu_);
      // The most recently freed first: its lines are likeliest still in cache.
      for (size_t i = free_list_.size(); i-- > 0;) {
        if (free_list_[i].second == cap) {
          p = free_list_[i].first;
          free_list_.erase(free_list_.begin() + long(i));
          free_bytes_ -= cap;
          break;
        }
      }
    }
    if (p == nullptr) {
      p = alloc_(cap);
      if (p == nullptr) return nullptr;
      if ((reinterpret_cast<uintptr_t>(p) & 63) != 0) {  // a user allocator's misaligned memory
        (*free_)(p, cap);
        return nullptr;
      }
    }
    std::weak_ptr<RecyclingAllocator> weak = weak_from_this();
    auto* raw = new PooledBuffer(p, bytes, cap, free_);
    return std::shared_ptr<InBuffer>(raw, [weak](InBuffer* b) {
      auto* pb = static_cast<PooledBuffer*>(b);
      if (auto self = weak.lock()) self->Recycle(pb->release(), pb->capacity());
      delete pb;
    });
  }

  ~RecyclingAllocator() override {
    MutexLock lock(&mu_);
    for (auto& f : free_list_) (*free_)(f.first, f.second);
  }

 private:
  static size_t RoundUp(size_t n) {
    size_t c = 4096;
    while (c < n) c *= 2;
    return c;
  }
  void Recycle(void* p, size_t cap) {
    MutexLock lock(&mu_);
    if (free_list_.size() < kMaxFree && free_bytes_ + cap <= kMaxFreeBytes) {
      free_list_.push_back({p, cap});
      free_bytes_ += cap;
    } else {
      (*free_)(p, cap);
    }
  }
  static constexpr size_t kMaxFree = 16, kMaxFreeBytes = size_t(1) << 30;
  const AllocFn alloc_;
  const std::shared_ptr<const FreeFn> free_;
  Mutex mu_;
  std::vector<std::pair<void*, size_t>> free_list_ GUARDED_BY(mu_);
  size_t free_bytes_ GUARDED_BY(mu_) = 0;
};

}  // namespace

std::shared_ptr<BufferAllocator> DefaultBufferAllocator() {
  return std::make_shared<RecyclingAllocator>([](size_t cap) { return std::aligned_alloc(64, cap); },
                                              [](void* p, size_t) { std::free(p); });
}

std::shared_ptr<BufferAllocator> FunctionBufferAllocator(std::function<void*(size_t)> alloc,
                                                         std::function<void(void*, size_t)> free) {
  return std::make_shared<RecyclingAllocator>(std::move(alloc), std::move(free));
}

}  // namespace ferry
