#include "backends/qualcomm/runtime/engine/kernels/KernelUtil.h"

#include <algorithm>

namespace qnn_delegate {
namespace engine {

bool broadcast_dims(const Dims& a, const Dims& b, Dims& out) {
  const size_t rank = std::max(a.size(), b.size());
  out.assign(rank, 1);
  for (size_t i = 0; i < rank; ++i) {
    const uint32_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    const uint32_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da != db && da != 1 && db != 1) return false;
    out[i] = da == 1 ? db : da;
  }
  return true;
}

Index broadcast_strides(const Dims& in, const Dims& out) {
  Index strides{};
  const size_t off = out.size() - in.size();
  size_t s = 1;
  for (size_t i = in.size(); i-- > 0;) {
    strides[i + off] = in[i] == 1 ? 0 : s;
    s *= in[i];
  }
  return strides;
}

Index contiguous_strides(const Dims& dims) {
  Index strides{};
  size_t s = 1;
  for (size_t i = dims.size(); i-- > 0;) {
    strides[i] = s;
    s *= dims[i];
  }
  return strides;
}

QNN_FMA_CLONES void fma_axpy(float a, const float* x, float* y, size_t n) {
  for (size_t i = 0; i < n; ++i) y[i] = std::fma(a, x[i], y[i]);
}

Status byte_element_size(const OpView& view, const TensorInfo& t, size_t& out) {
  out = element_size(t.dtype);
  if (out == 0) {
    return view.fail(ErrorKind::NotSupported, "tensor '%s' has sub-byte data type %s", t.name.c_str(),
                     dtype_name(t.dtype));
  }
  return Status::Ok();
}

}  // namespace engine
}  // namespace qnn_delegate
