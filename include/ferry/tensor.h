// TensorView: a non-owning view of a dense tensor (dtype, shape, contiguous strides).
// Views never own memory; whoever hands one out says how long it stays valid (for a
// Batch: as long as the Batch lives).
#ifndef FERRY_TENSOR_H_
#define FERRY_TENSOR_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace ferry {

enum class DType : uint8_t { kUint8 = 0, kInt64 = 1, kFloat32 = 2, kInt32 = 3 };

inline size_t DTypeSize(DType t) {
  switch (t) {
    case DType::kUint8: return 1;
    case DType::kInt64: return 8;
    case DType::kFloat32: return 4;
    case DType::kInt32: return 4;
  }
  return 0;
}

inline std::string_view DTypeName(DType t) {
  switch (t) {
    case DType::kUint8: return "uint8";
    case DType::kInt64: return "int64";
    case DType::kFloat32: return "float32";
    case DType::kInt32: return "int32";
  }
  return "?";
}

struct TensorView {
  void* data = nullptr;
  DType dtype = DType::kUint8;
  int rank = 0;
  std::array<int64_t, 4> shape{};  // only the first `rank` entries are meaningful

  int64_t num_elements() const {
    int64_t n = 1;
    for (int i = 0; i < rank; ++i) n *= shape[i];
    return n;
  }
  size_t num_bytes() const { return size_t(num_elements()) * DTypeSize(dtype); }
  template <typename T>
  T* as() const { return static_cast<T*>(data); }
};

}  // namespace ferry

#endif  // FERRY_TENSOR_H_
