// u8 x s8 -> int32 GEMM with AVX-512 VNNI: 4 rows x 16 output channels per
// step, one vpdpbusd per row and 4 k; HTP fixed-point requantization per output
// (HtpRequant.h). Compiled with target attributes (Simd.h), used when the CPU has VNNI.
#include <algorithm>
#include <cstring>

#include "backends/qualcomm/runtime/engine/kernels/QuantGemm.h"

#ifdef QNN_X86
#include <immintrin.h>
#endif

namespace qnn_delegate {
namespace engine {

size_t vnni_packed_bytes(size_t K, size_t nn) { return ((nn + kVnniNR - 1) / kVnniNR) * ((K + 3) / 4) * kVnniNR * 4; }

void pack_vnni(const int8_t* w, size_t K, size_t n0, size_t nn, int8_t* dst) {
  const size_t k4 = (K + 3) / 4, panels = (nn + kVnniNR - 1) / kVnniNR;
  std::memset(dst, 0, vnni_packed_bytes(K, nn));
  for (size_t p = 0; p < panels; ++p)
    for (size_t j = 0; j < kVnniNR && p * kVnniNR + j < nn; ++j) {
      const int8_t* row = w + (n0 + p * kVnniNR + j) * K;
      for (size_t k = 0; k < K; ++k) dst[((p * k4 + k / 4) * kVnniNR + j) * 4 + k % 4] = row[k];
    }
}

namespace {

template <typename O>
void requant_row(const Requant& rq, const int32_t* acc, size_t n0, size_t cnt, O* dst) {
  const int64_t* wsum = rq.wsum.data() + n0;
  const int64_t in_off = rq.in_offset;
  for (size_t j = 0; j < cnt; ++j) dst[j] = rq.apply<O>(int64_t(acc[j]) + in_off * wsum[j], n0 + j);
}

#ifdef QNN_X86
inline int32_t load4(const uint8_t* p, size_t avail) {
  int32_t v = 0;
  std::memcpy(&v, p, avail < 4 ? avail : 4);
  return v;
}

// MR rows of a x one 16-column panel.
template <int MR, typename O>
QNN_TARGET_VNNI void vnni_tile(const uint8_t* a, size_t lda, const int8_t* wp, size_t K, size_t n0, size_t cnt,
                               const Requant& rq, O* out, size_t ldo) {
  __m512i acc[MR];
  for (int r = 0; r < MR; ++r) acc[r] = _mm512_setzero_si512();
  const size_t full = K / 4, k4 = (K + 3) / 4;
  for (size_t q = 0; q < full; ++q) {
    const __m512i wv = _mm512_load_si512(wp + q * 64);
    for (int r = 0; r < MR; ++r) {
      int32_t a4;
      std::memcpy(&a4, a + r * lda + q * 4, 4);
      acc[r] = _mm512_dpbusd_epi32(acc[r], _mm512_set1_epi32(a4), wv);
    }
  }
  if (full < k4) {
    const __m512i wv = _mm512_load_si512(wp + full * 64);
    for (int r = 0; r < MR; ++r) {
      const int32_t a4 = load4(a + r * lda + full * 4, K - full * 4);
      acc[r] = _mm512_dpbusd_epi32(acc[r], _mm512_set1_epi32(a4), wv);
    }
  }
  alignas(64) int32_t tmp[kVnniNR];
  for (int r = 0; r < MR; ++r) {
    _mm512_store_si512(tmp, acc[r]);
    requant_row(rq, tmp, n0, cnt, out + r * ldo);
  }
}
#endif

}  // namespace

bool vnni_available() { return cpu_has_avx512_vnni(); }

template <typename O>
void qgemm_vnni(const uint8_t* a, size_t lda, const int8_t* wp, size_t K, size_t n0, size_t nn, size_t M,
                const Requant& rq, O* out, size_t ldo) {
#ifdef QNN_X86
  const size_t panel_bytes = ((K + 3) / 4) * kVnniNR * 4;
  const size_t panels = (nn + kVnniNR - 1) / kVnniNR;
  size_t m = 0;
  for (; m + 4 <= M; m += 4)
    for (size_t p = 0; p < panels; ++p) {
      const size_t cnt = std::min(kVnniNR, nn - p * kVnniNR);
      vnni_tile<4, O>(a + m * lda, lda, wp + p * panel_bytes, K, n0 + p * kVnniNR, cnt, rq, out + m * ldo + p * kVnniNR,
                      ldo);
    }
  for (; m < M; ++m)
    for (size_t p = 0; p < panels; ++p) {
      const size_t cnt = std::min(kVnniNR, nn - p * kVnniNR);
      vnni_tile<1, O>(a + m * lda, lda, wp + p * panel_bytes, K, n0 + p * kVnniNR, cnt, rq, out + m * ldo + p * kVnniNR,
                      ldo);
    }
#else
  (void)a;
  (void)lda;
  (void)wp;
  (void)K;
  (void)n0;
  (void)nn;
  (void)M;
  (void)rq;
  (void)out;
  (void)ldo;
#endif
}

template void qgemm_vnni<uint8_t>(const uint8_t*, size_t, const int8_t*, size_t, size_t, size_t, size_t, const Requant&,
                                  uint8_t*, size_t);
template void qgemm_vnni<uint16_t>(const uint8_t*, size_t, const int8_t*, size_t, size_t, size_t, size_t,
                                   const Requant&, uint16_t*, size_t);

}  // namespace engine
}  // namespace qnn_delegate
