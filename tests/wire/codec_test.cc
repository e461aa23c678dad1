// The data plane's codec (lib/wire/codec.h): every message round-trips through the
// bytes an OutFrame puts on the wire, batches decode as views into the received
// buffer (zero copy), and malformed input of every kind is refused with a Status,
// never a crash (run under ASan/UBSan and TSan too).
#include "wire/codec.h"

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <random>
#include <string>
#include <vector>

#include "ferry.capnp.h"  // only to build malformed messages the encoders cannot produce
#include "wire_test_util.h"

namespace ferry::wire {
namespace {

using namespace ::ferry::wire::test;  // NOLINT

// ---------------------------------------------------------------------------------
// Control messages

TEST(WireCodecTest, ChallengeRoundTrips) {
  ChallengeMsg m{std::string(32, '\x5a'), true, "worker-7"};
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
    HelloMsg m{role, std::string(32, '\x17'), "trainer-3"};
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
  Result<HelloOkMsg> d = DecodeHelloOk(ToInFrame(EncodeHelloOk("ferry-worker-1")));
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->server_id, "ferry-worker-1");
  EXPECT_EQ(d->state_id, "");
  d = DecodeHelloOk(ToInFrame(EncodeHelloOk("ferry-dispatcher", "0123456789abcdef")));
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->state_id, "0123456789abcdef");
}

TEST(WireCodecTest, OpenStreamRoundTripsInline) {
  OpenStreamMsg m;
  m.job.dataset = "/datasets/imagenet/train";
  m.job.pipeline = PipelineSpec::ImagenetEval();
  m.job.seed = 0xDEADBEEFCAFEull;
  m.job.shuffle = false;
  m.job.epochs = -1;
  m.job.batch_size = 256;
  m.job.last_batch = LastBatch::kPad;
  m.job.bad_samples = BadSamples::kRefill;
  m.job.fingerprint = 0x1234567890ABCDEFull;
  m.first_epoch = 7;
  m.shard_index = 3;
  m.num_shards = 5;
  m.consumer_id = "trainer-0";
  m.credits = 9;
  m.resume_epoch = 8;
  m.resume_batches_done = 42;
  Result<OpenStreamMsg> d = DecodeOpenStream(ToInFrame(EncodeOpenStream(m)));
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_FALSE(d->by_name);
  EXPECT_EQ(d->job, m.job) << "the JobSpec travels whole";
  EXPECT_EQ(d->job.pipeline.ToJson(), PipelineSpec::ImagenetEval().ToJson());
  EXPECT_EQ(d->first_epoch, 7u);
  EXPECT_EQ(d->shard_index, 3u);
  EXPECT_EQ(d->num_shards, 5u);
  EXPECT_EQ(d->consumer_id, "trainer-0");
  EXPECT_EQ(d->credits, 9u);
  EXPECT_EQ(d->resume_epoch, 8u);
  EXPECT_EQ(d->resume_batches_done, 42);

  for (LastBatch lb : {LastBatch::kDrop, LastBatch::kKeep}) {
    m.job.last_batch = lb;
    d = DecodeOpenStream(ToInFrame(EncodeOpenStream(m)));
    ASSERT_TRUE(d.ok());
    EXPECT_EQ(d->job.last_batch, lb);
  }
}

TEST(WireCodecTest, JobsWithTargetsAndATokenizerRoundTrip) {
  JobSpec j;
  j.dataset = "/data/shard-{0..3}.tar";
  j.targets = {"text", "tokens", "image_id"};
  j.tokenizer = {"/models/spm.model", 77, true, true, 5};
  Result<JobSpec> d = DecodeJobBytes(EncodeJobBytes(j));
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(*d, j);
  j.tokenizer = TokenizerSpec();
  j.targets = {"boxes"};
  d = DecodeJobBytes(EncodeJobBytes(j));
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->tokenizer, TokenizerSpec()) << "no tokenizer: none decoded";
}

TEST(WireCodecTest, MixturesRoundTrip) {
  JobSpec j;
  j.dataset = "mixture";
  j.mixture = {{"/data/a", 0.6, "", 1200}, {"s3://b/c/", 0.3, R"({"ops":[{"op":"resize","size":8}]})", 7},
               {"/data/d.tsv", 0.1, "", 0}};
  j.mixture_epoch = 10000;
  Result<JobSpec> d = DecodeJobBytes(EncodeJobBytes(j));
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(*d, j);
  j.mixture.clear();
  j.mixture_epoch = 0;
  j.dataset = "/data/a";
  d = DecodeJobBytes(EncodeJobBytes(j));
  ASSERT_TRUE(d.ok());
  EXPECT_TRUE(d->mixture.empty());
  EXPECT_EQ(d->mixture_epoch, 0);
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
    auto r = b.initRoot<schema::Error>();
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
  frames.push_back(EncodeChallenge({std::string(32, 7), true, "w"}));
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
  auto r = b.initRoot<schema::Batch>();
  auto fill = [](schema::Tensor::Builder t, const TensorSpec& s) {
    t.setDtype(schema::DType(s.dtype));
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
  b.initRoot<schema::Batch>().setValid(0);  // no tensors at all
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
    auto r = b.initRoot<schema::Hello>();
    r.setVersion(kProtocolVersion);
    r.setRole(schema::Role(77));
    const auto words = capnp::messageToFlatArray(b);
    const auto bytes = words.asBytes();
    EXPECT_EQ(
        DecodeHello(RawFrame(MessageType::kHello, std::string(bytes.begin(), bytes.end()))).status().code(),
        StatusCode::kInvalidArgument);
  }
  {
    capnp::MallocMessageBuilder b;
    auto job = b.initRoot<schema::OpenStream>().getJob().initInline();
    job.setPipelineJson(PipelineSpec::ImagenetTrain().ToJson());  // valid: the enum is what is wrong
    job.setLastBatch(schema::LastBatch(5));
    const auto words = capnp::messageToFlatArray(b);
    const auto bytes = words.asBytes();
    EXPECT_EQ(DecodeOpenStream(RawFrame(MessageType::kOpenStream, std::string(bytes.begin(), bytes.end())))
                  .status()
                  .code(),
              StatusCode::kInvalidArgument);
  }
  {
    capnp::MallocMessageBuilder b;
    b.initRoot<schema::Hello>().setVersion(kProtocolVersion + 1);  // a future protocol
    const auto words = capnp::messageToFlatArray(b);
    const auto bytes = words.asBytes();
    EXPECT_EQ(
        DecodeHello(RawFrame(MessageType::kHello, std::string(bytes.begin(), bytes.end()))).status().code(),
        StatusCode::kFailedPrecondition);
  }
}

}  // namespace
}  // namespace ferry::wire
