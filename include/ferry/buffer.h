// Receive buffers: where a batch's bytes land when they arrive from a worker. Every
// frame is read into one 64-byte-aligned buffer, and the tensors a Batch shows are
// views into it (no copy). A trainer may supply its own allocator, for instance one
// that hands out pinned memory for fast host-to-device copies.
#ifndef FERRY_BUFFER_H_
#define FERRY_BUFFER_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

namespace ferry {

// One received frame body. Owned through a shared_ptr: batches view into it and hold
// it alive.
class InBuffer {
 public:
  virtual ~InBuffer() = default;
  virtual uint8_t* data() = 0;
  virtual size_t size() const = 0;
};

// Thread-safe: the client's io thread allocates, and any thread may drop the last
// reference to a buffer.
class BufferAllocator {
 public:
  virtual ~BufferAllocator() = default;
  // A buffer of `bytes` bytes, 64-byte aligned; nullptr if none can be had.
  virtual std::shared_ptr<InBuffer> Allocate(size_t bytes) = 0;
};

// Plain 64-byte-aligned heap buffers, a few recycled by size class so that steady
// streaming allocates nothing.
std::shared_ptr<BufferAllocator> DefaultBufferAllocator();

// Buffers from user functions, e.g. cudaHostAlloc / cudaFreeHost, recycled as the
// default ones are (a few kept per size class). `alloc` gets a capacity (a power of
// two >= the frame) and must return 64-byte-aligned memory or nullptr; `free` gets
// the pointer and that capacity back, possibly after the allocator is gone.
std::shared_ptr<BufferAllocator> FunctionBufferAllocator(std::function<void*(size_t)> alloc,
                                                         std::function<void(void*, size_t)> free);

}  // namespace ferry

#endif  // FERRY_BUFFER_H_
