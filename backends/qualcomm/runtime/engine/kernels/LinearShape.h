// Shapes of FullyConnected and MatMul, shared by the float and integer
// kernels: param reading, dims checks, output shape inference.
#pragma once

#include "backends/qualcomm/runtime/engine/kernels/KernelUtil.h"

namespace qnn_delegate {
namespace engine {

struct FcShape {
  uint32_t x, w, b, out;
  size_t M, N, K;
};

struct MatMulShape {
  uint32_t a, b, out;
  size_t M, N, K;
  bool ta, tb;
  Dims batch;        // broadcast batch dims
  Index sa{}, sb{};  // batch strides in matrices (0 = broadcast)
  size_t batches;
};

// Checks dims (not dtypes) and the output dims; the output dtype must be `out_dtype`.
Status fc_shape(const OpView& v, DType out_dtype, FcShape& s);
Status matmul_shape(const OpView& v, DType out_dtype, MatMulShape& s);

}  // namespace engine
}  // namespace qnn_delegate
