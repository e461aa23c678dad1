// Fingerprint64: a fast, stable 64-bit hash for fingerprints of listings and specs.
// Stability matters more than speed here: the value travels between processes and
// machines, so it is defined byte-for-byte (FNV-1a mixed through a final avalanche)
// and must never depend on std::hash.
#ifndef FERRY_CORE_HASH_H_
#define FERRY_CORE_HASH_H_

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

namespace ferry {

class Fingerprinter {
 public:
  void Add(std::string_view bytes) {
    for (unsigned char c : bytes) {
      h_ ^= c;
      h_ *= 0x100000001b3ull;
    }
    // Length-delimit so that ("ab","c") and ("a","bc") differ.
    AddU64Raw(bytes.size());
  }
  void AddU64(uint64_t v) { AddU64Raw(v); }
  // Bytes without their length (for a stream hashed piece by piece: FinishRaw adds the
  // total length at the end, so that pieces hash as the whole would).
  void AddRaw(std::string_view bytes) {
    for (unsigned char c : bytes) {
      h_ ^= c;
      h_ *= 0x100000001b3ull;
    }
  }
  uint64_t FinishRaw(uint64_t total_length) const {
    Fingerprinter f = *this;
    f.AddU64Raw(total_length);
    return f.Finish();
  }
  uint64_t Finish() const {
    uint64_t z = h_;  // splitmix64 finalizer
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  std::string Hex() const {
    char buf[17];
    std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(Finish()));
    return buf;
  }

 private:
  void AddU64Raw(uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      h_ ^= (v >> (8 * i)) & 0xff;
      h_ *= 0x100000001b3ull;
    }
  }
  uint64_t h_ = 0xcbf29ce484222325ull;
};

}  // namespace ferry

#endif  // FERRY_CORE_HASH_H_
