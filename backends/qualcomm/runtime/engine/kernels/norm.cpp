// Softmax, LayerNorm, Batchnorm (float32); LayerNorm on uint8 / uint16 as QNN HTP computes it.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "backends/qualcomm/runtime/engine/Quant.h"
#include "backends/qualcomm/runtime/engine/ThreadPool.h"

#include "backends/qualcomm/runtime/engine/kernels/KernelUtil.h"

#ifdef QNN_X86
#include <immintrin.h>
#endif

namespace qnn_delegate {
namespace engine {
namespace {

// ---- Softmax ------------------------------------------------------------------
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
  const __m256i slow = _mm256_andnot_si256(_mm256_castps_si256(under),
                                           _mm256_cmpgt_epi32(top, _mm256_set1_epi32(0x42a)));
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
__attribute__((noinline)) void softmax_lane(const float* px, float* py, size_t axis, size_t inner,
                                            float beta, bool vec_exp) {
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

class SoftmaxKernel final : public Kernel {
 public:
  SoftmaxKernel(uint32_t in, uint32_t out, size_t outer, size_t axis, size_t inner, float beta)
      : in_(in), out_(out), outer_(outer), axis_(axis), inner_(inner), beta_(beta),
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

Status create_softmax(const OpView& v, KernelEnv&, KernelPtr& out) {
  QNN_RETURN_IF_ERROR(v.expect_arity(1, 1, 1));
  const TensorInfo& x = *v.inputs[0];
  QNN_RETURN_IF_ERROR(v.expect_float(x));
  ParamReader params(v);
  int64_t axis = 0;
  float beta = 1.f;
  QNN_RETURN_IF_ERROR(params.scalar_int("axis", DType::UINT_32, axis));
  QNN_RETURN_IF_ERROR(params.optional_float("beta", beta));
  if (size_t(axis) >= x.rank()) {
    return v.fail(ErrorKind::InvalidProgram, "axis %lld out of range for input '%s' %s",
                  static_cast<long long>(axis), x.name.c_str(), dims_to_string(x.dims).c_str());
  }
  QNN_RETURN_IF_ERROR(v.expect_output(0, x.dims, DType::FLOAT_32));
  return emplace_kernel<SoftmaxKernel>(out, x.id, v.outputs[0]->id, product(x.dims, 0, axis),
                                       size_t(x.dims[axis]), product(x.dims, axis + 1), beta);
}

// Softmax over the last axis of a per-tensor uint8 / uint16 activation: the numbers of the
// dequantize -> float Softmax -> requantize wrapper (same dequantize_run, softmax_lane,
// quantize_run per row), fused per row (no float copy of the tensor) and rows split over the
// thread pool.
template <typename Q>
class QuantSoftmaxKernel final : public Kernel {
 public:
  QuantSoftmaxKernel(uint32_t in, uint32_t out, size_t rows, size_t axis, float beta, QuantParams pin,
                     QuantParams pout)
      : in_(in), out_(out), rows_(rows), axis_(axis), beta_(beta), pin_(pin), pout_(pout),
        slots_(ThreadPool::instance().max_threads()), vec_exp_(softmax_vec_exp()) {}
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

// ---- LayerNorm ----------------------------------------------------------------
class LayerNormKernel final : public Kernel {
 public:
  LayerNormKernel(uint32_t x, uint32_t gamma, uint32_t beta, uint32_t out, size_t rows, size_t cols,
                  float eps)
      : x_(x), g_(gamma), b_(beta), out_(out), rows_(rows), cols_(cols), eps_(eps) {}
  Status run(const RunContext& c) const override {
    const float* x = c.at<const float>(x_);
    const float* gamma = c.at<const float>(g_);
    const float* beta = c.at<const float>(b_);
    float* y = c.at<float>(out_);
    for (size_t r = 0; r < rows_; ++r) {
      const float* px = x + r * cols_;
      float* py = y + r * cols_;
      double mean = 0.0;
      for (size_t i = 0; i < cols_; ++i) mean += px[i];
      mean /= double(cols_);
      double var = 0.0;
      for (size_t i = 0; i < cols_; ++i) var += (px[i] - mean) * (px[i] - mean);
      var /= double(cols_);
      const float m = float(mean);
      const float inv = float(1.0 / std::sqrt(var + double(eps_)));
      for (size_t i = 0; i < cols_; ++i) py[i] = std::fma((px[i] - m) * inv, gamma[i], beta[i]);
    }
    return Status::Ok();
  }

 private:
  uint32_t x_, g_, b_, out_;
  size_t rows_, cols_;
  float eps_;
};

Status create_layer_norm(const OpView& v, KernelEnv&, KernelPtr& out) {
  QNN_RETURN_IF_ERROR(v.expect_arity(3, 3, 1));
  const TensorInfo& x = *v.inputs[0];
  const TensorInfo& gamma = *v.inputs[1];
  const TensorInfo& beta = *v.inputs[2];
  for (const TensorInfo* t : {&x, &gamma, &beta}) QNN_RETURN_IF_ERROR(v.expect_float(*t));
  ParamReader params(v);
  float eps = 0.f;
  std::vector<int64_t> axes;
  QNN_RETURN_IF_ERROR(params.scalar_float("epsilon", eps));
  QNN_RETURN_IF_ERROR(params.tensor_int("axes", DType::UINT_32, {}, axes));
  const size_t k = axes.size();
  if (k == 0 || k > x.rank()) {
    return v.fail(ErrorKind::InvalidProgram, "'axes' must name 1..%zu axes, got %zu", x.rank(), k);
  }
  for (size_t i = 0; i < k; ++i) {
    if (size_t(axes[i]) != x.rank() - k + i) {
      return v.fail(ErrorKind::NotSupported, "'axes' must be the last %zu axes of input '%s' %s",
                    k, x.name.c_str(), dims_to_string(x.dims).c_str());
    }
  }
  const size_t cols = product(x.dims, x.rank() - k);
  if (gamma.numel != cols || beta.numel != cols) {
    return v.fail(ErrorKind::InvalidProgram,
                  "gamma '%s' %s / beta '%s' %s must match the normalized dims of input '%s' %s",
                  gamma.name.c_str(), dims_to_string(gamma.dims).c_str(), beta.name.c_str(),
                  dims_to_string(beta.dims).c_str(), x.name.c_str(), dims_to_string(x.dims).c_str());
  }
  QNN_RETURN_IF_ERROR(v.expect_output(0, x.dims, DType::FLOAT_32));
  const size_t rows = cols ? x.numel / cols : 0;
  return emplace_kernel<LayerNormKernel>(out, x.id, gamma.id, beta.id, v.outputs[0]->id, rows, cols,
                                         eps);
}

// ---- LayerNorm, quantized (uint8 / uint16 in and out) ------------------------------
// As QNN HTP computes it (measured on QNN 2.51): beta is added in whole output steps,
// code = round((x - mean) * rsqrt(var + eps) * gamma / out_scale) + round(beta / out_scale)
// - out_offset (8a8w vs QNN: 76.8% -> 97.6% bit-exact, 16a8w: 72.8% -> 96.9%, both max 1 step
// on random rows; the rest are values within ~0.05 step of a half: QNN's normalization is a
// little less precise than this double one). Gamma / out_scale and the rounded beta are
// computed at init.
template <typename Q>
class QuantLayerNormKernel final : public Kernel {
 public:
  Status init(const OpView& v, KernelEnv& env, size_t rows, size_t cols, float eps) {
    const TensorInfo& x = *v.inputs[0];
    const TensorInfo& gamma = *v.inputs[1];
    const TensorInfo& beta = *v.inputs[2];
    x_ = x.id;
    out_ = v.outputs[0]->id;
    rows_ = rows;
    cols_ = cols;
    eps_ = eps;
    pin_ = quant_params_of(x);
    pout_ = quant_params_of(*v.outputs[0]);
    table_ = Buffer(env.allocator, 2 * cols * sizeof(double));
    if (!table_.valid()) {
      return v.fail(ErrorKind::MemoryAllocationFailed, "cannot allocate %zu bytes for gamma / beta",
                    table_.size());
    }
    std::vector<float> g(cols), b(cols);
    if (gamma.is_quantized()) dequantize_static(gamma, g.data());
    else std::memcpy(g.data(), gamma.static_data, cols * sizeof(float));
    if (beta.is_quantized()) dequantize_static(beta, b.data());
    else std::memcpy(b.data(), beta.static_data, cols * sizeof(float));
    double* gs = table_.as<double>();
    double* bs = gs + cols;
    for (size_t i = 0; i < cols; ++i) {
      gs[i] = double(g[i]) / double(pout_.scale);
      bs[i] = std::nearbyint(double(b[i]) / double(pout_.scale)) - double(pout_.offset);
    }
    return Status::Ok();
  }

  Status run(const RunContext& c) const override {
    const Q* x = c.at<const Q>(x_);
    Q* y = c.at<Q>(out_);
    const double* gs = table_.as<double>();
    const double* bs = gs + cols_;
    const double lo = pout_.qmin, hi = pout_.qmax;
    for (size_t r = 0; r < rows_; ++r) {
      const Q* px = x + r * cols_;
      Q* py = y + r * cols_;
      double mean = 0.0;
      for (size_t i = 0; i < cols_; ++i) mean += real(px[i]);
      mean /= double(cols_);
      double var = 0.0;
      for (size_t i = 0; i < cols_; ++i) {
        const double d = centered(px[i], mean);
        var = std::fma(d, d, var);
      }
      var /= double(cols_);
      const double inv = 1.0 / std::sqrt(var + double(eps_));
      for (size_t i = 0; i < cols_; ++i) {
        const double q = std::nearbyint(centered(px[i], mean) * inv * gs[i]) + bs[i];
        py[i] = Q(q < lo ? lo : (q > hi ? hi : q));
      }
    }
    return Status::Ok();
  }
  size_t owned_bytes() const override { return table_.size(); }

 private:
  double real(Q q) const { return double(int32_t(q) + pin_.offset) * double(pin_.scale); }
  // real(q) - mean, rounded once.
  double centered(Q q, double mean) const {
    return std::fma(double(int32_t(q) + pin_.offset), double(pin_.scale), -mean);
  }

  uint32_t x_ = 0, out_ = 0;
  size_t rows_ = 0, cols_ = 0;
  float eps_ = 0.f;
  QuantParams pin_, pout_;
  Buffer table_;  // gamma / out_scale, then round(beta / out_scale) - out_offset (double each)
};

// ---- Batchnorm ----------------------------------------------------------------
class BatchnormKernel final : public Kernel {
 public:
  BatchnormKernel(uint32_t x, uint32_t scale, uint32_t offset, uint32_t out, size_t rows, size_t c)
      : x_(x), s_(scale), o_(offset), out_(out), rows_(rows), c_(c) {}
  Status run(const RunContext& ctx) const override {
    const float* x = ctx.at<const float>(x_);
    const float* s = ctx.at<const float>(s_);
    const float* o = ctx.at<const float>(o_);
    float* y = ctx.at<float>(out_);
    for (size_t r = 0; r < rows_; ++r)
      for (size_t i = 0; i < c_; ++i) y[r * c_ + i] = std::fma(x[r * c_ + i], s[i], o[i]);
    return Status::Ok();
  }

 private:
  uint32_t x_, s_, o_, out_;
  size_t rows_, c_;
};

Status create_batchnorm(const OpView& v, KernelEnv&, KernelPtr& out) {
  QNN_RETURN_IF_ERROR(v.expect_arity(3, 3, 1));
  const TensorInfo& x = *v.inputs[0];
  const TensorInfo& scale = *v.inputs[1];
  const TensorInfo& offset = *v.inputs[2];
  for (const TensorInfo* t : {&x, &scale, &offset}) QNN_RETURN_IF_ERROR(v.expect_float(*t));
  const size_t c = x.rank() ? x.dims.back() : 1;
  if (scale.numel != c || offset.numel != c) {
    return v.fail(ErrorKind::InvalidProgram, "scale '%s' / offset '%s' must have C = %zu elements",
                  scale.name.c_str(), offset.name.c_str(), c);
  }
  QNN_RETURN_IF_ERROR(v.expect_output(0, x.dims, DType::FLOAT_32));
  return emplace_kernel<BatchnormKernel>(out, x.id, scale.id, offset.id, v.outputs[0]->id,
                                         c ? x.numel / c : 0, c);
}

} // namespace

// Quantized LayerNorm as QNN computes it: x and output per-tensor uint8 or uint16 activations
// of one data type, STATIC gamma and beta (quantized or float), the last axes normalized.
// Leaves `out` empty when the op is not of that form (the dispatcher then wraps the float kernel).
Status create_layer_norm_quant(const OpView& v, KernelEnv& env, KernelPtr& out) {
  if (v.inputs.size() != 3 || v.outputs.size() != 1) return Status::Ok();
  const TensorInfo& x = *v.inputs[0];
  const TensorInfo& y = *v.outputs[0];
  const TensorInfo& gamma = *v.inputs[1];
  const TensorInfo& beta = *v.inputs[2];
  const bool u8 = x.dtype == DType::UFIXED_POINT_8, u16 = x.dtype == DType::UFIXED_POINT_16;
  if (!(u8 || u16) || y.dtype != x.dtype || y.dims != x.dims || !is_quant_activation(x) ||
      !is_quant_activation(y) || gamma.kind != TensorKind::STATIC || beta.kind != TensorKind::STATIC) {
    return Status::Ok();
  }
  for (const TensorInfo* t : {&gamma, &beta}) {
    if (!t->is_quantized() && t->dtype != DType::FLOAT_32) return Status::Ok();
  }
  ParamReader params(v);
  float eps = 0.f;
  std::vector<int64_t> axes;
  QNN_RETURN_IF_ERROR(params.scalar_float("epsilon", eps));
  QNN_RETURN_IF_ERROR(params.tensor_int("axes", DType::UINT_32, {}, axes));
  const size_t k = axes.size();
  if (k == 0 || k > x.rank()) return Status::Ok();
  for (size_t i = 0; i < k; ++i) {
    if (size_t(axes[i]) != x.rank() - k + i) return Status::Ok();
  }
  const size_t cols = product(x.dims, x.rank() - k);
  if (gamma.numel != cols || beta.numel != cols || cols == 0) return Status::Ok();
  const size_t rows = x.numel / cols;
  if (u8) {
    std::unique_ptr<QuantLayerNormKernel<uint8_t>> kernel(new QuantLayerNormKernel<uint8_t>());
    QNN_RETURN_IF_ERROR(kernel->init(v, env, rows, cols, eps));
    out = std::move(kernel);
  } else {
    std::unique_ptr<QuantLayerNormKernel<uint16_t>> kernel(new QuantLayerNormKernel<uint16_t>());
    QNN_RETURN_IF_ERROR(kernel->init(v, env, rows, cols, eps));
    out = std::move(kernel);
  }
  return Status::Ok();
}

// Quantized Softmax over the last axis, x and output per-tensor activations of one data type
// (uint8 / uint16) and dims; `out` stays empty otherwise (the dispatcher then wraps the float
// kernel, which computes the same numbers).
Status create_softmax_quant(const OpView& v, KernelEnv&, KernelPtr& out) {
  if (v.inputs.size() != 1 || v.outputs.size() != 1) return Status::Ok();
  const TensorInfo& x = *v.inputs[0];
  const TensorInfo& y = *v.outputs[0];
  const bool u8 = x.dtype == DType::UFIXED_POINT_8, u16 = x.dtype == DType::UFIXED_POINT_16;
  if (!(u8 || u16) || y.dtype != x.dtype || y.dims != x.dims || !is_quant_activation(x) ||
      !is_quant_activation(y) || x.rank() == 0 || x.numel == 0) {
    return Status::Ok();
  }
  ParamReader params(v);
  int64_t axis = 0;
  float beta = 1.f;
  QNN_RETURN_IF_ERROR(params.scalar_int("axis", DType::UINT_32, axis));
  QNN_RETURN_IF_ERROR(params.optional_float("beta", beta));
  if (size_t(axis) + 1 != x.rank()) return Status::Ok();
  const size_t cols = size_t(x.dims.back());
  if (u8) {
    return emplace_kernel<QuantSoftmaxKernel<uint8_t>>(out, x.id, y.id, x.numel / cols, cols, beta,
                                                       quant_params_of(x), quant_params_of(y));
  }
  return emplace_kernel<QuantSoftmaxKernel<uint16_t>>(out, x.id, y.id, x.numel / cols, cols, beta,
                                                      quant_params_of(x), quant_params_of(y));
}

QNN_REGISTER_KERNEL(Float, Softmax, &create_softmax);
QNN_REGISTER_KERNEL(Float, LayerNorm, &create_layer_norm);
QNN_REGISTER_KERNEL(Float, Batchnorm, &create_batchnorm);

} // namespace engine
} // namespace qnn_delegate
