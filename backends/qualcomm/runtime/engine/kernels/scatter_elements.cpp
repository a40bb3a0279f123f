// ScatterElements (torch.scatter / scatter_add / scatter_reduce sum, prod): out = data, then for
// each position i of `indices`, out[i with i[axis] replaced by indices[i]] = / += / *= updates[i]
// (in row-major order of i: the last write wins for reduction none). Float32 data (quantized
// graphs run it on dequantized values: QuantDispatch); an index out of range is an execute error.
#include <cstring>

#include "backends/qualcomm/runtime/engine/kernels/KernelUtil.h"

namespace qnn_delegate {
namespace engine {
namespace {

enum class Reduction : int64_t { kNone = 0, kAdd = 1, kMul = 2 };

template <typename Idx>
class ScatterElementsKernel final : public Kernel {
 public:
  ScatterElementsKernel(const OpView& v, size_t axis, Reduction reduction)
      : data_(v.inputs[0]->id),
        indices_(v.inputs[1]->id),
        updates_(v.inputs[2]->id),
        out_(v.outputs[0]->id),
        axis_(axis),
        reduction_(reduction),
        data_dims_(v.inputs[0]->dims),
        idx_dims_(v.inputs[1]->dims),
        strides_(contiguous_strides(v.inputs[0]->dims)),
        nbytes_(v.inputs[0]->nbytes),
        op_name_(v.name),
        index_name_(v.inputs[1]->name) {}
  Status run(const RunContext& c) const override {
    const Idx* idx = c.at<const Idx>(indices_);
    const size_t n = product(idx_dims_);
    const uint64_t limit = data_dims_[axis_];
    for (size_t i = 0; i < n; ++i) {
      if (idx[i] < 0 || uint64_t(idx[i]) >= limit) {
        return make_error(ErrorKind::InvalidArgument,
                          "op '%s' (ScatterElements): index %lld at position %zu of '%s' is out of range [0, %llu)",
                          op_name_.c_str(), (long long)idx[i], i, index_name_.c_str(), (unsigned long long)limit);
      }
    }
    float* y = c.at<float>(out_);
    const float* data = c.at<const float>(data_);
    if (static_cast<const void*>(y) != static_cast<const void*>(data) && nbytes_) std::memmove(y, data, nbytes_);
    const float* updates = c.at<const float>(updates_);
    if (n == 0) return Status::Ok();
    Index at{};
    for (size_t i = 0; i < n; ++i) {
      size_t off = 0;
      for (size_t d = 0; d < idx_dims_.size(); ++d) off += (d == axis_ ? size_t(idx[i]) : at[d]) * strides_[d];
      switch (reduction_) {
        case Reduction::kNone:
          y[off] = updates[i];
          break;
        case Reduction::kAdd:
          y[off] += updates[i];
          break;
        case Reduction::kMul:
          y[off] *= updates[i];
          break;
      }
      next_index(at, idx_dims_);
    }
    return Status::Ok();
  }

 private:
  uint32_t data_, indices_, updates_, out_;
  size_t axis_;
  Reduction reduction_;
  Dims data_dims_, idx_dims_;
  Index strides_;
  size_t nbytes_;
  std::string op_name_, index_name_;
};

Status check_shapes(const OpView& v, int64_t axis) {
  const TensorInfo& data = *v.inputs[0];
  const TensorInfo& indices = *v.inputs[1];
  const TensorInfo& updates = *v.inputs[2];
  if (data.rank() == 0 || axis < 0 || size_t(axis) >= data.rank()) {
    return v.fail(ErrorKind::InvalidProgram, "axis %lld out of range for data '%s' %s", (long long)axis,
                  data.name.c_str(), dims_to_string(data.dims).c_str());
  }
  if (indices.dtype != DType::INT_32 && indices.dtype != DType::INT_64) {
    return v.fail(ErrorKind::NotSupported, "indices '%s' have data type %s (INT_32 or INT_64 needed)",
                  indices.name.c_str(), dtype_name(indices.dtype));
  }
  bool fits = indices.rank() == data.rank() && updates.dims == indices.dims;
  for (size_t d = 0; fits && d < data.rank(); ++d) fits = d == size_t(axis) || indices.dims[d] <= data.dims[d];
  if (!fits) {
    return v.fail(ErrorKind::InvalidProgram, "indices '%s' %s / updates '%s' %s do not fit data '%s' %s",
                  indices.name.c_str(), dims_to_string(indices.dims).c_str(), updates.name.c_str(),
                  dims_to_string(updates.dims).c_str(), data.name.c_str(), dims_to_string(data.dims).c_str());
  }
  QNN_RETURN_IF_ERROR(v.expect_float(data));
  QNN_RETURN_IF_ERROR(v.expect_float(updates));
  return v.expect_output(0, data.dims, data.dtype);
}

Status create_scatter_elements(const OpView& v, KernelEnv&, KernelPtr& out) {
  QNN_RETURN_IF_ERROR(v.expect_arity(3, 3, 1));
  ParamReader params(v);
  int64_t axis = 0, reduction = 0;
  QNN_RETURN_IF_ERROR(params.scalar_int("axis", DType::UINT_32, axis));
  if (params.has("reduction")) QNN_RETURN_IF_ERROR(params.scalar_int("reduction", DType::UINT_32, reduction));
  if (reduction < 0 || reduction > 2) {
    return v.fail(ErrorKind::NotSupported, "reduction %lld is not supported (0 none, 1 add, 2 mul)",
                  (long long)reduction);
  }
  QNN_RETURN_IF_ERROR(check_shapes(v, axis));
  const Reduction r = static_cast<Reduction>(reduction);
  if (v.inputs[1]->dtype == DType::INT_32) {
    return emplace_kernel<ScatterElementsKernel<int32_t>>(out, v, size_t(axis), r);
  }
  return emplace_kernel<ScatterElementsKernel<int64_t>>(out, v, size_t(axis), r);
}

}  // namespace

QNN_REGISTER_KERNEL(Float, ScatterElements, &create_scatter_elements);

}  // namespace engine
}  // namespace qnn_delegate
