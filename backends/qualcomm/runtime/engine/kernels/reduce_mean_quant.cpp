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
#include "backends/qualcomm/runtime/engine/kernels/ReduceGeometry.h"

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
  QuantMeanKernel(uint32_t in, uint32_t out, const ReduceGeometry& g, const MeanParams& p)
      : in_(in), out_(out), g_(g), p_(p) {}
  size_t scratch_bytes() const override { return g_.out_numel * sizeof(int64_t); }

  Status run(const RunContext& c) const override {
    const T* x = c.at<const T>(in_);
    T* y = c.at<T>(out_);
    int64_t* acc = static_cast<int64_t*>(c.scratch);
    std::memset(acc, 0, g_.out_numel * sizeof(int64_t));
    g_.for_each_run([x, acc](size_t i, size_t o, size_t n, size_t stride) {
      if (stride == 0) {
        int64_t s = 0;
        for (size_t j = 0; j < n; ++j) s += x[i + j];
        acc[o] += s;
      } else {
        for (size_t j = 0; j < n; ++j) acc[o + j] += x[i + j];
      }
    });
    for (size_t k = 0; k < g_.out_numel; ++k) {
      const int64_t v = (p_.m * acc[k] + p_.c) >> p_.shift;
      y[k] = T(v < 0 ? 0 : (v > p_.qmax ? p_.qmax : v));
    }
    return Status::Ok();
  }

 private:
  uint32_t in_, out_;
  ReduceGeometry g_;
  MeanParams p_;
};

Status create_quant_mean(const OpView& v, KernelEnv& env, KernelPtr& out) {
  if (env.reference_only || v.inputs.size() != 1 || v.outputs.size() != 1) return Status::Ok();
  const TensorInfo& x = *v.inputs[0];
  const TensorInfo& y = *v.outputs[0];
  if (!is_quant_activation(x) || !is_quant_activation(y) || x.dtype != y.dtype || x.rank() > kMaxDims) {
    return Status::Ok();
  }
  ReduceGeometry g;
  if (!reduce_geometry(v, x, false, g).ok()) return Status::Ok();     // the float path reports it
  if (x.rank() == 0 || g.reduced[x.rank() - 1]) return Status::Ok();  // depth-axis means: not HTP's formula
  if (g.count == 0) return Status::Ok();
  QNN_RETURN_IF_ERROR(v.expect_output(0, g.out_dims, y.dtype));
  const bool eight_bit = y.dtype == DType::UFIXED_POINT_8;
  MeanParams p;
  if (!mean_params(quant_params_of(x), quant_params_of(y), g.count, eight_bit, p)) return Status::Ok();
  if (eight_bit) return emplace_kernel<QuantMeanKernel<uint8_t>>(out, x.id, y.id, g, p);
  return emplace_kernel<QuantMeanKernel<uint16_t>>(out, x.id, y.id, g, p);
}

}  // namespace

QNN_REGISTER_KERNEL(Quant, ReduceMean, &create_quant_mean);

}  // namespace engine
}  // namespace qnn_delegate
