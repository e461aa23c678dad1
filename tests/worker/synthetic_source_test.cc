// The synthetic source (lib/worker/synthetic_source.h) of ferry-bench transport: its
// dataset string is checked, it yields each epoch's batches then an EndOfEpoch (the
// last one marked), and draining stops it.
#include "worker/synthetic_source.h"

#include <gtest/gtest.h>

#include "wire/wire_test_util.h"

namespace ferry {
namespace {

wire::OpenStreamMsg Job(const std::string& dataset, int64_t epochs) {
  wire::OpenStreamMsg m;
  m.job.dataset = dataset;
  m.job.batch_size = 4;
  m.job.epochs = epochs;
  m.first_epoch = 3;
  return m;
}

TEST(SyntheticSourceTest, BadSpecsAreRefused) {
  for (const char* bad : {"synthetic:", "synthetic:10:2", "synthetic:0:2", "synthetic:8:0", "synthetic:x:y",
                          "synthetic:8:2000000000000", "synthetic:8589934592:1"}) {
    EXPECT_EQ(SyntheticSource::Create(Job(bad, 1)).status().code(), StatusCode::kInvalidArgument) << bad;
  }
}

TEST(SyntheticSourceTest, EpochsOfBatchesEachEndedByAnEndOfEpoch) {
  auto s = SyntheticSource::Create(Job("synthetic:12:2", 2));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  std::vector<std::string> seen;
  while (auto f = (*s)->Next()) {
    const wire::InFrame in = wire::test::ToInFrame(f->frame);
    if (f->needs_credit) {
      auto b = wire::DecodeBatch(in, nullptr);
      ASSERT_TRUE(b.ok());
      EXPECT_EQ(b->images.num_bytes(), 12u);
      EXPECT_EQ(b->rows(), 4);
      std::string what = "B";  // appended, not "B" + ...: GCC 12's -Wrestrict misfires on that
      what += std::to_string(b->provenance.epoch);
      seen.push_back(what);
    } else {
      auto e = wire::DecodeEndOfEpoch(in);
      ASSERT_TRUE(e.ok());
      EXPECT_EQ(e->last, f->last);
      std::string what = "E";
      what += std::to_string(e->epoch);
      if (e->last) what += "!";
      seen.push_back(what);
    }
  }
  EXPECT_EQ(seen, (std::vector<std::string>{"B3", "B3", "E3", "B4", "B4", "E4!"}));
  EXPECT_TRUE((*s)->done());
}

TEST(SyntheticSourceTest, StopEndsAStreamThatWouldRunForever) {
  auto s = SyntheticSource::Create(Job("synthetic:8:1", 0));
  ASSERT_TRUE(s.ok());
  for (int i = 0; i < 10; ++i) ASSERT_TRUE((*s)->Next().has_value());
  EXPECT_FALSE((*s)->done());
  (*s)->Stop();
  EXPECT_TRUE((*s)->done());
  EXPECT_FALSE((*s)->Next().has_value());
}

TEST(SyntheticSourceTest, StopStillClosesTheEpochItsLastBatchEnded) {
  auto s = SyntheticSource::Create(Job("synthetic:8:1", 0));
  ASSERT_TRUE(s.ok());
  auto batch = (*s)->Next();  // the epoch's only batch: its EndOfEpoch is due next
  ASSERT_TRUE(batch.has_value());
  ASSERT_TRUE(batch->needs_credit);
  (*s)->Stop();  // draining
  auto eoe = (*s)->Next();
  ASSERT_TRUE(eoe.has_value()) << "the epoch was sent whole: its EndOfEpoch still goes out";
  EXPECT_FALSE(eoe->needs_credit);
  EXPECT_TRUE((*s)->done());
  EXPECT_FALSE((*s)->Next().has_value());
}

}  // namespace
}  // namespace ferry
