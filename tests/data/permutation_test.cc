// Tests of lib/data/permutation.h: EpochPermutation over a real dataset's size, the
// same on every open of the same listing.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <set>
#include <vector>

#include "data/data_test_util.h"
#include "data/dataset.h"
#include "data/permutation.h"
#include "testutil.h"

namespace ferry {
namespace {

using testing::MakeImageFolder;
using testing::MustOpen;
using testing::TempDir;

TEST(ImageFolderTest, EpochPermutationOverDatasetSize) {
  TempDir tmp;
  MakeImageFolder(tmp.path(), 3, 5);
  auto a = MustOpen(OpenImageFolder(tmp.path()));
  auto b = MustOpen(OpenImageFolder(tmp.path()));
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  const std::vector<int64_t> p = EpochPermutation(a->size(), 42, 3);
  EXPECT_EQ(p, EpochPermutation(b->size(), 42, 3));
  EXPECT_NE(p, EpochPermutation(a->size(), 42, 4));
  std::vector<int64_t> sorted = p;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int64_t> identity(static_cast<size_t>(a->size()));
  std::iota(identity.begin(), identity.end(), 0);
  EXPECT_EQ(sorted, identity);
  // Both opens agree on what each permuted index means.
  for (int64_t i : p) {
    EXPECT_EQ(a->Path(i), b->Path(i));
    EXPECT_EQ(a->Label(i), b->Label(i));
  }
}

TEST(PermutationTest, IsAPermutationAndDeterministic) {
  const auto p = EpochPermutation(1000, 7, 0);
  EXPECT_EQ(p, EpochPermutation(1000, 7, 0));
  EXPECT_NE(p, EpochPermutation(1000, 7, 1));
  EXPECT_NE(p, EpochPermutation(1000, 8, 0));
  std::set<int64_t> s(p.begin(), p.end());
  EXPECT_EQ(s.size(), 1000u);
  EXPECT_EQ(*s.begin(), 0);
  EXPECT_EQ(*s.rbegin(), 999);
  const auto id = EpochPermutation(5, 7, 0, /*shuffle=*/false);
  EXPECT_EQ(id, (std::vector<int64_t>{0, 1, 2, 3, 4}));
}

}  // namespace
}  // namespace ferry
