// Integer matrix products of the quantized Conv2d / FullyConnected kernels:
// acc[m,n] = sum_k (q_in[m,k] + in_offset) * w[n,k], exact in Acc (int32 for
// u8 x s8, int64 otherwise), then requantized per output channel with QNN HTP's
// fixed-point arithmetic (HtpRequant.h).
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "backends/qualcomm/runtime/engine/HtpRequant.h"
#include "backends/qualcomm/runtime/engine/Quant.h"
#include "backends/qualcomm/runtime/engine/kernels/KernelUtil.h"

namespace qnn_delegate {
namespace engine {

// Requantization of the exact accumulator of output channel n.
// htp (uint8 or uint16 activations in and out, 8-bit weights per tensor / channel):
//   out_q = clamp(hr[n].apply(acc) - out_offset), QNN HTP's fixed-point arithmetic
//   (HtpRequant.h; bias and zero-point folds in hr[n].pre / post).
// otherwise (sub-byte / LPBQ / 16-bit weights, mixed 8/16-bit activations, whose HTP
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
    double v = std::nearbyint(double(acc) * mult[n] + bias[n]) - double(out_offset);
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
Status prepare_qweights(const OpView& v, const TensorInfo& w, size_t N, bool n_last,
                        TrackingAllocator* alloc, QWeights& out);

// Multipliers / bias terms / weight sums for x (*) w + b -> out (HTP arithmetic
// when x and out are both uint8 or both uint16 and w is an 8-bit per-tensor /
// per-channel weight).
void prepare_requant(const TensorInfo& x, const TensorInfo& w_info, const QWeights& w,
                     const TensorInfo& b, const TensorInfo& out, Requant& rq);

template <typename A, typename W, typename Acc>
inline Acc dot_product(const A* a, const W* w, size_t K) {
  Acc s = 0;
  for (size_t k = 0; k < K; ++k) s += Acc(a[k]) * Acc(w[k]);
  return s;
}

// out[m * ldo + j] for rows m < M and weight rows n0 + j, j < nn.
template <typename A, typename W, typename Acc, typename O>
void qgemm(const A* a, size_t lda, const W* w, size_t K, size_t n0, size_t nn, size_t M,
           const Requant& rq, O* out, size_t ldo) {
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

// ---- u8 x s8 fast path: AVX-512 VNNI (vpdpbusd) ------------------------------
// Weights packed in panels of kVnniNR output channels x 4 k: [panel][ceil(K/4)][16][4].
constexpr size_t kVnniNR = 16;
bool vnni_available();
size_t vnni_packed_bytes(size_t K, size_t nn);
// Packs rows n0 .. n0+nn of w [N][K] (zero padded).
void pack_vnni(const int8_t* w, size_t K, size_t n0, size_t nn, int8_t* dst);
// Same contract as qgemm<uint8_t, int8_t, int32_t, O> on packed weights `wp`
// (the panels of rows n0 .. n0+nn).
template <typename O>
void qgemm_vnni(const uint8_t* a, size_t lda, const int8_t* wp, size_t K, size_t n0, size_t nn,
                size_t M, const Requant& rq, O* out, size_t ldo);

// VNNI-packed copy of QWeights rows, one block of panels per group of `nn` rows;
// empty when the path does not apply (not u8 x s8, or no VNNI).
struct VnniWeights {
  Buffer data;
  size_t group_bytes = 0;
  bool ready() const { return data.size() != 0; }
};
template <typename A, typename W>
void prepare_vnni(QWeights& w, size_t groups, TrackingAllocator* alloc, VnniWeights& out) {
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
    w.data.reset();  // the packed copy replaces the [N][K] rows
  }
}

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

} // namespace engine
} // namespace qnn_delegate
