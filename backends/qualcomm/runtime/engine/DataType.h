// QNN data type helpers: element sizes, names, float16 rounding.
#pragma once

#include <cstddef>
#include <cstdint>

#include "qnn_payload_generated.h"

namespace qnn_delegate {
namespace engine {

using DType = ::qnn_delegate::QnnDataType;
using TensorKind = ::qnn_delegate::QnnTensorType;

// Bits per element; 0 for an unknown type.
int element_bits(DType dt);
// Bytes of `numel` elements (4-bit types packed two per byte).
size_t storage_bytes(DType dt, size_t numel);
// Bytes per element for byte-addressable types (0 for sub-byte / unknown).
size_t element_size(DType dt);
const char* dtype_name(DType dt);
const char* kind_name(TensorKind kind);

// float -> float16 -> float, round to nearest even.
inline float round_to_half(float x) { return static_cast<float>(static_cast<_Float16>(x)); }

// Bulk rounding (F16C-vectorized when available); src may equal dst.
void round_to_half_copy(const float* src, float* dst, size_t n);
inline void round_to_half_inplace(float* data, size_t n) { round_to_half_copy(data, data, n); }

}  // namespace engine
}  // namespace qnn_delegate
