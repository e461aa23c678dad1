// IteratorState's text form (include/ferry/client.h, lib/client/iterator_state.cc):
// it round-trips, and anything else is refused with InvalidArgument.
#include <gtest/gtest.h>

#include "ferry/client.h"

namespace ferry {
namespace {

TEST(IteratorStateTest, RoundTripsAndRefusesGarbage) {
  IteratorState st;
  st.job = "run7";
  st.consumer = "trainer-0";
  st.first_open = 2;
  st.done = {{2, 0}, {2, 5}, {3, 1}};
  st.partial[{2, 3}] = {0, 2};
  st.partial[{3, 0}] = {};
  auto back = IteratorState::Parse(st.Serialize());
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->job, st.job);
  EXPECT_EQ(back->consumer, st.consumer);
  EXPECT_EQ(back->first_open, 2u);
  EXPECT_EQ(back->done, st.done);
  EXPECT_EQ(back->partial, st.partial);
  for (const char* bad : {"", "hello\n", "ferry-iterator-state 1\njob x\n", "ferry-iterator-state 1\njob x\nconsumer y\ndone 1\n",
                          "ferry-iterator-state 1\njob x\nconsumer y\nwhat 1 2\n"}) {
    EXPECT_FALSE(IteratorState::Parse(bad).ok()) << bad;
  }
}

BatchProvenance Batch(uint64_t epoch, int64_t split, int64_t b, int64_t per_split) {
  BatchProvenance p;
  p.epoch = epoch;
  p.split = split;
  p.batch_in_split = b;
  p.batches_in_split = per_split;
  return p;
}

TEST(IteratorStateTest, UnyieldGivesABatchBack) {
  IteratorState st;
  st.first_open = 1;
  st.done = {{1, 0}};
  st.partial[{1, 2}] = {0};
  ASSERT_TRUE(st.Unyield(Batch(1, 0, 1, 3), 4).ok());
  EXPECT_EQ(st.done.count({1, 0}), 0u);
  EXPECT_EQ(st.partial[(IteratorState::SplitId{1, 0})], (std::set<int64_t>{0, 2})) << "a done split is partial without the batch";
  ASSERT_TRUE(st.Unyield(Batch(1, 2, 0, 3), 4).ok());
  EXPECT_EQ(st.partial.count({1, 2}), 0u) << "its only batch given back: nothing yielded of the split";
  EXPECT_EQ(st.Unyield(Batch(1, 2, 0, 3), 4).code(), StatusCode::kInvalidArgument) << "not yielded";
  EXPECT_EQ(st.Unyield(Batch(1, 3, 5, 3), 4).code(), StatusCode::kInvalidArgument) << "not a batch of the split";
}

TEST(IteratorStateTest, UnyieldingTheBatchThatClosedAnEpochReopensIt) {
  IteratorState st;
  st.first_open = 3;
  ASSERT_TRUE(st.Unyield(Batch(2, 1, 0, 1), 3).ok());
  EXPECT_EQ(st.first_open, 2u);
  EXPECT_EQ(st.done, (std::set<IteratorState::SplitId>{{2, 0}, {2, 2}}));
  EXPECT_TRUE(st.partial.empty());
  EXPECT_EQ(st.Unyield(Batch(0, 0, 0, 1), 3).code(), StatusCode::kInvalidArgument) << "long closed";
}

}  // namespace
}  // namespace ferry
