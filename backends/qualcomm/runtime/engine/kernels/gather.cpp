// Gather along an axis (table of any byte-sized dtype; INT_32 / INT_64 indices).
#include <cstring>

#include "backends/qualcomm/runtime/engine/kernels/KernelUtil.h"

namespace qnn_delegate {
namespace engine {
namespace {

template <typename Idx>
class GatherKernel final : public Kernel {
 public:
  GatherKernel(const OpView& v, size_t outer, size_t axis_dim, size_t num_idx, size_t row_bytes)
      : table_(v.inputs[0]->id),
        indices_(v.inputs[1]->id),
        out_(v.outputs[0]->id),
        outer_(outer),
        axis_dim_(axis_dim),
        num_idx_(num_idx),
        row_bytes_(row_bytes),
        op_name_(v.name),
        index_name_(v.inputs[1]->name) {}
  Status run(const RunContext& c) const override {
    const char* table = c.at<const char>(table_);
    const Idx* idx = c.at<const Idx>(indices_);
    char* y = c.at<char>(out_);
    for (size_t i = 0; i < num_idx_; ++i) {
      if (idx[i] < 0 || uint64_t(idx[i]) >= axis_dim_) {
        return make_error(ErrorKind::InvalidArgument,
                          "op '%s' (Gather): index %lld at position %zu of '%s' is out of range [0, %zu)",
                          op_name_.c_str(), (long long)idx[i], i, index_name_.c_str(), axis_dim_);
      }
    }
    for (size_t o = 0; o < outer_; ++o) {
      const char* src = table + o * axis_dim_ * row_bytes_;
      for (size_t i = 0; i < num_idx_; ++i) {
        std::memcpy(y, src + size_t(idx[i]) * row_bytes_, row_bytes_);
        y += row_bytes_;
      }
    }
    return Status::Ok();
  }

 private:
  uint32_t table_, indices_, out_;
  size_t outer_, axis_dim_, num_idx_, row_bytes_;
  std::string op_name_, index_name_;
};

Status create_gather(const OpView& v, KernelEnv&, KernelPtr& out) {
  QNN_RETURN_IF_ERROR(v.expect_arity(2, 2, 1));
  const TensorInfo& table = *v.inputs[0];
  const TensorInfo& indices = *v.inputs[1];
  int64_t axis = 0;
  QNN_RETURN_IF_ERROR(ParamReader(v).scalar_int("axis", DType::INT_32, axis));
  const int64_t rank = int64_t(table.rank());
  if (axis < 0) axis += rank;
  if (axis < 0 || axis >= rank) {
    return v.fail(ErrorKind::InvalidProgram, "axis out of range for table '%s' %s", table.name.c_str(),
                  dims_to_string(table.dims).c_str());
  }
  if (indices.dtype != DType::INT_32 && indices.dtype != DType::INT_64) {
    return v.fail(ErrorKind::NotSupported, "indices '%s' have data type %s (INT_32 or INT_64 needed)",
                  indices.name.c_str(), dtype_name(indices.dtype));
  }
  size_t es = 0;
  QNN_RETURN_IF_ERROR(byte_element_size(v, table, es));
  Dims out_dims(table.dims.begin(), table.dims.begin() + axis);
  out_dims.insert(out_dims.end(), indices.dims.begin(), indices.dims.end());
  out_dims.insert(out_dims.end(), table.dims.begin() + axis + 1, table.dims.end());
  QNN_RETURN_IF_ERROR(v.expect_output(0, out_dims, table.dtype));
  const size_t outer = product(table.dims, 0, axis);
  const size_t row_bytes = product(table.dims, axis + 1) * es;
  if (indices.dtype == DType::INT_32) {
    return emplace_kernel<GatherKernel<int32_t>>(out, v, outer, table.dims[axis], indices.numel, row_bytes);
  }
  return emplace_kernel<GatherKernel<int64_t>>(out, v, outer, table.dims[axis], indices.numel, row_bytes);
}

}  // namespace

QNN_REGISTER_KERNEL(Float, Gather, &create_gather);

}  // namespace engine
}  // namespace qnn_delegate
