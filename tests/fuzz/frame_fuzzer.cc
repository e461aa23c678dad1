// libFuzzer target for the parsers of untrusted bytes on a Ferry socket: the frame
// header (ParseFrameHeader) and every message decoder (lib/wire), of the data plane
// and of the control plane. Input: a frame as it
// arrives, 16 header bytes then the body. The header is parsed as a receiver would;
// the body (rounded down to whole words, in a 64-byte-aligned buffer as
// FrameConnection reads it) goes through every decoder, whatever type the header
// names, so that each decoder sees every body. Whatever decodes must be consistent:
// a Batch's views lie inside the buffer and agree with their shapes (ASan checks the
// bytes themselves, by reading them all).
//
//   frame_fuzzer --write-seeds DIR   writes a seed corpus of valid frames and exits
//   frame_fuzzer [libFuzzer flags] CORPUS...   (see tests/fuzz/run.sh)
#include <sys/stat.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "ferry/buffer.h"
#include "wire/codec.h"
#include "wire/control.h"
#include "wire/frame.h"
#include "fuzz_util.h"

namespace {

using namespace ferry;        // NOLINT
using namespace ferry::wire;  // NOLINT

using fuzz::Flatten;
using fuzz::WriteSeed;

void CheckView(const TensorView& v, int rank, const InBuffer& buf) {
  FUZZ_CHECK(v.rank == rank);
  int64_t elements = 1;
  for (int i = 0; i < rank; ++i) {
    FUZZ_CHECK(v.shape[size_t(i)] >= 0);
    FUZZ_CHECK(!__builtin_mul_overflow(elements, v.shape[size_t(i)], &elements));
  }
  const size_t bytes = size_t(elements) * DTypeSize(v.dtype);
  FUZZ_CHECK(bytes == v.num_bytes());
  if (bytes == 0) return;
  const auto* base = const_cast<InBuffer&>(buf).data();
  const auto* p = static_cast<const uint8_t*>(v.data);
  FUZZ_CHECK(p >= base && p + bytes <= base + buf.size());
  volatile uint8_t sink = 0;
  for (size_t i = 0; i < bytes; ++i) sink = sink ^ p[i];
}

constexpr MessageType kAllTypes[] = {
    MessageType::kChallenge,        MessageType::kHello,     MessageType::kHelloOk,
    MessageType::kOpenStream,       MessageType::kCredit,    MessageType::kBatch,
    MessageType::kEndOfEpoch,       MessageType::kError,     MessageType::kRegisterWorker,
    MessageType::kRegisterWorkerOk, MessageType::kHeartbeat, MessageType::kHeartbeatOk,
    MessageType::kGetOrCreateJob,   MessageType::kJobInfo,   MessageType::kGetWorkers,
    MessageType::kWorkerList,       MessageType::kAckSplits, MessageType::kGetJobStatus,
    MessageType::kJobStatus,        MessageType::kRestoreConsumer, MessageType::kReportWorker,
    MessageType::kGetClusterStatus, MessageType::kClusterStatus, MessageType::kDrainWorker};

void DecodeAll(InFrame f) {
  for (MessageType t : kAllTypes) {
    f.header.type = t;
    switch (f.header.type) {
      case MessageType::kChallenge:
        (void)DecodeChallenge(f);
        break;
      case MessageType::kHello:
        (void)DecodeHello(f);
        break;
      case MessageType::kHelloOk:
        (void)DecodeHelloOk(f);
        break;
      case MessageType::kOpenStream:
        (void)DecodeOpenStream(f);
        break;
      case MessageType::kCredit:
        (void)DecodeCredit(f);
        break;
      case MessageType::kEndOfEpoch:
        (void)DecodeEndOfEpoch(f);
        break;
      case MessageType::kError: {
        Result<ErrorMsg> e = DecodeError(f);
        if (e.ok()) FUZZ_CHECK(!e->status.ok());  // an Error never decodes to OK
        break;
      }
      case MessageType::kBatch: {
        std::vector<SkippedSample> skipped;
        Result<Batch> b = DecodeBatch(f, &skipped);
        if (!b.ok()) {
          FUZZ_CHECK(b.status().code() == StatusCode::kInvalidArgument);
          break;
        }
        CheckView(b->images, 4, *f.body);
        CheckView(b->labels, 1, *f.body);
        CheckView(b->indices, 1, *f.body);
        FUZZ_CHECK(b->labels.dtype == DType::kInt64 && b->indices.dtype == DType::kInt64);
        FUZZ_CHECK(b->images.shape[0] == b->rows() && b->indices.shape[0] == b->rows());
        FUZZ_CHECK(b->valid >= 0 && b->valid <= b->rows());
        FUZZ_CHECK(size_t(b->skipped) == skipped.size());
        // Fields: every view inside the buffer; a ragged field's rows partition its
        // values; a dense one has a row each.
        for (const BatchField& fd : b->fields) {
          CheckView(fd.values, fd.values.rank, *f.body);
          FUZZ_CHECK(fd.values.rank >= 1 && fd.values.rank <= 4);
          if (fd.ragged()) {
            CheckView(fd.offsets, 1, *f.body);
            FUZZ_CHECK(fd.offsets.shape[0] == b->rows() + 1);
            for (int64_t r = 0; r < b->rows(); ++r) {
              const auto [lo, hi] = fd.range(r);
              FUZZ_CHECK(lo >= 0 && lo <= hi && hi <= fd.values.shape[0]);
            }
          } else {
            FUZZ_CHECK(fd.values.shape[0] == b->rows());
          }
        }
        break;
      }
      case MessageType::kRegisterWorker:
        (void)DecodeRegisterWorker(f);
        break;
      case MessageType::kRegisterWorkerOk:
        (void)DecodeRegisterWorkerOk(f);
        break;
      case MessageType::kHeartbeat:
        (void)DecodeHeartbeat(f);
        break;
      case MessageType::kHeartbeatOk:
        (void)DecodeHeartbeatOk(f);
        break;
      case MessageType::kGetOrCreateJob:
        (void)DecodeGetOrCreateJob(f);
        break;
      case MessageType::kJobInfo:
        (void)DecodeJobInfo(f);
        break;
      case MessageType::kGetWorkers:
        (void)DecodeGetWorkers(f);
        break;
      case MessageType::kWorkerList:
        (void)DecodeWorkerList(f);
        break;
      case MessageType::kAckSplits:
        (void)DecodeAckSplits(f);
        break;
      case MessageType::kGetJobStatus:
        (void)DecodeGetJobStatus(f);
        break;
      case MessageType::kJobStatus:
        (void)DecodeJobStatus(f);
        break;
      case MessageType::kRestoreConsumer:
        (void)DecodeRestoreConsumer(f);
        break;
      case MessageType::kReportWorker:
        (void)DecodeReportWorker(f);
        break;
      case MessageType::kGetClusterStatus:
        (void)DecodeGetClusterStatus(f);
        break;
      case MessageType::kDrainWorker:
        (void)DecodeDrainWorker(f);
        break;
      case MessageType::kClusterStatus:
        (void)DecodeClusterStatus(f);
        break;
      case MessageType::kInvalid:
        break;
    }
  }
}

void WriteSeeds(const std::string& dir) {
  ::mkdir(dir.c_str(), 0755);
  WriteSeed(dir, "challenge", Flatten(EncodeChallenge({std::string(32, '\x42'), true, "ferry-worker"})));
  WriteSeed(dir, "hello", Flatten(EncodeHello({Role::kClient, std::string(32, '\x17'), "trainer"})));
  WriteSeed(dir, "hello_ok", Flatten(EncodeHelloOk("ferry-worker")));
  OpenStreamMsg open;
  open.job.dataset = "/data/train";
  open.job.pipeline = PipelineSpec::ImagenetTrain();
  open.job.batch_size = 7;
  open.num_shards = 2;
  open.credits = 4;
  open.resume_epoch = 1;
  open.resume_batches_done = 3;
  WriteSeed(dir, "open_stream", Flatten(EncodeOpenStream(open)));
  OpenStreamMsg by_name;
  by_name.by_name = true;
  by_name.job_name = "job";
  WriteSeed(dir, "open_stream_by_name", Flatten(EncodeOpenStream(by_name)));
  WriteSeed(dir, "credit", Flatten(EncodeCredit(4)));
  WriteSeed(dir, "end_of_epoch", Flatten(EncodeEndOfEpoch({2, 10, 70, true})));
  WriteSeed(dir, "error", Flatten(EncodeError(Status::Unavailable("worker is draining"))));
  // Batches: uint8 NHWC with a skipped sample, and float32 NCHW with padding.
  alignas(64) static uint8_t images[2 * 4 * 4 * 3];
  alignas(64) static float fimages[3 * 3 * 2 * 2];
  alignas(64) static int64_t labels[3] = {1, 0, -1}, indices[3] = {5, 9, -1};
  for (size_t i = 0; i < sizeof images; ++i) images[i] = uint8_t(i * 7);
  for (size_t i = 0; i < sizeof fimages / sizeof(float); ++i) fimages[i] = float(i) / 3.f;
  BatchFrameInput in;
  in.job = "job";
  in.provenance.epoch = 1;
  in.provenance.batch_in_epoch = 2;
  in.rows = 2;
  in.valid = 2;
  in.image_dims = {4, 4, 3};
  in.images = images;
  in.labels = labels;
  in.indices = indices;
  in.skipped = {{3, "/data/train/a/bad.jpg", "corrupt JPEG"}};
  WriteSeed(dir, "batch_uint8", Flatten(EncodeBatch(in)));
  in.rows = 3;
  in.valid = 2;
  in.image_dtype = DType::kFloat32;
  in.image_dims = {3, 2, 2};
  in.images = fimages;
  in.skipped.clear();
  WriteSeed(dir, "batch_float32", Flatten(EncodeBatch(in)));
  // A detection batch: boxes, labels and masks ragged (2, 0 and 1 instances), image
  // ids dense.
  alignas(64) static float boxes[3 * 4] = {0, 0, 2, 2, 1, 1, 3, 3, 0.5f, 0, 4, 1};
  alignas(64) static int64_t box_labels[3] = {18, 3, 1}, offsets[4] = {0, 2, 2, 3}, ids[3] = {42, 7, -1};
  alignas(64) static uint8_t masks[3 * 2 * 2] = {1, 0, 0, 1, 1, 1, 0, 0, 0, 1, 1, 0};
  alignas(64) static int32_t tokens[3 * 4] = {1, 17, 2, 3, 1, 40, 41, 42, 1, 2, 3, 3}, token_lengths[4] = {3, 4, 2, 0};
  auto view = [](void* p, DType t, std::initializer_list<int64_t> shape) {
    TensorView v;
    v.data = p;
    v.dtype = t;
    v.rank = int(shape.size());
    int i = 0;
    for (int64_t d : shape) v.shape[size_t(i++)] = d;
    return v;
  };
  const TensorView off = view(offsets, DType::kInt64, {4});
  in.fields = {{"boxes", view(boxes, DType::kFloat32, {3, 4}), off},
               {"labels", view(box_labels, DType::kInt64, {3}), off},
               {"masks", view(masks, DType::kUint8, {3, 2, 2}), off},
               {"image_id", view(ids, DType::kInt64, {3}), {}},
               {"tokens", view(tokens, DType::kInt32, {3, 4}), {}},
               {"tokens_length", view(token_lengths, DType::kInt32, {3}), {}}};
  WriteSeed(dir, "batch_fields", Flatten(EncodeBatch(in)));
  in.fields.clear();

  // The control plane.
  NamedJob job{"job", open.job};
  job.job.num_samples = 100;
  WriteSeed(dir, "register_worker", Flatten(EncodeRegisterWorker({"w0", "127.0.0.1:7000"})));
  WriteSeed(dir, "register_worker_ok", Flatten(EncodeRegisterWorkerOk(500)));
  WriteSeed(dir, "heartbeat", Flatten(EncodeHeartbeat({"w0", false, true, false, {"job"}, {{"gone", "no such directory"}}})));
  HeartbeatOkMsg hb;
  hb.leases = {{"job", 0, 3, "trainer"}, {"job", 1, 0, ""}};
  hb.jobs = {job};
  WriteSeed(dir, "heartbeat_ok", Flatten(EncodeHeartbeatOk(hb)));
  WriteSeed(dir, "get_or_create_job", Flatten(EncodeGetOrCreateJob({job, "trainer"})));
  WriteSeed(dir, "job_info", Flatten(EncodeJobInfo(job)));
  NamedJob captions = job;
  captions.job.targets = {"text", "tokens"};
  captions.job.tokenizer = {"/models/spm.model", 16, true, true, -1};
  WriteSeed(dir, "job_info_tokens", Flatten(EncodeJobInfo(captions)));
  WriteSeed(dir, "get_workers", Flatten(EncodeGetWorkers()));
  WriteSeed(dir, "worker_list", Flatten(EncodeWorkerList({"127.0.0.1:7000", "127.0.0.1:7001"})));
  WriteSeed(dir, "ack_splits", Flatten(EncodeAckSplits({"job", "trainer", {{0, 1}, {0, 2}}})));
  WriteSeed(dir, "get_job_status", Flatten(EncodeGetJobStatus({"job", "trainer", 1})));
  WriteSeed(dir, "restore_consumer", Flatten(EncodeRestoreConsumer({"job", "trainer", 1, {{1, 0}, {1, 4}}})));
  WriteSeed(dir, "report_worker", Flatten(EncodeReportWorker("127.0.0.1:7001")));
  WriteSeed(dir, "get_cluster_status", Flatten(EncodeGetClusterStatus()));
  WriteSeed(dir, "drain_worker", Flatten(EncodeDrainWorker("10.0.0.7:7000")));
  {
    ClusterStatusMsg cs;
    cs.state_id = "0123456789abcdef";
    cs.workers.push_back({"w1", "127.0.0.1:7001", false, 4, 120, "", "", {{"gone", "no such directory"}}});
    JobSummaryMsg j;
    j.name = "job";
    j.dataset = "/data";
    j.consumers = {"rank-0", "rank-1"};
    j.ranks = 2;
    cs.jobs.push_back(j);
    WriteSeed(dir, "cluster_status", Flatten(EncodeClusterStatus(cs)));
  }
  JobStatusMsg st;
  st.my_splits = {1, 5};
  WriteSeed(dir, "job_status", Flatten(EncodeJobStatus(st)));
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  for (int i = 1; i + 1 < *argc; ++i) {
    if (std::strcmp((*argv)[i], "--write-seeds") == 0) {
      WriteSeeds((*argv)[i + 1]);
      std::exit(0);
    }
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < kFrameHeaderSize) return 0;
  FrameLimits limits;
  limits.max_control_bytes = 1 << 16;
  limits.max_batch_bytes = 1 << 20;
  Result<FrameHeader> h = ParseFrameHeader(data, limits);
  if (h.ok()) {
    FUZZ_CHECK(h->version == kProtocolVersion);
    FUZZ_CHECK(std::string(MessageTypeName(h->type)) != "Invalid");
    FUZZ_CHECK(h->length >= 8 && h->length % 8 == 0);
    FUZZ_CHECK(h->length <=
               (h->type == MessageType::kBatch ? limits.max_batch_bytes : limits.max_control_bytes));
  } else {
    const StatusCode c = h.status().code();
    FUZZ_CHECK(c == StatusCode::kInvalidArgument || c == StatusCode::kResourceExhausted);
  }
  if (size < kFrameHeaderSize + 8) return 0;
  static const std::shared_ptr<BufferAllocator> buffers = DefaultBufferAllocator();
  const size_t body = (size - kFrameHeaderSize) / 8 * 8;
  InFrame f;
  f.header.length = body;
  f.body = buffers->Allocate(body);
  FUZZ_CHECK(f.body != nullptr);
  std::memcpy(f.body->data(), data + kFrameHeaderSize, body);
  DecodeAll(std::move(f));
  return 0;
}
