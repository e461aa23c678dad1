// The frame header (lib/wire/frame.h): it round-trips, and a receiver refuses wrong
// magic, versions and types, lengths over the per-type limit, and lengths that are
// not whole Cap'n Proto words, before it allocates anything.
#include "wire/frame.h"

#include <gtest/gtest.h>

#include <string>

#include "wire_test_util.h"

namespace ferry::wire {
namespace {

using namespace ::ferry::wire::test;  // NOLINT

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
  EXPECT_EQ(h[4], kProtocolVersion);
  EXPECT_EQ(h[5], 0);
  EXPECT_EQ(h[6], 6);
  EXPECT_EQ(h[7], 0);
  EXPECT_EQ(h[8], 0x08);
  EXPECT_EQ(h[15], 0x01);
}

TEST(WireFrameHeaderTest, RefusesWrongMagic) {
  for (const char* magic : {"FRY2", "fry1", "\0\0\0\0", "GET "}) {
    Result<FrameHeader> p = Parse(Header(magic, kProtocolVersion, 2, 64));
    ASSERT_FALSE(p.ok()) << magic;
    EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(p.status().message().find("magic"), std::string::npos) << p.status().ToString();
  }
}

TEST(WireFrameHeaderTest, RefusesWrongVersion) {
  for (uint16_t v : {uint16_t(0), uint16_t(kProtocolVersion - 1), uint16_t(kProtocolVersion + 1), uint16_t(0xFFFF)}) {
    Result<FrameHeader> p = Parse(Header("FRY1", v, 2, 64));
    ASSERT_FALSE(p.ok()) << v;
    EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(p.status().message().find("version"), std::string::npos) << p.status().ToString();
  }
}

TEST(WireFrameHeaderTest, RefusesUnknownTypes) {
  // Between the data plane's types (1..8) and the control plane's (16..31), and beyond.
  for (uint16_t t : {0, 9, 12, 15, 32, 99, 0x0100, 0xFFFF}) {
    Result<FrameHeader> p = Parse(Header("FRY1", kProtocolVersion, t, 64));
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
    EXPECT_TRUE(Parse(Header("FRY1", kProtocolVersion, t, 1024), limits).ok()) << t;
    Result<FrameHeader> p = Parse(Header("FRY1", kProtocolVersion, t, 1032), limits);
    ASSERT_FALSE(p.ok()) << t;
    EXPECT_EQ(p.status().code(), StatusCode::kResourceExhausted) << p.status().ToString();
    EXPECT_NE(p.status().message().find("exceeds the limit"), std::string::npos);
  }
  // A Batch may be larger than a control message, up to its own limit.
  EXPECT_TRUE(Parse(Header("FRY1", kProtocolVersion, 6, 1032), limits).ok());
  EXPECT_TRUE(Parse(Header("FRY1", kProtocolVersion, 6, 1 << 20), limits).ok());
  Result<FrameHeader> p = Parse(Header("FRY1", kProtocolVersion, 6, (1 << 20) + 8), limits);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::kResourceExhausted);
  // Absurd lengths: no overflow anywhere.
  p = Parse(Header("FRY1", kProtocolVersion, 6, uint64_t{64} << 30));
  EXPECT_EQ(p.status().code(), StatusCode::kResourceExhausted);
  p = Parse(Header("FRY1", kProtocolVersion, 6, ~uint64_t{0}));
  EXPECT_EQ(p.status().code(), StatusCode::kResourceExhausted);
  p = Parse(Header("FRY1", kProtocolVersion, 2, ~uint64_t{0} - 7));
  EXPECT_EQ(p.status().code(), StatusCode::kResourceExhausted);
}

TEST(WireFrameHeaderTest, RefusesLengthsThatAreNotWholeWords) {
  for (uint64_t len : {0, 1, 4, 7, 12, 65, 1023}) {
    Result<FrameHeader> p = Parse(Header("FRY1", kProtocolVersion, 5, len));
    ASSERT_FALSE(p.ok()) << len;
    EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument) << len;
  }
  EXPECT_TRUE(Parse(Header("FRY1", kProtocolVersion, 5, 8)).ok());
}

}  // namespace
}  // namespace ferry::wire
