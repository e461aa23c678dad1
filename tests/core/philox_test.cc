// Philox4x32-10 and SampleRng (lib/core/philox.h): the published known answer, streams
// that depend on exactly their key and counter, and unbiased bounded draws.
#include "core/philox.h"

#include <gtest/gtest.h>

#include <set>


namespace ferry {
namespace {

TEST(PhiloxTest, KnownAnswer) {
  // Random123's published known-answer vector for philox4x32-10 with zero inputs.
  const PhiloxBlock out = Philox4x32({0, 0, 0, 0}, {0, 0});
  EXPECT_EQ(out[0], 0x6627e8d5u);
  EXPECT_EQ(out[1], 0xe169c58du);
  EXPECT_EQ(out[2], 0xbc57ac4cu);
  EXPECT_EQ(out[3], 0x9b00dbd8u);
}

TEST(PhiloxTest, SameKeySameStreamDifferentKeyDifferentStream) {
  SampleRng a(42, 3, 17), b(42, 3, 17), c(42, 3, 18), d(42, 4, 17), e(43, 3, 17);
  for (int i = 0; i < 100; ++i) {
    const uint32_t x = a.NextU32();
    EXPECT_EQ(x, b.NextU32());
    // Collisions over 100 draws of 32 bits are possible but vanishingly rare.
    EXPECT_NE(x, c.NextU32());
    EXPECT_NE(x, d.NextU32());
    EXPECT_NE(x, e.NextU32());
  }
}

TEST(PhiloxTest, BelowIsInRangeAndCoversIt) {
  SampleRng rng(1, 0, 0);
  std::set<uint64_t> seen;
  for (int i = 0; i < 2000; ++i) {
    const uint64_t v = rng.Below(7);
    ASSERT_LT(v, 7u);
    seen.insert(v);
  }
  EXPECT_EQ(seen.size(), 7u);
  for (int i = 0; i < 1000; ++i) {
    const double u = rng.Uniform();
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
  }
}


}  // namespace
}  // namespace ferry
