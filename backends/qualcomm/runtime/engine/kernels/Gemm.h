// Float GEMM on a pre-packed right-hand side: C[M,N] = A[M,K] * B[K,N] + bias.
// B is packed in panels of nr columns ([panel][k][nr], zero padded) so the micro-kernel
// streams it contiguously. The code path (Simd.h) is chosen when B is packed, since nr
// depends on it: Avx512 (2 zmm per row: nr 32, 8 rows), Avx2 (2 ymm: nr 16, 6 rows), Plain
// (nr 16, scalar). Every path computes each output as acc = fma(a[k], b[k], acc) for k = 0..K-1
// from 0, then + bias, the fused activation and the fp16 rounding: the same bits.
#pragma once

#include <cstddef>

#include "backends/qualcomm/runtime/engine/Simd.h"
#include "backends/qualcomm/runtime/engine/Tensor.h"

namespace qnn_delegate {
namespace engine {

enum class GemmPath { Plain, Avx2, Avx512 };
// The path of GEMMs whose B is packed now (simd_level()).
GemmPath gemm_path();
// "avx512", "avx2" or "plain" (Kernel::path of the GEMM kernels).
const char* gemm_path_name(GemmPath p);
// Columns per packed panel.
inline size_t gemm_nr(GemmPath p) { return p == GemmPath::Avx512 ? 32 : 16; }

inline size_t packed_b_floats(GemmPath p, size_t K, size_t N) {
  const size_t nr = gemm_nr(p);
  return ((N + nr - 1) / nr) * nr * K;
}

// B given as b[k * ldb + n].
void pack_b_kn(GemmPath p, const float* b, size_t K, size_t N, size_t ldb, float* dst);
// B given transposed: w[n * K + k] (FullyConnected weights [N, K]).
void pack_b_nk(GemmPath p, const float* w, size_t K, size_t N, float* dst);

// What gemm_packed applies to each result before it stores it: a fused activation
// (FloatActivation::apply), then fp16 rounding (round_to_half) when round_half.
struct GemmEpilogue {
  FloatActivation act;
  bool round_half = false;
};

// C[m * ldc + n] = ep(sum_k A[m * lda + k] * B[k][n] + (bias ? bias[n] : 0)), Bp packed for path p.
void gemm_packed(GemmPath p, const float* A, size_t lda, const float* Bp, const float* bias, float* C, size_t ldc,
                 size_t M, size_t N, size_t K, const GemmEpilogue& ep = GemmEpilogue());

// Unpacked GEMM for dynamic operands (MatMul): B given as b[k * ldb + n], each output
// fma-accumulated over k from 0 as above. C must not alias A or B. Overwrites C.
void gemm_rowmajor(const float* A, size_t lda, const float* B, size_t ldb, float* C, size_t ldc, size_t M, size_t N,
                   size_t K);

// ---- internal: the tiles of one gemm_packed call (Gemm.cpp, GemmAvx2.cpp, GemmAvx512.cpp) ----
struct PackedGemmJob {
  const float* A;
  size_t lda;
  const float* Bp;
  const float* bias;
  float* C;
  size_t ldc, M, N, K;
  size_t nr, panels;
  GemmEpilogue ep;
};
constexpr size_t kGemmRowBlock = 96;  // rows per tile
// Tile t = (row block t / panels, panel t % panels), for t in [begin, end).
void gemm_tiles_plain(const PackedGemmJob& j, size_t begin, size_t end);
void gemm_tiles_avx2(const PackedGemmJob& j, size_t begin, size_t end);
void gemm_tiles_avx512(const PackedGemmJob& j, size_t begin, size_t end);

}  // namespace engine
}  // namespace qnn_delegate
