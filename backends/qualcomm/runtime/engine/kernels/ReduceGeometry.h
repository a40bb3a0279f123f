// Geometry of a reduction over a set of axes (ReduceSum / Mean / Max / Min, float and
// quantized), as ConvGeometry is for the convolutions: the "axes" / "keep_dims" params, the
// output dims, and the walk that maps each input element to its output.
#pragma once

#include <vector>

#include "backends/qualcomm/runtime/engine/kernels/KernelUtil.h"

namespace qnn_delegate {
namespace engine {

struct ReduceGeometry {
  Dims in_dims;               // the input's
  Dims out_dims;              // reduced axes dropped, or 1 with keep_dims
  std::vector<bool> reduced;  // per input axis
  Index out_strides{};        // per input axis: the output's stride, 0 on reduced axes
  size_t count = 1;           // input elements per output element
  size_t out_numel = 1;
  Dims outer;  // all input axes but the innermost

  // f(i, o, n, stride): the input elements i .. i + n - 1 (a run of the innermost axis) go to
  // outputs o, o + stride, .., in input order. No allocation.
  template <typename F>
  void for_each_run(F f) const {
    if (product(in_dims) == 0) return;
    const size_t rank = in_dims.size();
    const size_t inner = rank ? in_dims[rank - 1] : 1;
    const size_t inner_stride = rank ? out_strides[rank - 1] : 0;
    Index idx{};
    size_t i = 0;
    do {
      size_t o = 0;
      for (size_t d = 0; d < outer.size(); ++d) o += idx[d] * out_strides[d];
      f(i, o, inner, inner_stride);
      i += inner;
    } while (next_index(idx, outer));
  }
};

// Reads "axes" (UINT_32, each in range and at most once: else InvalidProgram) and the optional
// "keep_dims" of op v on input x. reject_empty: an empty reduced axis is InvalidProgram too.
Status reduce_geometry(const OpView& v, const TensorInfo& x, bool reject_empty, ReduceGeometry& g);

}  // namespace engine
}  // namespace qnn_delegate
