// Helpers shared by the dispatcher's tests.
#ifndef FERRY_TESTS_DISPATCH_DISPATCH_TEST_UTIL_H_
#define FERRY_TESTS_DISPATCH_DISPATCH_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "dispatch/state.h"
#include "ferry/job.h"

namespace ferry::dispatch::test {

// A job of `n` samples, batches of `batch`, `per_split` batches per split, `epochs`
// epochs (the defaults: 5 splits per epoch, 2 epochs).
inline JobSpec Spec(int64_t n = 100, int32_t batch = 10, int32_t per_split = 2, int64_t epochs = 2) {
  JobSpec c;
  c.dataset = "/data";
  c.num_samples = n;
  c.batch_size = batch;
  c.batches_per_split = per_split;
  c.epochs = epochs;
  return c;
}

inline CreateJob Create(const std::string& name = "job", int64_t n = 100, int32_t batch = 10, int32_t per_split = 2,
                        int64_t epochs = 2) {
  return CreateJob{name, Spec(n, batch, per_split, epochs)};
}

// A journal file of format 1 (an older Ferry: no magic; per record a u32 length, a
// u32 CRC-32 of the payload, the payload), written here independently of the journal.
inline std::string FormatOneJournal(const std::vector<std::string>& payloads) {
  std::string file;
  for (const std::string& payload : payloads) {
    uint32_t crc = 0xFFFFFFFFu;
    for (unsigned char b : payload) {
      crc ^= b;
      for (int k = 0; k < 8; ++k) crc = (crc & 1) ? 0xEDB88320u ^ (crc >> 1) : crc >> 1;
    }
    crc ^= 0xFFFFFFFFu;
    const uint32_t len = uint32_t(payload.size());
    file.append(reinterpret_cast<const char*>(&len), 4).append(reinterpret_cast<const char*>(&crc), 4) += payload;
  }
  return file;
}

inline void MustApply(DispatcherState& s, const Update& u) {
  Status st = s.Apply(u);
  ASSERT_TRUE(st.ok()) << st.ToString();
  ASSERT_EQ(s.CheckLeaseIndex(), "") << "the lease index after an update";
}

}  // namespace ferry::dispatch::test

#endif  // FERRY_TESTS_DISPATCH_DISPATCH_TEST_UTIL_H_
