#include "backends/qualcomm/runtime/engine/kernels/Gemm.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "backends/qualcomm/runtime/engine/DataType.h"
#include "backends/qualcomm/runtime/engine/ThreadPool.h"
#include "backends/qualcomm/runtime/engine/kernels/KernelUtil.h"

namespace qnn_delegate {
namespace engine {

GemmPath gemm_path() {
  switch (simd_level()) {
    case SimdLevel::Avx512:
      return GemmPath::Avx512;
    case SimdLevel::Avx2:
      return GemmPath::Avx2;
    default:
      return GemmPath::Plain;
  }
}

const char* gemm_path_name(GemmPath p) {
  return p == GemmPath::Avx512 ? "avx512" : (p == GemmPath::Avx2 ? "avx2" : "plain");
}

namespace {

// Panels of nr columns: dst[(p * K + k) * nr + j] = element (k, p * nr + j) (0 past N).
template <typename At>
void pack_panels(GemmPath path, size_t K, size_t N, float* dst, At at) {
  const size_t nr = gemm_nr(path);
  const size_t panels = (N + nr - 1) / nr;
  for (size_t p = 0; p < panels; ++p) {
    const size_t n0 = p * nr;
    const size_t nn = std::min(nr, N - n0);
    for (size_t k = 0; k < K; ++k) {
      float* d = dst + (p * K + k) * nr;
      for (size_t j = 0; j < nr; ++j) d[j] = j < nn ? at(k, n0 + j) : 0.f;
    }
  }
}

}  // namespace

void pack_b_kn(GemmPath p, const float* b, size_t K, size_t N, size_t ldb, float* dst) {
  pack_panels(p, K, N, dst, [b, ldb](size_t k, size_t n) { return b[k * ldb + n]; });
}

void pack_b_nk(GemmPath p, const float* w, size_t K, size_t N, float* dst) {
  pack_panels(p, K, N, dst, [w, K](size_t k, size_t n) { return w[n * K + k]; });
}

// One output at a time: the same operations as a SIMD lane (GemmTiles.inc).
void gemm_tiles_plain(const PackedGemmJob& j, size_t begin, size_t end) {
  for (size_t t = begin; t < end; ++t) {
    const size_t m0 = (t / j.panels) * kGemmRowBlock;
    const size_t p = t % j.panels;
    const size_t m_end = std::min(j.M, m0 + kGemmRowBlock);
    const float* panel = j.Bp + p * j.K * j.nr;
    const size_t n0 = p * j.nr;
    const size_t cols = std::min(j.nr, j.N - n0);
    for (size_t m = m0; m < m_end; ++m) {
      const float* a = j.A + m * j.lda;
      for (size_t c = 0; c < cols; ++c) {
        float acc = 0.f;
        for (size_t k = 0; k < j.K; ++k) acc = std::fma(a[k], panel[k * j.nr + c], acc);
        const float y = j.ep.act.apply(acc + (j.bias ? j.bias[n0 + c] : 0.f));
        j.C[m * j.ldc + n0 + c] = j.ep.round_half ? round_to_half(y) : y;
      }
    }
  }
}

namespace {

constexpr size_t kMinParallelMacs = size_t(1) << 20;  // below: the calling thread only

struct TilesCall {
  const PackedGemmJob* job;
  void (*tiles)(const PackedGemmJob&, size_t, size_t);
};

void run_tiles(void* ctx, size_t begin, size_t end) {
  const TilesCall& c = *static_cast<const TilesCall*>(ctx);
  c.tiles(*c.job, begin, end);
}

}  // namespace

void gemm_packed(GemmPath path, const float* A, size_t lda, const float* Bp, const float* bias, float* C, size_t ldc,
                 size_t M, size_t N, size_t K, const GemmEpilogue& ep) {
  const size_t nr = gemm_nr(path);
  const size_t panels = (N + nr - 1) / nr;
  const PackedGemmJob job{A, lda, Bp, bias, C, ldc, M, N, K, nr, panels, ep};
  TilesCall call{&job, path == GemmPath::Avx512 ? &gemm_tiles_avx512
                       : path == GemmPath::Avx2 ? &gemm_tiles_avx2
                                                : &gemm_tiles_plain};
  const size_t tiles = ((M + kGemmRowBlock - 1) / kGemmRowBlock) * panels;
  if (M * N * K < kMinParallelMacs) {
    run_tiles(&call, 0, tiles);
    return;
  }
  ThreadPool::instance().parallel_for(tiles, &run_tiles, &call);
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

// Row m of C: c = 0, then c[n] = fma(a[m, k], b[k, n], c[n]) for k = 0..K-1.
void run_rowmajor_rows(void* ctx, size_t begin, size_t end) {
  const RowMajorGemmJob& j = *static_cast<const RowMajorGemmJob*>(ctx);
  for (size_t m = begin; m < end; ++m) {
    float* c = j.C + m * j.ldc;
    std::memset(c, 0, j.N * sizeof(float));
    for (size_t k = 0; k < j.K; ++k) fma_axpy(j.A[m * j.lda + k], j.B + k * j.ldb, c, j.N);
  }
}

}  // namespace

void gemm_rowmajor(const float* A, size_t lda, const float* B, size_t ldb, float* C, size_t ldc, size_t M, size_t N,
                   size_t K) {
  RowMajorGemmJob job{A, lda, B, ldb, C, ldc, N, K};
  if (M * N * K < kMinParallelMacs) {
    run_rowmajor_rows(&job, 0, M);
    return;
  }
  ThreadPool::instance().parallel_for(M, &run_rowmajor_rows, &job);
}

}  // namespace engine
}  // namespace qnn_delegate
