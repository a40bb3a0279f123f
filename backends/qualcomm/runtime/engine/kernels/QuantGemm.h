// Integer matrix products of the quantized Conv2d / FullyConnected kernels:
// acc[m,n] = sum_k (q_in[m,k] + in_offset) * w[n,k], exact in Acc (int32 for
// u8 x s8, int64 otherwise), then requantized per output channel with QNN HTP's
// fixed-point arithmetic (HtpRequant.h).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "backends/qualcomm/runtime/engine/HtpRequant.h"
#include "backends/qualcomm/runtime/engine/Quant.h"
#include "backends/qualcomm/runtime/engine/ThreadPool.h"
#include "backends/qualcomm/runtime/engine/kernels/KernelUtil.h"

namespace qnn_delegate {
namespace engine {

// Requantization of the exact accumulator of output channel n.
// htp (uint8 or uint16 activations in and out, 8-bit weights per tensor / channel):
//   out_q = clamp(hr[n].apply(acc) - out_offset), QNN HTP's fixed-point arithmetic
//   (HtpRequant.h; bias and zero-point folds in hr[n].pre / post).
// (LPBQ weights count as 8-bit per-channel weights k * q.)
// otherwise (sub-byte weights next to uint8, 16-bit weights, mixed 8/16-bit activations, whose HTP
// arithmetic is not reproduced): out_q = clamp(rne(acc * mult[n] + bias[n]) -
// out_offset), the PT2E float reference (double multiplier, round half even).
struct Requant {
  bool htp = false;
  std::vector<HtpRequant> hr;  // htp: per output channel
  std::vector<double> mult;    // !htp: in_scale * w_scale[n] / out_scale
  std::vector<double> bias;    // !htp: bias_real[n] / out_scale
  std::vector<int64_t> wsum;   // sum_k w[n,k] (folds in_offset into the accumulator)
  int32_t in_offset = 0, out_offset = 0;
  int64_t qmin = 0, qmax = 255;

  template <typename O>
  O apply(int64_t acc, size_t n) const {
    if (htp) {
      int64_t v = hr[n].apply(acc) - int64_t(out_offset);
      v = v < qmin ? qmin : (v > qmax ? qmax : v);
      return static_cast<O>(v);
    }
    double v = std::nearbyint(std::fma(double(acc), mult[n], bias[n])) - double(out_offset);
    v = v < double(qmin) ? double(qmin) : (v > double(qmax) ? double(qmax) : v);
    return static_cast<O>(v);
  }
};

// Integer weights [N][K] (K contiguous): int8, or int16 when LPBQ block scales
// folded into the values do not fit int8 (exact: the block scale is an integer).
struct QWeights {
  Buffer data;
  bool wide = false;
  size_t N = 0, K = 0;
  std::vector<double> scale;  // float scale per output channel
};

// Whether the integer kernels take weight `w`: STATIC, signed, symmetric, per
// tensor / per channel on `out_axis` / blockwise on (out_axis, k_axis).
bool integer_weights_supported(const TensorInfo& w, int out_axis, int k_axis);

// Reorders w into [N][K]. `n_last`: element i is (k = i / N, n = i % N) (HWIO);
// otherwise (n = i / K, k = i % K) ([N, K]).
Status prepare_qweights(const OpView& v, const TensorInfo& w, size_t N, bool n_last, TrackingAllocator* alloc,
                        QWeights& out);

// Multipliers / bias terms / weight sums for x (*) w + b -> out (HTP arithmetic
// when x and out are both uint8 or both uint16 and w is an 8-bit per-tensor /
// per-channel weight). Sub-byte weights next to uint16 activations are first widened
// in `w` to the 8-bit codes QNN is given (sub_byte_widening, HtpRequant.h).
void prepare_requant(const TensorInfo& x, const TensorInfo& w_info, QWeights& w, const TensorInfo& b,
                     const TensorInfo& out, Requant& rq);

template <typename A, typename W, typename Acc>
inline Acc dot_product(const A* a, const W* w, size_t K) {
  Acc s = 0;
  for (size_t k = 0; k < K; ++k) s += Acc(a[k]) * Acc(w[k]);
  return s;
}

// out[m * ldo + j] for rows m < M and weight rows n0 + j, j < nn.
template <typename A, typename W, typename Acc, typename O>
void qgemm(const A* a, size_t lda, const W* w, size_t K, size_t n0, size_t nn, size_t M, const Requant& rq, O* out,
           size_t ldo) {
  constexpr size_t kRows = 4;
  for (size_t m0 = 0; m0 < M; m0 += kRows) {
    const size_t mr = M - m0 < kRows ? M - m0 : kRows;
    for (size_t j = 0; j < nn; ++j) {
      const size_t n = n0 + j;
      const W* wr = w + n * K;
      const Acc fold = Acc(rq.in_offset) * Acc(rq.wsum[n]);
      for (size_t r = 0; r < mr; ++r) {
        const Acc acc = dot_product<A, W, Acc>(a + (m0 + r) * lda, wr, K) + fold;
        out[(m0 + r) * ldo + j] = rq.apply<O>(acc, n);
      }
    }
  }
}

// HTP requantization of uint8 outputs in 8 int32 lanes, when every channel stays within
// int32 bounds (ok): per channel pre (+ fold), shift, half, mult and the bound of the
// shifted accumulator past which the output saturates anyway.
struct VecRequant8 {
  bool ok = false;
  std::vector<int32_t> pre, shift, half, mult, ulim;
  int32_t out_offset = 0, qmin = 0, qmax = 255;
};
// Channels n = g * nn + j of rq go to index g * nn_pad + j; fold[n] (may be null) is
// added to pre; max_abs_acc bounds the accumulator. The arrays are readable 16 past the last
// channel (a 16-lane load of the last channels).
void build_vec_requant8(const Requant& rq, size_t groups, size_t nn, size_t nn_pad, const int64_t* fold,
                        int64_t max_abs_acc, VecRequant8& out);
// out[j] = requantized acc[j] for j < cnt, channel i0 + j (AVX2; acc readable up to a
// multiple of 8, the VecRequant8 arrays too).
void requant_u8_row(const VecRequant8& v, const int32_t* acc, size_t i0, size_t cnt, uint8_t* out);

// ---- u8 x s8 fast path: AVX-512 VNNI (vpdpbusd) ------------------------------
// Weights packed in panels of kVnniNR output channels x 4 k: [panel][ceil(K/4)][16][4].
constexpr size_t kVnniNR = 16;
bool vnni_available();
size_t vnni_packed_bytes(size_t K, size_t nn);
// Packs rows n0 .. n0+nn of w [N][K] (zero padded).
void pack_vnni(const int8_t* w, size_t K, size_t n0, size_t nn, int8_t* dst);
// Same contract as qgemm<uint8_t, int8_t, int32_t, O> on packed weights `wp`
// (the panels of rows n0 .. n0+nn). `vec` (uint8 output only; may be null or not ok: scalar
// requantization) holds the lane requantization of channel n at index n, the input offset's
// fold (in_offset * wsum[n]) in its pre.
template <typename O>
void qgemm_vnni(const uint8_t* a, size_t lda, const int8_t* wp, size_t K, size_t n0, size_t nn, size_t M,
                const Requant& rq, const VecRequant8* vec, O* out, size_t ldo);

// VNNI-packed copy of QWeights rows, one block of panels per group of `nn` rows;
// empty when the path does not apply (not u8 x s8, or no VNNI).
struct VnniWeights {
  Buffer data;
  size_t group_bytes = 0;
  VecRequant8 vec;  // uint8 output: lane requantization, channels unpadded
  bool ready() const { return data.size() != 0; }
};
template <typename A, typename W>
void prepare_vnni(QWeights& w, const Requant& rq, size_t groups, TrackingAllocator* alloc, VnniWeights& out) {
  if constexpr (std::is_same<A, uint8_t>::value && std::is_same<W, int8_t>::value) {
    if (!vnni_available() || w.N % groups != 0) return;
    const size_t nn = w.N / groups;
    out.group_bytes = vnni_packed_bytes(w.K, nn);
    out.data = Buffer(alloc, out.group_bytes * groups);
    if (!out.data.valid() || out.data.size() == 0) {
      out.data.reset();
      return;
    }
    for (size_t g = 0; g < groups; ++g) {
      pack_vnni(w.data.as<int8_t>(), w.K, g * nn, nn, out.data.as<int8_t>() + g * out.group_bytes);
    }
    std::vector<int64_t> fold(w.N);
    for (size_t n = 0; n < w.N; ++n) fold[n] = int64_t(rq.in_offset) * rq.wsum[n];
    build_vec_requant8(rq, 1, w.N, w.N, fold.data(), int64_t(w.K) * 255 * 128, out.vec);
    w.data.reset();  // the packed copy replaces the [N][K] rows
  }
}

// ---- path choice, AVX2 path, threading -----------------------------------------
// Vnni: u8 x s8 when the CPU has AVX-512 VNNI; Avx2: u8 / u16 x s8 when it has AVX2; Plain:
// qgemm. Chosen from simd_level() (Simd.h) when a kernel is created: env
// QNN_HOST_ENGINE_KERNELS=plain forces Plain, =avx2 skips VNNI. Every path gives the same integers.
enum class QGemmPath { Plain, Avx2, Vnni };
QGemmPath qgemm_path(bool a8_w8);
inline std::string qgemm_path_name(QGemmPath p) {
  return p == QGemmPath::Vnni ? "vnni" : (p == QGemmPath::Avx2 ? "avx2" : "plain");
}

// HTP requantization with a product wider than 32 bits (uint16 activations: 23
// fractional bits; HTP's unshifted strided uint8 depthwise: up to ~30) in 8 int32 lanes,
// the products in 64-bit lanes (vpmuldq), when every channel has half 0, the same
// pre-shift s and a multiplier below 2^31 (ok). The accumulator enters split as
// hi = sum of (partial >> s) and lo = sum of (partial & (2^s - 1)), so that
// u + post = hi + (lo >> s) exactly with hi starting at hi0 = (pre + fold) >> s + post
// and lo at lo0 = (pre + fold) & (2^s - 1); y = (v * M + 2^(f - 1)) >> f on v clamped
// to +-vlim, past which the output saturates anyway (so y fits int32).
struct VecRequantW {
  bool ok = false;
  int32_t s = 0;
  std::vector<int32_t> hi0, lo0, mult, frac, vlim;
  int32_t out_offset = 0, qmin = 0, qmax = 255;
};
// Channels as build_vec_requant8; max_hi bounds |hi - hi0| (the shifted partial sums).
void build_vec_requant_wide(const Requant& rq, size_t groups, size_t nn, size_t nn_pad, const int64_t* fold,
                            int64_t max_hi, VecRequantW& out);
// out[j] = requantized acc[j] (one int32 partial per channel) for j < cnt, channel i0 + j.
template <typename O>
void requant_wide_row(const VecRequantW& v, const int32_t* acc, size_t i0, size_t cnt, O* out);

// Depthwise (channel multiplier 1, int8 weights) on AVX2: taps in pairs for vpmaddwd,
// 16 channels per block. x enters as int16: q + in_offset (uint8) or q - 32768 (uint16; a
// padding tap then adds (zero point - 32768) * w, removed again with corr[c] = hr[c].pre).
// Weights packed at init: [C / 16][tap pairs][32] int16, the pairs interleaved as
// vpunpck{l,h}wd interleaves two 16-channel rows.
constexpr size_t kDwMaxTaps = 64;
size_t dw_avx2_packed_elems(size_t taps, size_t C);
// tap_w: [taps][C] (tap-major).
void pack_dw_avx2(const int8_t* tap_w, size_t taps, size_t C, int16_t* dst);
// acc[c] = sum over taps t with px[t] != nullptr of (px[t][c] + in_offset) * w[t][c], c < C
// (equal to the plain loop's int32 sums); corr: uint16 only (else nullptr).
template <typename A>
void dw_pixel_avx2(const A* const* px, size_t taps, size_t C, const int16_t* wp, const int8_t* tap_w, int32_t in_offset,
                   const int32_t* corr, int32_t* acc);
// The same sums with AVX-512 VNNI (vpdpwssd), 32 channels per step, when the CPU has it (not
// capped by QNN_HOST_ENGINE_KERNELS=avx2): weights packed [C / 32][tap pairs][64] int16 in
// vpunpck{l,h}wd order (wp32), the last C % 32 channels on the AVX2 packing (wp16).
bool dw_vnni_available();
size_t dw_vnni_packed_elems(size_t taps, size_t C);
void pack_dw_vnni(const int8_t* tap_w, size_t taps, size_t C, int16_t* dst);
template <typename A>
void dw_pixel_vnni(const A* const* px, size_t taps, size_t C, const int16_t* wp32, const int16_t* wp16,
                   const int8_t* tap_w, int32_t in_offset, const int32_t* corr, int32_t* acc);

// AVX2 weights: per group, panels of 16 channels x kp / 2 k pairs x (16 x 2) int16 (one
// 64-byte line per pair: two ymm, or one zmm), channels padded to 16, k to kp (even).
constexpr size_t kAvx2RowTile = 32;  // rows converted to int16 at a time
struct Avx2Weights {
  Buffer data;
  size_t kp = 0, group_elems = 0;
  std::vector<int64_t> fold;  // (in_offset (+ 32768 for uint16 activations)) * wsum[n]
  VecRequant8 vec;            // uint8 activations and output (per padded channel)
  VecRequantW vec16;          // uint16 activations and output (per padded channel)
  // uint16 activations and output on a CPU with AVX-512 VNNI (not capped by
  // QNN_HOST_ENGINE_KERNELS=avx2): the pairs go through vpdpwssd, 32 channels per 2 zmm.
  bool dpwssd = false;
  bool ready() const { return data.size() != 0; }
};
size_t avx2_kp(size_t K);
size_t avx2_abuf_elems(size_t K);  // int16 scratch qgemm_avx2 needs
// false (out empty) when the packed copy cannot be allocated.
bool prepare_avx2(const QWeights& w, const Requant& rq, size_t groups, bool a16, TrackingAllocator* alloc,
                  Avx2Weights& out);
// Rows m < M of a times the channels j0 .. j0+nn (j0 a multiple of 16) of group `grp`
// (absolute channel n0 + j) -> out[m * ldo + j - j0].
template <typename A, typename O>
void qgemm_avx2(const A* a, size_t lda, const Avx2Weights& w, size_t grp, size_t K, size_t n0, size_t j0, size_t nn,
                size_t M, const Requant& rq, O* out, size_t ldo, int16_t* abuf);

// Work slots of the integer kernels: the pool's threads (fixed at init, sizes scratch).
inline size_t qgemm_slots() { return ThreadPool::instance().max_threads(); }

// f(slot) for every slot < slots, spread over the pool (serially when `serial`).
template <typename F>
void parallel_slots(size_t slots, bool serial, F& f) {
  if (serial || slots <= 1) {
    for (size_t s = 0; s < slots; ++s) f(s);
    return;
  }
  RangeFn tramp = [](void* ctx, size_t b, size_t e) {
    for (size_t s = b; s < e; ++s) (*static_cast<F*>(ctx))(s);
  };
  ThreadPool::instance().parallel_for(slots, tramp, &f);
}

constexpr size_t kMinParallelQMacs = size_t(1) << 17;

inline size_t align64(size_t bytes) { return (bytes + 63) & ~size_t(63); }

// Integer GEMM of a quantized Conv2d / FullyConnected: weights packed at init for
// the path in effect, rows x channels of one group per call.
template <typename A, typename W, typename Acc, typename O>
class QGemmCore {
 public:
  void init(QWeights&& w, Requant&& rq, size_t groups, TrackingAllocator* alloc) {
    w_ = std::move(w);
    rq_ = std::move(rq);
    groups_ = groups;
    cg_ = w_.N / groups;
    slots_ = qgemm_slots();
    constexpr bool a8w8 = std::is_same<A, uint8_t>::value && std::is_same<W, int8_t>::value;
    constexpr bool w8 = std::is_same<W, int8_t>::value;
    path_ = w8 ? qgemm_path(a8w8) : QGemmPath::Plain;
    if (path_ == QGemmPath::Vnni) {
      prepare_vnni<A, W>(w_, rq_, groups, alloc, vnni_);
      if (!vnni_.ready()) path_ = QGemmPath::Plain;
    }
    if (path_ == QGemmPath::Avx2) {
      if (prepare_avx2(w_, rq_, groups, sizeof(A) == 2, alloc, avx2_)) {
        w_.data.reset();
      } else {
        path_ = QGemmPath::Plain;
      }
    }
    // What gemm() runs (the same conditions as qgemm_avx2's requantization choice).
    const char* requant = "scalar";
    if (path_ == QGemmPath::Avx2 && sizeof(A) == 1 && sizeof(O) == 1 && avx2_.vec.ok) requant = "lanes8";
    if (path_ == QGemmPath::Avx2 && sizeof(A) == 2 && sizeof(O) == 2 && avx2_.vec16.ok) requant = "lanes64";
    if (path_ == QGemmPath::Vnni && sizeof(O) == 1 && vnni_.vec.ok) requant = "lanes8";
    // uint16 in and out with lane requantization: vpdpwssd where the CPU has AVX-512 VNNI.
    const bool dpwssd = path_ == QGemmPath::Avx2 && sizeof(A) == 2 && sizeof(O) == 2 && avx2_.vec16.ok && avx2_.dpwssd;
    path_name_ = (dpwssd ? std::string("vnni") : qgemm_path_name(path_)) + "/" + requant;
  }
  // "<plain|avx2|vnni>/<scalar|lanes8|lanes64>" (Kernel::path).
  const char* path_name() const { return path_name_.c_str(); }
  size_t K() const { return w_.K; }
  size_t owned_bytes() const { return w_.data.size() + vnni_.data.size() + avx2_.data.size(); }
  // int16 scratch bytes one slot needs.
  size_t slot_bytes() const { return path_ == QGemmPath::Avx2 ? align64(avx2_abuf_elems(w_.K) * 2) : 0; }
  size_t slots() const { return slots_; }

  // Rows m < M of a times channels j0 .. j0+nn of group grp, on this thread.
  void gemm(const A* a, size_t lda, size_t grp, size_t j0, size_t nn, size_t M, O* out, size_t ldo,
            void* slot_scratch) const {
    const size_t n0 = grp * cg_;
    if constexpr (std::is_same<W, int8_t>::value) {
      if (path_ == QGemmPath::Avx2) {
        qgemm_avx2<A, O>(a, lda, avx2_, grp, w_.K, n0, j0, nn, M, rq_, out, ldo, static_cast<int16_t*>(slot_scratch));
        return;
      }
    }
    if constexpr (std::is_same<A, uint8_t>::value && std::is_same<W, int8_t>::value) {
      if (path_ == QGemmPath::Vnni) {
        const size_t panel_bytes = ((w_.K + 3) / 4) * kVnniNR * 4;
        qgemm_vnni<O>(a, lda, vnni_.data.as<int8_t>() + grp * vnni_.group_bytes + (j0 / kVnniNR) * panel_bytes, w_.K,
                      n0 + j0, nn, M, rq_, &vnni_.vec, out, ldo);
        return;
      }
    }
    qgemm<A, W, Acc, O>(a, lda, w_.data.as<W>(), w_.K, n0 + j0, nn, M, rq_, out, ldo);
  }

  // All channels of group grp for rows m < M, split over the slots (by rows when there
  // are enough, else by blocks of 16 channels); scratch holds slots() * slot_bytes().
  void gemm_parallel(const A* a, size_t lda, size_t grp, size_t M, O* out, size_t ldo, char* scratch) const {
    const size_t S = slots_, sb = slot_bytes(), cg = cg_;
    const bool serial = M * cg * w_.K < kMinParallelQMacs;
    auto run = [&](size_t s) {
      if (serial) {
        if (s == 0) gemm(a, lda, grp, 0, cg, M, out, ldo, scratch);
        return;
      }
      if (M >= 8 * S) {
        const size_t m0 = (M * s / S) & ~size_t(3);
        const size_t m1 = s + 1 == S ? M : (M * (s + 1) / S) & ~size_t(3);
        if (m1 > m0) gemm(a + m0 * lda, lda, grp, 0, cg, m1 - m0, out + m0 * ldo, ldo, scratch + s * sb);
        return;
      }
      const size_t blocks = (cg + 15) / 16;
      const size_t j0 = blocks * s / S * 16, j1 = std::min(cg, blocks * (s + 1) / S * 16);
      if (j1 > j0) gemm(a, lda, grp, j0, j1 - j0, M, out + j0, ldo, scratch + s * sb);
    };
    parallel_slots(S, serial, run);
  }

  const Requant& rq() const { return rq_; }

 private:
  QWeights w_;
  VnniWeights vnni_;
  Avx2Weights avx2_;
  Requant rq_;
  QGemmPath path_ = QGemmPath::Plain;
  std::string path_name_;
  size_t groups_ = 1, cg_ = 0, slots_ = 1;
};

// Instantiates Kernel<A, W, Acc, O> for the runtime types of x, w and out.
template <template <typename, typename, typename, typename> class K, typename... Args>
KernelPtr make_integer_kernel(bool x16, bool w16, bool out16, Args&&... args) {
  auto make = [&](auto a, auto w, auto o) -> KernelPtr {
    using A = decltype(a);
    using W = decltype(w);
    using O = decltype(o);
    using Acc = typename std::conditional<sizeof(A) == 1 && sizeof(W) == 1, int32_t, int64_t>::type;
    return KernelPtr(new K<A, W, Acc, O>(std::forward<Args>(args)...));
  };
  if (!x16 && !w16) return out16 ? make(uint8_t(), int8_t(), uint16_t()) : make(uint8_t(), int8_t(), uint8_t());
  if (!x16 && w16) return out16 ? make(uint8_t(), int16_t(), uint16_t()) : make(uint8_t(), int16_t(), uint8_t());
  if (x16 && !w16) return out16 ? make(uint16_t(), int8_t(), uint16_t()) : make(uint16_t(), int8_t(), uint8_t());
  return out16 ? make(uint16_t(), int16_t(), uint16_t()) : make(uint16_t(), int16_t(), uint8_t());
}

}  // namespace engine
}  // namespace qnn_delegate
