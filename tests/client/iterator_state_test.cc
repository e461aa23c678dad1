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

}  // namespace
}  // namespace ferry
