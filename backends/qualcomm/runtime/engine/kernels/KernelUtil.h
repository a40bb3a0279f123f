// Helpers shared by kernel files: broadcasting, axis normalisation, index walks.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <utility>

#include "backends/qualcomm/runtime/engine/Kernel.h"
#include "backends/qualcomm/runtime/engine/Params.h"

namespace qnn_delegate {
namespace engine {

constexpr size_t kMaxDims = 8;
using Index = std::array<size_t, kMaxDims>;

// numpy broadcast of two shapes; false when incompatible.
bool broadcast_dims(const Dims& a, const Dims& b, Dims& out);

// Strides of `in` (right-aligned inside `out` rank) with 0 on broadcast axes.
Index broadcast_strides(const Dims& in, const Dims& out);

// Row-major strides of `dims`.
Index contiguous_strides(const Dims& dims);

// Creates kernel `K` (constructed from `args`) and stores it in `out`.
template <typename K, typename... Args>
Status emplace_kernel(KernelPtr& out, Args&&... args) {
  out.reset(new K(std::forward<Args>(args)...));
  return Status::Ok();
}

// Iterates an N-d index over `dims` (row-major); returns false when done.
inline bool next_index(Index& idx, const Dims& dims) {
  for (size_t d = dims.size(); d-- > 0;) {
    if (++idx[d] < dims[d]) return true;
    idx[d] = 0;
  }
  return false;
}

// Element size of a byte-addressable tensor (fails for packed 4-bit types).
Status byte_element_size(const OpView& view, const TensorInfo& t, size_t& out);

} // namespace engine
} // namespace qnn_delegate
