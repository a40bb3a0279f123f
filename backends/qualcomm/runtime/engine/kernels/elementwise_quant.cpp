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
#include "backends/qualcomm/runtime/engine/Simd.h"
#include "backends/qualcomm/runtime/engine/kernels/KernelUtil.h"

#if QNN_X86
#include <immintrin.h>
#endif

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

// One 16-bit output: int64, as the products and C exceed int32.
inline uint16_t addsub16_one(uint16_t a, uint16_t b, const AddSubParams& p) {
  const int64_t acc = (p.ka * int64_t(a) + p.kb * int64_t(b) + p.c) >> p.shift;
  return uint16_t(acc < 0 ? 0 : (acc > p.qmax ? p.qmax : acc));
}

#if QNN_X86
QNN_TARGET_AVX512 inline __m512d load_u16_pd(const uint16_t* p, size_t stride) {
  return stride ? _mm512_cvtepi32_pd(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))))
                : _mm512_set1_pd(double(*p));
}

// One broadcast row of the 16-bit op, 8 outputs per step: ka * a + kb * b + C in doubles (every
// term and partial sum is an integer below 2^53, so exact), then >> K as a multiplication by
// 2^-K and floor (exact): the int64 loop's numbers. The n % 8 tail takes addsub16_one.
QNN_TARGET_AVX512 void addsub16_row_avx512(const uint16_t* a, size_t ia, const uint16_t* b, size_t ib, uint16_t* out,
                                           size_t n, const AddSubParams& p) {
  const __m512d ka = _mm512_set1_pd(double(p.ka)), kb = _mm512_set1_pd(double(p.kb)), c = _mm512_set1_pd(double(p.c));
  const __m512d step = _mm512_set1_pd(std::ldexp(1.0, -p.shift)), hi = _mm512_set1_pd(double(p.qmax));
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m512d sum = _mm512_add_pd(
        _mm512_add_pd(_mm512_mul_pd(ka, load_u16_pd(a + i * ia, ia)), _mm512_mul_pd(kb, load_u16_pd(b + i * ib, ib))),
        c);
    __m512d q = _mm512_roundscale_pd(_mm512_mul_pd(sum, step), _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
    q = _mm512_min_pd(_mm512_max_pd(q, _mm512_setzero_pd()), hi);
    _mm256_mask_cvtepi32_storeu_epi16(out + i, 0xFF, _mm512_cvtpd_epi32(q));
  }
  for (; i < n; ++i) out[i] = addsub16_one(a[i * ia], b[i * ib], p);
}
#endif

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
        p_(p),
        avx512_(sizeof(T) == 2 && simd_level() == SimdLevel::Avx512) {
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
#if QNN_X86
    if constexpr (sizeof(T) == 2) {
      if (avx512_) {
        for_each_broadcast_row(numel_, a_numel_, b_numel_, dims_, sa_, sb_, outer_,
                               [&](size_t oa, size_t ia, size_t ob, size_t ib, size_t o, size_t n) {
                                 addsub16_row_avx512(a + oa, ia, b + ob, ib, out + o, n, p_);
                               });
        return Status::Ok();
      }
    }
#endif
    apply_broadcast(a, b, out, numel_, a_numel_, b_numel_, dims_, sa_, sb_, outer_,
                    [this](T x, T y) { return apply(x, y); });
    return Status::Ok();
  }
  // "avx512": 16-bit rows 8 values per step; "plain": the integer loop.
  const char* path() const override { return avx512_ ? "avx512" : "plain"; }

 private:
  T apply(T a, T b) const {
    if constexpr (sizeof(T) == 1) {
      const int32_t acc = (ta_[a] + tb_[b]) >> p_.shift;
      return T(acc < 0 ? 0 : (acc > 255 ? 255 : acc));
    } else {
      return addsub16_one(a, b, p_);
    }
  }

  uint32_t a_, b_, out_;
  Dims dims_;
  size_t numel_, a_numel_, b_numel_;
  Index sa_, sb_;
  Dims outer_;
  AddSubParams p_;
  bool avx512_;
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
