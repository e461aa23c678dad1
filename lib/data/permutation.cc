#include "data/permutation.h"

#include <numeric>
#include <utility>

#include "core/philox.h"

namespace ferry {

std::vector<int64_t> EpochPermutation(int64_t n, uint64_t seed, uint64_t epoch, bool shuffle) {
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), int64_t{0});
  if (!shuffle || n < 2) return order;
  // One Philox stream keyed by (seed, epoch); purpose 1 separates it from the
  // per-sample augmentation streams, which use purpose 0 and index = sample index.
  SampleRng rng(seed, epoch, /*index=*/0, /*purpose=*/1);
  for (int64_t i = n - 1; i > 0; --i) {
    const int64_t j = static_cast<int64_t>(rng.Below(static_cast<uint64_t>(i) + 1));
    std::swap(order[i], order[j]);
  }
  return order;
}

}  // namespace ferry
