// The packed-B float GEMM tiles of the SIMD paths (GemmTiles.inc once per target, each in a
// `#pragma GCC target` region): AVX2 + FMA + F16C, 2 ymm (16 columns) x 6 rows per micro tile;
// AVX-512, 2 zmm (32 columns) x 8 rows. Picked at run time (Gemm.cpp: gemm_path).
#include <algorithm>
#include <cstddef>

#include "backends/qualcomm/runtime/engine/DataType.h"
#include "backends/qualcomm/runtime/engine/kernels/Gemm.h"

#ifdef QNN_X86
#include <immintrin.h>

namespace qnn_delegate {
namespace engine {
namespace {

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
namespace avx2 {
using V = __m256;
constexpr size_t kLanes = 8, kMR = 6;
inline V vfma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
inline V round_half(V v) { return _mm256_cvtph_ps(_mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT)); }
#include "backends/qualcomm/runtime/engine/kernels/GemmTiles.inc"
}  // namespace avx2
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma,f16c")
namespace avx512 {
using V = __m512;
constexpr size_t kLanes = 16, kMR = 8;
inline V vfma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
// vcvtps2ph / vcvtph2ps on 16 lanes (round to nearest even, as F16C's). GCC 12's
// _mm512_cvtps_ph starts from an undefined vector and warns (-Wuninitialized) at -O0 / with
// sanitizers: the warning is silenced here.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
inline V round_half(V v) { return _mm512_cvtph_ps(_mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT)); }
#pragma GCC diagnostic pop
#include "backends/qualcomm/runtime/engine/kernels/GemmTiles.inc"
}  // namespace avx512
#pragma GCC pop_options

}  // namespace

void gemm_tiles_avx2(const PackedGemmJob& j, size_t begin, size_t end) { avx2::run_tiles_any(j, begin, end); }
void gemm_tiles_avx512(const PackedGemmJob& j, size_t begin, size_t end) { avx512::run_tiles_any(j, begin, end); }

}  // namespace engine
}  // namespace qnn_delegate

#else  // no SIMD path on this architecture (gemm_path() is always Plain)
namespace qnn_delegate {
namespace engine {
void gemm_tiles_avx2(const PackedGemmJob& j, size_t begin, size_t end) { gemm_tiles_plain(j, begin, end); }
void gemm_tiles_avx512(const PackedGemmJob& j, size_t begin, size_t end) { gemm_tiles_plain(j, begin, end); }
}  // namespace engine
}  // namespace qnn_delegate
#endif
