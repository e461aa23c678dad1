// The wire codec's interface: plain C++ structs in, frames out, and back. It is
// implemented in lib/wire (the ferry::wire library, which holds the generated Cap'n
// Proto code), so neither the header-only client nor the daemons' adapters touch
// generated accessors directly.
#ifndef FERRY_INTERNAL_WIRE_H_
#define FERRY_INTERNAL_WIRE_H_

#include <array>
#include <cstddef>
#include <functional>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ferry/batch.h"
#include "ferry/internal/frame.h"
#include "ferry/iterator.h"
#include "ferry/status.h"

namespace ferry::internal {

// A contiguous byte range, for scatter-gather writes.
struct ByteRange {
  const void* data;
  size_t size;
};

// One encoded frame ready to send: header, segment table and the message's segments,
// as byte ranges into memory the frame owns. Nothing is flattened or copied.
class OutFrame {
 public:
  class Impl;
  OutFrame();
  explicit OutFrame(std::unique_ptr<Impl> impl);
  OutFrame(OutFrame&&) noexcept;
  OutFrame& operator=(OutFrame&&) noexcept;
  ~OutFrame();

  MessageType type() const;
  const std::vector<ByteRange>& ranges() const;
  size_t size() const;  // total bytes on the wire
  Impl* impl() const { return impl_.get(); }

 private:
  std::unique_ptr<Impl> impl_;
};

// A received frame body in one 64-byte-aligned buffer (the standard capnp framing
// starts at data()). Owned through a shared_ptr so that batches can view into it.
class InBuffer {
 public:
  virtual ~InBuffer() = default;
  virtual uint8_t* data() = 0;
  virtual size_t size() const = 0;
};

// Allocates receive buffers; a user allocator may hand out pinned memory.
class BufferAllocator {
 public:
  virtual ~BufferAllocator() = default;
  virtual std::shared_ptr<InBuffer> Allocate(size_t bytes) = 0;
};
// Plain 64-byte-aligned heap buffers, recycled through a small free list.
std::shared_ptr<BufferAllocator> DefaultBufferAllocator();
// Buffers from user functions (e.g. cudaHostAlloc / cudaFreeHost). `alloc` must
// return 64-byte-aligned memory or nullptr.
std::shared_ptr<BufferAllocator> FunctionBufferAllocator(std::function<void*(size_t)> alloc,
                                                         std::function<void(void*, size_t)> free);

struct InFrame {
  FrameHeader header;
  std::shared_ptr<InBuffer> body;
};

enum class Role : uint8_t { kClient = 0, kWorker = 1, kDispatcher = 2, kTool = 3 };

struct ChallengeMsg {
  std::string nonce;
  bool auth_required = false;
  std::string server_id;
};

struct HelloMsg {
  Role role = Role::kClient;
  std::string mac;
  std::string peer_id;
};

enum class WireLastBatch : uint8_t { kDrop = 0, kPad = 1, kKeep = 2 };

// A job given inline (point to point, no dispatcher).
struct JobSpecMsg {
  std::string dataset_path;
  std::string pipeline_json;
  uint64_t seed = 0;
  bool shuffle = true;
  int64_t epochs = 1;
  uint64_t first_epoch = 0;
  uint32_t batch_size = 0;
  WireLastBatch last_batch = WireLastBatch::kKeep;
  uint32_t worker_index = 0;
  uint32_t num_workers = 1;
  uint64_t fingerprint = 0;
};

struct OpenStreamMsg {
  bool by_name = false;
  JobSpecMsg job;         // when !by_name
  std::string job_name;   // when by_name
  std::string consumer_id;
  uint32_t credits = 0;
  uint64_t resume_epoch = 0;
  int64_t resume_batches_done = 0;
};

struct EndOfEpochMsg {
  uint64_t epoch = 0;
  int64_t batches = 0;
  int64_t samples = 0;
  bool last = false;
};

// Encoders.
OutFrame EncodeChallenge(const ChallengeMsg& m);
OutFrame EncodeHello(const HelloMsg& m);
OutFrame EncodeHelloOk(const std::string& server_id);
OutFrame EncodeOpenStream(const OpenStreamMsg& m);
OutFrame EncodeCredit(uint32_t n);
OutFrame EncodeEndOfEpoch(const EndOfEpochMsg& m);
OutFrame EncodeError(const Status& s);

// Decoders: each checks the frame's type and the message's structure (traversal and
// nesting limits) and returns InvalidArgument for anything malformed.
Result<ChallengeMsg> DecodeChallenge(const InFrame& f);
Result<HelloMsg> DecodeHello(const InFrame& f);
Result<std::string> DecodeHelloOk(const InFrame& f);
Result<OpenStreamMsg> DecodeOpenStream(const InFrame& f);
Result<uint32_t> DecodeCredit(const InFrame& f);
Result<EndOfEpochMsg> DecodeEndOfEpoch(const InFrame& f);
// The Status an Error frame carries (as a value: decoding itself succeeded).
struct ErrorMsg {
  Status status;
};
Result<ErrorMsg> DecodeError(const InFrame& f);

// A batch to send, its tensors in memory that `owner` keeps alive until the frame is
// destroyed (after it was written). images: rows x image_dims, in image_dtype.
struct BatchFrameInput {
  std::string job;
  BatchProvenance provenance;
  int64_t rows = 0;
  int64_t valid = 0;
  DType image_dtype = DType::kUint8;
  std::array<int64_t, 3> image_dims{};  // H,W,C (uint8 NHWC) or C,H,W (float32 NCHW)
  // Each tensor 8-byte aligned, and readable up to its next multiple of 8 bytes: the
  // frame references the memory as whole Cap'n Proto words (no copy), so it sends up
  // to 7 bytes past a tensor's end. Misaligned memory makes EncodeBatch throw.
  const void* images = nullptr;
  const int64_t* labels = nullptr;
  const int64_t* indices = nullptr;
  std::vector<SkippedSample> skipped;
  std::shared_ptr<void> owner;
};
OutFrame EncodeBatch(const BatchFrameInput& in);

// A Batch whose tensors view into the frame's buffer (zero copy): `keepalive` holds
// the buffer. Skipped samples reported by the worker are appended to *skipped.
// Checks that tensor shapes, dtypes and byte sizes agree.
Result<Batch> DecodeBatch(const InFrame& f, std::vector<SkippedSample>* skipped);

// Authentication: HMAC-SHA256(token, "ferry-hello-v1" || nonce).
std::string HelloMac(const std::string& token, const std::string& nonce);
bool MacEquals(const std::string& a, const std::string& b);  // constant time
std::string RandomNonce();                                    // 32 bytes from the OS
// The shared token: the file's contents (trailing whitespace trimmed) if `token_file`
// is set, else $FERRY_TOKEN, else empty (no authentication).
Result<std::string> LoadToken(const std::string& token_file);

}  // namespace ferry::internal

#endif  // FERRY_INTERNAL_WIRE_H_
