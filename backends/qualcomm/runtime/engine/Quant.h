// Quantized tensors: loading / validating encodings, integer ranges,
// sub-byte weight unpacking, (de)quantization of element runs.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "backends/qualcomm/runtime/engine/Status.h"
#include "backends/qualcomm/runtime/engine/Tensor.h"

namespace qnn_delegate {
namespace engine {

// Reads `q` into info.quant and validates it against the tensor's data type,
// kind and dims; sets info.nbytes for packed sub-byte data.
Status load_quant_info(const ::qnn_delegate::QuantizeParams* q, const std::string& graph, TensorInfo& info);

bool is_fixed_point(DType dt);
// UFIXED_POINT_8 / UFIXED_POINT_16 with a per-tensor encoding.
bool is_quant_activation(const TensorInfo& t);
// Integer range of a quantized tensor (bitwidth-aware for SFIXED_POINT_4).
int64_t quant_min(const TensorInfo& t);
int64_t quant_max(const TensorInfo& t);

// Unpacks the STATIC data of a SFIXED_POINT_8 / SFIXED_POINT_4 (bitwidth 4 or 2)
// tensor into one int8 per element.
void unpack_int8(const TensorInfo& t, int8_t* dst);
// Integer value of element i of a STATIC quantized tensor (any fixed-point type).
int64_t static_q_at(const TensorInfo& t, size_t i);
// Output channel of element i of a per-channel / blockwise tensor (0 per tensor).
size_t channel_at(const TensorInfo& t, size_t i);
// Float scale of the channel of element i (per-tensor scale, or scales[c]).
float channel_scale_at(const TensorInfo& t, size_t i);
// Integer block scale of element i (blockwise), 1 otherwise.
uint32_t block_scale_at(const TensorInfo& t, size_t i);
// True when every offset is 0 (symmetric).
bool is_symmetric(const TensorInfo& t);
// Scale and offset that apply to element i (per tensor / channel / block).
float scale_at(const TensorInfo& t, size_t i, int32_t& offset);
// Dequantizes a whole STATIC quantized tensor into dst[numel].
void dequantize_static(const TensorInfo& t, float* dst);

// Per-tensor (de)quantization of activation runs, PT2E numerics:
// q = clamp(rne(x * (1/scale)) - offset), real = (q + offset) * scale (float32).
struct QuantParams {
  float scale = 1.f;
  float inv_scale = 1.f;
  int32_t offset = 0;
  int32_t qmin = 0, qmax = 255;
};
QuantParams quant_params_of(const TensorInfo& t);

template <typename Q>
inline Q quantize_one(float x, const QuantParams& p) {
  float r = std::nearbyint(x * p.inv_scale) - float(p.offset);
  r = r < float(p.qmin) ? float(p.qmin) : (r > float(p.qmax) ? float(p.qmax) : r);
  return static_cast<Q>(r != r ? float(p.qmin) : r);  // NaN -> qmin
}

template <typename Q>
void quantize_run(const float* x, Q* q, size_t n, const QuantParams& p) {
  for (size_t i = 0; i < n; ++i) q[i] = quantize_one<Q>(x[i], p);
}

template <typename Q>
void dequantize_run(const Q* q, float* x, size_t n, const QuantParams& p) {
  for (size_t i = 0; i < n; ++i) x[i] = float(int32_t(q[i]) + p.offset) * p.scale;
}

// Dispatch on an activation dtype (UFIXED_POINT_8 / 16).
void quantize_any(const float* x, void* q, size_t n, DType dt, const QuantParams& p);
void dequantize_any(const void* q, float* x, size_t n, DType dt, const QuantParams& p);

}  // namespace engine
}  // namespace qnn_delegate
