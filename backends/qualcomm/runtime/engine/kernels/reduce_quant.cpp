// Integer ReduceMean on quantized activations with QNN HTP's arithmetic (measured on
// QNN 2.51's HTP, SM8650: bit-exact on random 8-bit and 16-bit spatial means, 4x4 and 7x7):
//
//   out = clamp((M * S + C) >> K),  S = sum of the N input codes
//
// with m = s_in / (N * s_out), K = 15 - exponent(m) (M = round(m * 2^K) in [2^14, 2^15)),
// C = M * N * o_in - o_out * 2^K + 2^(K-1) (QNN offsets, real = s * (q + o)); 16-bit outputs
// with K >= 22 get one more 2^(K-1) in C (HTP rounds twice there). A mean over the last
// (depth) axis is not affine in S on HTP (about 98.5% of its outputs follow this formula,
// as of the float reference; 40% for a 9x9 mean stored last): declined, it runs as float.
// env.reference_only keeps the float reference.
#include <cmath>
#include <cstring>

#include "backends/qualcomm/runtime/engine/Quant.h"
#include "backends/qualcomm/runtime/engine/kernels/KernelUtil.h"

namespace qnn_delegate {
namespace engine {
namespace {

struct MeanParams {
  int64_t m = 0, c = 0, qmax = 255;
  int shift = 0;
};

bool mean_params(const QuantParams& in, const QuantParams& out, size_t count, bool eight_bit, MeanParams& p) {
  const double m = double(in.scale) / (double(count) * double(out.scale));
  if (!std::isfinite(m) || m <= 0.0) return false;
  int e = 0;
  std::frexp(m, &e);
  p.shift = 15 - e;
  if (p.shift < 1 || p.shift > 40) return false;
  p.m = int64_t(std::floor(std::ldexp(m, p.shift) + 0.5));
  const int64_t half = int64_t(1) << (p.shift - 1);
  p.c = p.m * int64_t(count) * int64_t(in.offset) - (int64_t(out.offset) << p.shift) + half;
  if (!eight_bit && p.shift >= 22) p.c += half;
  p.qmax = eight_bit ? 255 : 65535;
  return true;
}

template <typename T>
class QuantMeanKernel final : public Kernel {
 public:
  QuantMeanKernel(uint32_t in, uint32_t out, const Dims& in_dims, const Index& out_strides,
                  size_t out_numel, const MeanParams& p)
      : in_(in), out_(out), dims_(in_dims), so_(out_strides), out_numel_(out_numel), p_(p) {
    if (!dims_.empty()) outer_.assign(dims_.begin(), dims_.end() - 1);
  }
  size_t scratch_bytes() const override { return out_numel_ * sizeof(int64_t); }

  Status run(const RunContext& c) const override {
    const T* x = c.at<const T>(in_);
    T* y = c.at<T>(out_);
    int64_t* acc = static_cast<int64_t*>(c.scratch);
    std::memset(acc, 0, out_numel_ * sizeof(int64_t));
    const size_t n = product(dims_);
    if (n > 0) {
      const size_t rank = dims_.size();
      const size_t inner = rank ? dims_[rank - 1] : 1;
      const size_t inner_stride = rank ? so_[rank - 1] : 0;
      Index idx{};
      size_t i = 0;
      do {
        size_t o = 0;
        for (size_t d = 0; d < outer_.size(); ++d) o += idx[d] * so_[d];
        if (inner_stride == 0) {
          int64_t s = 0;
          for (size_t j = 0; j < inner; ++j) s += x[i + j];
          acc[o] += s;
        } else {
          for (size_t j = 0; j < inner; ++j) acc[o + j] += x[i + j];
        }
        i += inner;
      } while (next_index(idx, outer_));
    }
    for (size_t k = 0; k < out_numel_; ++k) {
      const int64_t v = (p_.m * acc[k] + p_.c) >> p_.shift;
      y[k] = T(v < 0 ? 0 : (v > p_.qmax ? p_.qmax : v));
    }
    return Status::Ok();
  }

 private:
  uint32_t in_, out_;
  Dims dims_;
  Index so_;
  size_t out_numel_;
  Dims outer_;
  MeanParams p_;
};

Status create_quant_mean(const OpView& v, KernelEnv& env, KernelPtr& out) {
  if (env.reference_only || v.inputs.size() != 1 || v.outputs.size() != 1) return Status::Ok();
  const TensorInfo& x = *v.inputs[0];
  const TensorInfo& y = *v.outputs[0];
  if (!is_quant_activation(x) || !is_quant_activation(y) || x.dtype != y.dtype || x.rank() > kMaxDims) {
    return Status::Ok();
  }
  ParamReader params(v);
  std::vector<int64_t> axes;
  bool keep_dims = false;
  QNN_RETURN_IF_ERROR(params.tensor_int("axes", DType::UINT_32, {}, axes));
  QNN_RETURN_IF_ERROR(params.optional_bool("keep_dims", keep_dims));
  std::vector<bool> reduced(x.rank(), false);
  for (int64_t a : axes) {
    if (a < 0 || size_t(a) >= x.rank() || reduced[a]) return Status::Ok();  // the float path reports it
    reduced[a] = true;
  }
  if (x.rank() == 0 || reduced[x.rank() - 1]) return Status::Ok();  // depth-axis means: not HTP's formula
  Dims out_dims, kept_dims;
  size_t count = 1;
  for (size_t d = 0; d < x.rank(); ++d) {
    kept_dims.push_back(reduced[d] ? 1 : x.dims[d]);
    if (reduced[d]) count *= x.dims[d];
    if (!reduced[d] || keep_dims) out_dims.push_back(reduced[d] ? 1 : x.dims[d]);
  }
  if (count == 0) return Status::Ok();
  QNN_RETURN_IF_ERROR(v.expect_output(0, out_dims, y.dtype));
  Index so = contiguous_strides(kept_dims);
  for (size_t d = 0; d < x.rank(); ++d) {
    if (reduced[d]) so[d] = 0;
  }
  const bool eight_bit = y.dtype == DType::UFIXED_POINT_8;
  MeanParams p;
  if (!mean_params(quant_params_of(x), quant_params_of(y), count, eight_bit, p)) return Status::Ok();
  if (eight_bit) return emplace_kernel<QuantMeanKernel<uint8_t>>(out, x.id, y.id, x.dims, so, product(out_dims), p);
  return emplace_kernel<QuantMeanKernel<uint16_t>>(out, x.id, y.id, x.dims, so, product(out_dims), p);
}

} // namespace

QNN_REGISTER_KERNEL(Quant, ReduceMean, &create_quant_mean);

} // namespace engine
} // namespace qnn_delegate
