// Quantize (float -> quantized), Dequantize (quantized -> float) and Convert
// (requantize to the output encoding), per-tensor activations, PT2E numerics.
#include <cmath>

#include "backends/qualcomm/runtime/engine/Quant.h"
#include "backends/qualcomm/runtime/engine/Simd.h"
#include "backends/qualcomm/runtime/engine/kernels/KernelUtil.h"

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

template <typename Q>
class QuantizeKernel final : public Kernel {
 public:
  explicit QuantizeKernel(const QuantIo& io) : io_(io) {}
  Status run(const RunContext& c) const override {
    const float* x = c.at<const float>(io_.in);
    Q* y = c.at<Q>(io_.out);
    if constexpr (sizeof(Q) == 1) {
      quantize_u8_htp_run(x, y, io_.n, io_.pout);
    } else {
      quantize_u16_run(x, y, io_.n, io_.pout);
    }
    return Status::Ok();
  }

 private:
  QuantIo io_;
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
  explicit ConvertKernel(const QuantIo& io) : io_(io) {}
  Status run(const RunContext& c) const override {
    convert_run(c.at<const QI>(io_.in), c.at<QO>(io_.out), io_.n, io_.pin, io_.pout);
    return Status::Ok();
  }

 private:
  QuantIo io_;
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
