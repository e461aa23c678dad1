// Tests of lib/pipeline/batch_window.cc: a made batch served to the other lanes, the
// waiters of one being made, a maker that gives up, and the byte bound.
#include "pipeline/batch_window.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <vector>

namespace ferry {
namespace {

std::shared_ptr<const BatchWindow::Made> MadeBatch(int64_t rows, uint8_t fill, size_t bytes_per_row = 1000) {
  auto m = BatchWindow::Made::Allocate(rows, bytes_per_row, 0);
  m->rows = m->valid = rows;
  std::fill_n(m->images.get(), size_t(rows) * bytes_per_row, fill);
  std::fill_n(m->labels.get(), size_t(rows), fill);
  std::fill_n(m->indices.get(), size_t(rows), fill);
  return m;
}

TEST(BatchWindowTest, TheFirstToAskMakesItAndTheOthersAreServedIt) {
  BatchWindow w(1 << 20);
  const BatchWindow::Key k{7, 0, 3, 1};
  bool make = false;
  EXPECT_EQ(w.Take(k, nullptr, &make), nullptr);
  EXPECT_TRUE(make) << "nobody has it: the caller makes it";
  // Asked while it is being made: the waiter is called when it is put, on the maker's thread.
  std::vector<std::shared_ptr<const BatchWindow::Made>> got;
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(w.Take(k, [&got](std::shared_ptr<const BatchWindow::Made> m) { got.push_back(m); }, &make), nullptr);
    EXPECT_FALSE(make);
  }
  EXPECT_TRUE(got.empty());
  w.Put(k, MadeBatch(4, 9));
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0]->images.get()[0], 9);
  // Asked after: served at once. Another key, or another content, is not.
  auto now = w.Take(k, nullptr, &make);
  ASSERT_NE(now, nullptr);
  EXPECT_FALSE(make);
  EXPECT_EQ(now->rows, 4);
  EXPECT_EQ(w.Take({8, 0, 3, 1}, nullptr, &make), nullptr);
  EXPECT_TRUE(make);
  const BatchWindow::Counters c = w.counters();
  EXPECT_EQ(c.made, 1u);
  EXPECT_EQ(c.served, 3u);
}

TEST(BatchWindowTest, AMakerThatGivesUpSendsItsWaitersToMakeItThemselves) {
  BatchWindow w(1 << 20);
  const BatchWindow::Key k{1, 2, 3, 0};
  bool make = false;
  w.Take(k, nullptr, &make);
  ASSERT_TRUE(make);
  int told = 0;
  w.Take(k, [&told](std::shared_ptr<const BatchWindow::Made> m) { told += m == nullptr ? 1 : 100; }, &make);
  w.Abandon(k);
  EXPECT_EQ(told, 1);
  // Nothing is kept: the next to ask makes it.
  EXPECT_EQ(w.Take(k, nullptr, &make), nullptr);
  EXPECT_TRUE(make);
  EXPECT_EQ(w.counters().abandoned, 1u);
}

TEST(BatchWindowTest, TheWindowStaysWithinItsBytesDroppingTheLeastRecentlyUsed) {
  const uint64_t one = MadeBatch(10, 0)->bytes();
  BatchWindow w(3 * one);
  bool make = false;
  for (int64_t b = 0; b < 3; ++b) {
    w.Take({1, 0, 0, b}, nullptr, &make);
    w.Put({1, 0, 0, b}, MadeBatch(10, uint8_t(b)));
  }
  EXPECT_NE(w.Take({1, 0, 0, 0}, nullptr, &make), nullptr) << "batch 0 is used again: the newest";
  w.Take({1, 0, 0, 3}, nullptr, &make);
  w.Put({1, 0, 0, 3}, MadeBatch(10, 3));
  EXPECT_LE(w.counters().bytes, 3 * one);
  EXPECT_EQ(w.counters().evicted, 1u);
  EXPECT_NE(w.Take({1, 0, 0, 0}, nullptr, &make), nullptr);
  EXPECT_EQ(w.Take({1, 0, 0, 1}, nullptr, &make), nullptr) << "the least recently used went";
  EXPECT_TRUE(make);
  w.Abandon({1, 0, 0, 1});
  // A batch larger than the whole window reaches its waiters and is not kept.
  w.Take({2, 0, 0, 0}, nullptr, &make);
  int served = 0;
  w.Take({2, 0, 0, 0}, [&served](std::shared_ptr<const BatchWindow::Made> m) { served += m != nullptr; }, &make);
  w.Put({2, 0, 0, 0}, MadeBatch(100, 1));
  EXPECT_EQ(served, 1);
  EXPECT_EQ(w.Take({2, 0, 0, 0}, nullptr, &make), nullptr);
  EXPECT_LE(w.counters().bytes, 3 * one);
}

}  // namespace
}  // namespace ferry
