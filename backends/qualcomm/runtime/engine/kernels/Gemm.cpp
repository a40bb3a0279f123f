#include "backends/qualcomm/runtime/engine/kernels/Gemm.h"

#include <algorithm>
#include <cstring>

namespace qnn_delegate {
namespace engine {

void pack_b_kn(const float* b, size_t K, size_t N, size_t ldb, float* dst) {
  const size_t panels = (N + kGemmNR - 1) / kGemmNR;
  for (size_t p = 0; p < panels; ++p) {
    const size_t n0 = p * kGemmNR;
    const size_t nn = std::min(kGemmNR, N - n0);
    for (size_t k = 0; k < K; ++k) {
      float* d = dst + (p * K + k) * kGemmNR;
      for (size_t j = 0; j < kGemmNR; ++j) d[j] = j < nn ? b[k * ldb + n0 + j] : 0.f;
    }
  }
}

void pack_b_nk(const float* w, size_t K, size_t N, float* dst) {
  const size_t panels = (N + kGemmNR - 1) / kGemmNR;
  for (size_t p = 0; p < panels; ++p) {
    const size_t n0 = p * kGemmNR;
    const size_t nn = std::min(kGemmNR, N - n0);
    for (size_t k = 0; k < K; ++k) {
      float* d = dst + (p * K + k) * kGemmNR;
      for (size_t j = 0; j < kGemmNR; ++j) d[j] = j < nn ? w[(n0 + j) * K + k] : 0.f;
    }
  }
}

namespace {

// acc[MR][NR] = A[0..MR) x panel; rows beyond `rows` are not read.
template <size_t MR>
inline void micro_kernel(const float* A, size_t lda, const float* panel, size_t K,
                         float (&acc)[kGemmMR][kGemmNR]) {
  for (size_t i = 0; i < MR; ++i)
    for (size_t j = 0; j < kGemmNR; ++j) acc[i][j] = 0.f;
  for (size_t k = 0; k < K; ++k) {
    const float* b = panel + k * kGemmNR;
#pragma GCC unroll 4
    for (size_t i = 0; i < MR; ++i) {
      const float a = A[i * lda + k];
#pragma GCC unroll 32
      for (size_t j = 0; j < kGemmNR; ++j) acc[i][j] += a * b[j];
    }
  }
}

inline void store_tile(const float (&acc)[kGemmMR][kGemmNR], size_t rows, size_t cols,
                       const float* bias, float* C, size_t ldc) {
  for (size_t i = 0; i < rows; ++i) {
    float* c = C + i * ldc;
    if (bias) {
      for (size_t j = 0; j < cols; ++j) c[j] = acc[i][j] + bias[j];
    } else {
      for (size_t j = 0; j < cols; ++j) c[j] = acc[i][j];
    }
  }
}

} // namespace

void gemm_packed(const float* A, size_t lda, const float* Bp, const float* bias, float* C,
                 size_t ldc, size_t M, size_t N, size_t K) {
  constexpr size_t kRowBlock = 64;
  const size_t panels = (N + kGemmNR - 1) / kGemmNR;
  float acc[kGemmMR][kGemmNR];
  for (size_t m0 = 0; m0 < M; m0 += kRowBlock) {
    const size_t m_end = std::min(M, m0 + kRowBlock);
    for (size_t p = 0; p < panels; ++p) {
      const float* panel = Bp + p * K * kGemmNR;
      const size_t n0 = p * kGemmNR;
      const size_t cols = std::min(kGemmNR, N - n0);
      const float* pb = bias ? bias + n0 : nullptr;
      size_t m = m0;
      for (; m + kGemmMR <= m_end; m += kGemmMR) {
        micro_kernel<kGemmMR>(A + m * lda, lda, panel, K, acc);
        store_tile(acc, kGemmMR, cols, pb, C + m * ldc + n0, ldc);
      }
      for (; m < m_end; ++m) {
        micro_kernel<1>(A + m * lda, lda, panel, K, acc);
        store_tile(acc, 1, cols, pb, C + m * ldc + n0, ldc);
      }
    }
  }
}

void gemm_rowmajor(const float* A, size_t lda, const float* B, size_t ldb, float* C, size_t ldc,
                   size_t M, size_t N, size_t K) {
  for (size_t m = 0; m < M; ++m) {
    float* c = C + m * ldc;
    std::memset(c, 0, N * sizeof(float));
    for (size_t k = 0; k < K; ++k) {
      const float a = A[m * lda + k];
      const float* b = B + k * ldb;
      for (size_t n = 0; n < N; ++n) c[n] += a * b[n];
    }
  }
}

} // namespace engine
} // namespace qnn_delegate
