// SplitId: one split of one epoch of a dispatcher job, the unit the dispatcher leases
// to a worker, a worker's feed serves, and a consumer acknowledges and saves in its
// IteratorState. One type for all of them (the dispatcher's state, the control
// plane's messages, the worker's feeds, the client's ledger), ordered by epoch, then
// split.
#ifndef FERRY_SPLIT_ID_H_
#define FERRY_SPLIT_ID_H_

#include <compare>
#include <cstdint>

namespace ferry {

struct SplitId {
  uint64_t epoch = 0;
  int64_t split = 0;
  friend auto operator<=>(const SplitId&, const SplitId&) = default;
};

}  // namespace ferry

#endif  // FERRY_SPLIT_ID_H_
