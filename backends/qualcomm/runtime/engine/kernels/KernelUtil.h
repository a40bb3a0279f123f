// Helpers shared by kernel files: broadcasting, axis normalisation, index walks.
#pragma once

#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <utility>

#include "backends/qualcomm/runtime/engine/Kernel.h"
#include "backends/qualcomm/runtime/engine/Params.h"
#include "backends/qualcomm/runtime/engine/Simd.h"

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

// The rows of a binary elementwise op's broadcast output: row(oa, ia, ob, ib, o, n) for n
// outputs from out[o], reading a[oa + i * ia] and b[ob + i * ib] (strides 0 or 1). One flat row
// when an input is full-size or a scalar, else one row per index of all but the innermost axis
// (`outer`). `sa` / `sb` from broadcast_strides; no allocation.
template <typename R>
void for_each_broadcast_row(size_t numel, size_t a_numel, size_t b_numel, const Dims& dims, const Index& sa,
                            const Index& sb, const Dims& outer, R row) {
  if (numel == 0) return;
  if ((a_numel == numel || a_numel == 1) && (b_numel == numel || b_numel == 1)) {
    row(size_t(0), size_t(a_numel == numel), size_t(0), size_t(b_numel == numel), size_t(0), numel);
    return;
  }
  const size_t rank = dims.size();
  const size_t inner = dims[rank - 1];
  const size_t ia = sa[rank - 1], ib = sb[rank - 1];
  Index idx{};
  size_t o = 0;
  do {
    size_t oa = 0, ob = 0;
    for (size_t d = 0; d + 1 < rank; ++d) {
      oa += idx[d] * sa[d];
      ob += idx[d] * sb[d];
    }
    row(oa, ia, ob, ib, o, inner);
    o += inner;
  } while (next_index(idx, outer));
}

// out = f(a, b) over the broadcast output of a binary elementwise op (for_each_broadcast_row).
template <typename T, typename F>
void apply_broadcast(const T* a, const T* b, T* out, size_t numel, size_t a_numel, size_t b_numel, const Dims& dims,
                     const Index& sa, const Index& sb, const Dims& outer, F f) {
  for_each_broadcast_row(numel, a_numel, b_numel, dims, sa, sb, outer,
                         [&](size_t oa, size_t ia, size_t ob, size_t ib, size_t o, size_t n) {
                           if (ia == 1 && ib == 1) {
                             for (size_t i = 0; i < n; ++i) out[o + i] = f(a[oa + i], b[ob + i]);
                           } else {
                             for (size_t i = 0; i < n; ++i) out[o + i] = f(a[oa + i * ia], b[ob + i * ib]);
                           }
                         });
}

// acc + sum over k < K of a[k * sa] * b[k * sb], added in k order, the products of the first
// K - K % kBlock terms rounded before they are added and the last K % kBlock terms fused
// (fma): the numbers the float reference dot products (Conv2d / FullyConnected with dynamic
// weights, MatMul on a transposed b) have always given (the vectorized loops of the former
// -march=native build, kBlock lanes each). Pinned so that every build gives them.
template <size_t kBlock>
inline float dot_tail_fused(float acc, const float* a, size_t sa, const float* b, size_t sb, size_t K) {
  const size_t head = K - K % kBlock;
  size_t k = 0;
  for (; k < head; ++k) acc += a[k * sa] * b[k * sb];
  for (; k < K; ++k) acc = std::fma(a[k * sa], b[k * sb], acc);
  return acc;
}

// y[i] = fma(a, x[i], y[i]) for i < n. Compiled for x86-64 and x86-64-v3 (Simd.h:
// QNN_FMA_CLONES), so the fused multiply-adds run as instructions where the CPU has them.
void fma_axpy(float a, const float* x, float* y, size_t n);

// Element size of a byte-addressable tensor (fails for packed 4-bit types).
Status byte_element_size(const OpView& view, const TensorInfo& t, size_t& out);

}  // namespace engine
}  // namespace qnn_delegate
