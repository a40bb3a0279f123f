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

typedef float VecF __attribute__((vector_size(kGemmVecFloats * sizeof(float))));

inline VecF load_vec(const float* p) {
  VecF v;
  __builtin_memcpy(&v, p, sizeof(v));
  return v;
}

inline void store_vec(float* p, VecF v) { __builtin_memcpy(p, &v, sizeof(v)); }

// C[0..MR) x [0..cols) = A[0..MR) x panel (+ bias); MR rows are all valid.
template <size_t MR>
inline void micro_kernel(const float* A, size_t lda, const float* panel, size_t K,
                         const float* bias, float* C, size_t ldc, size_t cols) {
  VecF acc0[MR], acc1[MR];
  for (size_t i = 0; i < MR; ++i) {
    acc0[i] = VecF{};
    acc1[i] = VecF{};
  }
  for (size_t k = 0; k < K; ++k) {
    const VecF b0 = load_vec(panel + k * kGemmNR);
    const VecF b1 = load_vec(panel + k * kGemmNR + kGemmVecFloats);
#pragma GCC unroll 8
    for (size_t i = 0; i < MR; ++i) {
      const float a = A[i * lda + k];
      acc0[i] += a * b0;
      acc1[i] += a * b1;
    }
  }
  if (cols == kGemmNR) {
    const VecF bias0 = bias ? load_vec(bias) : VecF{};
    const VecF bias1 = bias ? load_vec(bias + kGemmVecFloats) : VecF{};
    for (size_t i = 0; i < MR; ++i) {
      store_vec(C + i * ldc, acc0[i] + bias0);
      store_vec(C + i * ldc + kGemmVecFloats, acc1[i] + bias1);
    }
    return;
  }
  for (size_t i = 0; i < MR; ++i) {
    float tmp[kGemmNR];
    store_vec(tmp, acc0[i]);
    store_vec(tmp + kGemmVecFloats, acc1[i]);
    for (size_t j = 0; j < cols; ++j) C[i * ldc + j] = tmp[j] + (bias ? bias[j] : 0.f);
  }
}

} // namespace

void gemm_packed(const float* A, size_t lda, const float* Bp, const float* bias, float* C,
                 size_t ldc, size_t M, size_t N, size_t K) {
  constexpr size_t kRowBlock = 96;
  const size_t panels = (N + kGemmNR - 1) / kGemmNR;
  for (size_t m0 = 0; m0 < M; m0 += kRowBlock) {
    const size_t m_end = std::min(M, m0 + kRowBlock);
    for (size_t p = 0; p < panels; ++p) {
      const float* panel = Bp + p * K * kGemmNR;
      const size_t n0 = p * kGemmNR;
      const size_t cols = std::min(kGemmNR, N - n0);
      const float* pb = bias ? bias + n0 : nullptr;
      size_t m = m0;
      for (; m + kGemmMR <= m_end; m += kGemmMR) {
        micro_kernel<kGemmMR>(A + m * lda, lda, panel, K, pb, C + m * ldc + n0, ldc, cols);
      }
      for (; m < m_end; ++m) {
        micro_kernel<1>(A + m * lda, lda, panel, K, pb, C + m * ldc + n0, ldc, cols);
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
