// Tests of the frame header and the wire codec (lib/wire): every message round-trips
// through the bytes an OutFrame puts on the wire, batches decode as views into the
// received buffer (zero copy), and malformed input of every kind is refused with a
// Status, never a crash (run under ASan/UBSan too). Also the authentication helpers.
#include "ferry/internal/wire.h"

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "ferry.capnp.h"  // only to build malformed messages the encoders cannot produce
#include "ferry/internal/control.h"
#include "ferry/internal/frame.h"
#include "testutil.h"

namespace ferry::internal {
namespace {

using testing::TempDir;
using testing::WriteFile;

// ---------------------------------------------------------------------------------
// Helpers

std::string Flatten(const OutFrame& f) {
  std::string out;
  for (const ByteRange& r : f.ranges()) out.append(static_cast<const char*>(r.data), r.size);
  return out;
}

std::shared_ptr<InBuffer> AlignedCopy(const void* data, size_t size) {
  std::shared_ptr<InBuffer> b = DefaultBufferAllocator()->Allocate(size);
  if (size > 0) std::memcpy(b->data(), data, size);
  return b;
}

// What a receiver makes of an OutFrame's bytes: the header parsed, the body copied
// into one 64-byte-aligned buffer.
InFrame ToInFrame(const OutFrame& out) {
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
InFrame RawFrame(MessageType type, const std::string& body) {
  InFrame f;
  f.header.type = type;
  f.header.length = body.size();
  f.body = AlignedCopy(body.data(), body.size());
  return f;
}

std::string Header(const char magic[4], uint16_t version, uint16_t type, uint64_t length) {
  uint8_t h[kFrameHeaderSize];
  std::memcpy(h, magic, 4);
  h[4] = uint8_t(version);
  h[5] = uint8_t(version >> 8);
  h[6] = uint8_t(type);
  h[7] = uint8_t(type >> 8);
  for (int i = 0; i < 8; ++i) h[8 + i] = uint8_t(length >> (8 * i));
  return std::string(reinterpret_cast<const char*>(h), sizeof h);
}

Result<FrameHeader> Parse(const std::string& header, const FrameLimits& limits = FrameLimits{}) {
  return ParseFrameHeader(reinterpret_cast<const uint8_t*>(header.data()), limits);
}

// Every decoder, on the given frame (the frame's type picks nothing: all are tried).
std::vector<Status> DecodeWithAll(const InFrame& f) {
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
Status DecodeAs(MessageType type, const InFrame& f) {
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
    case MessageType::kInvalid:
      break;
  }
  return Status::Internal("no decoder");
}

// Every message type there is: the data plane (1..8), then the control plane (16..28).
constexpr MessageType kAllTypes[] = {
    MessageType::kChallenge,        MessageType::kHello,     MessageType::kHelloOk,
    MessageType::kOpenStream,       MessageType::kCredit,    MessageType::kBatch,
    MessageType::kEndOfEpoch,       MessageType::kError,     MessageType::kRegisterWorker,
    MessageType::kRegisterWorkerOk, MessageType::kHeartbeat, MessageType::kHeartbeatOk,
    MessageType::kGetOrCreateJob,   MessageType::kJobInfo,   MessageType::kGetWorkers,
    MessageType::kWorkerList,       MessageType::kAckSplits, MessageType::kGetJobStatus,
    MessageType::kJobStatus,        MessageType::kRestoreConsumer, MessageType::kReportWorker};

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

bool Inside(const void* p, size_t n, const InBuffer& buf) {
  const auto* b = static_cast<const uint8_t*>(const_cast<InBuffer&>(buf).data());
  const auto* q = static_cast<const uint8_t*>(p);
  return q >= b && q + n <= b + buf.size();
}

// ---------------------------------------------------------------------------------
// Frame header

TEST(WireFrameHeaderTest, RoundTripsAndParses) {
  for (MessageType t : kAllTypes) {
    uint8_t h[kFrameHeaderSize];
    EncodeFrameHeader(t, 4096, h);
    Result<FrameHeader> p = ParseFrameHeader(h, FrameLimits{});
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    EXPECT_EQ(p->type, t);
    EXPECT_EQ(p->version, kProtocolVersion);
    EXPECT_EQ(p->length, 4096u);
  }
  // Little-endian on the wire, whatever the host.
  uint8_t h[kFrameHeaderSize];
  EncodeFrameHeader(MessageType::kBatch, 0x0102030405060708ull, h);
  EXPECT_EQ(std::string(reinterpret_cast<char*>(h), 4), "FRY1");
  EXPECT_EQ(h[4], 1);
  EXPECT_EQ(h[5], 0);
  EXPECT_EQ(h[6], 6);
  EXPECT_EQ(h[7], 0);
  EXPECT_EQ(h[8], 0x08);
  EXPECT_EQ(h[15], 0x01);
}

TEST(WireFrameHeaderTest, RefusesWrongMagic) {
  for (const char* magic : {"FRY2", "fry1", "\0\0\0\0", "GET "}) {
    Result<FrameHeader> p = Parse(Header(magic, 1, 2, 64));
    ASSERT_FALSE(p.ok()) << magic;
    EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(p.status().message().find("magic"), std::string::npos) << p.status().ToString();
  }
}

TEST(WireFrameHeaderTest, RefusesWrongVersion) {
  for (uint16_t v : {0, 2, 0x100, 0xFFFF}) {
    Result<FrameHeader> p = Parse(Header("FRY1", v, 2, 64));
    ASSERT_FALSE(p.ok()) << v;
    EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(p.status().message().find("version"), std::string::npos) << p.status().ToString();
  }
}

TEST(WireFrameHeaderTest, RefusesUnknownTypes) {
  // Between the data plane's types (1..8) and the control plane's (16..28), and beyond.
  for (uint16_t t : {0, 9, 12, 15, 29, 99, 0x0100, 0xFFFF}) {
    Result<FrameHeader> p = Parse(Header("FRY1", 1, t, 64));
    ASSERT_FALSE(p.ok()) << t;
    EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(p.status().message().find("unknown message type"), std::string::npos) << p.status().ToString();
  }
}

TEST(WireFrameHeaderTest, LimitsArePerType) {
  FrameLimits limits;
  limits.max_control_bytes = 1024;
  limits.max_batch_bytes = 1 << 20;
  // Control messages (every type but Batch): up to max_control_bytes.
  for (MessageType type : kAllTypes) {
    const uint16_t t = uint16_t(type);
    if (type == MessageType::kBatch) continue;
    EXPECT_TRUE(Parse(Header("FRY1", 1, t, 1024), limits).ok()) << t;
    Result<FrameHeader> p = Parse(Header("FRY1", 1, t, 1032), limits);
    ASSERT_FALSE(p.ok()) << t;
    EXPECT_EQ(p.status().code(), StatusCode::kResourceExhausted) << p.status().ToString();
    EXPECT_NE(p.status().message().find("exceeds the limit"), std::string::npos);
  }
  // A Batch may be larger than a control message, up to its own limit.
  EXPECT_TRUE(Parse(Header("FRY1", 1, 6, 1032), limits).ok());
  EXPECT_TRUE(Parse(Header("FRY1", 1, 6, 1 << 20), limits).ok());
  Result<FrameHeader> p = Parse(Header("FRY1", 1, 6, (1 << 20) + 8), limits);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::kResourceExhausted);
  // Absurd lengths: no overflow anywhere.
  p = Parse(Header("FRY1", 1, 6, uint64_t{64} << 30));
  EXPECT_EQ(p.status().code(), StatusCode::kResourceExhausted);
  p = Parse(Header("FRY1", 1, 6, ~uint64_t{0}));
  EXPECT_EQ(p.status().code(), StatusCode::kResourceExhausted);
  p = Parse(Header("FRY1", 1, 2, ~uint64_t{0} - 7));
  EXPECT_EQ(p.status().code(), StatusCode::kResourceExhausted);
}

TEST(WireFrameHeaderTest, RefusesLengthsThatAreNotWholeWords) {
  for (uint64_t len : {0, 1, 4, 7, 12, 65, 1023}) {
    Result<FrameHeader> p = Parse(Header("FRY1", 1, 5, len));
    ASSERT_FALSE(p.ok()) << len;
    EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument) << len;
  }
  EXPECT_TRUE(Parse(Header("FRY1", 1, 5, 8)).ok());
}

// ---------------------------------------------------------------------------------
// Control messages

TEST(WireCodecTest, ChallengeRoundTrips) {
  ChallengeMsg m{RandomNonce(), true, "worker-7"};
  OutFrame out = EncodeChallenge(m);
  EXPECT_EQ(out.type(), MessageType::kChallenge);
  Result<ChallengeMsg> d = DecodeChallenge(ToInFrame(out));
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->nonce, m.nonce);
  EXPECT_EQ(d->nonce.size(), 32u);
  EXPECT_TRUE(d->auth_required);
  EXPECT_EQ(d->server_id, "worker-7");

  d = DecodeChallenge(ToInFrame(EncodeChallenge({"", false, ""})));
  ASSERT_TRUE(d.ok());
  EXPECT_FALSE(d->auth_required);
  EXPECT_EQ(d->nonce, "");
}

TEST(WireCodecTest, HelloRoundTrips) {
  for (Role role : {Role::kClient, Role::kWorker, Role::kDispatcher, Role::kTool}) {
    HelloMsg m{role, HelloMac("tok", "nonce"), "trainer-3"};
    Result<HelloMsg> d = DecodeHello(ToInFrame(EncodeHello(m)));
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    EXPECT_EQ(d->role, role);
    EXPECT_EQ(d->mac, m.mac);
    EXPECT_EQ(d->peer_id, "trainer-3");
  }
  // Binary bytes (NULs) survive in Data fields.
  HelloMsg m{Role::kClient, std::string("\0\x01\xff\0", 4), std::string("a\0b", 3)};
  Result<HelloMsg> d = DecodeHello(ToInFrame(EncodeHello(m)));
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->mac, m.mac);
}

TEST(WireCodecTest, HelloOkRoundTrips) {
  Result<std::string> d = DecodeHelloOk(ToInFrame(EncodeHelloOk("ferry-worker-1")));
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(*d, "ferry-worker-1");
}

TEST(WireCodecTest, OpenStreamRoundTripsInline) {
  OpenStreamMsg m;
  m.job.dataset_path = "/datasets/imagenet/train";
  m.job.pipeline_json = R"({"ops":[{"op":"random_resized_crop","size":32}]})";
  m.job.seed = 0xDEADBEEFCAFEull;
  m.job.shuffle = false;
  m.job.epochs = -1;
  m.job.first_epoch = 7;
  m.job.batch_size = 256;
  m.job.last_batch = WireLastBatch::kPad;
  m.job.worker_index = 3;
  m.job.num_workers = 5;
  m.job.fingerprint = 0x1234567890ABCDEFull;
  m.consumer_id = "trainer-0";
  m.credits = 9;
  m.resume_epoch = 8;
  m.resume_batches_done = 42;
  Result<OpenStreamMsg> d = DecodeOpenStream(ToInFrame(EncodeOpenStream(m)));
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_FALSE(d->by_name);
  EXPECT_EQ(d->job.dataset_path, m.job.dataset_path);
  EXPECT_EQ(d->job.pipeline_json, m.job.pipeline_json);
  EXPECT_EQ(d->job.seed, m.job.seed);
  EXPECT_EQ(d->job.shuffle, false);
  EXPECT_EQ(d->job.epochs, -1);
  EXPECT_EQ(d->job.first_epoch, 7u);
  EXPECT_EQ(d->job.batch_size, 256u);
  EXPECT_EQ(d->job.last_batch, WireLastBatch::kPad);
  EXPECT_EQ(d->job.worker_index, 3u);
  EXPECT_EQ(d->job.num_workers, 5u);
  EXPECT_EQ(d->job.fingerprint, m.job.fingerprint);
  EXPECT_EQ(d->consumer_id, "trainer-0");
  EXPECT_EQ(d->credits, 9u);
  EXPECT_EQ(d->resume_epoch, 8u);
  EXPECT_EQ(d->resume_batches_done, 42);

  for (WireLastBatch lb : {WireLastBatch::kDrop, WireLastBatch::kKeep}) {
    m.job.last_batch = lb;
    d = DecodeOpenStream(ToInFrame(EncodeOpenStream(m)));
    ASSERT_TRUE(d.ok());
    EXPECT_EQ(d->job.last_batch, lb);
  }
}

TEST(WireCodecTest, OpenStreamRoundTripsByName) {
  OpenStreamMsg m;
  m.by_name = true;
  m.job_name = "imagenet-epoch-run";
  m.credits = 1;
  Result<OpenStreamMsg> d = DecodeOpenStream(ToInFrame(EncodeOpenStream(m)));
  ASSERT_TRUE(d.ok());
  EXPECT_TRUE(d->by_name);
  EXPECT_EQ(d->job_name, "imagenet-epoch-run");
  EXPECT_EQ(d->credits, 1u);
}

TEST(WireCodecTest, CreditRoundTrips) {
  for (uint32_t n : {0u, 1u, 4u, 0xFFFFFFFFu}) {
    Result<uint32_t> d = DecodeCredit(ToInFrame(EncodeCredit(n)));
    ASSERT_TRUE(d.ok());
    EXPECT_EQ(*d, n);
  }
}

TEST(WireCodecTest, EndOfEpochRoundTrips) {
  EndOfEpochMsg m{12, 5005, 1281167, true};
  Result<EndOfEpochMsg> d = DecodeEndOfEpoch(ToInFrame(EncodeEndOfEpoch(m)));
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->epoch, 12u);
  EXPECT_EQ(d->batches, 5005);
  EXPECT_EQ(d->samples, 1281167);
  EXPECT_TRUE(d->last);
}

TEST(WireCodecTest, ErrorRoundTripsEveryCode) {
  for (int c = 1; c <= int(StatusCode::kCancelled); ++c) {
    const Status s(StatusCode(c), "message " + std::to_string(c));
    Result<ErrorMsg> d = DecodeError(ToInFrame(EncodeError(s)));
    ASSERT_TRUE(d.ok());
    EXPECT_EQ(d->status.code(), s.code());
    EXPECT_EQ(d->status.message(), s.message());
  }
  // Codes this build does not know (and OK, which an Error must not carry) become
  // Internal rather than an out-of-range enum.
  for (int c : {0, 13, 200, 255}) {
    capnp::MallocMessageBuilder b;
    auto r = b.initRoot<wire::schema::Error>();
    r.setCode(uint8_t(c));
    r.setMessage("x");
    const kj::Array<capnp::word> words = capnp::messageToFlatArray(b);
    const kj::ArrayPtr<const kj::byte> bytes = words.asBytes();
    Result<ErrorMsg> d = DecodeError(RawFrame(MessageType::kError, std::string(bytes.begin(), bytes.end())));
    ASSERT_TRUE(d.ok());
    EXPECT_EQ(d->status.code(), StatusCode::kInternal) << c;
    EXPECT_FALSE(d->status.ok());
  }
}

TEST(WireCodecTest, DecodersRefuseTheWrongType) {
  std::vector<OutFrame> frames;
  frames.push_back(EncodeChallenge({"n", false, "s"}));
  frames.push_back(EncodeHello({Role::kClient, "", "p"}));
  frames.push_back(EncodeHelloOk("s"));
  frames.push_back(EncodeOpenStream({}));
  frames.push_back(EncodeCredit(1));
  frames.push_back(EncodeEndOfEpoch({}));
  frames.push_back(EncodeError(Status::Internal("x")));
  for (const OutFrame& out : frames) {
    const InFrame f = ToInFrame(out);
    const std::vector<Status> st = DecodeWithAll(f);
    int ok = 0;
    for (const Status& s : st) {
      if (s.ok()) {
        ++ok;
      } else {
        EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
        EXPECT_NE(s.message().find("expected"), std::string::npos) << s.ToString();
      }
    }
    EXPECT_EQ(ok, 1) << MessageTypeName(out.type()) << ": exactly its own decoder accepts it";
  }
}

// ---------------------------------------------------------------------------------
// Batches

struct TestBatch {
  std::unique_ptr<AlignedBytes> images, labels, indices;
  BatchFrameInput in;
};

TestBatch MakeBatch(DType dtype, std::array<int64_t, 3> dims, int64_t rows, int64_t valid) {
  TestBatch t;
  const size_t sample = size_t(dims[0] * dims[1] * dims[2]) * DTypeSize(dtype);
  t.images = std::make_unique<AlignedBytes>(sample * size_t(rows));
  t.labels = std::make_unique<AlignedBytes>(sizeof(int64_t) * size_t(rows));
  t.indices = std::make_unique<AlignedBytes>(sizeof(int64_t) * size_t(rows));
  std::mt19937_64 rng(uint64_t(rows) * 31 + size_t(dtype));
  if (dtype == DType::kFloat32) {
    auto* f = t.images->as<float>();
    for (size_t i = 0; i < t.images->size / 4; ++i) f[i] = float(int64_t(rng() % 2001) - 1000) / 7.f;
  } else {
    auto* u = t.images->as<uint8_t>();
    for (size_t i = 0; i < t.images->size; ++i) u[i] = uint8_t(rng());
  }
  for (int64_t r = 0; r < rows; ++r) {
    t.labels->as<int64_t>()[r] = r < valid ? int64_t(rng() % 1000) : -1;
    t.indices->as<int64_t>()[r] = r < valid ? int64_t(rng() % 1000000) : -1;
  }
  t.in.job = "job-1";
  t.in.provenance.epoch = 3;
  t.in.provenance.batch_in_epoch = 17;
  t.in.provenance.split = 2;
  t.in.provenance.batch_in_split = 5;
  t.in.provenance.batches_in_split = 9;
  t.in.provenance.last_in_epoch = true;
  t.in.rows = rows;
  t.in.valid = valid;
  t.in.image_dtype = dtype;
  t.in.image_dims = dims;
  t.in.images = t.images->p;
  t.in.labels = t.labels->as<int64_t>();
  t.in.indices = t.indices->as<int64_t>();
  return t;
}

void ExpectBatchRoundTrips(DType dtype, std::array<int64_t, 3> dims, int64_t rows, int64_t valid) {
  SCOPED_TRACE(std::string(DTypeName(dtype)) + " rows=" + std::to_string(rows));
  TestBatch t = MakeBatch(dtype, dims, rows, valid);
  t.in.skipped = {{5, "/d/a/bad.jpg", "corrupt JPEG"}, {-1, "/d/b/x", "not an image"}};
  auto owner = std::make_shared<int>(1);
  t.in.owner = owner;
  OutFrame out = EncodeBatch(t.in);
  t.in.owner.reset();
  EXPECT_EQ(out.type(), MessageType::kBatch);
  EXPECT_EQ(owner.use_count(), 2) << "the frame keeps the batch memory alive";
  // Zero copy on send: the pixels go out from the caller's memory.
  bool images_by_reference = false;
  for (const ByteRange& r : out.ranges()) images_by_reference |= r.data == t.images->p;
  EXPECT_TRUE(images_by_reference || rows == 0);

  const InFrame f = ToInFrame(out);
  std::vector<SkippedSample> skipped;
  Result<Batch> b = DecodeBatch(f, &skipped);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  out = OutFrame();
  EXPECT_EQ(owner.use_count(), 1) << "destroying the frame releases the batch memory";

  EXPECT_EQ(b->rows(), rows);
  EXPECT_EQ(b->valid_rows(), valid);
  EXPECT_EQ(b->provenance.epoch, 3u);
  EXPECT_EQ(b->provenance.batch_in_epoch, 17);
  EXPECT_EQ(b->provenance.split, 2);
  EXPECT_EQ(b->provenance.batch_in_split, 5);
  EXPECT_EQ(b->provenance.batches_in_split, 9);
  EXPECT_TRUE(b->provenance.last_in_epoch);
  EXPECT_EQ(b->skipped, 2);
  ASSERT_EQ(skipped.size(), 2u);
  EXPECT_EQ(skipped[0].index, 5);
  EXPECT_EQ(skipped[0].path, "/d/a/bad.jpg");
  EXPECT_EQ(skipped[0].reason, "corrupt JPEG");
  EXPECT_EQ(skipped[1].index, -1);

  EXPECT_EQ(b->images.dtype, dtype);
  ASSERT_EQ(b->images.rank, 4);
  EXPECT_EQ(b->images.shape[0], rows);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(b->images.shape[size_t(i) + 1], dims[size_t(i)]);
  EXPECT_EQ(b->labels.dtype, DType::kInt64);
  EXPECT_EQ(b->indices.dtype, DType::kInt64);
  ASSERT_EQ(b->images.num_bytes(), t.images->size);
  // Zero copy on receive: every view lies inside the received buffer, and the batch
  // keeps that buffer alive.
  EXPECT_EQ(b->keepalive, std::static_pointer_cast<void>(f.body));
  for (const TensorView* v : {&b->images, &b->labels, &b->indices}) {
    if (v->num_bytes() == 0) continue;
    EXPECT_TRUE(Inside(v->data, v->num_bytes(), *f.body));
    EXPECT_EQ(reinterpret_cast<uintptr_t>(v->data) % 8, 0u);
  }
  if (rows > 0) {
    EXPECT_EQ(std::memcmp(b->images.data, t.images->p, t.images->size), 0);
    EXPECT_EQ(std::memcmp(b->labels.data, t.labels->p, t.labels->size), 0);
    EXPECT_EQ(std::memcmp(b->indices.data, t.indices->p, t.indices->size), 0);
  }
  for (int64_t r = valid; r < rows; ++r) EXPECT_EQ(b->indices.as<int64_t>()[r], -1);
}

TEST(WireBatchTest, Uint8NhwcRoundTripsWithoutCopies) {
  ExpectBatchRoundTrips(DType::kUint8, {32, 32, 3}, 7, 7);
}

TEST(WireBatchTest, Float32NchwRoundTripsWithoutCopies) {
  ExpectBatchRoundTrips(DType::kFloat32, {3, 24, 24}, 5, 3);
}

TEST(WireBatchTest, OddSizesAndEmptyBatches) {
  ExpectBatchRoundTrips(DType::kUint8, {5, 3, 1}, 3, 3);  // 45 image bytes: not whole words
  ExpectBatchRoundTrips(DType::kUint8, {1, 1, 1}, 1, 1);
  ExpectBatchRoundTrips(DType::kUint8, {8, 8, 3}, 0, 0);  // all of it skipped
}

TEST(WireBatchTest, LargeBatchIsExact) {
  ExpectBatchRoundTrips(DType::kFloat32, {3, 224, 224}, 4, 4);  // 2.4 MB: several segments
}

// ---------------------------------------------------------------------------------
// Malformed bodies

TEST(WireMalformedTest, TruncatedSegmentTable) {
  // Says 5 segments (count - 1 = 4) but ends before their sizes.
  std::string body(8, '\0');
  body[0] = 4;
  body[4] = 1;
  for (MessageType t : kAllTypes) {
    const Status s = DecodeAs(t, RawFrame(t, body));
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << MessageTypeName(t) << ": " << s.ToString();
  }
  // A segment count so large that the table alone would not fit in memory.
  std::string huge(16, '\0');
  std::memset(huge.data(), 0xFF, 4);
  for (MessageType t : kAllTypes)
    EXPECT_EQ(DecodeAs(t, RawFrame(t, huge)).code(), StatusCode::kInvalidArgument);
}

TEST(WireMalformedTest, SegmentSizesExceedTheBody) {
  for (uint32_t words : {3u, 1000u, 0xFFFFFFFFu}) {
    std::string body(24, '\0');  // room for 2 words after the table
    body[0] = 0;                 // one segment
    std::memcpy(&body[4], &words, 4);
    for (MessageType t : kAllTypes) {
      const Status s = DecodeAs(t, RawFrame(t, body));
      EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << MessageTypeName(t) << " words=" << words;
    }
  }
  // A real message cut short.
  const std::string whole = Flatten(EncodeOpenStream({})).substr(kFrameHeaderSize);
  for (size_t cut = 8; cut < whole.size(); cut += 8) {
    EXPECT_EQ(DecodeOpenStream(RawFrame(MessageType::kOpenStream, whole.substr(0, cut))).status().code(),
              StatusCode::kInvalidArgument)
        << cut;
  }
}

TEST(WireMalformedTest, BodiesThatAreNotWholeWordsOrMissing) {
  for (MessageType t : kAllTypes) {
    EXPECT_EQ(DecodeAs(t, RawFrame(t, std::string(12, '\0'))).code(), StatusCode::kInvalidArgument);
    InFrame f;
    f.header.type = t;  // no body at all
    EXPECT_EQ(DecodeAs(t, f).code(), StatusCode::kInvalidArgument);
  }
}

TEST(WireMalformedTest, RandomBytesNeverCrash) {
  std::mt19937_64 rng(12345);
  int refused = 0, total = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    const size_t words = 1 + rng() % 40;
    std::string body(words * 8, '\0');
    for (char& c : body) c = char(rng());
    // Keep the segment table plausible half the time so that decoding gets further.
    if (iter % 2 == 0) {
      const uint32_t count_minus_1 = 0, size = uint32_t(words - 1);
      std::memcpy(&body[0], &count_minus_1, 4);
      std::memcpy(&body[4], &size, 4);
    }
    for (MessageType t : kAllTypes) {
      const Status s = DecodeAs(t, RawFrame(t, body));
      ++total;
      if (!s.ok()) {
        ++refused;
        EXPECT_TRUE(s.code() == StatusCode::kInvalidArgument || s.code() == StatusCode::kFailedPrecondition)
            << s.ToString();
      }
    }
  }
  EXPECT_GT(refused, total / 4);
}

TEST(WireMalformedTest, BitFlipsOfRealFramesNeverCrash) {
  std::vector<OutFrame> frames;
  frames.push_back(EncodeChallenge({RandomNonce(), true, "w"}));
  frames.push_back(EncodeOpenStream({}));
  frames.push_back(EncodeError(Status::Unavailable("draining")));
  TestBatch t = MakeBatch(DType::kUint8, {4, 4, 3}, 3, 2);
  t.in.skipped = {{1, "p", "r"}};
  frames.push_back(EncodeBatch(t.in));
  std::mt19937_64 rng(7);
  for (const OutFrame& out : frames) {
    const std::string body = Flatten(out).substr(kFrameHeaderSize);
    for (int iter = 0; iter < 500; ++iter) {
      std::string b = body;
      for (int k = 0; k < 3; ++k) b[rng() % b.size()] ^= char(1 << (rng() % 8));
      const Status s = DecodeAs(out.type(), RawFrame(out.type(), b));
      if (!s.ok()) {
        EXPECT_TRUE(s.code() == StatusCode::kInvalidArgument || s.code() == StatusCode::kFailedPrecondition)
            << s.ToString();
      }
    }
  }
}

// Builds a Batch message by hand (shapes, dtypes and sizes of our choosing).
struct TensorSpec {
  TensorSpec(uint16_t d, std::initializer_list<int64_t> s, size_t b) : dtype(d), rank(s.size()), bytes(b) {
    std::copy(s.begin(), s.end(), shape.begin());
  }
  uint16_t dtype;
  size_t rank;
  std::array<int64_t, 5> shape{};
  size_t bytes;
};

InFrame HandMadeBatch(const TensorSpec& images, const TensorSpec& labels, const TensorSpec& indices,
                      int64_t valid) {
  capnp::MallocMessageBuilder b;
  auto r = b.initRoot<wire::schema::Batch>();
  auto fill = [](wire::schema::Tensor::Builder t, const TensorSpec& s) {
    t.setDtype(wire::schema::DType(s.dtype));
    auto shape = t.initShape(unsigned(s.rank));
    for (unsigned i = 0; i < s.rank; ++i) shape.set(i, s.shape[i]);
    t.initData(unsigned(s.bytes));
  };
  fill(r.initImages(), images);
  fill(r.initLabels(), labels);
  fill(r.initIndices(), indices);
  r.setValid(valid);
  const kj::Array<capnp::word> words = capnp::messageToFlatArray(b);
  const kj::ArrayPtr<const kj::byte> bytes = words.asBytes();
  return RawFrame(MessageType::kBatch, std::string(bytes.begin(), bytes.end()));
}

Status DecodeHandMade(const TensorSpec& images, const TensorSpec& labels, const TensorSpec& indices,
                      int64_t valid) {
  return DecodeAs(MessageType::kBatch, HandMadeBatch(images, labels, indices, valid));
}

TEST(WireMalformedTest, BatchesWhoseTensorsDisagree) {
  const TensorSpec labels{1, {2}, 16}, indices{1, {2}, 16};
  // The well-formed baseline decodes.
  EXPECT_TRUE(DecodeHandMade({0, {2, 4, 4, 3}, 96}, labels, indices, 2).ok());
  EXPECT_TRUE(DecodeHandMade({2, {2, 3, 4, 4}, 384}, labels, indices, 1).ok());

  struct Case {
    const char* what;
    TensorSpec images, labels, indices;
    int64_t valid;
  };
  const std::vector<Case> cases = {
      {"images data shorter than the shape", {0, {2, 4, 4, 3}, 95}, labels, indices, 2},
      {"images data longer than the shape", {0, {2, 4, 4, 3}, 97}, labels, indices, 2},
      {"float32 images sized as uint8", {2, {2, 3, 4, 4}, 96}, labels, indices, 2},
      {"labels data disagrees", {0, {2, 4, 4, 3}, 96}, {1, {2}, 8}, indices, 2},
      {"indices data disagrees", {0, {2, 4, 4, 3}, 96}, labels, {1, {2}, 24}, 2},
      {"images rank 3", {0, {2, 4, 12}, 96}, labels, indices, 2},
      {"images rank 5", {0, {2, 4, 4, 3, 1}, 96}, labels, indices, 2},
      {"labels rank 2", {0, {2, 4, 4, 3}, 96}, {1, {2, 1}, 16}, indices, 2},
      {"rows disagree", {0, {3, 4, 4, 3}, 144}, labels, indices, 2},
      {"labels not int64", {0, {2, 4, 4, 3}, 96}, {0, {2}, 2}, indices, 2},
      {"indices float32", {0, {2, 4, 4, 3}, 96}, labels, {2, {2}, 8}, 2},
      {"int64 images", {1, {2, 4, 4, 3}, 768}, labels, indices, 2},
      {"unknown dtype", {9, {2, 4, 4, 3}, 96}, labels, indices, 2},
      {"negative dimension", {0, {2, -4, -4, 3}, 96}, labels, indices, 2},
      {"valid beyond rows", {0, {2, 4, 4, 3}, 96}, labels, indices, 3},
      {"negative valid", {0, {2, 4, 4, 3}, 96}, labels, indices, -1},
      {"huge dimension", {0, {2, int64_t{1} << 62, 1, 1}, 96}, labels, indices, 2},
      // The product of the dimensions overflows 128 bits (64 * 2^40 * 2^40 * 2^40 * 4
      // bytes = 2^128): it must not wrap around to match the empty data.
      {"element count overflows",
       {2, {64, int64_t{1} << 40, int64_t{1} << 40, int64_t{1} << 40}, 0},
       {1, {64}, 512},
       {1, {64}, 512},
       0},
      {"element count overflows int64",
       {0, {1, int64_t{1} << 40, int64_t{1} << 40, 1}, 0},
       {1, {1}, 8},
       {1, {1}, 8},
       0},
  };
  for (const Case& c : cases) {
    const Status s = DecodeHandMade(c.images, c.labels, c.indices, c.valid);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << c.what << ": " << s.ToString();
  }
}

TEST(WireMalformedTest, BatchWithMissingTensors) {
  capnp::MallocMessageBuilder b;
  b.initRoot<wire::schema::Batch>().setValid(0);  // no tensors at all
  const kj::Array<capnp::word> words = capnp::messageToFlatArray(b);
  const kj::ArrayPtr<const kj::byte> bytes = words.asBytes();
  EXPECT_EQ(
      DecodeAs(MessageType::kBatch, RawFrame(MessageType::kBatch, std::string(bytes.begin(), bytes.end())))
          .code(),
      StatusCode::kInvalidArgument);
}

TEST(WireMalformedTest, UnknownEnumValuesAreRefused) {
  {
    capnp::MallocMessageBuilder b;
    auto r = b.initRoot<wire::schema::Hello>();
    r.setVersion(kProtocolVersion);
    r.setRole(wire::schema::Role(77));
    const auto words = capnp::messageToFlatArray(b);
    const auto bytes = words.asBytes();
    EXPECT_EQ(
        DecodeHello(RawFrame(MessageType::kHello, std::string(bytes.begin(), bytes.end()))).status().code(),
        StatusCode::kInvalidArgument);
  }
  {
    capnp::MallocMessageBuilder b;
    b.initRoot<wire::schema::OpenStream>().getJob().initInline().setLastBatch(wire::schema::LastBatch(5));
    const auto words = capnp::messageToFlatArray(b);
    const auto bytes = words.asBytes();
    EXPECT_EQ(DecodeOpenStream(RawFrame(MessageType::kOpenStream, std::string(bytes.begin(), bytes.end())))
                  .status()
                  .code(),
              StatusCode::kInvalidArgument);
  }
  {
    capnp::MallocMessageBuilder b;
    b.initRoot<wire::schema::Hello>().setVersion(2);  // a future protocol
    const auto words = capnp::messageToFlatArray(b);
    const auto bytes = words.asBytes();
    EXPECT_EQ(
        DecodeHello(RawFrame(MessageType::kHello, std::string(bytes.begin(), bytes.end()))).status().code(),
        StatusCode::kFailedPrecondition);
  }
}

// ---------------------------------------------------------------------------------
// Receive buffers

TEST(WireBufferAllocatorTest, DefaultBuffersAreAlignedAndRecycled) {
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

TEST(WireBufferAllocatorTest, FunctionAllocatorRefusesMisalignedMemory) {
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

// ---------------------------------------------------------------------------------
// Authentication

TEST(WireAuthTest, HelloMacIsDeterministicAndSensitive) {
  const std::string nonce = RandomNonce();
  EXPECT_EQ(nonce.size(), 32u);
  EXPECT_NE(RandomNonce(), nonce);
  const std::string mac = HelloMac("s3cret", nonce);
  EXPECT_EQ(mac.size(), 32u);  // HMAC-SHA256
  EXPECT_EQ(HelloMac("s3cret", nonce), mac);
  EXPECT_NE(HelloMac("s3cret!", nonce), mac);
  EXPECT_NE(HelloMac("S3cret", nonce), mac);
  EXPECT_NE(HelloMac("", nonce), mac);
  std::string other = nonce;
  other[31] ^= 1;
  EXPECT_NE(HelloMac("s3cret", other), mac);
  // A known answer: HMAC-SHA256(key "key", message "ferry-hello-v1" "abc"), as
  // `printf ferry-hello-v1abc | openssl dgst -sha256 -hmac key` computes it.
  std::string hex;
  for (unsigned char c : HelloMac("key", "abc")) {
    char buf[3];
    std::snprintf(buf, sizeof buf, "%02x", c);
    hex += buf;
  }
  EXPECT_EQ(hex, "420408a8445699df20fba5cd87e4752bd5e6d3a14aced3045be4ef8708cfdda3");
  // Domain separation: the MAC covers the protocol label, not just the nonce.
  EXPECT_NE(HelloMac("key", "abc"), HelloMac("key", "ferry-hello-v1abc"));
}

TEST(WireAuthTest, MacEquals) {
  const std::string a = HelloMac("t", "n");
  EXPECT_TRUE(MacEquals(a, a));
  EXPECT_TRUE(MacEquals("", ""));
  std::string b = a;
  b[0] ^= 0x80;
  EXPECT_FALSE(MacEquals(a, b));
  b = a;
  b[31] ^= 1;
  EXPECT_FALSE(MacEquals(a, b));
  EXPECT_FALSE(MacEquals(a, a.substr(0, 31)));
  EXPECT_FALSE(MacEquals(a, ""));
  EXPECT_FALSE(MacEquals("", a));
  EXPECT_FALSE(MacEquals(a, a + '\0'));
}

class WireTokenTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* old = std::getenv("FERRY_TOKEN");
    had_env_ = old != nullptr;
    if (had_env_) old_env_ = old;
    unsetenv("FERRY_TOKEN");
  }
  void TearDown() override {
    if (had_env_) {
      setenv("FERRY_TOKEN", old_env_.c_str(), 1);
    } else {
      unsetenv("FERRY_TOKEN");
    }
  }
  TempDir dir_;
  bool had_env_ = false;
  std::string old_env_;
};

TEST_F(WireTokenTest, FromFileWithTrailingWhitespaceTrimmed) {
  WriteFile(dir_ / "token", "s3cret\n");
  Result<std::string> t = LoadToken(dir_ / "token");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(*t, "s3cret");
  WriteFile(dir_ / "token2", "two words \r\n\t\n");
  t = LoadToken(dir_ / "token2");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(*t, "two words");
  // The file wins over the environment.
  setenv("FERRY_TOKEN", "from-env", 1);
  t = LoadToken(dir_ / "token");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(*t, "s3cret");
}

TEST_F(WireTokenTest, FromEnvironment) {
  Result<std::string> t = LoadToken("");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(*t, "") << "no file and no FERRY_TOKEN: no authentication";
  setenv("FERRY_TOKEN", "from-env", 1);
  t = LoadToken("");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(*t, "from-env");
}

TEST_F(WireTokenTest, EmptyFileIsAnError) {
  WriteFile(dir_ / "empty", "");
  Result<std::string> t = LoadToken(dir_ / "empty");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(t.status().message().find("empty"), std::string::npos);
  WriteFile(dir_ / "blank", " \n\n");
  EXPECT_FALSE(LoadToken(dir_ / "blank").ok());
}

TEST_F(WireTokenTest, MissingFileIsNotFound) {
  Result<std::string> t = LoadToken(dir_ / "no-such-file");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kNotFound);
  EXPECT_NE(t.status().message().find("no-such-file"), std::string::npos);
}

}  // namespace
}  // namespace ferry::internal
