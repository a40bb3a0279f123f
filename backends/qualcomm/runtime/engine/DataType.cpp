#include "backends/qualcomm/runtime/engine/DataType.h"

#include "backends/qualcomm/runtime/engine/Simd.h"

#ifdef QNN_X86
#include <immintrin.h>
#endif

namespace qnn_delegate {
namespace engine {

int element_bits(DType dt) {
  switch (dt) {
    case DType::INT_8:
    case DType::UINT_8:
    case DType::SFIXED_POINT_8:
    case DType::UFIXED_POINT_8:
    case DType::BOOL_8:
      return 8;
    case DType::INT_16:
    case DType::UINT_16:
    case DType::FLOAT_16:
    case DType::SFIXED_POINT_16:
    case DType::UFIXED_POINT_16:
      return 16;
    case DType::INT_32:
    case DType::UINT_32:
    case DType::FLOAT_32:
    case DType::SFIXED_POINT_32:
      return 32;
    case DType::INT_64:
    case DType::UINT_64:
      return 64;
    case DType::SFIXED_POINT_4:
    case DType::UFIXED_POINT_4:
      return 4;
    default:
      return 0;
  }
}

size_t storage_bytes(DType dt, size_t numel) {
  const size_t bits = static_cast<size_t>(element_bits(dt));
  return (numel * bits + 7) / 8;
}

size_t element_size(DType dt) {
  const int bits = element_bits(dt);
  return bits >= 8 ? static_cast<size_t>(bits / 8) : 0;
}

const char* dtype_name(DType dt) {
  const char* name = ::qnn_delegate::EnumNameQnnDataType(dt);
  return (name && *name) ? name : "<unknown data type>";
}

#ifdef QNN_X86
namespace {
// 8 floats per F16C conversion (the same rounding as round_to_half); returns how many it rounded.
QNN_TARGET_AVX2 size_t round_to_half_f16c(const float* src, float* dst, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
  }
  return i;
}
}  // namespace
#endif

void round_to_half_copy(const float* src, float* dst, size_t n) {
  size_t i = 0;
#ifdef QNN_X86
  if (cpu_simd_level() >= SimdLevel::Avx2) i = round_to_half_f16c(src, dst, n);
#endif
  for (; i < n; ++i) dst[i] = round_to_half(src[i]);
}

const char* kind_name(TensorKind kind) {
  const char* name = ::qnn_delegate::EnumNameQnnTensorType(kind);
  return (name && *name) ? name : "<unknown tensor type>";
}

}  // namespace engine
}  // namespace qnn_delegate
