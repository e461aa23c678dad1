// The data plane's codec (schemas/ferry.capnp): plain C++ structs in, frames out,
// and back. With control.h, the only code that touches generated Cap'n Proto
// accessors; everything else sees these structs.
//
// Decoders check the frame's type and the message's structure (traversal and nesting
// limits, enum ranges, tensor shapes against their bytes) and return InvalidArgument
// for anything malformed: a peer's bad bytes never throw past this layer.
#ifndef FERRY_WIRE_CODEC_H_
#define FERRY_WIRE_CODEC_H_

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ferry/batch.h"
#include "ferry/iterator.h"
#include "ferry/job.h"
#include "ferry/status.h"
#include "wire/message.h"

namespace ferry::wire {

enum class Role : uint8_t { kClient = 0, kWorker = 1, kDispatcher = 2, kTool = 3 };
const char* RoleName(Role r);

struct ChallengeMsg {
  std::string nonce;
  bool auth_required = false;
  std::string server_id;
};

struct HelloMsg {
  Role role = Role::kClient;
  std::string mac;
  std::string peer_id;
  std::string nonce = {};  // the client's
};

struct HelloOkMsg {
  std::string server_id;
  std::string state_id;  // a dispatcher's work dir identity; empty from workers
  std::string mac = {};   // the server's proof
};

struct OpenStreamMsg {
  bool by_name = false;
  JobSpec job;            // when !by_name (point to point)
  std::string job_name;   // when by_name (a dispatcher job)
  std::string consumer_id;
  uint32_t credits = 0;
  // Point to point: this stream's share of each epoch, and where it starts.
  uint32_t shard_index = 0;
  uint32_t num_shards = 1;
  uint64_t first_epoch = 0;
  uint32_t rank = 0;  // a ranked job (job.num_consumers > 0): the rank this stream serves
  uint64_t job_config = 0;  // by name: the client's JobSpec::ConfigFingerprint() (0: unchecked)
  uint64_t resume_epoch = 0;
  int64_t resume_batches_done = 0;
};

struct EndOfEpochMsg {
  uint64_t epoch = 0;
  int64_t batches = 0;
  int64_t samples = 0;
  bool last = false;
};

// The Status an Error frame carries (as a value: decoding itself succeeded).
struct ErrorMsg {
  Status status;
};

OutFrame EncodeChallenge(const ChallengeMsg& m);
OutFrame EncodeHello(const HelloMsg& m);
OutFrame EncodeHelloOk(const std::string& server_id, const std::string& state_id = "", const std::string& mac = "");
OutFrame EncodeOpenStream(const OpenStreamMsg& m);
OutFrame EncodeCredit(uint32_t n);
OutFrame EncodeEndOfEpoch(const EndOfEpochMsg& m);
OutFrame EncodeError(const Status& s);

Result<ChallengeMsg> DecodeChallenge(const InFrame& f);
Result<HelloMsg> DecodeHello(const InFrame& f);
Result<HelloOkMsg> DecodeHelloOk(const InFrame& f);
Result<OpenStreamMsg> DecodeOpenStream(const InFrame& f);
Result<uint32_t> DecodeCredit(const InFrame& f);
Result<EndOfEpochMsg> DecodeEndOfEpoch(const InFrame& f);
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
  const float* targets = nullptr;  // rows x num_classes, when num_classes > 0 (a batch op's soft targets)
  int64_t num_classes = 0;
  std::vector<SkippedSample> skipped;
  // The job's per-sample fields (views: each 8-byte aligned, readable to a multiple
  // of 8 bytes, kept alive by `owner`).
  std::vector<BatchField> fields;
  std::shared_ptr<void> owner;
  // User code: the JSON that rebuilds the batch from `user_data` (8-byte aligned,
  // readable to a multiple of 8 bytes, kept alive by `owner`). "": not user code.
  std::string structure;
  const void* user_data = nullptr;
  size_t user_bytes = 0;
  uint64_t listing = 0;        // point to point: the worker's listing (see schemas/ferry.capnp)
  int64_t listed_samples = 0;
};
OutFrame EncodeBatch(const BatchFrameInput& in);

// What a point-to-point worker says it lists (Batch.listing; 0 when not sent).
struct BatchListing {
  uint64_t fingerprint = 0;
  int64_t samples = 0;
};

// A Batch whose tensors view into the frame's buffer (zero copy): `keepalive` holds
// the buffer. Skipped samples reported by the worker are appended to *skipped.
// Checks that tensor shapes, dtypes and byte sizes agree.
Result<Batch> DecodeBatch(const InFrame& f, std::vector<SkippedSample>* skipped, BatchListing* listing = nullptr);

// A JobSpec as bytes (one Cap'n Proto message, the wire's Job struct): how the
// dispatcher's journal stores jobs, so that a job has one encoding everywhere.
std::string EncodeJobBytes(const JobSpec& job);
Result<JobSpec> DecodeJobBytes(const std::string& bytes);

}  // namespace ferry::wire

#endif  // FERRY_WIRE_CODEC_H_
