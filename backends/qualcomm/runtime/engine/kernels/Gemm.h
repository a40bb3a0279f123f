// Float GEMM on a pre-packed right-hand side: C[M,N] = A[M,K] * B[K,N] + bias.
// B is packed in panels of kGemmNR columns ([panel][k][kGemmNR], zero padded)
// so the micro-kernel streams it contiguously. The micro-kernel uses GCC vector
// extensions (portable C++, lowered to AVX2 / AVX-512 by -march).
#pragma once

#include <cstddef>

#include "backends/qualcomm/runtime/engine/Tensor.h"

namespace qnn_delegate {
namespace engine {

#if defined(__AVX512F__)
constexpr size_t kGemmVecFloats = 16;  // one zmm
constexpr size_t kGemmMR = 8;          // 8 x 2 accumulators
#else
constexpr size_t kGemmVecFloats = 8;   // one ymm
constexpr size_t kGemmMR = 6;          // 6 x 2 accumulators
#endif
constexpr size_t kGemmNR = 2 * kGemmVecFloats;

inline size_t packed_b_floats(size_t K, size_t N) {
  return ((N + kGemmNR - 1) / kGemmNR) * kGemmNR * K;
}

// B given as b[k * ldb + n].
void pack_b_kn(const float* b, size_t K, size_t N, size_t ldb, float* dst);
// B given transposed: w[n * K + k] (FullyConnected weights [N, K]).
void pack_b_nk(const float* w, size_t K, size_t N, float* dst);

// What gemm_packed applies to each result before it stores it: a fused activation
// (FloatActivation::apply), then fp16 rounding (round_to_half) when round_half.
struct GemmEpilogue {
  FloatActivation act;
  bool round_half = false;
};

// C[m * ldc + n] = ep(sum_k A[m * lda + k] * B[k][n] + (bias ? bias[n] : 0)).
void gemm_packed(const float* A, size_t lda, const float* Bp, const float* bias, float* C,
                 size_t ldc, size_t M, size_t N, size_t K, const GemmEpilogue& ep = GemmEpilogue());

// Unpacked GEMM for dynamic operands (MatMul): B given as b[k * ldb + n].
// C must not alias A or B. Overwrites C.
void gemm_rowmajor(const float* A, size_t lda, const float* B, size_t ldb, float* C, size_t ldc,
                   size_t M, size_t N, size_t K);

} // namespace engine
} // namespace qnn_delegate
