// uint8 / uint16 activations x int8 weights -> exact integer accumulator with AVX2
// (vpmaddwd on int16 pairs: every product and pair sum is exact in int32; no
// vpmaddubsw, whose int16 saturation would change results). uint16 activations
// enter as q - 32768 (int16), the 32768 * wsum term goes back in Avx2Weights::fold;
// their int32 partial sums are widened to int64 every kAvx2Block16 k. Compiled with
// target attributes and picked at run time (qgemm_path), so a build without
// -march=native keeps it; the results equal qgemm's (tested bit for bit against the
// plain path, QNN_HOST_ENGINE_KERNELS=plain).
#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "backends/qualcomm/runtime/engine/kernels/QuantGemm.h"

#ifdef QNN_X86
#include <immintrin.h>
#endif

// AVX-512 with VNNI (vpdpwssd) on top of AVX2.
#define QNN_TARGET_AVX512_VNNI __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512vnni,avx2,fma,f16c")))

namespace qnn_delegate {
namespace engine {

namespace {
constexpr size_t kPanel = 16;     // output channels per packed panel (two ymm / one zmm of int32)
constexpr size_t kTileN = 16;     // channels per AVX2 micro tile: one panel
constexpr size_t kBlock16 = 256;  // k per int32 partial sum with 16-bit activations
}  // namespace

QGemmPath qgemm_path(bool a8_w8) {
  const SimdLevel level = simd_level();
  if (a8_w8 && level == SimdLevel::Avx512 && vnni_available()) return QGemmPath::Vnni;
  return level >= SimdLevel::Avx2 ? QGemmPath::Avx2 : QGemmPath::Plain;
}

// For HtpRequant with frac 15 and post 0, y(u) = ((2u + half) M + 2^15) >> 16 is
// nondecreasing in u = (acc + pre) >> s; with M < 2^16, clamping u to +-ulim,
// ulim = ceil((qmax + |out_offset| + 4) 2^15 / M), leaves the clamped output as it is
// and keeps (2u + 1) M + 2^15 below 2^26.
void build_vec_requant8(const Requant& rq, size_t groups, size_t nn, size_t nn_pad, const int64_t* fold,
                        int64_t max_abs_acc, VecRequant8& out) {
  out.ok = false;
  if (!rq.htp || rq.qmax > 255 || rq.qmin < 0) return;
  const size_t total = groups * nn_pad + 16;
  for (auto* v : {&out.pre, &out.shift, &out.half, &out.mult, &out.ulim}) v->assign(total, 0);
  out.out_offset = rq.out_offset;
  out.qmin = int32_t(rq.qmin);
  out.qmax = int32_t(rq.qmax);
  const int64_t reach = rq.qmax + std::abs(int64_t(rq.out_offset)) + 4;
  for (size_t g = 0; g < groups; ++g)
    for (size_t j = 0; j < nn; ++j) {
      const size_t n = g * nn + j, i = g * nn_pad + j;
      const HtpRequant& h = rq.hr[n];
      const int64_t pre = h.pre + (fold ? fold[n] : 0);
      if (h.frac != 15 || h.post != 0 || h.mult <= 0 || h.mult >= (int64_t(1) << 16) ||
          std::abs(pre) + max_abs_acc >= (int64_t(1) << 30)) {
        return;
      }
      out.pre[i] = int32_t(pre);
      out.shift[i] = std::min<int32_t>(h.shift, 31);
      out.half[i] = h.half;
      out.mult[i] = int32_t(h.mult);
      out.ulim[i] = int32_t((reach * 32768 + h.mult - 1) / h.mult);
    }
  out.ok = true;
}

// vlim = ceil(R 2^f / M) + 1 (capped at INT32_MAX: then |y| <= 2^31 M / 2^f < R anyway);
// with f <= 32, |v| M + 2^(f-1) stays below 2^62 and the low 32 bits of the logical
// shift are those of the arithmetic one.
void build_vec_requant_wide(const Requant& rq, size_t groups, size_t nn, size_t nn_pad, const int64_t* fold,
                            int64_t max_hi, VecRequantW& out) {
  out.ok = false;
  if (!rq.htp || rq.hr.empty() || rq.qmin < 0 || rq.qmax > 65535) return;
  out.s = rq.hr[0].shift;
  if (out.s < 0 || out.s > 16) return;
  const size_t total = groups * nn_pad + 8;
  for (auto* v : {&out.hi0, &out.lo0, &out.mult, &out.vlim}) v->assign(total, 0);
  out.frac.assign(total, 1);
  out.out_offset = rq.out_offset;
  out.qmin = int32_t(rq.qmin);
  out.qmax = int32_t(rq.qmax);
  const int64_t reach = rq.qmax + std::abs(int64_t(rq.out_offset)) + 4;
  const int64_t mask = (int64_t(1) << out.s) - 1;
  for (size_t g = 0; g < groups; ++g)
    for (size_t j = 0; j < nn; ++j) {
      const size_t n = g * nn + j, i = g * nn_pad + j;
      const HtpRequant& h = rq.hr[n];
      const int64_t c = h.pre + (fold ? fold[n] : 0);
      if (h.half != 0 || h.shift != out.s || h.mult <= 0 || h.mult >= (int64_t(1) << 31) || h.frac < 1 || h.frac > 32 ||
          std::abs(c) >= (int64_t(1) << 60)) {
        return;
      }
      const int64_t hi0 = (c >> out.s) + h.post;
      if (std::abs(hi0) + max_hi >= (int64_t(1) << 30)) return;
      out.hi0[i] = int32_t(hi0);
      out.lo0[i] = int32_t(c & mask);
      out.mult[i] = int32_t(h.mult);
      out.frac[i] = h.frac;
      const double lim = std::ceil(double(reach) * std::ldexp(1.0, h.frac) / double(h.mult)) + 1.0;
      out.vlim[i] = lim >= 2147483647.0 ? INT32_MAX : int32_t(lim);
    }
  out.ok = true;
}

size_t avx2_kp(size_t K) { return (K + 1) & ~size_t(1); }

size_t avx2_abuf_elems(size_t K) { return kAvx2RowTile * avx2_kp(K); }

bool prepare_avx2(const QWeights& w, const Requant& rq, size_t groups, bool a16, TrackingAllocator* alloc,
                  Avx2Weights& out) {
  const size_t nn = w.N / groups, kp = avx2_kp(w.K);
  const size_t nn_pad = (nn + kTileN - 1) / kTileN * kTileN;
  out.kp = kp;
  out.group_elems = nn_pad * kp;
  out.data = Buffer(alloc, out.group_elems * groups * sizeof(int16_t));
  if (!out.data.valid()) {
    out.data.reset();
    return false;
  }
  int16_t* dst = out.data.as<int16_t>();
  std::memset(dst, 0, out.data.size());
  const int8_t* src = w.data.as<int8_t>();
  for (size_t g = 0; g < groups; ++g)
    for (size_t j = 0; j < nn; ++j) {
      const int8_t* row = src + (g * nn + j) * w.K;
      int16_t* panel = dst + g * out.group_elems + (j / kPanel) * kp * kPanel;
      for (size_t k = 0; k < w.K; ++k) panel[(k / 2) * kPanel * 2 + (j % kPanel) * 2 + k % 2] = row[k];
    }
  out.dpwssd = a16 && simd_level() == SimdLevel::Avx512 && cpu_has_avx512_vnni();
  const int64_t shift = a16 ? 32768 : 0;
  out.fold.resize(w.N);
  for (size_t n = 0; n < w.N; ++n) out.fold[n] = (int64_t(rq.in_offset) + shift) * rq.wsum[n];
  if (!a16) build_vec_requant8(rq, groups, nn, nn_pad, out.fold.data(), int64_t(w.K) * 255 * 128, out.vec);
  // uint16: |partial| <= 256 k x 2^22 per block, hi grows by <= K 2^14 + one per block.
  if (a16)
    build_vec_requant_wide(rq, groups, nn, nn_pad, out.fold.data(), int64_t(w.K) * 16384 + int64_t(w.K) / 256 + 2,
                           out.vec16);
  return true;
}

namespace {

#ifdef QNN_X86
// acc[r][0..15] += rows r < MR of `a` (int16, stride lda) x the 16-channel panel at wp,
// over pairs [q0, q1).
template <int MR>
__attribute__((target("avx2"))) inline void tile_pairs(const int16_t* a, size_t lda, const int16_t* wp, size_t q0,
                                                       size_t q1, __m256i (&acc)[4][2]) {
  for (size_t q = q0; q < q1; ++q) {
    const __m256i w0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wp + q * 32));
    const __m256i w1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wp + q * 32 + 16));
    for (int r = 0; r < MR; ++r) {
      int32_t pair;
      std::memcpy(&pair, a + r * lda + 2 * q, 4);
      const __m256i b = _mm256_set1_epi32(pair);
      acc[r][0] = _mm256_add_epi32(acc[r][0], _mm256_madd_epi16(b, w0));
      acc[r][1] = _mm256_add_epi32(acc[r][1], _mm256_madd_epi16(b, w1));
    }
  }
}

// MR rows x 16 channels (n0 + [0, cnt)) with the full K; requantized into out.
template <int MR, typename O>
__attribute__((target("avx2"))) void tile(const int16_t* a, size_t lda, const int16_t* wp, size_t kp, bool a16,
                                          size_t n0, size_t cnt, const Requant& rq, const int64_t* fold, O* out,
                                          size_t ldo) {
  const size_t pairs = kp / 2, step = a16 ? kBlock16 / 2 : pairs;
  int64_t total[MR][kTileN] = {};
  alignas(32) int32_t part[kTileN];
  for (size_t q0 = 0; q0 < pairs; q0 += step) {
    __m256i acc[4][2];
    for (int r = 0; r < MR; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_si256();
    tile_pairs<MR>(a, lda, wp, q0, std::min(pairs, q0 + step), acc);
    for (int r = 0; r < MR; ++r) {
      _mm256_store_si256(reinterpret_cast<__m256i*>(part), acc[r][0]);
      _mm256_store_si256(reinterpret_cast<__m256i*>(part + 8), acc[r][1]);
      for (size_t j = 0; j < kTileN; ++j) total[r][j] += part[j];
    }
  }
  for (int r = 0; r < MR; ++r)
    for (size_t j = 0; j < cnt; ++j) {
      out[r * ldo + j] = rq.apply<O>(total[r][j] + fold[n0 + j], n0 + j);
    }
}

// p[i .. i + 8).
__attribute__((target("avx2"))) inline __m256i ld8(const std::vector<int32_t>& p, size_t i) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p.data() + i));
}

// 8 lanes of Avx2Weights::vec_rq requantization: uint8 values in the low bytes.
__attribute__((target("avx2"))) inline __m256i requant8(__m256i acc, const VecRequant8& v, size_t i) {
  const __m256i lim = ld8(v.ulim, i);
  __m256i u = _mm256_srav_epi32(_mm256_add_epi32(acc, ld8(v.pre, i)), ld8(v.shift, i));
  u = _mm256_min_epi32(_mm256_max_epi32(u, _mm256_sub_epi32(_mm256_setzero_si256(), lim)), lim);
  const __m256i t = _mm256_add_epi32(_mm256_add_epi32(u, u), ld8(v.half, i));
  __m256i y =
      _mm256_srai_epi32(_mm256_add_epi32(_mm256_mullo_epi32(t, ld8(v.mult, i)), _mm256_set1_epi32(1 << 15)), 16);
  y = _mm256_sub_epi32(y, _mm256_set1_epi32(v.out_offset));
  return _mm256_min_epi32(_mm256_max_epi32(y, _mm256_set1_epi32(v.qmin)), _mm256_set1_epi32(v.qmax));
}

// 8 lanes of VecRequantW requantization (hi, lo as described there): int32 results.

__attribute__((target("avx2"))) inline __m256i requant_wide(__m256i hi, __m256i lo, const VecRequantW& v, size_t i) {
  const __m256i lim = ld8(v.vlim, i);
  __m256i x = _mm256_add_epi32(hi, _mm256_sra_epi32(lo, _mm_cvtsi32_si128(v.s)));
  x = _mm256_min_epi32(_mm256_max_epi32(x, _mm256_sub_epi32(_mm256_setzero_si256(), lim)), lim);
  const __m256i m = ld8(v.mult, i), f = ld8(v.frac, i);
  const __m256i one = _mm256_set1_epi64x(1);
  const __m256i fe = _mm256_and_si256(f, _mm256_set1_epi64x(0xffffffffLL)), fo = _mm256_srli_epi64(f, 32);
  // Signed 32 x 32 -> 64 products of the even and the odd lanes; the logical shift
  // leaves the low 32 bits of the arithmetic one (y fits int32, f <= 32).
  __m256i pe = _mm256_mul_epi32(x, m);
  __m256i po = _mm256_mul_epi32(_mm256_srli_epi64(x, 32), _mm256_srli_epi64(m, 32));
  pe = _mm256_srlv_epi64(_mm256_add_epi64(pe, _mm256_sllv_epi64(one, _mm256_sub_epi64(fe, one))), fe);
  po = _mm256_srlv_epi64(_mm256_add_epi64(po, _mm256_sllv_epi64(one, _mm256_sub_epi64(fo, one))), fo);
  __m256i y = _mm256_blend_epi32(pe, _mm256_slli_epi64(po, 32), 0xAA);
  y = _mm256_sub_epi32(y, _mm256_set1_epi32(v.out_offset));
  return _mm256_min_epi32(_mm256_max_epi32(y, _mm256_set1_epi32(v.qmin)), _mm256_set1_epi32(v.qmax));
}

// 16 uint16 values of two 8-lane results (already in [0, 65535]).
__attribute__((target("avx2"))) inline void store_u16x16(__m256i lo, __m256i hi, size_t cnt, uint16_t* out) {
  const __m256i w16 = _mm256_permute4x64_epi64(_mm256_packus_epi32(lo, hi), 0xD8);
  if (cnt == kTileN) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), w16);
  } else {
    alignas(32) uint16_t tmp[kTileN];
    _mm256_store_si256(reinterpret_cast<__m256i*>(tmp), w16);
    std::memcpy(out, tmp, cnt * sizeof(uint16_t));
  }
}

// uint16 activations and output (HTP's 16-bit arithmetic), all k blocks: each block's
// int32 partial goes into hi (>> 8) and lo (& 255), no int64 widening.
template <int MR>
__attribute__((target("avx2"))) void tile_u16(const int16_t* a, size_t lda, const int16_t* wp, size_t kp, size_t i0,
                                              size_t cnt, const VecRequantW& v, uint16_t* out, size_t ldo) {
  const size_t pairs = kp / 2, step = kBlock16 / 2;
  const __m128i sh = _mm_cvtsi32_si128(v.s);
  const __m256i mask = _mm256_set1_epi32((1 << v.s) - 1);
  __m256i hi[MR][2], lo[MR][2];
  for (int r = 0; r < MR; ++r)
    for (int h = 0; h < 2; ++h) {
      hi[r][h] = ld8(v.hi0, i0 + 8 * h);
      lo[r][h] = ld8(v.lo0, i0 + 8 * h);
    }
  for (size_t q0 = 0; q0 < pairs; q0 += step) {
    __m256i acc[4][2];
    for (int r = 0; r < MR; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_si256();
    tile_pairs<MR>(a, lda, wp, q0, std::min(pairs, q0 + step), acc);
    for (int r = 0; r < MR; ++r)
      for (int h = 0; h < 2; ++h) {
        hi[r][h] = _mm256_add_epi32(hi[r][h], _mm256_sra_epi32(acc[r][h], sh));
        lo[r][h] = _mm256_add_epi32(lo[r][h], _mm256_and_si256(acc[r][h], mask));
      }
  }
  for (int r = 0; r < MR; ++r) {
    store_u16x16(requant_wide(hi[r][0], lo[r][0], v, i0), requant_wide(hi[r][1], lo[r][1], v, i0 + 8), cnt,
                 out + r * ldo);
  }
}

// GCC 12's AVX-512 intrinsics start from an undefined vector (_mm512_undefined_epi32) and
// warn (-Wmaybe-uninitialized) where they are inlined: silenced for this code.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// tile_u16 with vpdpwssd (AVX-512 VNNI; the same int32 sums as vpmaddwd + vpaddd): MR rows
// x NP panels of 16 channels, one zmm accumulator each, cnt channels of the last panel.
template <int MR, int NP>
QNN_TARGET_AVX512_VNNI void tile_u16_vnni(const int16_t* a, size_t lda, const int16_t* wp, size_t panel_stride,
                                          size_t kp, size_t i0, size_t cnt, const VecRequantW& v, uint16_t* out,
                                          size_t ldo) {
  const size_t pairs = kp / 2, step = kBlock16 / 2;
  const __m128i sh = _mm_cvtsi32_si128(v.s);
  const __m512i mask = _mm512_set1_epi32((1 << v.s) - 1);
  __m512i hi[MR][NP], lo[MR][NP];
  for (int r = 0; r < MR; ++r)
    for (int p = 0; p < NP; ++p) {
      hi[r][p] = _mm512_loadu_si512(v.hi0.data() + i0 + 16 * p);
      lo[r][p] = _mm512_loadu_si512(v.lo0.data() + i0 + 16 * p);
    }
  for (size_t q0 = 0; q0 < pairs; q0 += step) {
    const size_t q1 = std::min(pairs, q0 + step);
    __m512i acc[MR][NP];
    for (int r = 0; r < MR; ++r)
      for (int p = 0; p < NP; ++p) acc[r][p] = _mm512_setzero_si512();
    for (size_t q = q0; q < q1; ++q) {
      __m512i w[NP];
      for (int p = 0; p < NP; ++p) w[p] = _mm512_loadu_si512(wp + p * panel_stride + q * 32);
      for (int r = 0; r < MR; ++r) {
        int32_t pair;
        std::memcpy(&pair, a + r * lda + 2 * q, 4);
        const __m512i b = _mm512_set1_epi32(pair);
        for (int p = 0; p < NP; ++p) acc[r][p] = _mm512_dpwssd_epi32(acc[r][p], b, w[p]);
      }
    }
    for (int r = 0; r < MR; ++r)
      for (int p = 0; p < NP; ++p) {
        hi[r][p] = _mm512_add_epi32(hi[r][p], _mm512_sra_epi32(acc[r][p], sh));
        lo[r][p] = _mm512_add_epi32(lo[r][p], _mm512_and_si512(acc[r][p], mask));
      }
  }
  for (int r = 0; r < MR; ++r)
    for (int p = 0; p < NP; ++p) {
      const size_t i = i0 + 16 * p;
      const __m256i y0 = requant_wide(_mm512_castsi512_si256(hi[r][p]), _mm512_castsi512_si256(lo[r][p]), v, i);
      const __m256i y1 =
          requant_wide(_mm512_extracti64x4_epi64(hi[r][p], 1), _mm512_extracti64x4_epi64(lo[r][p], 1), v, i + 8);
      store_u16x16(y0, y1, p + 1 == NP ? cnt - 16 * (NP - 1) : kTileN, out + r * ldo + 16 * p);
    }
}

// Rows m < rows of the int16 rows abuf x channels j0 .. j0 + nn of the group's panels wg.
void qgemm_u16_vnni(const int16_t* abuf, size_t kp, const int16_t* wg, size_t base, size_t j0, size_t nn, size_t rows,
                    const VecRequantW& v, uint16_t* out, size_t ldo) {
  const size_t panel_stride = kp * kPanel;
  size_t j = j0;
  for (; j < j0 + nn && j0 + nn - j > kTileN; j += 2 * kTileN) {  // two panels (the second may be partial)
    const size_t cnt = std::min(2 * kTileN, j0 + nn - j);
    const int16_t* wp = wg + (j / kPanel) * panel_stride;
    uint16_t* o = out + (j - j0);
    size_t r = 0;
    for (; r + 4 <= rows; r += 4)
      tile_u16_vnni<4, 2>(abuf + r * kp, kp, wp, panel_stride, kp, base + j, cnt, v, o + r * ldo, ldo);
    for (; r < rows; ++r)
      tile_u16_vnni<1, 2>(abuf + r * kp, kp, wp, panel_stride, kp, base + j, cnt, v, o + r * ldo, ldo);
  }
  if (j < j0 + nn) {
    const size_t cnt = j0 + nn - j;
    const int16_t* wp = wg + (j / kPanel) * panel_stride;
    uint16_t* o = out + (j - j0);
    size_t r = 0;
    for (; r + 4 <= rows; r += 4)
      tile_u16_vnni<4, 1>(abuf + r * kp, kp, wp, panel_stride, kp, base + j, cnt, v, o + r * ldo, ldo);
    for (; r < rows; ++r)
      tile_u16_vnni<1, 1>(abuf + r * kp, kp, wp, panel_stride, kp, base + j, cnt, v, o + r * ldo, ldo);
  }
}

#pragma GCC diagnostic pop

template <typename O>
__attribute__((target("avx2"))) void requant_wide_row_avx2(const VecRequantW& v, const int32_t* acc, size_t i0,
                                                           size_t cnt, O* out) {
  const __m128i sh = _mm_cvtsi32_si128(v.s);
  const __m256i mask = _mm256_set1_epi32((1 << v.s) - 1);
  for (size_t j = 0; j < cnt; j += 8) {
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(acc + j));
    const __m256i hi = _mm256_add_epi32(_mm256_sra_epi32(a, sh), ld8(v.hi0, i0 + j));
    const __m256i lo = _mm256_add_epi32(_mm256_and_si256(a, mask), ld8(v.lo0, i0 + j));
    const __m256i y = requant_wide(hi, lo, v, i0 + j);
    alignas(16) O tmp[16 / sizeof(O)];
    if constexpr (sizeof(O) == 2) {
      _mm_store_si128(reinterpret_cast<__m128i*>(tmp),
                      _mm_packus_epi32(_mm256_castsi256_si128(y), _mm256_extracti128_si256(y, 1)));
    } else {
      const __m128i w16 = _mm_packs_epi32(_mm256_castsi256_si128(y), _mm256_extracti128_si256(y, 1));
      _mm_store_si128(reinterpret_cast<__m128i*>(tmp), _mm_packus_epi16(w16, w16));
    }
    std::memcpy(out + j, tmp, std::min<size_t>(8, cnt - j) * sizeof(O));
  }
}

// uint8 activations and output, one k block, vectorized requantization.
template <int MR>
__attribute__((target("avx2"))) void tile_u8(const int16_t* a, size_t lda, const int16_t* wp, size_t kp, size_t i0,
                                             size_t cnt, const VecRequant8& v, uint8_t* out, size_t ldo) {
  __m256i acc[4][2];
  for (int r = 0; r < MR; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_si256();
  tile_pairs<MR>(a, lda, wp, 0, kp / 2, acc);
  for (int r = 0; r < MR; ++r) {
    const __m256i lo = requant8(acc[r][0], v, i0), hi = requant8(acc[r][1], v, i0 + 8);
    const __m256i w16 = _mm256_permute4x64_epi64(_mm256_packs_epi32(lo, hi), 0xD8);
    const __m128i b8 = _mm_packus_epi16(_mm256_castsi256_si128(w16), _mm256_extracti128_si256(w16, 1));
    if (cnt == kTileN) {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + r * ldo), b8);
    } else {
      alignas(16) uint8_t tmp[kTileN];
      _mm_store_si128(reinterpret_cast<__m128i*>(tmp), b8);
      std::memcpy(out + r * ldo, tmp, cnt);
    }
  }
}

__attribute__((target("avx2"))) void requant_u8_row_avx2(const VecRequant8& v, const int32_t* acc, size_t i0,
                                                         size_t cnt, uint8_t* out) {
  for (size_t j = 0; j < cnt; j += 8) {
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(acc + j));
    const __m256i y = requant8(a, v, i0 + j);
    const __m128i w16 = _mm_packs_epi32(_mm256_castsi256_si128(y), _mm256_extracti128_si256(y, 1));
    const __m128i b8 = _mm_packus_epi16(w16, w16);
    if (cnt - j >= 8) {
      _mm_storel_epi64(reinterpret_cast<__m128i*>(out + j), b8);
    } else {
      alignas(16) uint8_t tmp[16];
      _mm_store_si128(reinterpret_cast<__m128i*>(tmp), b8);
      std::memcpy(out + j, tmp, cnt - j);
    }
  }
}

// Rows of `a` as int16 (uint16: q - 32768), K padded to kp with zeros.
template <typename A>
void to_int16(const A* a, size_t lda, size_t rows, size_t K, size_t kp, int16_t* dst) {
  for (size_t r = 0; r < rows; ++r) {
    const A* src = a + r * lda;
    int16_t* d = dst + r * kp;
    if constexpr (sizeof(A) == 1) {
      for (size_t k = 0; k < K; ++k) d[k] = int16_t(src[k]);
    } else {
      for (size_t k = 0; k < K; ++k) d[k] = int16_t(int32_t(src[k]) - 32768);
    }
    for (size_t k = K; k < kp; ++k) d[k] = 0;
  }
}
#endif

}  // namespace

template <typename A, typename O>
void qgemm_avx2(const A* a, size_t lda, const Avx2Weights& w, size_t grp, size_t K, size_t n0, size_t j0, size_t nn,
                size_t M, const Requant& rq, O* out, size_t ldo, int16_t* abuf) {
#ifdef QNN_X86
  const size_t kp = w.kp;
  const bool a16 = sizeof(A) == 2;
  const int16_t* wg = w.data.as<int16_t>() + grp * w.group_elems;
  for (size_t m0 = 0; m0 < M; m0 += kAvx2RowTile) {
    const size_t rows = std::min(kAvx2RowTile, M - m0);
    to_int16<A>(a + m0 * lda, lda, rows, K, kp, abuf);
    if constexpr (sizeof(A) == 1 && sizeof(O) == 1) {
      if (w.vec.ok) {
        const size_t base = grp * (w.group_elems / kp);  // padded channels before this group
        const VecRequant8& v = w.vec;
        for (size_t j = j0; j < j0 + nn; j += kTileN) {
          const size_t cnt = std::min(kTileN, j0 + nn - j);
          const int16_t* wp = wg + (j / kPanel) * kp * kPanel;
          O* o = out + m0 * ldo + (j - j0);
          size_t r = 0;
          for (; r + 4 <= rows; r += 4) tile_u8<4>(abuf + r * kp, kp, wp, kp, base + j, cnt, v, o + r * ldo, ldo);
          for (; r < rows; ++r) tile_u8<1>(abuf + r * kp, kp, wp, kp, base + j, cnt, v, o + r * ldo, ldo);
        }
        continue;
      }
    }
    if constexpr (sizeof(A) == 2 && sizeof(O) == 2) {
      if (w.vec16.ok && w.dpwssd) {
        qgemm_u16_vnni(abuf, kp, wg, grp * (w.group_elems / kp), j0, nn, rows, w.vec16, out + m0 * ldo, ldo);
        continue;
      }
      if (w.vec16.ok) {
        const size_t base = grp * (w.group_elems / kp);
        for (size_t j = j0; j < j0 + nn; j += kTileN) {
          const size_t cnt = std::min(kTileN, j0 + nn - j);
          const int16_t* wp = wg + (j / kPanel) * kp * kPanel;
          O* o = out + m0 * ldo + (j - j0);
          size_t r = 0;
          for (; r + 4 <= rows; r += 4)
            tile_u16<4>(abuf + r * kp, kp, wp, kp, base + j, cnt, w.vec16, o + r * ldo, ldo);
          for (; r < rows; ++r) tile_u16<1>(abuf + r * kp, kp, wp, kp, base + j, cnt, w.vec16, o + r * ldo, ldo);
        }
        continue;
      }
    }
    for (size_t j = j0; j < j0 + nn; j += kTileN) {
      const size_t cnt = std::min(kTileN, j0 + nn - j);
      const int16_t* wp = wg + (j / kPanel) * kp * kPanel;
      O* o = out + m0 * ldo + (j - j0);
      size_t r = 0;
      for (; r + 4 <= rows; r += 4) {
        tile<4, O>(abuf + r * kp, kp, wp, kp, a16, n0 + j, cnt, rq, w.fold.data(), o + r * ldo, ldo);
      }
      for (; r < rows; ++r) {
        tile<1, O>(abuf + r * kp, kp, wp, kp, a16, n0 + j, cnt, rq, w.fold.data(), o + r * ldo, ldo);
      }
    }
  }
#else
  (void)a;
  (void)lda;
  (void)w;
  (void)grp;
  (void)K;
  (void)n0;
  (void)j0;
  (void)nn;
  (void)M;
  (void)rq;
  (void)out;
  (void)ldo;
  (void)abuf;
#endif
}

void requant_u8_row(const VecRequant8& v, const int32_t* acc, size_t i0, size_t cnt, uint8_t* out) {
#ifdef QNN_X86
  requant_u8_row_avx2(v, acc, i0, cnt, out);
#else
  (void)v;
  (void)acc;
  (void)i0;
  (void)cnt;
  (void)out;
#endif
}

size_t dw_avx2_packed_elems(size_t taps, size_t C) { return (C / 16) * ((taps + 1) / 2) * 32; }

void pack_dw_avx2(const int8_t* tap_w, size_t taps, size_t C, int16_t* dst) {
  const size_t pairs = (taps + 1) / 2;
  // Position of channel j (< 16) of a block in vpunpcklwd (lo) / vpunpckhwd (hi) order.
  for (size_t b = 0; b < C / 16; ++b)
    for (size_t p = 0; p < pairs; ++p) {
      int16_t* d = dst + (b * pairs + p) * 32;
      for (size_t j = 0; j < 16; ++j) {
        const size_t half = (j % 8) / 4, lane = j / 8, pos = half * 16 + lane * 8 + (j % 4) * 2;
        for (size_t e = 0; e < 2; ++e) {
          const size_t t = 2 * p + e;
          d[pos + e] = t < taps ? int16_t(tap_w[t * C + b * 16 + j]) : int16_t(0);
        }
      }
    }
}

namespace {
#ifdef QNN_X86
__attribute__((target("avx2"))) inline __m256i dw_load16(const uint8_t* p, __m256i add) {
  return _mm256_add_epi16(_mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), add);
}
__attribute__((target("avx2"))) inline __m256i dw_load16(const uint16_t* p, __m256i) {
  return _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)), _mm256_set1_epi16(-32768));
}

// Channels c_begin (a multiple of 16) .. C.
template <typename A>
__attribute__((target("avx2"))) void dw_pixel_avx2_impl(const A* const* px, size_t taps, size_t C, const int16_t* wp,
                                                        const int8_t* tap_w, int32_t in_offset, const int32_t* corr,
                                                        int32_t* acc, size_t c_begin = 0) {
  const size_t pairs = (taps + 1) / 2, C16 = C & ~size_t(15);
  const __m256i add = _mm256_set1_epi16(int16_t(sizeof(A) == 1 ? in_offset : 0));
  // x16 of the input's zero point: what a padding tap holds.
  const __m256i pad = _mm256_set1_epi16(int16_t(sizeof(A) == 1 ? 0 : -in_offset - 32768));
  for (size_t c0 = c_begin; c0 < C16; c0 += 16) {
    __m256i lo = _mm256_setzero_si256(), hi = _mm256_setzero_si256();
    const int16_t* w = wp + (c0 / 16) * pairs * 32;
    for (size_t p = 0; p < pairs; ++p, w += 32) {
      const A* p0 = px[2 * p];
      const A* p1 = 2 * p + 1 < taps ? px[2 * p + 1] : nullptr;
      const __m256i x0 = p0 ? dw_load16(p0 + c0, add) : pad;
      const __m256i x1 = p1 ? dw_load16(p1 + c0, add) : pad;
      lo = _mm256_add_epi32(lo, _mm256_madd_epi16(_mm256_unpacklo_epi16(x0, x1),
                                                  _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w))));
      hi = _mm256_add_epi32(hi, _mm256_madd_epi16(_mm256_unpackhi_epi16(x0, x1),
                                                  _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 16))));
    }
    // lo holds channels 0-3 | 8-11, hi 4-7 | 12-15.
    __m256i a0 = _mm256_permute2x128_si256(lo, hi, 0x20), a1 = _mm256_permute2x128_si256(lo, hi, 0x31);
    if (corr) {
      a0 = _mm256_sub_epi32(a0, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(corr + c0)));
      a1 = _mm256_sub_epi32(a1, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(corr + c0 + 8)));
    }
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(acc + c0), a0);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(acc + c0 + 8), a1);
  }
  for (size_t c = std::max(C16, c_begin); c < C; ++c) {
    int32_t s = 0;
    for (size_t t = 0; t < taps; ++t) {
      if (px[t]) s += (int32_t(px[t][c]) + in_offset) * int32_t(tap_w[t * C + c]);
    }
    acc[c] = s;
  }
}

// GCC 12's AVX-512 intrinsics warn (-Wmaybe-uninitialized) where inlined: silenced here.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
QNN_TARGET_AVX512_VNNI inline __m512i dw_load32(const uint8_t* p, __m512i add) {
  return _mm512_add_epi16(_mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))), add);
}
QNN_TARGET_AVX512_VNNI inline __m512i dw_load32(const uint16_t* p, __m512i) {
  return _mm512_xor_si512(_mm512_loadu_si512(p), _mm512_set1_epi16(-32768));
}

// dw_pixel_avx2_impl with 32 channels per step through vpdpwssd (the same int32 sums as
// vpmaddwd + vpaddd) on the 32-channel packing wp32 (pack_dw_vnni), then the AVX2 16-channel
// block and the scalar tail on the AVX2 packing wp16.
template <typename A>
QNN_TARGET_AVX512_VNNI void dw_pixel_vnni_impl(const A* const* px, size_t taps, size_t C, const int16_t* wp32,
                                               const int16_t* wp16, const int8_t* tap_w, int32_t in_offset,
                                               const int32_t* corr, int32_t* acc) {
  const size_t pairs = (taps + 1) / 2, C32 = C & ~size_t(31);
  const __m512i add = _mm512_set1_epi16(int16_t(sizeof(A) == 1 ? in_offset : 0));
  const __m512i pad = _mm512_set1_epi16(int16_t(sizeof(A) == 1 ? 0 : -in_offset - 32768));
  // lo holds, per 128-bit lane L, channels 8L .. 8L+3 of the block, hi 8L+4 .. 8L+7: the
  // indices (into lo, 16 + into hi) that put channels 0..15 and 16..31 in order.
  alignas(64) int32_t order[2][16];
  for (int h = 0; h < 2; ++h)
    for (int c = 0; c < 16; ++c) {
      const int ch = 16 * h + c, lane = ch / 8, w = ch % 8;
      order[h][c] = (w < 4 ? 0 : 16) + lane * 4 + w % 4;
    }
  const __m512i idx0 = _mm512_load_si512(order[0]), idx1 = _mm512_load_si512(order[1]);
  for (size_t c0 = 0; c0 < C32; c0 += 32) {
    __m512i lo = _mm512_setzero_si512(), hi = _mm512_setzero_si512();
    const int16_t* w = wp32 + (c0 / 32) * pairs * 64;
    for (size_t p = 0; p < pairs; ++p, w += 64) {
      const A* p0 = px[2 * p];
      const A* p1 = 2 * p + 1 < taps ? px[2 * p + 1] : nullptr;
      const __m512i x0 = p0 ? dw_load32(p0 + c0, add) : pad;
      const __m512i x1 = p1 ? dw_load32(p1 + c0, add) : pad;
      lo = _mm512_dpwssd_epi32(lo, _mm512_unpacklo_epi16(x0, x1), _mm512_loadu_si512(w));
      hi = _mm512_dpwssd_epi32(hi, _mm512_unpackhi_epi16(x0, x1), _mm512_loadu_si512(w + 32));
    }
    __m512i a0 = _mm512_permutex2var_epi32(lo, idx0, hi), a1 = _mm512_permutex2var_epi32(lo, idx1, hi);
    if (corr) {
      a0 = _mm512_sub_epi32(a0, _mm512_loadu_si512(corr + c0));
      a1 = _mm512_sub_epi32(a1, _mm512_loadu_si512(corr + c0 + 16));
    }
    _mm512_storeu_si512(acc + c0, a0);
    _mm512_storeu_si512(acc + c0 + 16, a1);
  }
  if (C32 < C) dw_pixel_avx2_impl<A>(px, taps, C, wp16, tap_w, in_offset, corr, acc, C32);
}
#pragma GCC diagnostic pop
#endif
}  // namespace

template <typename A>
void dw_pixel_avx2(const A* const* px, size_t taps, size_t C, const int16_t* wp, const int8_t* tap_w, int32_t in_offset,
                   const int32_t* corr, int32_t* acc) {
#ifdef QNN_X86
  dw_pixel_avx2_impl<A>(px, taps, C, wp, tap_w, in_offset, corr, acc);
#else
  (void)px;
  (void)taps;
  (void)C;
  (void)wp;
  (void)tap_w;
  (void)in_offset;
  (void)corr;
  (void)acc;
#endif
}
template void dw_pixel_avx2<uint8_t>(const uint8_t* const*, size_t, size_t, const int16_t*, const int8_t*, int32_t,
                                     const int32_t*, int32_t*);
template void dw_pixel_avx2<uint16_t>(const uint16_t* const*, size_t, size_t, const int16_t*, const int8_t*, int32_t,
                                      const int32_t*, int32_t*);

bool dw_vnni_available() { return simd_level() == SimdLevel::Avx512 && cpu_has_avx512_vnni(); }

size_t dw_vnni_packed_elems(size_t taps, size_t C) { return (C / 32) * ((taps + 1) / 2) * 64; }

void pack_dw_vnni(const int8_t* tap_w, size_t taps, size_t C, int16_t* dst) {
  const size_t pairs = (taps + 1) / 2;
  // Channel j (< 32) of a block: 128-bit lane j / 8; vpunpcklwd (first 32 int16) for j % 8 < 4,
  // vpunpckhwd (next 32) otherwise; pair (j % 4) within the lane.
  for (size_t b = 0; b < C / 32; ++b)
    for (size_t p = 0; p < pairs; ++p) {
      int16_t* d = dst + (b * pairs + p) * 64;
      for (size_t j = 0; j < 32; ++j) {
        const size_t half = (j % 8) / 4, lane = j / 8, pos = half * 32 + lane * 8 + (j % 4) * 2;
        for (size_t e = 0; e < 2; ++e) {
          const size_t t = 2 * p + e;
          d[pos + e] = t < taps ? int16_t(tap_w[t * C + b * 32 + j]) : int16_t(0);
        }
      }
    }
}

template <typename A>
void dw_pixel_vnni(const A* const* px, size_t taps, size_t C, const int16_t* wp32, const int16_t* wp16,
                   const int8_t* tap_w, int32_t in_offset, const int32_t* corr, int32_t* acc) {
#ifdef QNN_X86
  dw_pixel_vnni_impl<A>(px, taps, C, wp32, wp16, tap_w, in_offset, corr, acc);
#else
  (void)px;
  (void)taps;
  (void)C;
  (void)wp32;
  (void)wp16;
  (void)tap_w;
  (void)in_offset;
  (void)corr;
  (void)acc;
#endif
}
template void dw_pixel_vnni<uint8_t>(const uint8_t* const*, size_t, size_t, const int16_t*, const int16_t*,
                                     const int8_t*, int32_t, const int32_t*, int32_t*);
template void dw_pixel_vnni<uint16_t>(const uint16_t* const*, size_t, size_t, const int16_t*, const int16_t*,
                                      const int8_t*, int32_t, const int32_t*, int32_t*);

template <typename O>
void requant_wide_row(const VecRequantW& v, const int32_t* acc, size_t i0, size_t cnt, O* out) {
#ifdef QNN_X86
  requant_wide_row_avx2<O>(v, acc, i0, cnt, out);
#else
  (void)v;
  (void)acc;
  (void)i0;
  (void)cnt;
  (void)out;
#endif
}
template void requant_wide_row<uint8_t>(const VecRequantW&, const int32_t*, size_t, size_t, uint8_t*);
template void requant_wide_row<uint16_t>(const VecRequantW&, const int32_t*, size_t, size_t, uint16_t*);

#define QNN_AVX2_INSTANCE(A, O)                                                                                        \
  template void qgemm_avx2<A, O>(const A*, size_t, const Avx2Weights&, size_t, size_t, size_t, size_t, size_t, size_t, \
                                 const Requant&, O*, size_t, int16_t*);
QNN_AVX2_INSTANCE(uint8_t, uint8_t)
QNN_AVX2_INSTANCE(uint8_t, uint16_t)
QNN_AVX2_INSTANCE(uint16_t, uint8_t)
QNN_AVX2_INSTANCE(uint16_t, uint16_t)
#undef QNN_AVX2_INSTANCE

}  // namespace engine
}  // namespace qnn_delegate
