// Quantize (float -> quantized), Dequantize (quantized -> float) and Convert
// (requantize to the output encoding), per-tensor activations, PT2E numerics.
#include <cmath>

#include "backends/qualcomm/runtime/engine/Quant.h"
#include "backends/qualcomm/runtime/engine/QuantSimd.h"
#include "backends/qualcomm/runtime/engine/Simd.h"
#include "backends/qualcomm/runtime/engine/kernels/KernelUtil.h"

#if QNN_X86
#include <immintrin.h>
#endif

namespace qnn_delegate {
namespace engine {
namespace {

struct QuantIo {
  uint32_t in, out;
  size_t n;
  QuantParams pin, pout;
};

// uint8 as QNN HTP quantizes (measured on QNN 2.51, 0 differences in 80k random values over
// four encodings): x * (1/scale) in float32, rounded to float16, then to the nearest integer
// with halves away from zero, minus the offset; the float16 step is what makes e.g. 19.4977
// quantize as 20. uint16: the exact rounding (QNN differs on ~0.05% of values, by 1).
// std::round of a float16 value h, written so that it compiles inline: floor(|h| + 0.5) with the
// sign of h, exact because |h| + 0.5 is (float16 values below 2^16 have no bits under 2^-24 and
// at most 11 significant ones), halves away from zero as std::round; inf and NaN pass through.
inline float round_half_value(float h) { return std::copysign(std::floor(std::fabs(h) + 0.5f), h); }

inline uint8_t quantize_u8_htp(float x, const QuantParams& p) {
  float r = round_half_value(round_to_half(x * p.inv_scale)) - float(p.offset);
  r = r < float(p.qmin) ? float(p.qmin) : (r > float(p.qmax) ? float(p.qmax) : r);
  return static_cast<uint8_t>(r != r ? float(p.qmin) : r);  // NaN -> qmin
}

// quantize_u8_htp over n values, compiled for x86-64 and x86-64-v3 (QNN_FMA_CLONES): with F16C
// the float16 rounding is two instructions instead of two library calls per value. Same bits.
QNN_FMA_CLONES void quantize_u8_htp_run(const float* x, uint8_t* y, size_t n, const QuantParams& p) {
  for (size_t i = 0; i < n; ++i) y[i] = quantize_u8_htp(x[i], p);
}

// quantize_one over n uint16 values, and Convert's requantization, compiled the same way
// (QNN_FMA_CLONES: std::nearbyint is one instruction with SSE4.1 instead of a call). Same bits.
QNN_FMA_CLONES void quantize_u16_run(const float* x, uint16_t* y, size_t n, const QuantParams& p) {
  for (size_t i = 0; i < n; ++i) y[i] = quantize_one<uint16_t>(x[i], p);
}

template <typename QI, typename QO>
inline void convert_loop(const QI* x, QO* y, size_t n, const QuantParams& pin, const QuantParams& pout) {
  for (size_t i = 0; i < n; ++i) y[i] = quantize_one<QO>(float(int32_t(x[i]) + pin.offset) * pin.scale, pout);
}
#define QNN_CONVERT_RUN(QI, QO)                                                                                    \
  QNN_FMA_CLONES void convert_run(const QI* x, QO* y, size_t n, const QuantParams& pin, const QuantParams& pout) { \
    convert_loop<QI, QO>(x, y, n, pin, pout);                                                                      \
  }
QNN_CONVERT_RUN(uint8_t, uint8_t)
QNN_CONVERT_RUN(uint8_t, uint16_t)
QNN_CONVERT_RUN(uint16_t, uint8_t)
QNN_CONVERT_RUN(uint16_t, uint16_t)
#undef QNN_CONVERT_RUN

#if QNN_X86
// AVX2 + F16C copies of the loops above, 8 values per step, the same operations in the same
// order (so the same bits: the float16 rounding is vcvtps2ph's round-to-nearest-even, as the
// _Float16 cast; maxps returns its second operand for a NaN first one, which is how NaN becomes
// qmin; codes are clamped to [qmin, qmax] >= 0 before the unsigned packs). The tails (n % 8)
// take the scalar loops.
QNN_TARGET_AVX2 inline __m256 htp_codes8(__m256 x, const QuantParams& p) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 h = _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_mul_ps(x, _mm256_set1_ps(p.inv_scale)), _MM_FROUND_TO_NEAREST_INT));
  __m256 a = _mm256_floor_ps(_mm256_add_ps(_mm256_andnot_ps(sign, h), _mm256_set1_ps(0.5f)));
  __m256 r = _mm256_sub_ps(_mm256_or_ps(a, _mm256_and_ps(sign, h)), _mm256_set1_ps(float(p.offset)));
  return clamp8(r, p);
}

template <typename Q>
QNN_TARGET_AVX2 void quantize_avx2(const float* x, Q* y, size_t n, const QuantParams& p) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    store8(sizeof(Q) == 1 ? htp_codes8(v, p) : rne_codes8(v, p), y + i);
  }
  if constexpr (sizeof(Q) == 1) {
    quantize_u8_htp_run(x + i, y + i, n - i, p);
  } else {
    quantize_u16_run(x + i, y + i, n - i, p);
  }
}

// Convert: real = float(q + offset_in) * scale_in (exact int -> float below 2^24), then the
// nearest-even requantization.
template <typename QI, typename QO>
QNN_TARGET_AVX2 void convert_avx2(const QI* x, QO* y, size_t n, const QuantParams& pin, const QuantParams& pout) {
  const __m256 off = _mm256_set1_ps(float(pin.offset)), scale = _mm256_set1_ps(pin.scale);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    store8(rne_codes8(_mm256_mul_ps(_mm256_add_ps(load8(x + i), off), scale), pout), y + i);
  }
  convert_run(x + i, y + i, n - i, pin, pout);
}
#endif

// The AVX2 loops when this CPU and QNN_HOST_ENGINE_KERNELS allow them (read at init).
bool quant_vector_path() {
#if QNN_X86
  return simd_level() >= SimdLevel::Avx2;
#else
  return false;
#endif
}

template <typename Q>
class QuantizeKernel final : public Kernel {
 public:
  explicit QuantizeKernel(const QuantIo& io) : io_(io), vector_(quant_vector_path()) {}
  const char* path() const override { return vector_ ? "avx2" : "plain"; }
  Status run(const RunContext& c) const override {
    const float* x = c.at<const float>(io_.in);
    Q* y = c.at<Q>(io_.out);
#if QNN_X86
    if (vector_) {
      quantize_avx2(x, y, io_.n, io_.pout);
      return Status::Ok();
    }
#endif
    if constexpr (sizeof(Q) == 1) {
      quantize_u8_htp_run(x, y, io_.n, io_.pout);
    } else {
      quantize_u16_run(x, y, io_.n, io_.pout);
    }
    return Status::Ok();
  }

 private:
  QuantIo io_;
  bool vector_;
};

template <typename Q>
class DequantizeKernel final : public Kernel {
 public:
  explicit DequantizeKernel(const QuantIo& io) : io_(io) {}
  Status run(const RunContext& c) const override {
    dequantize_run(c.at<const Q>(io_.in), c.at<float>(io_.out), io_.n, io_.pin);
    return Status::Ok();
  }

 private:
  QuantIo io_;
};

template <typename QI, typename QO>
class ConvertKernel final : public Kernel {
 public:
  explicit ConvertKernel(const QuantIo& io) : io_(io), vector_(quant_vector_path()) {}
  const char* path() const override { return vector_ ? "avx2" : "plain"; }
  Status run(const RunContext& c) const override {
#if QNN_X86
    if (vector_) {
      convert_avx2(c.at<const QI>(io_.in), c.at<QO>(io_.out), io_.n, io_.pin, io_.pout);
      return Status::Ok();
    }
#endif
    convert_run(c.at<const QI>(io_.in), c.at<QO>(io_.out), io_.n, io_.pin, io_.pout);
    return Status::Ok();
  }

 private:
  QuantIo io_;
  bool vector_;
};

Status expect_activation(const OpView& v, const TensorInfo& t) {
  if (!is_quant_activation(t)) {
    return v.fail(ErrorKind::InvalidProgram,
                  "tensor '%s' has data type %s (%s); expected UFIXED_POINT_8/16 with SCALE_OFFSET", t.name.c_str(),
                  dtype_name(t.dtype), encoding_name(t.quant.encoding));
  }
  return Status::Ok();
}

Status make_io(const OpView& v, QuantIo& io) {
  QNN_RETURN_IF_ERROR(v.expect_arity(1, 1, 1));
  const TensorInfo& x = *v.inputs[0];
  const TensorInfo& y = *v.outputs[0];
  QNN_RETURN_IF_ERROR(v.expect_output(0, x.dims, y.dtype));
  io.in = x.id;
  io.out = y.id;
  io.n = x.numel;
  if (x.is_quantized()) io.pin = quant_params_of(x);
  if (y.is_quantized()) io.pout = quant_params_of(y);
  return Status::Ok();
}

bool is_16bit(const TensorInfo& t) { return t.dtype == DType::UFIXED_POINT_16; }

Status create_quantize(const OpView& v, KernelEnv&, KernelPtr& out) {
  QuantIo io;
  QNN_RETURN_IF_ERROR(make_io(v, io));
  QNN_RETURN_IF_ERROR(v.expect_float(*v.inputs[0]));
  QNN_RETURN_IF_ERROR(expect_activation(v, *v.outputs[0]));
  if (is_16bit(*v.outputs[0])) return emplace_kernel<QuantizeKernel<uint16_t>>(out, io);
  return emplace_kernel<QuantizeKernel<uint8_t>>(out, io);
}

Status create_dequantize(const OpView& v, KernelEnv&, KernelPtr& out) {
  QuantIo io;
  QNN_RETURN_IF_ERROR(make_io(v, io));
  QNN_RETURN_IF_ERROR(expect_activation(v, *v.inputs[0]));
  QNN_RETURN_IF_ERROR(v.expect_float(*v.outputs[0]));
  if (is_16bit(*v.inputs[0])) return emplace_kernel<DequantizeKernel<uint16_t>>(out, io);
  return emplace_kernel<DequantizeKernel<uint8_t>>(out, io);
}

Status create_convert(const OpView& v, KernelEnv&, KernelPtr& out) {
  QuantIo io;
  QNN_RETURN_IF_ERROR(make_io(v, io));
  QNN_RETURN_IF_ERROR(expect_activation(v, *v.inputs[0]));
  QNN_RETURN_IF_ERROR(expect_activation(v, *v.outputs[0]));
  const bool in16 = is_16bit(*v.inputs[0]), out16 = is_16bit(*v.outputs[0]);
  if (in16 && out16) return emplace_kernel<ConvertKernel<uint16_t, uint16_t>>(out, io);
  if (in16) return emplace_kernel<ConvertKernel<uint16_t, uint8_t>>(out, io);
  if (out16) return emplace_kernel<ConvertKernel<uint8_t, uint16_t>>(out, io);
  return emplace_kernel<ConvertKernel<uint8_t, uint8_t>>(out, io);
}

}  // namespace

QNN_REGISTER_KERNEL(Quant, Quantize, &create_quantize);
QNN_REGISTER_KERNEL(Quant, Dequantize, &create_dequantize);
QNN_REGISTER_KERNEL(Quant, Convert, &create_convert);

}  // namespace engine
}  // namespace qnn_delegate
