// Softmax and LogSoftmax along one axis (float32; beta scales x first), and Softmax over the
// last axis of a per-tensor uint8 / uint16 activation fused with its dequantize / requantize.
// Softmax takes exp in AVX2 lanes over a contiguous axis (glibc's expf, bit for bit) or with
// std::exp; LogSoftmax is x - max - log(sum(exp(x - max))). Quantized LogSoftmax runs through
// QuantDispatch's float path.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "backends/qualcomm/runtime/engine/Quant.h"
#include "backends/qualcomm/runtime/engine/ThreadPool.h"
#include "backends/qualcomm/runtime/engine/kernels/KernelUtil.h"

#ifdef QNN_X86
#include <immintrin.h>
#endif

namespace qnn_delegate {
namespace engine {
namespace {

// ---- exp lanes and one softmax lane ---------------------------------------------------
#ifdef QNN_X86
// glibc's expf (>= 2.27; its FMA variant, which a CPU with FMA runs) in 4 double lanes:
// the same operations, table and constants, so each lane equals std::exp (vec_exp_matches
// checks that once against std::exp on this machine; otherwise the scalar loop runs).
alignas(32) const uint64_t kExp2fTab[32] = {
    0x3ff0000000000000, 0x3fefd9b0d3158574, 0x3fefb5586cf9890f, 0x3fef9301d0125b51, 0x3fef72b83c7d517b,
    0x3fef54873168b9aa, 0x3fef387a6e756238, 0x3fef1e9df51fdee1, 0x3fef06fe0a31b715, 0x3feef1a7373aa9cb,
    0x3feedea64c123422, 0x3feece086061892d, 0x3feebfdad5362a27, 0x3feeb42b569d4f82, 0x3feeab07dd485429,
    0x3feea47eb03a5585, 0x3feea09e667f3bcd, 0x3fee9f75e8ec5f74, 0x3feea11473eb0187, 0x3feea589994cce13,
    0x3feeace5422aa0db, 0x3feeb737b0cdc5e5, 0x3feec49182a3f090, 0x3feed503b23e255d, 0x3feee89f995ad3ad,
    0x3feeff76f2fb5e47, 0x3fef199bdd85529c, 0x3fef3720dcef9069, 0x3fef5818dcfba487, 0x3fef7c97337b9b5f,
    0x3fefa4afa2a490da, 0x3fefd0765b6e4540};

QNN_TARGET_AVX2 inline __m256d dbits(uint64_t v) { return _mm256_castsi256_pd(_mm256_set1_epi64x(int64_t(v))); }

QNN_TARGET_AVX2 inline __m128 expf4(__m128 x) {
  const __m256d xd = _mm256_cvtps_pd(x);
  const __m256d inv_ln2n = dbits(0x40471547652b82feULL), shift = dbits(0x4338000000000000ULL);
  const __m256d z = _mm256_fmadd_pd(inv_ln2n, xd, shift);
  const __m256i ki = _mm256_castpd_si256(z);
  const __m256d r = _mm256_fmsub_pd(inv_ln2n, xd, _mm256_sub_pd(z, shift));
  const __m256i tab = _mm256_i64gather_epi64(reinterpret_cast<const long long*>(kExp2fTab),
                                             _mm256_and_si256(ki, _mm256_set1_epi64x(31)), 8);
  const __m256d sc = _mm256_castsi256_pd(_mm256_add_epi64(tab, _mm256_slli_epi64(ki, 47)));
  const __m256d p = _mm256_fmadd_pd(r, dbits(0x3ebc6af84b912394ULL), dbits(0x3f2ebfce50fac4f3ULL));
  const __m256d r2 = _mm256_mul_pd(r, r);
  __m256d y = _mm256_fmadd_pd(r, dbits(0x3f962e42ff0c52d6ULL), _mm256_set1_pd(1.0));
  y = _mm256_fmadd_pd(p, r2, y);
  return _mm256_cvtpd_ps(_mm256_mul_pd(y, sc));
}

// exp of 8 floats: glibc's fast path; x < -0x1.9fe368p6 (and -inf) underflows to +0 there
// too (softmax's masked positions); any other lane (|x| >= ~88, nan) sends the 8 through
// std::exp.
QNN_TARGET_AVX2 inline __m256 expf8(__m256 x) {
  const __m256i top = _mm256_and_si256(_mm256_srli_epi32(_mm256_castps_si256(x), 20), _mm256_set1_epi32(0x7ff));
  const __m256 under = _mm256_cmp_ps(x, _mm256_set1_ps(-0x1.9fe368p6f), _CMP_LT_OQ);
  const __m256i slow =
      _mm256_andnot_si256(_mm256_castps_si256(under), _mm256_cmpgt_epi32(top, _mm256_set1_epi32(0x42a)));
  if (_mm256_movemask_epi8(slow) != 0) {
    alignas(32) float v[8];
    _mm256_store_ps(v, x);
    for (float& f : v) f = std::exp(f);
    return _mm256_load_ps(v);
  }
  const __m256 y = _mm256_set_m128(expf4(_mm256_extractf128_ps(x, 1)), expf4(_mm256_castps256_ps128(x)));
  return _mm256_andnot_ps(under, y);
}

QNN_TARGET_AVX2 bool expf8_matches_std_exp() {
  alignas(32) float x[8], y[8];
  for (int i = 0; i < (1 << 16); i += 8) {
    for (int j = 0; j < 8; ++j) x[j] = -110.f * float(i + j) / float(1 << 16) + 1e-3f * float(j);
    _mm256_store_ps(y, expf8(_mm256_load_ps(x)));
    for (int j = 0; j < 8; ++j) {
      const float want = std::exp(x[j]);
      if (std::memcmp(&want, &y[j], sizeof(float)) != 0) return false;
    }
  }
  return true;
}

// py[a] = exp(fma(beta, px[a], -mx)) for a < the last multiple of 8 of axis, their sum added to
// `sum` in order; returns that multiple.
QNN_TARGET_AVX2 size_t exp_lanes(const float* px, float* py, size_t axis, float beta, float mx, float& sum) {
  const __m256 b = _mm256_set1_ps(beta), m = _mm256_set1_ps(mx);
  size_t a0 = 0;
  for (; a0 + 8 <= axis; a0 += 8) {
    _mm256_storeu_ps(py + a0, expf8(_mm256_fmsub_ps(b, _mm256_loadu_ps(px + a0), m)));
    for (size_t j = 0; j < 8; ++j) sum += py[a0 + j];
  }
  return a0;
}
#endif

bool vec_exp_matches() {
#ifdef QNN_X86
  static const bool ok = cpu_simd_level() >= SimdLevel::Avx2 && expf8_matches_std_exp();
  return ok;
#else
  return false;
#endif
}

// Whether softmax lanes over a contiguous axis take exp in vector lanes (AVX2 + FMA, decided
// when a kernel is created; QNN_HOST_ENGINE_KERNELS=plain keeps std::exp). Same numbers either way.
bool softmax_vec_exp() { return simd_level() >= SimdLevel::Avx2 && vec_exp_matches(); }

const char* softmax_path(bool vec_exp) { return vec_exp ? "avx2/exp-lanes" : "plain/exp-scalar"; }

// One lane: px[a * inner] -> py[a * inner], a < axis (vec_exp: softmax_vec_exp(), inner 1).
// Not inlined, so that the float kernel and the quantized one (QuantSoftmaxKernel) run the
// same instructions.
__attribute__((noinline)) void softmax_lane(const float* px, float* py, size_t axis, size_t inner, float beta,
                                            bool vec_exp) {
  float mx = -INFINITY;
  for (size_t a = 0; a < axis; ++a) mx = std::max(mx, beta * px[a * inner]);
  float sum = 0.f;
  size_t a0 = 0;
  // beta * x - mx fused in both loops; the sum stays sequential.
#ifdef QNN_X86
  if (vec_exp && inner == 1) a0 = exp_lanes(px, py, axis, beta, mx, sum);
#else
  (void)vec_exp;
#endif
  for (size_t a = a0; a < axis; ++a) {
    const float e = std::exp(std::fma(beta, px[a * inner], -mx));
    py[a * inner] = e;
    sum += e;
  }
  const float inv = 1.f / sum;
  for (size_t a = 0; a < axis; ++a) py[a * inner] *= inv;
}

// ---- params shared by Softmax and LogSoftmax ------------------------------------------
// x as [outer, axis, inner] around param `axis` (at position `pos`); `beta` (default 1).
struct SoftmaxShape {
  size_t pos = 0, outer = 1, axis = 1, inner = 1;
  float beta = 1.f;
};

Status softmax_shape(const OpView& v, const TensorInfo& x, SoftmaxShape& s) {
  ParamReader params(v);
  int64_t axis = 0;
  QNN_RETURN_IF_ERROR(params.scalar_int("axis", DType::UINT_32, axis));
  QNN_RETURN_IF_ERROR(params.optional_float("beta", s.beta));
  if (axis < 0 || size_t(axis) >= x.rank()) {
    return v.fail(ErrorKind::InvalidProgram, "axis %lld out of range for input '%s' %s", static_cast<long long>(axis),
                  x.name.c_str(), dims_to_string(x.dims).c_str());
  }
  s.pos = size_t(axis);
  s.outer = product(x.dims, 0, s.pos);
  s.axis = x.dims[axis];
  s.inner = product(x.dims, size_t(axis) + 1);
  return Status::Ok();
}

// A float kernel K of x -> output of x's dims, constructed from (x, y, SoftmaxShape).
template <typename K>
Status create_float(const OpView& v, KernelPtr& out) {
  QNN_RETURN_IF_ERROR(v.expect_arity(1, 1, 1));
  const TensorInfo& x = *v.inputs[0];
  QNN_RETURN_IF_ERROR(v.expect_float(x));
  SoftmaxShape s;
  QNN_RETURN_IF_ERROR(softmax_shape(v, x, s));
  QNN_RETURN_IF_ERROR(v.expect_output(0, x.dims, DType::FLOAT_32));
  return emplace_kernel<K>(out, x.id, v.outputs[0]->id, s.outer, s.axis, s.inner, s.beta);
}

// ---- Softmax ------------------------------------------------------------------------
class SoftmaxKernel final : public Kernel {
 public:
  SoftmaxKernel(uint32_t in, uint32_t out, size_t outer, size_t axis, size_t inner, float beta)
      : in_(in),
        out_(out),
        outer_(outer),
        axis_(axis),
        inner_(inner),
        beta_(beta),
        vec_exp_(inner == 1 && softmax_vec_exp()) {}
  const char* path() const override { return softmax_path(vec_exp_); }
  Status run(const RunContext& c) const override {
    const float* x = c.at<const float>(in_);
    float* y = c.at<float>(out_);
    for (size_t o = 0; o < outer_; ++o)
      for (size_t i = 0; i < inner_; ++i) {
        softmax_lane(x + o * axis_ * inner_ + i, y + o * axis_ * inner_ + i, axis_, inner_, beta_, vec_exp_);
      }
    return Status::Ok();
  }

 private:
  uint32_t in_, out_;
  size_t outer_, axis_, inner_;
  float beta_;
  bool vec_exp_;
};

Status create_softmax(const OpView& v, KernelEnv&, KernelPtr& out) { return create_float<SoftmaxKernel>(v, out); }

// Softmax over the last axis of a per-tensor uint8 / uint16 activation: the numbers of the
// dequantize -> float Softmax -> requantize wrapper (same dequantize_run, softmax_lane,
// quantize_run per row), fused per row (no float copy of the tensor) and rows split over the
// thread pool.
template <typename Q>
class QuantSoftmaxKernel final : public Kernel {
 public:
  QuantSoftmaxKernel(uint32_t in, uint32_t out, size_t rows, size_t axis, float beta, QuantParams pin, QuantParams pout)
      : in_(in),
        out_(out),
        rows_(rows),
        axis_(axis),
        beta_(beta),
        pin_(pin),
        pout_(pout),
        slots_(ThreadPool::instance().max_threads()),
        vec_exp_(softmax_vec_exp()) {}
  const char* path() const override { return softmax_path(vec_exp_); }

  Status run(const RunContext& c) const override {
    const Q* x = c.at<const Q>(in_);
    Q* y = c.at<Q>(out_);
    char* scratch = static_cast<char*>(c.scratch);
    const size_t S = slots_;
    auto body = [&](size_t s) {
      float* a = reinterpret_cast<float*>(scratch + s * lane_bytes());
      float* b = a + lane_floats();
      for (size_t r = rows_ * s / S, r1 = rows_ * (s + 1) / S; r < r1; ++r) {
        dequantize_run<Q>(x + r * axis_, a, axis_, pin_);
        softmax_lane(a, b, axis_, 1, beta_, vec_exp_);
        quantize_run<Q>(b, y + r * axis_, axis_, pout_);
      }
    };
    if (S <= 1 || rows_ * axis_ < kMinParallelElems) {
      for (size_t s = 0; s < S; ++s) body(s);
      return Status::Ok();
    }
    RangeFn tramp = [](void* ctx, size_t b, size_t e) {
      for (size_t s = b; s < e; ++s) (*static_cast<decltype(body)*>(ctx))(s);
    };
    ThreadPool::instance().parallel_for(S, tramp, &body);
    return Status::Ok();
  }
  size_t scratch_bytes() const override { return slots_ * lane_bytes(); }

 private:
  static constexpr size_t kMinParallelElems = size_t(1) << 14;
  size_t lane_floats() const { return (axis_ + 15) & ~size_t(15); }
  size_t lane_bytes() const { return 2 * lane_floats() * sizeof(float); }

  uint32_t in_, out_;
  size_t rows_, axis_;
  float beta_;
  QuantParams pin_, pout_;
  size_t slots_;
  bool vec_exp_;
};

// ---- LogSoftmax ---------------------------------------------------------------------
class LogSoftmaxKernel final : public Kernel {
 public:
  LogSoftmaxKernel(uint32_t in, uint32_t out, size_t outer, size_t axis, size_t inner, float beta)
      : in_(in), out_(out), outer_(outer), axis_(axis), inner_(inner), beta_(beta) {}

  Status run(const RunContext& c) const override {
    const float* x = c.at<const float>(in_);
    float* y = c.at<float>(out_);
    for (size_t o = 0; o < outer_; ++o) {
      for (size_t i = 0; i < inner_; ++i) {
        const float* px = x + o * axis_ * inner_ + i;
        float* py = y + o * axis_ * inner_ + i;
        float mx = -INFINITY;
        for (size_t a = 0; a < axis_; ++a) mx = std::max(mx, beta_ * px[a * inner_]);
        double sum = 0.0;
        for (size_t a = 0; a < axis_; ++a) sum += std::exp(double(std::fma(beta_, px[a * inner_], -mx)));
        const float lse = mx + float(std::log(sum));
        for (size_t a = 0; a < axis_; ++a) py[a * inner_] = std::fma(beta_, px[a * inner_], -lse);
      }
    }
    return Status::Ok();
  }

 private:
  uint32_t in_, out_;
  size_t outer_, axis_, inner_;
  float beta_;
};

Status create_log_softmax(const OpView& v, KernelEnv&, KernelPtr& out) {
  return create_float<LogSoftmaxKernel>(v, out);
}

}  // namespace

// Quantized Softmax over the last axis, x and output per-tensor activations of one data type
// (uint8 / uint16) and dims; `out` stays empty otherwise (the dispatcher then wraps the float
// kernel, which computes the same numbers).
Status create_softmax_quant(const OpView& v, KernelEnv&, KernelPtr& out) {
  if (v.inputs.size() != 1 || v.outputs.size() != 1) return Status::Ok();
  const TensorInfo& x = *v.inputs[0];
  const TensorInfo& y = *v.outputs[0];
  const bool u8 = x.dtype == DType::UFIXED_POINT_8, u16 = x.dtype == DType::UFIXED_POINT_16;
  if (!(u8 || u16) || y.dtype != x.dtype || y.dims != x.dims || !is_quant_activation(x) || !is_quant_activation(y) ||
      x.rank() == 0 || x.numel == 0) {
    return Status::Ok();
  }
  SoftmaxShape s;
  if (!softmax_shape(v, x, s).ok() || s.pos + 1 != x.rank()) return Status::Ok();
  if (u8) {
    return emplace_kernel<QuantSoftmaxKernel<uint8_t>>(out, x.id, y.id, s.outer, s.axis, s.beta, quant_params_of(x),
                                                       quant_params_of(y));
  }
  return emplace_kernel<QuantSoftmaxKernel<uint16_t>>(out, x.id, y.id, s.outer, s.axis, s.beta, quant_params_of(x),
                                                      quant_params_of(y));
}

QNN_REGISTER_KERNEL(Float, Softmax, &create_softmax);
QNN_REGISTER_KERNEL(Float, LogSoftmax, &create_log_softmax);

}  // namespace engine
}  // namespace qnn_delegate
