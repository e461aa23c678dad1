// Read-ahead for datasets whose reads wait on a network (objects in a bucket): an I/O
// stage of its own threads fetches the samples the producer has planned
// (Dataset::Prefetch, called as each batch is planned), many requests in flight and
// bounded in bytes, so that the decode threads find the bytes there when they get to a
// sample (ReadSample takes them) instead of waiting one request's latency per sample.
//
//   requests  fetches in flight at once (threads of this stage): with 50 ms per request
//             and 32 in flight, 640 samples a second: a worker's decode rate and more
//   bytes     fetched-but-not-yet-taken bytes at most (a sample over it is fetched
//             alone); planned samples wait in line beyond it
//
// A sample taken before its fetch started is read on the taking thread (its queue entry
// is dropped); one whose fetch is in flight is waited for. A fetched sample nobody takes
// within `keep_s` (its stream stopped, its split went to another worker) is dropped.
// Errors are the inner dataset's, returned by ReadSample as they came.
#ifndef FERRY_DATA_READ_AHEAD_H_
#define FERRY_DATA_READ_AHEAD_H_

#include <cstdint>
#include <memory>

#include "data/dataset.h"

namespace ferry {

struct ReadAheadOptions {
  int requests = 32;
  uint64_t bytes = uint64_t{256} << 20;
  double keep_s = 60;
};

// `inner`'s reads, fetched ahead by a stage of `options.requests` threads.
std::unique_ptr<Dataset> WithReadAhead(std::unique_ptr<Dataset> inner, const ReadAheadOptions& options);

}  // namespace ferry

#endif  // FERRY_DATA_READ_AHEAD_H_
