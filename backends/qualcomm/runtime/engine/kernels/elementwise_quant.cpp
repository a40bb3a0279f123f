// Integer ElementWiseAdd / ElementWiseSubtract on quantized activations, with
// QNN HTP's arithmetic (measured on QNN 2.51's HTP, SM8650: bit-exact on every
// 8-bit input pair and on random 16-bit pairs over random encodings):
//
//   out = clamp((ka * qa + kb * qb + C) >> K)        (>> rounds down)
//
// with ka = round(sa / so * 2^K), kb = +-round(sb / so * 2^K) (half up) and
// C = ka * oa + kb * ob - oo * 2^K + 2^(K-1) (o* = QNN offsets, real = s * (q + o)).
// K is the largest shift that keeps the multipliers 16-bit:
// - 8-bit: the sum of the positive (or of the negative) multipliers below 2^14,
//   K <= 15, and C rounded (half up) to a multiple of 256;
// - 16-bit: the largest |multiplier| below 2^15, K <= 16, C exact.
// The PT2E reference (float add of the dequantized inputs, then quantize) differs from
// this by one step near rounding ties; env.reference_only keeps that reference.
#include <cmath>

#include "backends/qualcomm/runtime/engine/Quant.h"
#include "backends/qualcomm/runtime/engine/kernels/KernelUtil.h"

namespace qnn_delegate {
namespace engine {
namespace {

int64_t floor_div(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

int64_t round_half_up(double x) { return int64_t(std::floor(x + 0.5)); }

struct AddSubParams {
  int64_t ka = 0, kb = 0, c = 0;
  int shift = 0;
  int64_t qmax = 255;
};

// false when the encodings need a shift HTP's scheme does not cover (then decline).
bool addsub_params(const QuantParams& a, const QuantParams& b, const QuantParams& o, bool subtract, bool eight_bit,
                   AddSubParams& p) {
  const double ia = double(a.scale) / double(o.scale);
  const double ib = (subtract ? -1.0 : 1.0) * double(b.scale) / double(o.scale);
  if (!std::isfinite(ia) || !std::isfinite(ib)) return false;
  int e = 0;
  if (eight_bit) {
    const double pos = std::max(ia, 0.0) + std::max(ib, 0.0);
    const double neg = -(std::min(ia, 0.0) + std::min(ib, 0.0));
    std::frexp(std::max(pos, neg), &e);
    p.shift = std::min(15, 14 - e);
  } else {
    std::frexp(std::max(std::fabs(ia), std::fabs(ib)), &e);
    p.shift = std::min(16, 15 - e);
  }
  if (p.shift < 1) return false;
  const double k = std::ldexp(1.0, p.shift);
  p.ka = round_half_up(ia * k);
  p.kb = round_half_up(ib * k);
  // QuantParams offsets are QNN's (real = s * (q + offset)).
  const int64_t oa = a.offset, ob = b.offset, oo = o.offset;
  int64_t c = p.ka * oa + p.kb * ob - (oo << p.shift) + (int64_t(1) << (p.shift - 1));
  if (eight_bit) c = floor_div(c + 128, 256) * 256;
  p.c = c;
  p.qmax = eight_bit ? 255 : 65535;
  return true;
}

template <typename T>
class QuantAddSubKernel final : public Kernel {
 public:
  QuantAddSubKernel(const OpView& v, const Dims& out_dims, const AddSubParams& p)
      : a_(v.inputs[0]->id),
        b_(v.inputs[1]->id),
        out_(v.outputs[0]->id),
        dims_(out_dims),
        numel_(product(out_dims)),
        a_numel_(v.inputs[0]->numel),
        b_numel_(v.inputs[1]->numel),
        sa_(broadcast_strides(v.inputs[0]->dims, out_dims)),
        sb_(broadcast_strides(v.inputs[1]->dims, out_dims)),
        p_(p) {
    if (!dims_.empty()) outer_.assign(dims_.begin(), dims_.end() - 1);
    if constexpr (sizeof(T) == 1) {  // 8-bit: |ka * q + C| < 2^31, two 256-entry tables
      for (int q = 0; q < 256; ++q) {
        ta_[q] = int32_t(p_.ka * q + p_.c);
        tb_[q] = int32_t(p_.kb * q);
      }
    }
  }

  Status run(const RunContext& ctx) const override {
    const T* a = ctx.at<const T>(a_);
    const T* b = ctx.at<const T>(b_);
    T* out = ctx.at<T>(out_);
    apply_broadcast(a, b, out, numel_, a_numel_, b_numel_, dims_, sa_, sb_, outer_,
                    [this](T x, T y) { return apply(x, y); });
    return Status::Ok();
  }

 private:
  T apply(T a, T b) const {
    if constexpr (sizeof(T) == 1) {
      const int32_t acc = (ta_[a] + tb_[b]) >> p_.shift;
      return T(acc < 0 ? 0 : (acc > 255 ? 255 : acc));
    } else {  // int64: 16-bit products and C exceed int32
      const int64_t acc = (p_.ka * int64_t(a) + p_.kb * int64_t(b) + p_.c) >> p_.shift;
      return T(acc < 0 ? 0 : (acc > p_.qmax ? p_.qmax : acc));
    }
  }

  uint32_t a_, b_, out_;
  Dims dims_;
  size_t numel_, a_numel_, b_numel_;
  Index sa_, sb_;
  Dims outer_;
  AddSubParams p_;
  int32_t ta_[256] = {}, tb_[256] = {};  // 8-bit only
};

template <bool kSubtract>
Status create_quant_addsub(const OpView& v, KernelEnv& env, KernelPtr& out) {
  if (env.reference_only || v.inputs.size() != 2 || v.outputs.size() != 1) return Status::Ok();
  const TensorInfo& a = *v.inputs[0];
  const TensorInfo& b = *v.inputs[1];
  const TensorInfo& o = *v.outputs[0];
  for (const TensorInfo* t : {&a, &b, &o}) {
    if (!is_quant_activation(*t) || t->dtype != o.dtype) return Status::Ok();
  }
  Dims out_dims;
  if (!broadcast_dims(a.dims, b.dims, out_dims) || out_dims.size() > kMaxDims) return Status::Ok();
  QNN_RETURN_IF_ERROR(v.expect_output(0, out_dims, o.dtype));
  const bool eight_bit = o.dtype == DType::UFIXED_POINT_8;
  AddSubParams p;
  if (!addsub_params(quant_params_of(a), quant_params_of(b), quant_params_of(o), kSubtract, eight_bit, p)) {
    return Status::Ok();
  }
  if (eight_bit) return emplace_kernel<QuantAddSubKernel<uint8_t>>(out, v, out_dims, p);
  return emplace_kernel<QuantAddSubKernel<uint16_t>>(out, v, out_dims, p);
}

}  // namespace

QNN_REGISTER_KERNEL(Quant, ElementWiseAdd, &create_quant_addsub<false>);
QNN_REGISTER_KERNEL(Quant, ElementWiseSubtract, &create_quant_addsub<true>);

}  // namespace engine
}  // namespace qnn_delegate
