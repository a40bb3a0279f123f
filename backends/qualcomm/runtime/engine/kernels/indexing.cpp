// Indexing ops, dtype-agnostic by element size: Split (one input, n outputs along an axis),
// ScatterNd (copy of `data` with the slices addressed by `indices` replaced by `updates`, in
// order: the last write wins; reduction 1 adds them instead, for FLOAT_32 / INT_32 / INT_64 data,
// duplicates summed in order; reduction 2 multiplies, FLOAT_32) and GatherElements (torch.gather).
#include <cstring>

#include "backends/qualcomm/runtime/engine/kernels/KernelUtil.h"

namespace qnn_delegate {
namespace engine {
namespace {

// ---- Split ------------------------------------------------------------------------
class SplitKernel final : public Kernel {
 public:
  SplitKernel(uint32_t in, std::vector<uint32_t> outs, std::vector<size_t> chunk_bytes, size_t outer)
      : in_(in), outs_(std::move(outs)), chunk_(std::move(chunk_bytes)), outer_(outer) {}
  Status run(const RunContext& c) const override {
    const char* x = c.at<const char>(in_);
    for (size_t o = 0; o < outer_; ++o)
      for (size_t i = 0; i < outs_.size(); ++i) {
        if (chunk_[i] == 0) continue;
        std::memcpy(c.at<char>(outs_[i]) + o * chunk_[i], x, chunk_[i]);
        x += chunk_[i];
      }
    return Status::Ok();
  }

 private:
  uint32_t in_;
  std::vector<uint32_t> outs_;
  std::vector<size_t> chunk_;
  size_t outer_;
};

Status create_split(const OpView& v, KernelEnv&, KernelPtr& out) {
  if (v.outputs.size() < 2) {
    return v.fail(ErrorKind::InvalidProgram, "expects at least 2 outputs, got %zu", v.outputs.size());
  }
  QNN_RETURN_IF_ERROR(v.expect_arity(1, 1, int(v.outputs.size())));
  const TensorInfo& x = *v.inputs[0];
  int64_t axis = 0;
  QNN_RETURN_IF_ERROR(ParamReader(v).scalar_int("axis", DType::UINT_32, axis));
  if (axis < 0 || size_t(axis) >= x.rank()) {
    return v.fail(ErrorKind::InvalidProgram, "axis %lld out of range for input '%s' %s", (long long)axis,
                  x.name.c_str(), dims_to_string(x.dims).c_str());
  }
  std::vector<int64_t> starts;
  QNN_RETURN_IF_ERROR(
      ParamReader(v).tensor_int("split_index", DType::UINT_32, {uint32_t(v.outputs.size() - 1)}, starts));
  starts.insert(starts.begin(), 0);
  starts.push_back(int64_t(x.dims[axis]));
  size_t es = 0;
  QNN_RETURN_IF_ERROR(byte_element_size(v, x, es));
  const size_t inner = product(x.dims, axis + 1) * es;
  std::vector<uint32_t> ids;
  std::vector<size_t> chunks;
  for (size_t i = 0; i < v.outputs.size(); ++i) {
    if (starts[i + 1] <= starts[i]) {
      return v.fail(ErrorKind::InvalidProgram,
                    "'split_index' must be strictly increasing inside (0, %u) (axis %lld of '%s' %s)", x.dims[axis],
                    (long long)axis, x.name.c_str(), dims_to_string(x.dims).c_str());
    }
    Dims dims = x.dims;
    dims[axis] = uint32_t(starts[i + 1] - starts[i]);
    QNN_RETURN_IF_ERROR(v.expect_output(i, dims, x.dtype));
    ids.push_back(v.outputs[i]->id);
    chunks.push_back(size_t(dims[axis]) * inner);
  }
  return emplace_kernel<SplitKernel>(out, x.id, ids, chunks, product(x.dims, 0, axis));
}

// ---- ScatterNd --------------------------------------------------------------------
// How a slice of updates lands on the output: copied (reduction none) or added element-wise.
struct CopySlice {
  static void apply(char* y, const char* u, size_t bytes) { std::memcpy(y, u, bytes); }
};
template <typename T>
struct AddSlice {
  static void apply(char* y, const char* u, size_t bytes) {
    T* out = reinterpret_cast<T*>(y);
    const T* add = reinterpret_cast<const T*>(u);
    for (size_t i = 0, n = bytes / sizeof(T); i < n; ++i) out[i] += add[i];
  }
};

template <typename T>
struct MulSlice {
  static void apply(char* y, const char* u, size_t bytes) {
    T* out = reinterpret_cast<T*>(y);
    const T* factor = reinterpret_cast<const T*>(u);
    for (size_t i = 0, n = bytes / sizeof(T); i < n; ++i) out[i] *= factor[i];
  }
};

template <typename Idx, typename Land>
class ScatterNdKernel final : public Kernel {
 public:
  ScatterNdKernel(const OpView& v, size_t depth, size_t count, size_t slice_bytes, const Index& strides)
      : data_(v.inputs[0]->id),
        indices_(v.inputs[1]->id),
        updates_(v.inputs[2]->id),
        out_(v.outputs[0]->id),
        data_bytes_(v.inputs[0]->nbytes),
        depth_(depth),
        count_(count),
        slice_bytes_(slice_bytes),
        strides_(strides),
        dims_(v.inputs[0]->dims),
        op_name_(v.name),
        index_name_(v.inputs[1]->name) {}
  Status run(const RunContext& c) const override {
    const Idx* idx = c.at<const Idx>(indices_);
    for (size_t j = 0; j < count_ * depth_; ++j) {
      const size_t d = j % depth_;
      if (idx[j] < 0 || uint64_t(idx[j]) >= dims_[d]) {
        return make_error(ErrorKind::InvalidArgument,
                          "op '%s' (ScatterNd): index %lld at position %zu of '%s' is out of range [0, %u)",
                          op_name_.c_str(), (long long)idx[j], j, index_name_.c_str(), dims_[d]);
      }
    }
    char* y = c.at<char>(out_);
    const char* data = c.at<const char>(data_);
    if (y != data && data_bytes_) std::memmove(y, data, data_bytes_);
    const char* updates = c.at<const char>(updates_);
    for (size_t j = 0; j < count_; ++j) {
      size_t slice = 0;
      for (size_t d = 0; d < depth_; ++d) slice += size_t(idx[j * depth_ + d]) * strides_[d];
      Land::apply(y + slice * slice_bytes_, updates + j * slice_bytes_, slice_bytes_);
    }
    return Status::Ok();
  }

 private:
  uint32_t data_, indices_, updates_, out_;
  size_t data_bytes_, depth_, count_, slice_bytes_;
  Index strides_;  // in slices, over the first depth_ axes of data
  Dims dims_;
  std::string op_name_, index_name_;
};

Status check_scatter_nd_shapes(const OpView& v, size_t& depth, size_t& count) {
  const TensorInfo& data = *v.inputs[0];
  const TensorInfo& indices = *v.inputs[1];
  const TensorInfo& updates = *v.inputs[2];
  if (indices.dtype != DType::INT_32 && indices.dtype != DType::INT_64) {
    return v.fail(ErrorKind::NotSupported, "indices '%s' have data type %s (INT_32 or INT_64 needed)",
                  indices.name.c_str(), dtype_name(indices.dtype));
  }
  if (indices.rank() == 0 || indices.dims.back() == 0 || indices.dims.back() > data.rank()) {
    return v.fail(ErrorKind::InvalidProgram, "indices '%s' %s: the last dim must be in [1, rank %zu of '%s']",
                  indices.name.c_str(), dims_to_string(indices.dims).c_str(), data.rank(), data.name.c_str());
  }
  depth = indices.dims.back();
  count = product(indices.dims, 0, indices.rank() - 1);
  Dims expected(indices.dims.begin(), indices.dims.end() - 1);
  expected.insert(expected.end(), data.dims.begin() + depth, data.dims.end());
  if (updates.dims != expected || updates.dtype != data.dtype) {
    return v.fail(ErrorKind::InvalidProgram, "updates '%s' %s %s: expected %s %s", updates.name.c_str(),
                  dims_to_string(updates.dims).c_str(), dtype_name(updates.dtype), dims_to_string(expected).c_str(),
                  dtype_name(data.dtype));
  }
  return v.expect_output(0, data.dims, data.dtype);
}

template <typename Land>
Status emplace_scatter_nd(const OpView& v, size_t depth, size_t count, size_t slice_bytes, const Index& strides,
                          KernelPtr& out) {
  if (v.inputs[1]->dtype == DType::INT_32) {
    return emplace_kernel<ScatterNdKernel<int32_t, Land>>(out, v, depth, count, slice_bytes, strides);
  }
  return emplace_kernel<ScatterNdKernel<int64_t, Land>>(out, v, depth, count, slice_bytes, strides);
}

Status create_scatter_nd(const OpView& v, KernelEnv&, KernelPtr& out) {
  QNN_RETURN_IF_ERROR(v.expect_arity(3, 3, 1));
  ParamReader params(v);
  int64_t reduction = 0;
  if (params.has("reduction")) QNN_RETURN_IF_ERROR(params.scalar_int("reduction", DType::UINT_32, reduction));
  if (reduction < 0 || reduction > 2) {
    return v.fail(ErrorKind::NotSupported, "reduction %lld is not supported (0 = none, 1 = add, 2 = mul)",
                  (long long)reduction);
  }
  size_t depth = 0, count = 0;
  QNN_RETURN_IF_ERROR(check_scatter_nd_shapes(v, depth, count));
  const TensorInfo& data = *v.inputs[0];
  size_t es = 0;
  QNN_RETURN_IF_ERROR(byte_element_size(v, data, es));
  Index strides{};
  size_t stride = 1;
  for (size_t d = depth; d-- > 0;) {
    strides[d] = stride;
    stride *= data.dims[d];
  }
  const size_t slice_bytes = product(data.dims, depth) * es;
  if (reduction == 0) return emplace_scatter_nd<CopySlice>(v, depth, count, slice_bytes, strides, out);
  if (reduction == 2) {
    if (data.dtype != DType::FLOAT_32) {
      return v.fail(ErrorKind::NotSupported, "reduction 2 (mul) on data '%s' of data type %s (FLOAT_32 needed)",
                    data.name.c_str(), dtype_name(data.dtype));
    }
    return emplace_scatter_nd<MulSlice<float>>(v, depth, count, slice_bytes, strides, out);
  }
  switch (data.dtype) {
    case DType::FLOAT_32:
      return emplace_scatter_nd<AddSlice<float>>(v, depth, count, slice_bytes, strides, out);
    case DType::INT_32:
      return emplace_scatter_nd<AddSlice<int32_t>>(v, depth, count, slice_bytes, strides, out);
    case DType::INT_64:
      return emplace_scatter_nd<AddSlice<int64_t>>(v, depth, count, slice_bytes, strides, out);
    default:
      return v.fail(ErrorKind::NotSupported,
                    "reduction 1 (add) on data '%s' of data type %s (FLOAT_32, INT_32 or "
                    "INT_64 needed)",
                    data.name.c_str(), dtype_name(data.dtype));
  }
}

// ---- GatherElements ---------------------------------------------------------------
template <typename T, typename Idx>
class GatherElementsKernel final : public Kernel {
 public:
  GatherElementsKernel(const OpView& v, size_t axis)
      : x_(v.inputs[0]->id),
        indices_(v.inputs[1]->id),
        out_(v.outputs[0]->id),
        axis_(axis),
        x_dims_(v.inputs[0]->dims),
        idx_dims_(v.inputs[1]->dims),
        x_strides_(contiguous_strides(v.inputs[0]->dims)),
        op_name_(v.name),
        index_name_(v.inputs[1]->name) {}
  Status run(const RunContext& c) const override {
    const T* x = c.at<const T>(x_);
    const Idx* idx = c.at<const Idx>(indices_);
    T* y = c.at<T>(out_);
    const size_t n = product(idx_dims_);
    if (n == 0) return Status::Ok();
    const uint64_t limit = x_dims_[axis_];
    Index at{};
    for (size_t i = 0; i < n; ++i) {
      if (idx[i] < 0 || uint64_t(idx[i]) >= limit) {
        return make_error(ErrorKind::InvalidArgument,
                          "op '%s' (GatherElements): index %lld at position %zu of '%s' is out of range [0, %llu)",
                          op_name_.c_str(), (long long)idx[i], i, index_name_.c_str(), (unsigned long long)limit);
      }
      size_t off = 0;
      for (size_t d = 0; d < idx_dims_.size(); ++d) off += (d == axis_ ? size_t(idx[i]) : at[d]) * x_strides_[d];
      y[i] = x[off];
      next_index(at, idx_dims_);
    }
    return Status::Ok();
  }

 private:
  uint32_t x_, indices_, out_;
  size_t axis_;
  Dims x_dims_, idx_dims_;
  Index x_strides_;
  std::string op_name_, index_name_;
};

template <typename Idx>
Status emplace_gather_elements(const OpView& v, size_t es, size_t axis, KernelPtr& out) {
  switch (es) {
    case 1:
      return emplace_kernel<GatherElementsKernel<uint8_t, Idx>>(out, v, axis);
    case 2:
      return emplace_kernel<GatherElementsKernel<uint16_t, Idx>>(out, v, axis);
    case 4:
      return emplace_kernel<GatherElementsKernel<uint32_t, Idx>>(out, v, axis);
    default:
      return emplace_kernel<GatherElementsKernel<uint64_t, Idx>>(out, v, axis);
  }
}

Status create_gather_elements(const OpView& v, KernelEnv&, KernelPtr& out) {
  QNN_RETURN_IF_ERROR(v.expect_arity(2, 2, 1));
  const TensorInfo& x = *v.inputs[0];
  const TensorInfo& indices = *v.inputs[1];
  int64_t axis = 0;
  QNN_RETURN_IF_ERROR(ParamReader(v).scalar_int("axis", DType::UINT_32, axis));
  if (x.rank() == 0 || axis < 0 || size_t(axis) >= x.rank()) {
    return v.fail(ErrorKind::InvalidProgram, "axis %lld out of range for input '%s' %s", (long long)axis,
                  x.name.c_str(), dims_to_string(x.dims).c_str());
  }
  if (indices.dtype != DType::INT_32 && indices.dtype != DType::INT_64) {
    return v.fail(ErrorKind::NotSupported, "indices '%s' have data type %s (INT_32 or INT_64 needed)",
                  indices.name.c_str(), dtype_name(indices.dtype));
  }
  bool fits = indices.rank() == x.rank();
  for (size_t d = 0; fits && d < x.rank(); ++d) fits = d == size_t(axis) || indices.dims[d] <= x.dims[d];
  if (!fits) {
    return v.fail(ErrorKind::InvalidProgram,
                  "indices '%s' %s do not fit input '%s' %s (same rank, dims <= "
                  "the input's off the axis)",
                  indices.name.c_str(), dims_to_string(indices.dims).c_str(), x.name.c_str(),
                  dims_to_string(x.dims).c_str());
  }
  QNN_RETURN_IF_ERROR(v.expect_output(0, indices.dims, x.dtype));
  size_t es = 0;
  QNN_RETURN_IF_ERROR(byte_element_size(v, x, es));
  if (indices.dtype == DType::INT_32) return emplace_gather_elements<int32_t>(v, es, size_t(axis), out);
  return emplace_gather_elements<int64_t>(v, es, size_t(axis), out);
}

}  // namespace

QNN_REGISTER_KERNEL(Float, Split, &create_split);
QNN_REGISTER_KERNEL(Float, ScatterNd, &create_scatter_nd);
QNN_REGISTER_KERNEL(Float, GatherElements, &create_gather_elements);

}  // namespace engine
}  // namespace qnn_delegate
