// Philox4x32-10, a counter-based random number generator (Salmon et al., SC'11).
//
// Why counter-based: a sample's random choices (crop box, flip, jitter) must be the
// same whichever thread, worker or retry produces it. Philox maps (key, counter) to
// random bits with no state carried between samples, so keying it by
// (seed, epoch, sample_index) makes every sample's draws a pure function of those.
//
// SampleRng gives a small stream of draws for one sample: the counter holds
// (sample_index, epoch mod 2^32, purpose << 24 | block_number), the key holds the
// seed. A stream therefore has 2^24 blocks (2^26 draws of 32 bits) before it would
// run into the next purpose; the largest user, an epoch permutation, needs two
// draws per sample.
#ifndef FERRY_CORE_PHILOX_H_
#define FERRY_CORE_PHILOX_H_

#include <array>
#include <cmath>
#include <cstdint>

namespace ferry {

using PhiloxBlock = std::array<uint32_t, 4>;

inline PhiloxBlock Philox4x32(PhiloxBlock ctr, std::array<uint32_t, 2> key) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = uint64_t{kM0} * ctr[0];
    const uint64_t p1 = uint64_t{kM1} * ctr[2];
    ctr = {uint32_t(p1 >> 32) ^ ctr[1] ^ key[0], uint32_t(p1), uint32_t(p0 >> 32) ^ ctr[3] ^ key[1],
           uint32_t(p0)};
    key[0] += kW0;
    key[1] += kW1;
  }
  return ctr;
}

// A deterministic stream of random numbers for one (seed, epoch, index, purpose).
// Thread-compatible; cheap to construct (no state beyond the counter).
class SampleRng {
 public:
  SampleRng(uint64_t seed, uint64_t epoch, uint64_t index, uint32_t purpose = 0)
      : key_{uint32_t(seed), uint32_t(seed >> 32)},
        ctr_{uint32_t(index), uint32_t(index >> 32), uint32_t(epoch), purpose << 24} {}

  uint32_t NextU32() {
    if (pos_ == 4) {
      block_ = Philox4x32(ctr_, key_);
      ++ctr_[3];  // low bits of word 3 count blocks within this sample's stream
      pos_ = 0;
    }
    return block_[pos_++];
  }
  uint64_t NextU64() { return (uint64_t{NextU32()} << 32) | NextU32(); }
  // Uniform double in [0, 1) with 53 random bits.
  double Uniform() { return double(NextU64() >> 11) * 0x1.0p-53; }
  double Uniform(double lo, double hi) { return lo + (hi - lo) * Uniform(); }
  // Uniform integer in [0, n), n > 0, without modulo bias (Lemire's method).
  uint64_t Below(uint64_t n) {
    if (n <= 1) return 0;
    for (;;) {
      const uint64_t x = NextU64();
      const unsigned __int128 m = (unsigned __int128)x * n;
      const uint64_t low = uint64_t(m);
      if (low >= n || low >= (-n) % n) return uint64_t(m >> 64);
    }
  }
  bool Bernoulli(double p) { return Uniform() < p; }

 private:
  std::array<uint32_t, 2> key_;
  PhiloxBlock ctr_;
  PhiloxBlock block_{};
  int pos_ = 4;
};

}  // namespace ferry

#endif  // FERRY_CORE_PHILOX_H_
