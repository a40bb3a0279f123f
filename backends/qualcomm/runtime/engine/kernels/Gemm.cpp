#include "backends/qualcomm/runtime/engine/kernels/Gemm.h"

#include <algorithm>
#include <cstring>

#include "backends/qualcomm/runtime/engine/DataType.h"
#include "backends/qualcomm/runtime/engine/ThreadPool.h"

#if defined(__F16C__)
#include <immintrin.h>
#endif

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

// FloatActivation::apply on every lane (Act: its kind; ordered compares, so a NaN lane stays
// NaN for ReluMinMax and becomes 0 for Relu, as there).
template <int Act>
inline VecF activate_vec(VecF x, const FloatActivation& a) {
  if (Act == FloatActivation::Relu) return x > VecF{} ? x : VecF{};
  if (Act == FloatActivation::ReluMinMax) {
    const VecF lo = VecF{} + a.lo, hi = VecF{} + a.hi;
    return x < lo ? lo : (x > hi ? hi : x);
  }
  return x;
}

// round_to_half of every lane (F16C: 8 lanes per conversion, the same rounding).
inline VecF round_half_vec(VecF v) {
#if defined(__F16C__)
  for (size_t h = 0; h < kGemmVecFloats; h += 8) {
    __m256 x;
    __builtin_memcpy(&x, reinterpret_cast<float*>(&v) + h, sizeof(x));
    x = _mm256_cvtph_ps(_mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
    __builtin_memcpy(reinterpret_cast<float*>(&v) + h, &x, sizeof(x));
  }
#else
  for (size_t h = 0; h < kGemmVecFloats; ++h) v[h] = round_to_half(v[h]);
#endif
  return v;
}

// C[0..MR) x [0..cols) = ep(A[0..MR) x panel (+ bias)) (Act: ep.act.kind, Round:
// ep.round_half); MR rows are all valid. Accumulators, init and full-width epilogue are
// unrolled so they stay in registers.
template <size_t MR, bool Round, int Act>
inline void micro_kernel(const float* A, size_t lda, const float* panel, size_t K,
                         const float* bias, float* C, size_t ldc, size_t cols,
                         const GemmEpilogue& ep) {
  VecF acc0[MR], acc1[MR];
#pragma GCC unroll 8
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
#pragma GCC unroll 8
    for (size_t i = 0; i < MR; ++i) {
      VecF c0 = activate_vec<Act>(acc0[i] + bias0, ep.act), c1 = activate_vec<Act>(acc1[i] + bias1, ep.act);
      if (Round) {
        c0 = round_half_vec(c0);
        c1 = round_half_vec(c1);
      }
      store_vec(C + i * ldc, c0);
      store_vec(C + i * ldc + kGemmVecFloats, c1);
    }
    return;
  }
  for (size_t i = 0; i < MR; ++i) {
    float tmp[kGemmNR];
    store_vec(tmp, acc0[i]);
    store_vec(tmp + kGemmVecFloats, acc1[i]);
    for (size_t j = 0; j < cols; ++j) {
      const float c = ep.act.apply(tmp[j] + (bias ? bias[j] : 0.f));
      C[i * ldc + j] = Round ? round_to_half(c) : c;
    }
  }
}

} // namespace

namespace {

struct PackedGemmJob {
  const float* A;
  size_t lda;
  const float* Bp;
  const float* bias;
  float* C;
  size_t ldc, M, N, K;
  size_t panels;
  GemmEpilogue ep;
};

constexpr size_t kRowBlock = 96;
// Below this many multiply-adds a GEMM runs on the calling thread only.
constexpr size_t kMinParallelMacs = size_t(1) << 20;

// Tile t = (row block t / panels, panel t % panels).
template <bool Round, int Act>
void run_tiles(const PackedGemmJob& j, size_t begin, size_t end) {
  for (size_t t = begin; t < end; ++t) {
    const size_t m0 = (t / j.panels) * kRowBlock;
    const size_t p = t % j.panels;
    const size_t m_end = std::min(j.M, m0 + kRowBlock);
    const float* panel = j.Bp + p * j.K * kGemmNR;
    const size_t n0 = p * kGemmNR;
    const size_t cols = std::min(kGemmNR, j.N - n0);
    const float* pb = j.bias ? j.bias + n0 : nullptr;
    size_t m = m0;
    for (; m + kGemmMR <= m_end; m += kGemmMR) {
      micro_kernel<kGemmMR, Round, Act>(j.A + m * j.lda, j.lda, panel, j.K, pb, j.C + m * j.ldc + n0, j.ldc, cols,
                                   j.ep);
    }
    for (; m < m_end; ++m) {
      micro_kernel<1, Round, Act>(j.A + m * j.lda, j.lda, panel, j.K, pb, j.C + m * j.ldc + n0, j.ldc, cols, j.ep);
    }
  }
}

void run_packed_tiles(void* ctx, size_t begin, size_t end) {
  const PackedGemmJob& j = *static_cast<const PackedGemmJob*>(ctx);
  const bool r = j.ep.round_half;
  switch (j.ep.act.kind) {
    case FloatActivation::Relu:
      return r ? run_tiles<true, FloatActivation::Relu>(j, begin, end)
               : run_tiles<false, FloatActivation::Relu>(j, begin, end);
    case FloatActivation::ReluMinMax:
      return r ? run_tiles<true, FloatActivation::ReluMinMax>(j, begin, end)
               : run_tiles<false, FloatActivation::ReluMinMax>(j, begin, end);
    default:
      return r ? run_tiles<true, FloatActivation::None>(j, begin, end)
               : run_tiles<false, FloatActivation::None>(j, begin, end);
  }
}

} // namespace

void gemm_packed(const float* A, size_t lda, const float* Bp, const float* bias, float* C,
                 size_t ldc, size_t M, size_t N, size_t K, const GemmEpilogue& ep) {
  const size_t panels = (N + kGemmNR - 1) / kGemmNR;
  PackedGemmJob job{A, lda, Bp, bias, C, ldc, M, N, K, panels, ep};
  const size_t tiles = ((M + kRowBlock - 1) / kRowBlock) * panels;
  if (M * N * K < kMinParallelMacs) {
    run_packed_tiles(&job, 0, tiles);
    return;
  }
  ThreadPool::instance().parallel_for(tiles, &run_packed_tiles, &job);
}

namespace {

struct RowMajorGemmJob {
  const float* A;
  size_t lda;
  const float* B;
  size_t ldb;
  float* C;
  size_t ldc, N, K;
};

void run_rowmajor_rows(void* ctx, size_t begin, size_t end) {
  const RowMajorGemmJob& j = *static_cast<const RowMajorGemmJob*>(ctx);
  for (size_t m = begin; m < end; ++m) {
    float* c = j.C + m * j.ldc;
    std::memset(c, 0, j.N * sizeof(float));
    for (size_t k = 0; k < j.K; ++k) {
      const float a = j.A[m * j.lda + k];
      const float* b = j.B + k * j.ldb;
      for (size_t n = 0; n < j.N; ++n) c[n] += a * b[n];
    }
  }
}

} // namespace

void gemm_rowmajor(const float* A, size_t lda, const float* B, size_t ldb, float* C, size_t ldc,
                   size_t M, size_t N, size_t K) {
  RowMajorGemmJob job{A, lda, B, ldb, C, ldc, N, K};
  if (M * N * K < kMinParallelMacs) {
    run_rowmajor_rows(&job, 0, M);
    return;
  }
  ThreadPool::instance().parallel_for(M, &run_rowmajor_rows, &job);
}

} // namespace engine
} // namespace qnn_delegate
