// Tests of a Batch's per-sample fields on the wire (schemas/ferry.capnp Field,
// lib/wire/codec.cc): ragged and dense fields round-trip without copies, and hostile
// fields (offsets out of range or decreasing, counts that do not add up, huge declared
// sizes, dense fields of the wrong length, duplicate or empty names, too many) are
// refused with InvalidArgument, never a crash.
#include <gtest/gtest.h>

#include <capnp/message.h>
#include <capnp/serialize.h>

#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "ferry.capnp.h"  // only to build malformed messages the encoders cannot produce
#include "wire/codec.h"
#include "wire_test_util.h"

namespace ferry::wire {
namespace {

using namespace ::ferry::wire::test;  // NOLINT

TensorView View(void* p, DType t, std::initializer_list<int64_t> shape) {
  TensorView v;
  v.data = p;
  v.dtype = t;
  v.rank = int(shape.size());
  int i = 0;
  for (int64_t d : shape) v.shape[size_t(i++)] = d;
  return v;
}

// Three rows of 2 x 2 RGB images; rows 0 and 2 have boxes (2 and 1), row 1 none.
struct FieldsBatch {
  AlignedBytes images{3 * 2 * 2 * 3}, labels{24}, indices{24};
  AlignedBytes boxes{3 * 4 * 4}, box_labels{3 * 8}, offsets{4 * 8}, masks{3 * 2 * 2}, ids{3 * 8};
  BatchFrameInput in;
  FieldsBatch() {
    for (int i = 0; i < 12; ++i) boxes.as<float>()[i] = float(i) / 2;
    const int64_t o[4] = {0, 2, 2, 3}, l[3] = {18, 3, 90}, id[3] = {42, 7, 1001};
    std::memcpy(offsets.p, o, sizeof o);
    std::memcpy(box_labels.p, l, sizeof l);
    std::memcpy(ids.p, id, sizeof id);
    for (int i = 0; i < 12; ++i) masks.as<uint8_t>()[i] = uint8_t(i % 3 == 0);
    in.rows = 3;
    in.valid = 3;
    in.image_dims = {2, 2, 3};
    in.images = images.p;
    in.labels = labels.as<int64_t>();
    in.indices = indices.as<int64_t>();
    const TensorView off = View(offsets.p, DType::kInt64, {4});
    in.fields = {{"boxes", View(boxes.p, DType::kFloat32, {3, 4}), off},
                 {"labels", View(box_labels.p, DType::kInt64, {3}), off},
                 {"masks", View(masks.p, DType::kUint8, {3, 2, 2}), off},
                 {"image_id", View(ids.p, DType::kInt64, {3}), {}}};
  }
};

TEST(WireFieldsTest, RaggedAndDenseFieldsRoundTripWithoutCopies) {
  FieldsBatch t;
  OutFrame out = EncodeBatch(t.in);
  bool boxes_by_reference = false;
  for (const ByteRange& r : out.ranges()) boxes_by_reference |= r.data == t.boxes.p;
  EXPECT_TRUE(boxes_by_reference) << "the fields go out from the caller's memory";
  const InFrame f = ToInFrame(out);
  std::vector<SkippedSample> skipped;
  Result<Batch> b = DecodeBatch(f, &skipped);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  ASSERT_EQ(b->fields.size(), 4u);
  const BatchField* boxes = b->field("boxes");
  ASSERT_NE(boxes, nullptr);
  ASSERT_TRUE(boxes->ragged());
  EXPECT_EQ(boxes->range(0), (std::pair<int64_t, int64_t>{0, 2}));
  EXPECT_EQ(boxes->range(1), (std::pair<int64_t, int64_t>{2, 2}));
  EXPECT_EQ(boxes->range(2), (std::pair<int64_t, int64_t>{2, 3}));
  EXPECT_EQ(boxes->values.dtype, DType::kFloat32);
  EXPECT_EQ(std::memcmp(boxes->values.data, t.boxes.p, 48), 0);
  const BatchField* masks = b->field("masks");
  ASSERT_NE(masks, nullptr);
  EXPECT_EQ(masks->values.rank, 3);
  EXPECT_EQ(std::memcmp(masks->values.data, t.masks.p, 12), 0);
  const BatchField* ids = b->field("image_id");
  ASSERT_NE(ids, nullptr);
  EXPECT_FALSE(ids->ragged());
  EXPECT_EQ(ids->values.as<int64_t>()[2], 1001);
  // Views into the received buffer (zero copy on receive too).
  const auto* base = static_cast<const uint8_t*>(b->buffer);
  const auto* p = static_cast<const uint8_t*>(masks->values.data);
  EXPECT_TRUE(p >= base && p + 12 <= base + b->buffer_size);
  EXPECT_EQ(b->field("text"), nullptr);
}

// A batch of 2 rows with valid images, labels and indices, and `fields` made by `make`.
InFrame HandMade(const std::function<void(capnp::List<schema::Field>::Builder)>& make, unsigned n) {
  capnp::MallocMessageBuilder m;
  auto r = m.initRoot<schema::Batch>();
  auto tensor = [](schema::Tensor::Builder t, uint16_t dtype, std::initializer_list<int64_t> shape, size_t bytes) {
    t.setDtype(schema::DType(dtype));
    auto s = t.initShape(unsigned(shape.size()));
    unsigned i = 0;
    for (int64_t d : shape) s.set(i++, d);
    t.initData(unsigned(bytes));
  };
  tensor(r.initImages(), 0, {2, 2, 2, 3}, 24);
  tensor(r.initLabels(), 1, {2}, 16);
  tensor(r.initIndices(), 1, {2}, 16);
  r.setValid(2);
  make(r.initFields(n));
  const kj::Array<capnp::word> words = capnp::messageToFlatArray(m);
  const kj::ArrayPtr<const kj::byte> bytes = words.asBytes();
  return RawFrame(MessageType::kBatch, std::string(bytes.begin(), bytes.end()));
}

// One ragged field: values float32 [n, 4] (`bytes` of data), offsets int64 `offs`.
void Ragged(schema::Field::Builder f, const char* name, int64_t n, size_t bytes, std::vector<int64_t> offs,
            uint16_t offsets_dtype = 1) {
  f.setName(name);
  auto v = f.initValues();
  v.setDtype(schema::DType::FLOAT32);
  auto s = v.initShape(2);
  s.set(0, n);
  s.set(1, 4);
  v.initData(unsigned(bytes));
  auto o = f.initOffsets();
  o.setDtype(schema::DType(offsets_dtype));
  o.initShape(1).set(0, int64_t(offs.size()));
  auto d = o.initData(unsigned(offs.size() * 8));
  std::memcpy(d.begin(), offs.data(), offs.size() * 8);
}

// One dense field: int64 [rows], or of `dtype` (the wire's number) [rows, cols] with
// `bytes` of data (default: what the shape takes, taking 4-byte elements past int64).
void Dense(schema::Field::Builder f, const char* name, int64_t rows, uint16_t dtype = 1, int64_t cols = 0,
           int64_t bytes = -1) {
  f.setName(name);
  auto v = f.initValues();
  v.setDtype(schema::DType(dtype));
  auto s = v.initShape(cols > 0 ? 2 : 1);
  s.set(0, rows);
  if (cols > 0) s.set(1, cols);
  const int64_t elem = dtype == 1 ? 8 : dtype == 0 ? 1 : 4;
  v.initData(unsigned(bytes >= 0 ? bytes : rows * std::max<int64_t>(cols, 1) * elem));
}

Status Decode(const InFrame& f) {
  std::vector<SkippedSample> skipped;
  return DecodeBatch(f, &skipped).status();
}

TEST(WireFieldsTest, HostileFieldsAreRefused) {
  // The baseline decodes.
  ASSERT_TRUE(Decode(HandMade([](auto l) { Ragged(l[0], "boxes", 3, 48, {0, 1, 3}); }, 1)).ok());
  ASSERT_TRUE(Decode(HandMade([](auto l) { Dense(l[0], "image_id", 2); }, 1)).ok());
  ASSERT_TRUE(Decode(HandMade([](auto l) { Dense(l[0], "tokens", 2, 3, 5); }, 1)).ok()) << "int32 [B, L]";
  struct Case {
    const char* what;
    std::function<void(capnp::List<schema::Field>::Builder)> make;
    unsigned n;
  };
  const std::vector<Case> cases = {
      {"offsets past the values", [](auto l) { Ragged(l[0], "boxes", 3, 48, {0, 1, 4}); }, 1},
      {"offsets short of the values", [](auto l) { Ragged(l[0], "boxes", 3, 48, {0, 1, 2}); }, 1},
      {"offsets not from 0", [](auto l) { Ragged(l[0], "boxes", 3, 48, {1, 2, 3}); }, 1},
      {"offsets decreasing", [](auto l) { Ragged(l[0], "boxes", 3, 48, {0, 3, 2}); }, 1},
      {"negative offsets", [](auto l) { Ragged(l[0], "boxes", 3, 48, {0, -5, 3}); }, 1},
      {"offsets of another length", [](auto l) { Ragged(l[0], "boxes", 3, 48, {0, 3}); }, 1},
      {"float offsets", [](auto l) { Ragged(l[0], "boxes", 3, 48, {0, 1, 3}, 2); }, 1},
      {"values data disagrees", [](auto l) { Ragged(l[0], "boxes", 3, 40, {0, 1, 3}); }, 1},
      {"a huge declared size", [](auto l) { Ragged(l[0], "boxes", int64_t{1} << 40, 0, {0, 0, int64_t{1} << 40}); }, 1},
      {"a dense field of the wrong length", [](auto l) { Dense(l[0], "image_id", 3); }, 1},
      {"a name twice", [](auto l) { Dense(l[0], "image_id", 2), Dense(l[1], "image_id", 2); }, 2},
      {"an empty name", [](auto l) { Dense(l[0], "", 2); }, 1},
      {"too many fields",
       [](auto l) {
         for (unsigned i = 0; i < l.size(); ++i) Dense(l[i], ("f" + std::to_string(i)).c_str(), 2);
       },
       unsigned(JobSpec::kMaxBatchFields + 1)},
      {"an unknown dtype", [](auto l) { Dense(l[0], "tokens", 2, 4); }, 1},
      {"int32 values of the wrong size", [](auto l) { Dense(l[0], "tokens", 2, 3, 5, 36); }, 1},
      {"values of rank 0", [](auto l) { l[0].setName("x"); l[0].initValues().setDtype(schema::DType::UINT8); }, 1},
  };
  for (const Case& c : cases) {
    const Status s = Decode(HandMade(c.make, c.n));
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << c.what << ": " << s.ToString();
  }
}

TEST(WireFieldsTest, BitFlipsOfAFrameWithFieldsNeverCrash) {
  FieldsBatch t;
  const std::string body = Flatten(EncodeBatch(t.in)).substr(kFrameHeaderSize);
  std::mt19937_64 rng(23);
  int decoded = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    std::string b = body;
    for (int k = 0; k < 2; ++k) b[rng() % b.size()] ^= char(1 << (rng() % 8));
    std::vector<SkippedSample> skipped;
    Result<Batch> d = DecodeBatch(RawFrame(MessageType::kBatch, b), &skipped);
    if (!d.ok()) {
      EXPECT_TRUE(d.status().code() == StatusCode::kInvalidArgument || d.status().code() == StatusCode::kFailedPrecondition)
          << d.status().ToString();
      continue;
    }
    ++decoded;
    for (const BatchField& f : d->fields) {
      for (int64_t r = 0; r < d->rows(); ++r) {
        const auto [lo, hi] = f.range(r);
        ASSERT_TRUE(lo >= 0 && lo <= hi && hi <= f.values.shape[0]) << f.name;
      }
    }
  }
  EXPECT_GT(decoded, 0);
}

}  // namespace
}  // namespace ferry::wire
