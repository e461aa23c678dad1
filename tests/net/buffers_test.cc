// Receive buffers (include/ferry/buffer.h, lib/net/buffers.cc): aligned, recycled,
// and a user allocator's misaligned memory refused.
#include "ferry/buffer.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

namespace ferry {
namespace {

TEST(BufferAllocatorTest, DefaultBuffersAreAlignedAndRecycled) {
  std::shared_ptr<BufferAllocator> a = DefaultBufferAllocator();
  void* first = nullptr;
  for (size_t n : {8ul, 64ul, 4096ul, 100000ul, 3ul << 20}) {
    std::shared_ptr<InBuffer> b = a->Allocate(n);
    ASSERT_TRUE(b);
    EXPECT_EQ(b->size(), n);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b->data()) % 64, 0u);
    std::memset(b->data(), 0xAB, n);  // ASan: the whole size is usable
    if (n == 100000) first = b->data();
  }
  // The same size class comes back from the free list.
  std::shared_ptr<InBuffer> again = a->Allocate(100000);
  EXPECT_EQ(again->data(), first);
  // Buffers may outlive their allocator.
  a.reset();
  again->data()[0] = 1;
}

TEST(BufferAllocatorTest, FunctionAllocatorRefusesMisalignedMemory) {
  int frees = 0;
  std::vector<char> arena(256);
  char* misaligned = arena.data() + (64 - reinterpret_cast<uintptr_t>(arena.data()) % 64) % 64 + 8;
  auto a = FunctionBufferAllocator([&](size_t) -> void* { return misaligned; },
                                   [&](void* p, size_t) {
                                     EXPECT_EQ(p, misaligned);
                                     ++frees;
                                   });
  EXPECT_EQ(a->Allocate(64), nullptr);
  EXPECT_EQ(frees, 1);
  auto null_alloc = FunctionBufferAllocator([](size_t) -> void* { return nullptr; }, [](void*, size_t) {});
  EXPECT_EQ(null_alloc->Allocate(64), nullptr);
}

// Pinned memory is expensive to allocate: a user allocator's buffers are recycled as
// the default ones are, and all given back through `free`, even after the allocator.
TEST(BufferAllocatorTest, FunctionAllocatorRecyclesAndFreesEverything) {
  int allocs = 0, frees = 0;
  auto a = FunctionBufferAllocator(
      [&](size_t cap) -> void* {
        ++allocs;
        EXPECT_GE(cap, 100000u);
        return std::aligned_alloc(64, cap);
      },
      [&](void* p, size_t) {
        ++frees;
        std::free(p);
      });
  for (int i = 0; i < 50; ++i) {
    auto b = a->Allocate(100000);
    ASSERT_TRUE(b);
    std::memset(b->data(), 1, b->size());
  }
  EXPECT_EQ(allocs, 1);
  auto outlives = a->Allocate(100000);
  auto second = a->Allocate(100000);
  EXPECT_EQ(allocs, 2);
  a.reset();  // frees the free list; the live buffers are freed when they go
  EXPECT_EQ(frees, 0);
  outlives.reset();
  second.reset();
  EXPECT_EQ(frees, 2);
}

// A burst of large frames is not kept: at most 1 GiB (and 16 buffers) of free memory.
TEST(BufferAllocatorTest, TheFreeListIsBoundedInBytes) {
  size_t live = 0;
  uintptr_t next = 0;
  std::vector<std::shared_ptr<InBuffer>> burst;
  auto a = FunctionBufferAllocator(
      [&](size_t cap) -> void* {
        live += cap;
        return reinterpret_cast<void*>(++next * 64);  // aligned, and never touched
      },
      [&](void*, size_t cap) { live -= cap; });
  for (int i = 0; i < 6; ++i) burst.push_back(a->Allocate(size_t(300) << 20));  // 6 x 512 MiB classes
  EXPECT_EQ(live, size_t(6) * (size_t(512) << 20));
  burst.clear();
  EXPECT_LE(live, size_t(1) << 30) << "freed buffers kept past 1 GiB";
  EXPECT_GT(live, 0u) << "nothing recycled";
  a.reset();
  EXPECT_EQ(live, 0u);
}

}  // namespace
}  // namespace ferry
