// The receive buffer allocators of include/ferry/buffer.h.
#include "ferry/buffer.h"

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <utility>
#include <vector>

#include "core/mutex.h"

namespace ferry {

namespace {

class HeapBuffer : public InBuffer {
 public:
  HeapBuffer(void* p, size_t n, size_t cap) : p_(p), n_(n), cap_(cap) {}
  ~HeapBuffer() override;
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
};

HeapBuffer::~HeapBuffer() { std::free(p_); }

// Recycles a few buffers by size class so that steady streaming allocates nothing.
class DefaultAllocator : public BufferAllocator, public std::enable_shared_from_this<DefaultAllocator> {
 public:
  std::shared_ptr<InBuffer> Allocate(size_t bytes) override {
    const size_t cap = RoundUp(std::max<size_t>(bytes, 64));
    void* p = nullptr;
    {
      MutexLock lock(&mu_);
      for (size_t i = 0; i < free_.size(); ++i) {
        if (free_[i].second == cap) {
          p = free_[i].first;
          free_.erase(free_.begin() + long(i));
          break;
        }
      }
    }
    if (p == nullptr) p = std::aligned_alloc(64, cap);
    if (p == nullptr) return nullptr;
    std::weak_ptr<DefaultAllocator> weak = weak_from_this();
    auto* raw = new HeapBuffer(p, bytes, cap);
    return std::shared_ptr<InBuffer>(raw, [weak](InBuffer* b) {
      auto* hb = static_cast<HeapBuffer*>(b);
      if (auto self = weak.lock()) self->Recycle(hb->release(), hb->capacity());
      delete hb;
    });
  }

  ~DefaultAllocator() override {
    MutexLock lock(&mu_);
    for (auto& f : free_) std::free(f.first);
  }

 private:
  static size_t RoundUp(size_t n) {
    size_t c = 4096;
    while (c < n) c *= 2;
    return c;
  }
  void Recycle(void* p, size_t cap) {
    MutexLock lock(&mu_);
    if (free_.size() < 16) {
      free_.push_back({p, cap});
    } else {
      std::free(p);
    }
  }
  Mutex mu_;
  std::vector<std::pair<void*, size_t>> free_ GUARDED_BY(mu_);
};

class UserBuffer : public InBuffer {
 public:
  UserBuffer(void* p, size_t n, std::function<void(void*, size_t)> free) : p_(p), n_(n), free_(std::move(free)) {}
  ~UserBuffer() override { free_(p_, n_); }
  uint8_t* data() override { return static_cast<uint8_t*>(p_); }
  size_t size() const override { return n_; }

 private:
  void* p_;
  size_t n_;
  std::function<void(void*, size_t)> free_;
};

class FunctionAllocator : public BufferAllocator {
 public:
  FunctionAllocator(std::function<void*(size_t)> a, std::function<void(void*, size_t)> f)
      : alloc_(std::move(a)), free_(std::move(f)) {}
  std::shared_ptr<InBuffer> Allocate(size_t bytes) override {
    void* p = alloc_(bytes);
    if (p == nullptr || (reinterpret_cast<uintptr_t>(p) & 63) != 0) {
      if (p) free_(p, bytes);
      return nullptr;
    }
    return std::make_shared<UserBuffer>(p, bytes, free_);
  }

 private:
  std::function<void*(size_t)> alloc_;
  std::function<void(void*, size_t)> free_;
};

}  // namespace

std::shared_ptr<BufferAllocator> DefaultBufferAllocator() { return std::make_shared<DefaultAllocator>(); }

std::shared_ptr<BufferAllocator> FunctionBufferAllocator(std::function<void*(size_t)> alloc,
                                                         std::function<void(void*, size_t)> free) {
  return std::make_shared<FunctionAllocator>(std::move(alloc), std::move(free));
}

}  // namespace ferry
