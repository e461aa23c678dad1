// The frame header that precedes every Ferry message on a socket (see
// schemas/ferry.capnp for the protocol).
//
//   offset  size  field
//   0       4     magic "FRY1"
//   4       2     version (little-endian)
//   6       2     message type (little-endian)
//   8       8     length of the body that follows (little-endian)
//
// The body is one Cap'n Proto message in the standard stream framing. A receiver
// checks all four fields, and the length against a per-type limit, before it
// allocates anything for the body.
#ifndef FERRY_WIRE_FRAME_H_
#define FERRY_WIRE_FRAME_H_

#include <cstdint>
#include <cstring>
#include <string>

#include "ferry/status.h"

namespace ferry::wire {

inline constexpr uint8_t kFrameMagic[4] = {'F', 'R', 'Y', '1'};
inline constexpr uint16_t kProtocolVersion = 2;
inline constexpr size_t kFrameHeaderSize = 16;

// Mirrors schema::MessageType (checked in lib/wire).
enum class MessageType : uint16_t {
  kInvalid = 0,
  kChallenge = 1,
  kHello = 2,
  kHelloOk = 3,
  kOpenStream = 4,
  kCredit = 5,
  kBatch = 6,
  kEndOfEpoch = 7,
  kError = 8,
  // Control plane (schemas/control.capnp).
  kRegisterWorker = 16,
  kRegisterWorkerOk = 17,
  kHeartbeat = 18,
  kHeartbeatOk = 19,
  kGetOrCreateJob = 20,
  kJobInfo = 21,
  kGetWorkers = 22,
  kWorkerList = 23,
  kAckSplits = 24,
  kGetJobStatus = 25,
  kJobStatus = 26,
  kRestoreConsumer = 27,
  kReportWorker = 28,
  kGetClusterStatus = 29,
  kClusterStatus = 30,
  kDrainWorker = 31,
};

inline const char* MessageTypeName(MessageType t) {
  switch (t) {
    case MessageType::kChallenge: return "Challenge";
    case MessageType::kHello: return "Hello";
    case MessageType::kHelloOk: return "HelloOk";
    case MessageType::kOpenStream: return "OpenStream";
    case MessageType::kCredit: return "Credit";
    case MessageType::kBatch: return "Batch";
    case MessageType::kEndOfEpoch: return "EndOfEpoch";
    case MessageType::kError: return "Error";
    case MessageType::kRegisterWorker: return "RegisterWorker";
    case MessageType::kRegisterWorkerOk: return "RegisterWorkerOk";
    case MessageType::kHeartbeat: return "Heartbeat";
    case MessageType::kHeartbeatOk: return "HeartbeatOk";
    case MessageType::kGetOrCreateJob: return "GetOrCreateJob";
    case MessageType::kJobInfo: return "JobInfo";
    case MessageType::kGetWorkers: return "GetWorkers";
    case MessageType::kWorkerList: return "WorkerList";
    case MessageType::kAckSplits: return "AckSplits";
    case MessageType::kGetJobStatus: return "GetJobStatus";
    case MessageType::kJobStatus: return "JobStatus";
    case MessageType::kRestoreConsumer: return "RestoreConsumer";
    case MessageType::kReportWorker: return "ReportWorker";
    case MessageType::kGetClusterStatus: return "GetClusterStatus";
    case MessageType::kClusterStatus: return "ClusterStatus";
    case MessageType::kDrainWorker: return "DrainWorker";
    case MessageType::kInvalid: break;
  }
  return "Invalid";
}

struct FrameLimits {
  uint64_t max_control_bytes = uint64_t{1} << 20;  // every message but Batch
  uint64_t max_batch_bytes = uint64_t{4} << 30;    // one Batch
};

// What a server reads from a peer that has not authenticated: a Hello, which is a few
// hundred bytes. With the defaults, 16 bytes of header would make a daemon reserve
// and wait for up to 4 GiB from anyone who can connect.
inline FrameLimits PreAuthLimits() { return {uint64_t{16} << 10, 0}; }
// What a control channel reads from its daemon: replies, never a Batch. With the
// defaults a Batch header from a rogue or broken daemon would make the caller reserve
// up to 4 GiB for it.
inline FrameLimits ControlReplyLimits() { return {uint64_t{1} << 20, 0}; }

struct FrameHeader {
  uint16_t version = kProtocolVersion;
  MessageType type = MessageType::kInvalid;
  uint64_t length = 0;
};

inline void EncodeFrameHeader(MessageType type, uint64_t length, uint8_t out[kFrameHeaderSize]) {
  std::memcpy(out, kFrameMagic, 4);
  const uint16_t v = kProtocolVersion, t = uint16_t(type);
  out[4] = uint8_t(v);
  out[5] = uint8_t(v >> 8);
  out[6] = uint8_t(t);
  out[7] = uint8_t(t >> 8);
  for (int i = 0; i < 8; ++i) out[8 + i] = uint8_t(length >> (8 * i));
}

// Validates a received header. Errors are InvalidArgument (garbage, unknown type,
// bad version) or ResourceExhausted (over the limit); either way the connection is
// to be closed.
inline Result<FrameHeader> ParseFrameHeader(const uint8_t in[kFrameHeaderSize], const FrameLimits& limits) {
  if (std::memcmp(in, kFrameMagic, 4) != 0) return Status::InvalidArgument("bad frame: wrong magic");
  FrameHeader h;
  h.version = uint16_t(in[4] | in[5] << 8);
  const uint16_t type = uint16_t(in[6] | in[7] << 8);
  for (int i = 0; i < 8; ++i) h.length |= uint64_t(in[8 + i]) << (8 * i);
  if (h.version != kProtocolVersion)
    return Status::InvalidArgument("bad frame: protocol version " + std::to_string(h.version) + ", expected " +
                                   std::to_string(kProtocolVersion));
  if (type == 0 || (type > uint16_t(MessageType::kError) && type < uint16_t(MessageType::kRegisterWorker)) ||
      type > uint16_t(MessageType::kDrainWorker))
    return Status::InvalidArgument("bad frame: unknown message type " + std::to_string(type));
  h.type = MessageType(type);
  const uint64_t limit = h.type == MessageType::kBatch ? limits.max_batch_bytes : limits.max_control_bytes;
  if (h.length > limit)
    return Status::ResourceExhausted(std::string("bad frame: ") + MessageTypeName(h.type) + " of " +
                                     std::to_string(h.length) + " bytes exceeds the limit of " +
                                     std::to_string(limit));
  if (h.length < 8 || h.length % 8 != 0)
    return Status::InvalidArgument("bad frame: body length " + std::to_string(h.length) +
                                   " is not a whole Cap'n Proto message");
  return h;
}

}  // namespace ferry::wire

#endif  // FERRY_WIRE_FRAME_H_
