// Fixed-point requantization of an int32 accumulator as Qualcomm's QNN HTP does
// it (measured on QNN 2.51 HTP, SM8650, against tiny FullyConnected / Conv2d
// graphs; see backends/qualcomm/tests/qnn/test_fidelity_weighted.py):
//
//   m  = in_scale * w_scale / out_scale             (float32 scales, double math)
//   e  = floor(-log2(m)),  s = max(0, e - 3)        (pre-shift of the accumulator)
//   M  = round(m * 2^(s + 15))                      (12-bit multiplier when s > 0)
//   u  = floor(acc / 2^s)                           (arithmetic shift: truncation)
//   y  = s > 0 ? floor(((2u + 1) * M + 2^15) / 2^16)   (u's bucket midpoint, half up)
//              : floor((acc * M + 2^14) / 2^15)        (half up)
//   q  = clamp(y + zero_point, qmin, qmax)
//
// i.e. the accumulator loses its s low bits (it is replaced by the middle of its
// 2^s bucket), the multiplier keeps 15 fractional bits after that shift, and the
// result rounds half up (towards +inf). A quantized bias does not enter as its
// integer: HTP dequantizes it in float32 and requantizes it into accumulator units
// with floor: bias_acc = floor(f32(b * bias_scale) / f32(in_scale * w_scale)),
// which is b - 1 for some b (see htp_bias_acc); it is added to acc before the shift.
//
// Measured for uint8 activations (in and out) with int8 weights (per tensor and per
// channel; FullyConnected, Conv2d, DepthWiseConv2d) and uint8 x uint8 MatMul:
// bit-exact on >= 99.9% of the elements of random cases (rare misses of 1 step with
// biases much larger than the accumulator). uint16 activations (in and out) with
// int8 weights take another path (htp_requant16_of): 98.7-99.9% equal to QNN on
// random convs / linears, max 1 step, when m = s_in * s_w / s_out is small (below
// ~0.005; up to 4 steps off at larger m, and HTP's small constant offset is not
// reproduced).
#pragma once

#include <cmath>
#include <cstdint>

namespace qnn_delegate {
namespace engine {

struct HtpRequant {
  int64_t pre = 0;    // added to the accumulator before the shift (bias, zero-point fold)
  int64_t post = 0;   // added after the shift (in units of 2^s)
  int64_t mult = 0;   // M
  int32_t shift = 0;  // s
  int32_t half = 0;   // 1: u is replaced by its bucket midpoint (8-bit, s > 0)
  int32_t frac = 15;  // fractional bits of M
  // Output integer before the zero point and clamp.
  int64_t apply(int64_t acc) const {
    const int64_t u = (acc + pre) >> shift;  // arithmetic shift (floor) on two's complement
    return ((2 * (u + post) + half) * mult + (int64_t(1) << frac)) >> (frac + 1);
  }
};

// HTP's multiplier / pre-shift for the real multiplier m > 0 (in * w / out) of an
// 8-bit-activation op; pre / post stay 0 (the caller sets them).
inline HtpRequant htp_requant_of(double m) {
  HtpRequant r;
  if (!(m > 0.0) || !std::isfinite(m)) return r;  // mult 0: output = zero point
  int k = 0;
  const double f = std::frexp(m, &k);   // m = f * 2^k, f in [0.5, 1)
  const int e = f == 0.5 ? 1 - k : -k;  // floor(-log2(m))
  r.shift = e - 3 > 0 ? e - 3 : 0;
  r.half = r.shift > 0 ? 1 : 0;
  r.mult = int64_t(std::floor(std::ldexp(m, r.shift + 15) + 0.5));
  return r;
}

// A strided (stride > 1) uint8 DepthWiseConv2d takes another HTP kernel: no
// pre-shift of the accumulator, a multiplier with 15 significant bits
// (M = round(m * 2^(e + 15)), e = floor(-log2 m)), half up. Measured on QNN 2.51
// (SM8650), 3x3 and 5x5, stride 2: 99.9% equal (the 15-bit path: 97-98%), max 1.
inline HtpRequant htp_requant_unshifted_of(double m) {
  HtpRequant r;
  if (!(m > 0.0) || !std::isfinite(m)) return r;
  int k = 0;
  const double f = std::frexp(m, &k);
  const int e = f == 0.5 ? 1 - k : -k;
  r.frac = e + 15;  // apply(): (2u * M + 2^frac) >> (frac + 1) = (u * M + 2^(frac-1)) >> frac
  r.mult = int64_t(std::floor(std::ldexp(m, e + 15) + 0.5));
  return r;
}

// uint16 activations x int8 weights -> uint16: HTP takes x - 32768 (int16), shifts
// that accumulator right by 8 (floor), adds a per-channel constant in units of 2^8 --
// the rest of the zero-point fold rounded (half up), the bias truncated towards zero
// (trunc(f32(bias) / f32(in_scale * w_scale) / 256)) -- and multiplies by
// round(m * 2^31) with 23 fractional bits, half up. `zero_point` is the input's
// (-offset), `wsum` the channel's weight sum.
inline HtpRequant htp_requant16_of(double m, float bias_real, float in_scale, float w_scale, int64_t zero_point,
                                   int64_t wsum) {
  HtpRequant r;
  if (!(m > 0.0) || !std::isfinite(m)) return r;
  r.shift = 8;
  r.frac = 23;
  r.mult = int64_t(std::floor(std::ldexp(m, r.shift + r.frac) + 0.5));
  r.pre = (zero_point - 32768) * wsum;
  const float unit = in_scale * w_scale;
  const float b = unit > 0.f ? bias_real / unit : 0.f;
  const double bq = std::isfinite(b) ? std::trunc(double(b) / 256.0) : 0.0;
  r.post = int64_t(bq) + ((-r.pre + 128) >> 8);
  return r;
}

// Sub-byte weights next to uint16 activations (16a4w, 16a2w). QNN 2.51's HTP computes
// a 4-bit (or 2-bit) weight as its int8 container: the bitwidth changes only the storage
// (packed in the context binary), the arithmetic is the 16-bit path above, whose
// accumulator loses 8 bits. A 4-bit code spans 1/16 of the int8 range, so at the same
// output step that loss is 16x larger in output steps: measured on one-op Conv2d /
// DepthWiseConv2d / FullyConnected graphs, 4-16 steps (up to 28 at m ~ 0.04) off the
// exact result, and the whole-model figures of issue 30 (QNN 15-33 steps off per conv of
// a small 16a4w net, the host engine within 1). The same weights as 8-bit codes
// q * 2^(8 - bits) with scale / 2^(8 - bits) (bias: codes * 2^(8 - bits), scale / 2^(8 -
// bits), so that bias scale = input scale x weight scale holds) are the same real
// numbers and bring QNN within 1-2 steps of the exact result. QNN gets that form
// (runtime/qnn/QnnTensorDesc.cpp, widen_sub_byte_weights) and the host engine computes
// it with the same arithmetic (QuantGemm.cpp, prepare_requant). Returns the factor
// 2^(8 - bits), or 1 when the weights stay as they are (8-bit or wider weights, other
// activations, or a bias code times the factor beyond int32).
inline int32_t sub_byte_widening(uint32_t weight_bits, bool uint16_in_and_out, int64_t max_abs_bias_code) {
  if (!uint16_in_and_out || weight_bits == 0 || weight_bits >= 8) return 1;
  const int32_t f = int32_t(1) << (8 - weight_bits);
  return max_abs_bias_code * f > int64_t(INT32_MAX) ? 1 : f;
}

// A bias value (dequantized in float32, `bias_real`) in accumulator units, as
// HTP folds it: floor(bias_real / f32(in_scale * w_scale)) in float32.
inline int64_t htp_bias_acc(float bias_real, float in_scale, float w_scale) {
  const float unit = in_scale * w_scale;
  if (!(unit > 0.f)) return 0;
  const float v = bias_real / unit;
  if (!std::isfinite(v)) return v > 0 ? INT32_MAX : INT32_MIN;
  return int64_t(std::floor(double(v)));
}

}  // namespace engine
}  // namespace qnn_delegate
