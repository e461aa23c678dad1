// Helpers shared by the fuzz targets (no gtest: a fuzzer reports by aborting).
#ifndef FERRY_TESTS_FUZZ_FUZZ_UTIL_H_
#define FERRY_TESTS_FUZZ_FUZZ_UTIL_H_

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "ferry/buffer.h"
#include "wire/frame.h"
#include "wire/message.h"

// A bug in the code under test: libFuzzer reports the input that got here.
#define FUZZ_CHECK(cond)                                                     \
  do {                                                                       \
    if (!(cond)) {                                                           \
      std::fprintf(stderr, "fuzzer: check failed at %s:%d: %s\n", __FILE__, \
                   __LINE__, #cond);                                         \
      std::abort();                                                          \
    }                                                                        \
  } while (0)

namespace ferry::fuzz {

inline std::string Flatten(const wire::OutFrame& f) {
  std::string out;
  for (const wire::ByteRange& r : f.ranges()) out.append(static_cast<const char*>(r.data), r.size);
  return out;
}

// A body as FrameConnection reads it: in one 64-byte-aligned buffer of its own.
inline wire::InFrame BodyFrame(wire::MessageType type, const void* body, size_t size) {
  static const std::shared_ptr<BufferAllocator> buffers = DefaultBufferAllocator();
  wire::InFrame f;
  f.header.type = type;
  f.header.length = size;
  f.body = buffers->Allocate(size);
  FUZZ_CHECK(f.body != nullptr);
  if (size > 0) std::memcpy(f.body->data(), body, size);
  return f;
}

// What the receiving end of `out` gets: its header parsed, its body in its own buffer.
inline wire::InFrame Received(const wire::OutFrame& out) {
  const std::string bytes = Flatten(out);
  FUZZ_CHECK(bytes.size() >= wire::kFrameHeaderSize);
  Result<wire::FrameHeader> h =
      wire::ParseFrameHeader(reinterpret_cast<const uint8_t*>(bytes.data()), wire::FrameLimits{});
  FUZZ_CHECK(h.ok());
  FUZZ_CHECK(h->length == bytes.size() - wire::kFrameHeaderSize);
  wire::InFrame f = BodyFrame(h->type, bytes.data() + wire::kFrameHeaderSize, size_t(h->length));
  f.header = *h;
  return f;
}

// Writes one seed file (a fuzzer's --write-seeds); exits on failure.
inline void WriteSeed(const std::string& dir, const std::string& name, const void* bytes, size_t size) {
  const std::string path = dir + "/" + name;
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr || std::fwrite(bytes, 1, size, f) != size) {
    std::fprintf(stderr, "fuzzer: cannot write %s\n", path.c_str());
    std::exit(1);
  }
  std::fclose(f);
}
inline void WriteSeed(const std::string& dir, const std::string& name, const std::string& bytes) {
  WriteSeed(dir, name, bytes.data(), bytes.size());
}

}  // namespace ferry::fuzz

#endif  // FERRY_TESTS_FUZZ_FUZZ_UTIL_H_
