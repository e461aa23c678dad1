// Epoch order: a deterministic permutation of [0, n) drawn from (seed, epoch).
// Every worker, the dispatcher and the in-process loader compute the same order, so
// it is never sent over the wire. Fisher-Yates driven by Philox (see core/philox.h).
#ifndef FERRY_DATA_PERMUTATION_H_
#define FERRY_DATA_PERMUTATION_H_

#include <cstdint>
#include <vector>

namespace ferry {

// Returns the epoch order. With shuffle == false it is the identity.
std::vector<int64_t> EpochPermutation(int64_t n, uint64_t seed, uint64_t epoch, bool shuffle = true);

}  // namespace ferry

#endif  // FERRY_DATA_PERMUTATION_H_
