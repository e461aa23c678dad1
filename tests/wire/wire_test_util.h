// Helpers shared by the wire tests: frames as a receiver sees them, hand-made frames
// and headers, and every decoder by message type.
#ifndef FERRY_TESTS_WIRE_WIRE_TEST_UTIL_H_
#define FERRY_TESTS_WIRE_WIRE_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "ferry/buffer.h"
#include "wire/codec.h"
#include "wire/control.h"
#include "wire/frame.h"
#include "wire/message.h"

namespace ferry::wire::test {


inline std::string Flatten(const OutFrame& f) {
  std::string out;
  for (const ByteRange& r : f.ranges()) out.append(static_cast<const char*>(r.data), r.size);
  return out;
}

inline std::shared_ptr<InBuffer> AlignedCopy(const void* data, size_t size) {
  std::shared_ptr<InBuffer> b = DefaultBufferAllocator()->Allocate(size);
  if (size > 0) std::memcpy(b->data(), data, size);
  return b;
}

// What a receiver makes of an OutFrame's bytes: the header parsed, the body copied
// into one 64-byte-aligned buffer.
inline InFrame ToInFrame(const OutFrame& out) {
  const std::string bytes = Flatten(out);
  EXPECT_EQ(bytes.size(), out.size());
  EXPECT_GE(bytes.size(), kFrameHeaderSize);
  Result<FrameHeader> h = ParseFrameHeader(reinterpret_cast<const uint8_t*>(bytes.data()), FrameLimits{});
  EXPECT_TRUE(h.ok()) << h.status().ToString();
  InFrame f;
  if (!h.ok()) return f;
  EXPECT_EQ(h->type, out.type());
  EXPECT_EQ(h->length, bytes.size() - kFrameHeaderSize);
  f.header = *h;
  f.body = AlignedCopy(bytes.data() + kFrameHeaderSize, bytes.size() - kFrameHeaderSize);
  return f;
}

// A frame of `type` whose body is `body` (no validation: the decoders must do it).
inline InFrame RawFrame(MessageType type, const std::string& body) {
  InFrame f;
  f.header.type = type;
  f.header.length = body.size();
  f.body = AlignedCopy(body.data(), body.size());
  return f;
}

inline std::string Header(const char magic[4], uint16_t version, uint16_t type, uint64_t length) {
  uint8_t h[kFrameHeaderSize];
  std::memcpy(h, magic, 4);
  h[4] = uint8_t(version);
  h[5] = uint8_t(version >> 8);
  h[6] = uint8_t(type);
  h[7] = uint8_t(type >> 8);
  for (int i = 0; i < 8; ++i) h[8 + i] = uint8_t(length >> (8 * i));
  return std::string(reinterpret_cast<const char*>(h), sizeof h);
}

inline Result<FrameHeader> Parse(const std::string& header, const FrameLimits& limits = FrameLimits{}) {
  return ParseFrameHeader(reinterpret_cast<const uint8_t*>(header.data()), limits);
}

// Every decoder, on the given frame (the frame's type picks nothing: all are tried).
inline std::vector<Status> DecodeWithAll(const InFrame& f) {
  std::vector<Status> out;
  out.push_back(DecodeChallenge(f).status());
  out.push_back(DecodeHello(f).status());
  out.push_back(DecodeHelloOk(f).status());
  out.push_back(DecodeOpenStream(f).status());
  out.push_back(DecodeCredit(f).status());
  out.push_back(DecodeEndOfEpoch(f).status());
  out.push_back(DecodeError(f).status());
  std::vector<SkippedSample> skipped;
  out.push_back(DecodeBatch(f, &skipped).status());
  return out;
}

// The decoder of `type` on `f`.
inline Status DecodeAs(MessageType type, const InFrame& f) {
  InFrame g = f;
  g.header.type = type;
  switch (type) {
    case MessageType::kChallenge:
      return DecodeChallenge(g).status();
    case MessageType::kHello:
      return DecodeHello(g).status();
    case MessageType::kHelloOk:
      return DecodeHelloOk(g).status();
    case MessageType::kOpenStream:
      return DecodeOpenStream(g).status();
    case MessageType::kCredit:
      return DecodeCredit(g).status();
    case MessageType::kEndOfEpoch:
      return DecodeEndOfEpoch(g).status();
    case MessageType::kError:
      return DecodeError(g).status();
    case MessageType::kBatch: {
      std::vector<SkippedSample> skipped;
      Result<Batch> b = DecodeBatch(g, &skipped);
      if (b.ok()) {
        // Touch every byte the views claim, so that ASan checks them.
        uint64_t sum = 0;
        for (const TensorView* t : {&b->images, &b->labels, &b->indices}) {
          const auto* p = static_cast<const uint8_t*>(t->data);
          for (size_t i = 0; i < t->num_bytes(); ++i) sum += p[i];
        }
        (void)sum;
      }
      return b.status();
    }
    // The control plane's decoders face the same untrusted bytes.
    case MessageType::kRegisterWorker:
      return DecodeRegisterWorker(g).status();
    case MessageType::kRegisterWorkerOk:
      return DecodeRegisterWorkerOk(g).status();
    case MessageType::kHeartbeat:
      return DecodeHeartbeat(g).status();
    case MessageType::kHeartbeatOk:
      return DecodeHeartbeatOk(g).status();
    case MessageType::kGetOrCreateJob:
      return DecodeGetOrCreateJob(g).status();
    case MessageType::kJobInfo:
      return DecodeJobInfo(g).status();
    case MessageType::kGetWorkers:
      return DecodeGetWorkers(g);
    case MessageType::kWorkerList:
      return DecodeWorkerList(g).status();
    case MessageType::kAckSplits:
      return DecodeAckSplits(g).status();
    case MessageType::kGetJobStatus:
      return DecodeGetJobStatus(g).status();
    case MessageType::kJobStatus:
      return DecodeJobStatus(g).status();
    case MessageType::kRestoreConsumer:
      return DecodeRestoreConsumer(g).status();
    case MessageType::kReportWorker:
      return DecodeReportWorker(g).status();
    case MessageType::kGetClusterStatus:
      return DecodeGetClusterStatus(g);
    case MessageType::kClusterStatus:
      return DecodeClusterStatus(g).status();
    case MessageType::kDrainWorker:
      return DecodeDrainWorker(g).status();
    case MessageType::kInvalid:
      break;
  }
  return Status::Internal("no decoder");
}

// Every message type there is: the data plane (1..8), then the control plane (16..30).
constexpr MessageType kAllTypes[] = {
    MessageType::kChallenge,        MessageType::kHello,     MessageType::kHelloOk,
    MessageType::kOpenStream,       MessageType::kCredit,    MessageType::kBatch,
    MessageType::kEndOfEpoch,       MessageType::kError,     MessageType::kRegisterWorker,
    MessageType::kRegisterWorkerOk, MessageType::kHeartbeat, MessageType::kHeartbeatOk,
    MessageType::kGetOrCreateJob,   MessageType::kJobInfo,   MessageType::kGetWorkers,
    MessageType::kWorkerList,       MessageType::kAckSplits, MessageType::kGetJobStatus,
    MessageType::kJobStatus,        MessageType::kRestoreConsumer, MessageType::kReportWorker,
    MessageType::kGetClusterStatus, MessageType::kClusterStatus, MessageType::kDrainWorker};

// Memory for a tensor: 64-byte aligned and padded to a multiple of 64 bytes.
struct AlignedBytes {
  explicit AlignedBytes(size_t n) : size(n), p(std::aligned_alloc(64, (n + 63) / 64 * 64 + 64)) {}
  ~AlignedBytes() { std::free(p); }
  AlignedBytes(const AlignedBytes&) = delete;
  AlignedBytes& operator=(const AlignedBytes&) = delete;
  template <typename T>
  T* as() {
    return static_cast<T*>(p);
  }
  size_t size;
  void* p;
};

inline bool Inside(const void* p, size_t n, const InBuffer& buf) {
  const auto* b = static_cast<const uint8_t*>(const_cast<InBuffer&>(buf).data());
  const auto* q = static_cast<const uint8_t*>(p);
  return q >= b && q + n <= b + buf.size();
}

}  // namespace ferry::wire::test

#endif  // FERRY_TESTS_WIRE_WIRE_TEST_UTIL_H_
