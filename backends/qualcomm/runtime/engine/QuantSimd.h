// AVX2 + F16C building blocks of the per-tensor (de)quantization loops, 8 values per step, the
// same operations in the same order as the scalar code in Quant.h (so the same bits): x86 only,
// each function compiled for AVX2 (callers check the CPU first).
#pragma once

#include <cstddef>
#include <cstdint>

#include "backends/qualcomm/runtime/engine/Quant.h"
#include "backends/qualcomm/runtime/engine/Simd.h"

#if QNN_X86
#include <immintrin.h>

namespace qnn_delegate {
namespace engine {

// Codes clamped to [qmin, qmax] (maxps returns its second operand for a NaN first one, which is
// how NaN becomes qmin; qmin >= 0, so the unsigned packs below are exact).
QNN_TARGET_AVX2 inline __m256 clamp8(__m256 r, const QuantParams& p) {
  return _mm256_min_ps(_mm256_max_ps(r, _mm256_set1_ps(float(p.qmin))), _mm256_set1_ps(float(p.qmax)));
}

QNN_TARGET_AVX2 inline __m256 rne_codes8(__m256 real, const QuantParams& p) {
  __m256 r =
      _mm256_round_ps(_mm256_mul_ps(real, _mm256_set1_ps(p.inv_scale)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  return clamp8(_mm256_sub_ps(r, _mm256_set1_ps(float(p.offset))), p);
}

QNN_TARGET_AVX2 inline void store8(__m256 codes, uint8_t* y) {
  const __m256i i = _mm256_cvtps_epi32(codes);
  const __m128i w = _mm_packus_epi32(_mm256_castsi256_si128(i), _mm256_extracti128_si256(i, 1));
  _mm_storel_epi64(reinterpret_cast<__m128i*>(y), _mm_packus_epi16(w, w));
}

QNN_TARGET_AVX2 inline void store8(__m256 codes, uint16_t* y) {
  const __m256i i = _mm256_cvtps_epi32(codes);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(y),
                   _mm_packus_epi32(_mm256_castsi256_si128(i), _mm256_extracti128_si256(i, 1)));
}

QNN_TARGET_AVX2 inline __m256 load8(const uint8_t* x) {
  return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(x))));
}

QNN_TARGET_AVX2 inline __m256 load8(const uint16_t* x) {
  return _mm256_cvtepi32_ps(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x))));
}

// quantize_run (nearest even) over n values; the n % 8 tail takes the scalar loop.
template <typename Q>
QNN_TARGET_AVX2 void quantize_rne_avx2(const float* x, Q* q, size_t n, const QuantParams& p) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) store8(rne_codes8(_mm256_loadu_ps(x + i), p), q + i);
  quantize_run(x + i, q + i, n - i, p);
}

// dequantize_run over n values: float(q + offset) * scale (the int -> float conversion exact).
template <typename Q>
QNN_TARGET_AVX2 void dequantize_avx2(const Q* q, float* x, size_t n, const QuantParams& p) {
  const __m256 off = _mm256_set1_ps(float(p.offset)), scale = _mm256_set1_ps(p.scale);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_add_ps(load8(q + i), off), scale));
  dequantize_run(q + i, x + i, n - i, p);
}

}  // namespace engine
}  // namespace qnn_delegate
#endif
