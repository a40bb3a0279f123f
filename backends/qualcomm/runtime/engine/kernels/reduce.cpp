// ReduceMean and ReduceSum over a set of axes (float32), one templated kernel.
#include <algorithm>
#include <cstring>

#include "backends/qualcomm/runtime/engine/kernels/KernelUtil.h"

namespace qnn_delegate {
namespace engine {
namespace {

class ReduceKernel final : public Kernel {
 public:
  ReduceKernel(uint32_t in, uint32_t out, const Dims& in_dims, const Index& out_strides,
               size_t out_numel, float scale)
      : in_(in), out_(out), dims_(in_dims), so_(out_strides), out_numel_(out_numel), scale_(scale) {
    if (!dims_.empty()) outer_.assign(dims_.begin(), dims_.end() - 1);
  }
  Status run(const RunContext& c) const override {
    const float* x = c.at<const float>(in_);
    float* y = c.at<float>(out_);
    std::memset(y, 0, out_numel_ * sizeof(float));
    const size_t n = product(dims_);
    if (n == 0) return Status::Ok();
    const size_t rank = dims_.size();
    const size_t inner = rank ? dims_[rank - 1] : 1;
    const size_t inner_stride = rank ? so_[rank - 1] : 0;
    const Dims& outer = outer_;
    Index idx{};
    size_t i = 0;
    do {
      size_t o = 0;
      for (size_t d = 0; d < outer.size(); ++d) o += idx[d] * so_[d];
      for (size_t j = 0; j < inner; ++j) y[o + j * inner_stride] += x[i + j];
      i += inner;
    } while (next_index(idx, outer));
    if (scale_ != 1.f) {
      for (size_t k = 0; k < out_numel_; ++k) y[k] /= scale_;
    }
    return Status::Ok();
  }

 private:
  uint32_t in_, out_;
  Dims dims_;
  Index so_;
  size_t out_numel_;
  float scale_;
  Dims outer_;  // all but the innermost axis (no allocation in run)
};

template <bool kMean>
Status create_reduce(const OpView& v, KernelEnv&, KernelPtr& out) {
  QNN_RETURN_IF_ERROR(v.expect_arity(1, 1, 1));
  const TensorInfo& x = *v.inputs[0];
  QNN_RETURN_IF_ERROR(v.expect_float(x));
  ParamReader params(v);
  std::vector<int64_t> axes;
  bool keep_dims = false;
  QNN_RETURN_IF_ERROR(params.tensor_int("axes", DType::UINT_32, {}, axes));
  QNN_RETURN_IF_ERROR(params.optional_bool("keep_dims", keep_dims));
  std::vector<bool> reduced(x.rank(), false);
  for (int64_t a : axes) {
    if (size_t(a) >= x.rank() || reduced[a]) {
      return v.fail(ErrorKind::InvalidProgram, "axis %lld is out of range or repeated for input '%s' %s",
                    static_cast<long long>(a), x.name.c_str(), dims_to_string(x.dims).c_str());
    }
    reduced[a] = true;
  }
  Dims out_dims, kept_dims;  // kept_dims: input rank with 1 on reduced axes
  size_t count = 1;
  for (size_t d = 0; d < x.rank(); ++d) {
    kept_dims.push_back(reduced[d] ? 1 : x.dims[d]);
    if (reduced[d]) count *= x.dims[d];
    if (!reduced[d] || keep_dims) out_dims.push_back(reduced[d] ? 1 : x.dims[d]);
  }
  QNN_RETURN_IF_ERROR(v.expect_output(0, out_dims, DType::FLOAT_32));
  Index so = contiguous_strides(kept_dims);
  for (size_t d = 0; d < x.rank(); ++d) {
    if (reduced[d]) so[d] = 0;
  }
  const float scale = kMean && count ? float(count) : 1.f;  // divisor
  return emplace_kernel<ReduceKernel>(out, x.id, v.outputs[0]->id, x.dims, so, product(out_dims), scale);
}

} // namespace

QNN_REGISTER_KERNEL(Float, ReduceMean, &create_reduce<true>);
QNN_REGISTER_KERNEL(Float, ReduceSum, &create_reduce<false>);

} // namespace engine
} // namespace qnn_delegate
