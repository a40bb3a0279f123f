// Data movement ops, dtype-agnostic by element size: Reshape, Transpose,
// Concat, StridedSlice, Tile.
#include <cstring>

#include "backends/qualcomm/runtime/engine/kernels/KernelUtil.h"

namespace qnn_delegate {
namespace engine {
namespace {

// ---- Reshape: byte copy -------------------------------------------------------
class CopyKernel final : public Kernel {
 public:
  CopyKernel(uint32_t in, uint32_t out, size_t bytes) : in_(in), out_(out), bytes_(bytes) {}
  Status run(const RunContext& c) const override {
    if (bytes_) std::memcpy(c.at<void>(out_), c.at<const void>(in_), bytes_);
    return Status::Ok();
  }

 private:
  uint32_t in_, out_;
  size_t bytes_;
};

Status create_reshape(const OpView& v, KernelEnv&, KernelPtr& out) {
  QNN_RETURN_IF_ERROR(v.expect_arity(1, 2, 1));  // QNN allows an optional shape input
  const TensorInfo& x = *v.inputs[0];
  const TensorInfo& y = *v.outputs[0];
  if (x.numel != y.numel || x.dtype != y.dtype) {
    return v.fail(ErrorKind::InvalidProgram, "output '%s' %s %s does not match input '%s' %s %s", y.name.c_str(),
                  dims_to_string(y.dims).c_str(), dtype_name(y.dtype), x.name.c_str(), dims_to_string(x.dims).c_str(),
                  dtype_name(x.dtype));
  }
  return emplace_kernel<CopyKernel>(out, x.id, y.id, x.nbytes);
}

// ---- index-mapped copy: out[idx] = in[base + sum idx[d] * step[d]] (affine)
//      or in[sum (idx[d] % in_dims[d]) * in_stride[d]] (tile) ---------------------
template <typename T, bool kTile>
class MappedCopyKernel final : public Kernel {
 public:
  MappedCopyKernel(uint32_t in, uint32_t out, const Dims& out_dims, const Dims& in_dims, size_t base, const Index& step)
      : in_(in), out_(out), out_dims_(out_dims), in_dims_(in_dims), base_(base), step_(step) {
    if (!out_dims_.empty()) outer_.assign(out_dims_.begin(), out_dims_.end() - 1);
  }
  Status run(const RunContext& c) const override {
    const T* x = c.at<const T>(in_);
    T* y = c.at<T>(out_);
    const size_t n = product(out_dims_);
    if (n == 0) return Status::Ok();
    const size_t rank = out_dims_.size();
    if (rank == 0) {
      y[0] = x[base_];
      return Status::Ok();
    }
    const size_t inner = out_dims_[rank - 1];
    const Dims& outer = outer_;
    Index idx{};
    size_t o = 0;
    do {
      size_t off = base_;
      for (size_t d = 0; d + 1 < rank; ++d) off += (kTile ? idx[d] % in_dims_[d] : idx[d]) * step_[d];
      if (kTile) {
        const size_t w = in_dims_[rank - 1];
        for (size_t i = 0; i < inner; ++i) y[o + i] = x[off + (i % w)];
      } else {
        const size_t s = step_[rank - 1];
        for (size_t i = 0; i < inner; ++i) y[o + i] = x[off + i * s];
      }
      o += inner;
    } while (next_index(idx, outer));
    return Status::Ok();
  }

 private:
  uint32_t in_, out_;
  Dims out_dims_, in_dims_;
  size_t base_;
  Index step_;
  Dims outer_;  // all but the innermost axis (no allocation in run)
};

template <bool kTile>
Status emplace_mapped(const OpView& v, KernelPtr& out, const Dims& out_dims, size_t base, const Index& step) {
  const TensorInfo& x = *v.inputs[0];
  const uint32_t in = x.id, o = v.outputs[0]->id;
  size_t es = 0;
  QNN_RETURN_IF_ERROR(byte_element_size(v, x, es));
  switch (es) {
    case 1:
      return emplace_kernel<MappedCopyKernel<uint8_t, kTile>>(out, in, o, out_dims, x.dims, base, step);
    case 2:
      return emplace_kernel<MappedCopyKernel<uint16_t, kTile>>(out, in, o, out_dims, x.dims, base, step);
    case 4:
      return emplace_kernel<MappedCopyKernel<uint32_t, kTile>>(out, in, o, out_dims, x.dims, base, step);
    default:
      return emplace_kernel<MappedCopyKernel<uint64_t, kTile>>(out, in, o, out_dims, x.dims, base, step);
  }
}

Status create_transpose(const OpView& v, KernelEnv&, KernelPtr& out) {
  QNN_RETURN_IF_ERROR(v.expect_arity(1, 1, 1));
  const TensorInfo& x = *v.inputs[0];
  std::vector<int64_t> perm;
  QNN_RETURN_IF_ERROR(ParamReader(v).tensor_int("perm", DType::UINT_32, {uint32_t(x.rank())}, perm));
  std::vector<bool> used(x.rank(), false);
  const Index in_strides = contiguous_strides(x.dims);
  Dims out_dims;
  Index step{};
  for (size_t d = 0; d < perm.size(); ++d) {
    if (size_t(perm[d]) >= x.rank() || used[perm[d]]) {
      return v.fail(ErrorKind::InvalidProgram, "'perm' is not a permutation of %zu axes", x.rank());
    }
    used[perm[d]] = true;
    out_dims.push_back(x.dims[perm[d]]);
    step[d] = in_strides[perm[d]];
  }
  QNN_RETURN_IF_ERROR(v.expect_output(0, out_dims, x.dtype));
  return emplace_mapped<false>(v, out, out_dims, 0, step);
}

Status create_strided_slice(const OpView& v, KernelEnv&, KernelPtr& out) {
  QNN_RETURN_IF_ERROR(v.expect_arity(1, 1, 1));
  const TensorInfo& x = *v.inputs[0];
  std::vector<int64_t> ranges;
  QNN_RETURN_IF_ERROR(ParamReader(v).tensor_int("ranges", DType::INT_32, {uint32_t(x.rank()), 3}, ranges));
  const Index in_strides = contiguous_strides(x.dims);
  Dims out_dims;
  Index step{};
  size_t base = 0;
  for (size_t d = 0; d < x.rank(); ++d) {
    const int64_t b = ranges[d * 3], e = ranges[d * 3 + 1], s = ranges[d * 3 + 2];
    if (b < 0 || b > e || e > int64_t(x.dims[d]) || s < 1) {
      return v.fail(ErrorKind::InvalidProgram,
                    "range (%lld, %lld, %lld) of axis %zu is invalid for input '%s' %s "
                    "(need 0 <= begin <= end <= dim, stride >= 1)",
                    (long long)b, (long long)e, (long long)s, d, x.name.c_str(), dims_to_string(x.dims).c_str());
    }
    out_dims.push_back(uint32_t((e - b + s - 1) / s));
    base += size_t(b) * in_strides[d];
    step[d] = size_t(s) * in_strides[d];
  }
  QNN_RETURN_IF_ERROR(v.expect_output(0, out_dims, x.dtype));
  return emplace_mapped<false>(v, out, out_dims, base, step);
}

Status create_tile(const OpView& v, KernelEnv&, KernelPtr& out) {
  QNN_RETURN_IF_ERROR(v.expect_arity(1, 1, 1));
  const TensorInfo& x = *v.inputs[0];
  std::vector<int64_t> mult;
  QNN_RETURN_IF_ERROR(ParamReader(v).tensor_int("multiples", DType::UINT_32, {uint32_t(x.rank())}, mult));
  Dims out_dims;
  for (size_t d = 0; d < x.rank(); ++d) {
    const uint64_t od = uint64_t(x.dims[d]) * uint64_t(mult[d]);
    if (od > UINT32_MAX) return v.fail(ErrorKind::InvalidProgram, "tiled dim %zu is too large", d);
    out_dims.push_back(uint32_t(od));
  }
  QNN_RETURN_IF_ERROR(v.expect_output(0, out_dims, x.dtype));
  return emplace_mapped<true>(v, out, out_dims, 0, contiguous_strides(x.dims));
}

// ---- Concat ---------------------------------------------------------------------
class ConcatKernel final : public Kernel {
 public:
  ConcatKernel(std::vector<uint32_t> ins, std::vector<size_t> chunk_bytes, uint32_t out, size_t outer)
      : ins_(std::move(ins)), chunk_(std::move(chunk_bytes)), out_(out), outer_(outer) {}
  Status run(const RunContext& c) const override {
    char* y = c.at<char>(out_);
    for (size_t o = 0; o < outer_; ++o)
      for (size_t i = 0; i < ins_.size(); ++i) {
        if (chunk_[i] == 0) continue;
        std::memcpy(y, c.at<const char>(ins_[i]) + o * chunk_[i], chunk_[i]);
        y += chunk_[i];
      }
    return Status::Ok();
  }

 private:
  std::vector<uint32_t> ins_;
  std::vector<size_t> chunk_;
  uint32_t out_;
  size_t outer_;
};

Status create_concat(const OpView& v, KernelEnv&, KernelPtr& out) {
  QNN_RETURN_IF_ERROR(v.expect_arity(1, -1, 1));
  const TensorInfo& x0 = *v.inputs[0];
  int64_t axis = 0;
  QNN_RETURN_IF_ERROR(ParamReader(v).scalar_int("axis", DType::UINT_32, axis));
  if (size_t(axis) >= x0.rank()) {
    return v.fail(ErrorKind::InvalidProgram, "axis %lld out of range for input '%s' %s", (long long)axis,
                  x0.name.c_str(), dims_to_string(x0.dims).c_str());
  }
  size_t es = 0;
  QNN_RETURN_IF_ERROR(byte_element_size(v, x0, es));
  Dims out_dims = x0.dims;
  out_dims[axis] = 0;
  std::vector<uint32_t> ids;
  std::vector<size_t> chunks;
  const size_t inner = product(x0.dims, axis + 1);
  for (const TensorInfo* t : v.inputs) {
    bool same = t->rank() == x0.rank() && t->dtype == x0.dtype;
    for (size_t d = 0; same && d < x0.rank(); ++d) same = d == size_t(axis) || t->dims[d] == x0.dims[d];
    if (!same) {
      return v.fail(ErrorKind::InvalidProgram, "input '%s' %s %s does not concat with '%s' %s %s on axis %lld",
                    t->name.c_str(), dims_to_string(t->dims).c_str(), dtype_name(t->dtype), x0.name.c_str(),
                    dims_to_string(x0.dims).c_str(), dtype_name(x0.dtype), (long long)axis);
    }
    out_dims[axis] += t->dims[axis];
    ids.push_back(t->id);
    chunks.push_back(size_t(t->dims[axis]) * inner * es);
  }
  QNN_RETURN_IF_ERROR(v.expect_output(0, out_dims, x0.dtype));
  return emplace_kernel<ConcatKernel>(out, ids, chunks, v.outputs[0]->id, product(x0.dims, 0, axis));
}

}  // namespace

QNN_REGISTER_KERNEL(Float, Reshape, &create_reshape);
QNN_REGISTER_KERNEL(Float, Transpose, &create_transpose);
QNN_REGISTER_KERNEL(Float, StridedSlice, &create_strided_slice);
QNN_REGISTER_KERNEL(Float, Tile, &create_tile);
QNN_REGISTER_KERNEL(Float, Concat, &create_concat);

}  // namespace engine
}  // namespace qnn_delegate
