// u8 x s8 -> int32 GEMM with AVX-512 VNNI: 4 rows x 32 output channels per step (8
// accumulators: vpdpbusd's latency hidden), one vpdpbusd per row, panel and 4 k; HTP
// fixed-point requantization (HtpRequant.h), in 16 int32 lanes for uint8 outputs
// (VecRequant8, the numbers of the AVX2 path's lanes), else per output. Compiled with target
// attributes (Simd.h), used when the CPU has VNNI.
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

// GCC 12's AVX-512 intrinsics start from an undefined vector (_mm512_undefined_epi32) and
// warn (-Wmaybe-uninitialized) where they are inlined: silenced for this code.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// 16 lanes of VecRequant8 requantization (channels i .. i + 16): the int32 results.
QNN_TARGET_VNNI inline __m512i requant16(__m512i acc, const VecRequant8& v, size_t i) {
  const __m512i lim = _mm512_loadu_si512(v.ulim.data() + i);
  __m512i u = _mm512_srav_epi32(_mm512_add_epi32(acc, _mm512_loadu_si512(v.pre.data() + i)),
                                _mm512_loadu_si512(v.shift.data() + i));
  u = _mm512_min_epi32(_mm512_max_epi32(u, _mm512_sub_epi32(_mm512_setzero_si512(), lim)), lim);
  const __m512i t = _mm512_add_epi32(_mm512_add_epi32(u, u), _mm512_loadu_si512(v.half.data() + i));
  __m512i y = _mm512_srai_epi32(
      _mm512_add_epi32(_mm512_mullo_epi32(t, _mm512_loadu_si512(v.mult.data() + i)), _mm512_set1_epi32(1 << 15)), 16);
  y = _mm512_sub_epi32(y, _mm512_set1_epi32(v.out_offset));
  return _mm512_min_epi32(_mm512_max_epi32(y, _mm512_set1_epi32(v.qmin)), _mm512_set1_epi32(v.qmax));
}

// MR rows of a x NP 16-column panels (cnt columns of the last); lane requantization when
// `vec` (uint8 output), else scalar.
template <int MR, int NP, typename O>
QNN_TARGET_VNNI void vnni_tile(const uint8_t* a, size_t lda, const int8_t* wp, size_t panel_bytes, size_t K, size_t n0,
                               size_t cnt, const Requant& rq, const VecRequant8* vec, O* out, size_t ldo) {
  __m512i acc[MR][NP];
  for (int r = 0; r < MR; ++r)
    for (int p = 0; p < NP; ++p) acc[r][p] = _mm512_setzero_si512();
  const size_t full = K / 4, k4 = (K + 3) / 4;
  for (size_t q = 0; q < full; ++q) {
    __m512i wv[NP];
    for (int p = 0; p < NP; ++p) wv[p] = _mm512_load_si512(wp + p * panel_bytes + q * 64);
    for (int r = 0; r < MR; ++r) {
      int32_t a4;
      std::memcpy(&a4, a + r * lda + q * 4, 4);
      const __m512i av = _mm512_set1_epi32(a4);
      for (int p = 0; p < NP; ++p) acc[r][p] = _mm512_dpbusd_epi32(acc[r][p], av, wv[p]);
    }
  }
  if (full < k4) {
    __m512i wv[NP];
    for (int p = 0; p < NP; ++p) wv[p] = _mm512_load_si512(wp + p * panel_bytes + full * 64);
    for (int r = 0; r < MR; ++r) {
      const __m512i av = _mm512_set1_epi32(load4(a + r * lda + full * 4, K - full * 4));
      for (int p = 0; p < NP; ++p) acc[r][p] = _mm512_dpbusd_epi32(acc[r][p], av, wv[p]);
    }
  }
  const size_t last = cnt - (NP - 1) * kVnniNR;  // columns of the last panel
  if constexpr (sizeof(O) == 1) {
    if (vec != nullptr) {
      const __mmask16 tail = __mmask16((uint32_t(1) << last) - 1);
      for (int r = 0; r < MR; ++r)
        for (int p = 0; p < NP; ++p) {
          const __m512i y = requant16(acc[r][p], *vec, n0 + p * kVnniNR);
          _mm512_mask_cvtepi32_storeu_epi8(out + r * ldo + p * kVnniNR, p + 1 == NP ? tail : __mmask16(0xFFFF), y);
        }
      return;
    }
  }
  alignas(64) int32_t tmp[kVnniNR];
  for (int r = 0; r < MR; ++r)
    for (int p = 0; p < NP; ++p) {
      _mm512_store_si512(tmp, acc[r][p]);
      requant_row(rq, tmp, n0 + p * kVnniNR, p + 1 == NP ? last : kVnniNR, out + r * ldo + p * kVnniNR);
    }
}

// Rows m0 .. M of a in tiles of MR rows x NP panels, then the single-panel tail.
template <int MR, typename O>
void vnni_rows(const uint8_t* a, size_t lda, const int8_t* wp, size_t panel_bytes, size_t K, size_t n0, size_t nn,
               size_t m0, size_t m1, const Requant& rq, const VecRequant8* vec, O* out, size_t ldo) {
  const size_t panels = (nn + kVnniNR - 1) / kVnniNR;
  for (size_t m = m0; m < m1; m += MR) {
    size_t p = 0;
    for (; p + 2 <= panels; p += 2) {
      const size_t cnt = std::min(2 * kVnniNR, nn - p * kVnniNR);
      vnni_tile<MR, 2, O>(a + m * lda, lda, wp + p * panel_bytes, panel_bytes, K, n0 + p * kVnniNR, cnt, rq, vec,
                          out + m * ldo + p * kVnniNR, ldo);
    }
    if (p < panels) {
      const size_t cnt = nn - p * kVnniNR;
      vnni_tile<MR, 1, O>(a + m * lda, lda, wp + p * panel_bytes, panel_bytes, K, n0 + p * kVnniNR, cnt, rq, vec,
                          out + m * ldo + p * kVnniNR, ldo);
    }
  }
}
#pragma GCC diagnostic pop

#endif

}  // namespace

bool vnni_available() { return cpu_has_avx512_vnni(); }

template <typename O>
void qgemm_vnni(const uint8_t* a, size_t lda, const int8_t* wp, size_t K, size_t n0, size_t nn, size_t M,
                const Requant& rq, const VecRequant8* vec, O* out, size_t ldo) {
#ifdef QNN_X86
  const size_t panel_bytes = ((K + 3) / 4) * kVnniNR * 4;
  const VecRequant8* lanes = sizeof(O) == 1 && vec != nullptr && vec->ok ? vec : nullptr;
  const size_t m4 = M & ~size_t(3);
  vnni_rows<4, O>(a, lda, wp, panel_bytes, K, n0, nn, 0, m4, rq, lanes, out, ldo);
  vnni_rows<1, O>(a, lda, wp, panel_bytes, K, n0, nn, m4, M, rq, lanes, out, ldo);
#else
  (void)a;
  (void)lda;
  (void)wp;
  (void)K;
  (void)n0;
  (void)nn;
  (void)M;
  (void)rq;
  (void)vec;
  (void)out;
  (void)ldo;
#endif
}

template void qgemm_vnni<uint8_t>(const uint8_t*, size_t, const int8_t*, size_t, size_t, size_t, size_t, const Requant&,
                                  const VecRequant8*, uint8_t*, size_t);
template void qgemm_vnni<uint16_t>(const uint8_t*, size_t, const int8_t*, size_t, size_t, size_t, size_t,
                                   const Requant&, const VecRequant8*, uint16_t*, size_t);

}  // namespace engine
}  // namespace qnn_delegate
