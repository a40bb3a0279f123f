// Engine view of one payload tensor.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "backends/qualcomm/runtime/engine/DataType.h"
#include "backends/qualcomm/runtime/engine/QuantInfo.h"

namespace qnn_delegate {
namespace engine {

using Dims = std::vector<uint32_t>;

// A float Relu / ReluMinMax computed by the op that produces its input (ActivationFusion.h):
// the same expressions as their kernels (elementwise.cpp), so the bits are theirs.
struct FloatActivation {
  enum Kind : uint8_t { None, Relu, ReluMinMax };
  Kind kind = None;
  float lo = 0.f, hi = 0.f;  // ReluMinMax's min_value / max_value
  float apply(float x) const {
    if (kind == Relu) return x > 0.f ? x : 0.f;
    if (kind == ReluMinMax) return x < lo ? lo : (x > hi ? hi : x);
    return x;
  }
};

struct TensorInfo {
  uint32_t id = 0;
  std::string name;
  TensorKind kind = TensorKind::NATIVE;
  DType dtype = DType::FLOAT_32;
  Dims dims;
  size_t numel = 1;
  size_t nbytes = 0;
  // STATIC tensors: engine-owned copy of the data (fp16-rounded if needed).
  const void* static_data = nullptr;
  QuantInfo quant;  // UNDEFINED for float / integer tensors
  // Graph inputs / outputs: the ExecuTorch dim order of the caller's tensor (`dims` are the
  // logical dims in this order). Empty = contiguous.
  std::vector<uint8_t> dim_order;
  // Codes a fused activation clamps this tensor to (quant_min / quant_max narrow to them): set
  // on the view of a producer that writes a Relu / ReluMinMax output whose encoding is wider.
  int64_t clamp_min = INT64_MIN, clamp_max = INT64_MAX;
  // Float tensors: the activation a fused producer applies before storing (view only).
  FloatActivation fused_act;

  size_t rank() const { return dims.size(); }
  bool is_float() const { return dtype == DType::FLOAT_32; }
  bool is_quantized() const { return quant.defined(); }
};

inline size_t product(const Dims& dims, size_t begin = 0, size_t end = SIZE_MAX) {
  size_t p = 1;
  for (size_t i = begin; i < dims.size() && i < end; ++i) p *= dims[i];
  return p;
}

std::string dims_to_string(const Dims& dims);

}  // namespace engine
}  // namespace qnn_delegate
