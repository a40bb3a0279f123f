#include "backends/qualcomm/runtime/engine/kernels/QuantGemm.h"

#include <cstdlib>

namespace qnn_delegate {
namespace engine {

bool integer_weights_supported(const TensorInfo& w, int out_axis, int k_axis) {
  const QuantInfo& q = w.quant;
  const bool signed_weight =
      w.dtype == DType::SFIXED_POINT_8 || w.dtype == DType::SFIXED_POINT_4 || w.dtype == DType::SFIXED_POINT_16;
  if (w.kind != TensorKind::STATIC || !signed_weight || !is_symmetric(w)) return false;
  if (q.per_tensor()) return true;
  if (q.per_channel()) return q.axis == out_axis;
  return q.blockwise() && q.axis == out_axis && q.block_axis == k_axis;
}

namespace {

template <typename W>
void fill_weights(const int32_t* values, size_t numel, size_t N, size_t K, bool n_last, W* dst) {
  for (size_t i = 0; i < numel; ++i) {
    const size_t n = n_last ? i % N : i / K;
    const size_t k = n_last ? i / N : i % K;
    dst[n * K + k] = W(values[i]);
  }
}

}  // namespace

Status prepare_qweights(const OpView& v, const TensorInfo& w, size_t N, bool n_last, TrackingAllocator* alloc,
                        QWeights& out) {
  out.N = N;
  out.K = N ? w.numel / N : 0;
  // Integer values with LPBQ block scales folded in (init-time temporary).
  Buffer values(alloc, w.numel * sizeof(int32_t));
  if (!values.valid()) {
    return v.fail(ErrorKind::MemoryAllocationFailed, "cannot unpack weight '%s'", w.name.c_str());
  }
  int32_t* vals = values.as<int32_t>();
  int32_t lo = 0, hi = 0;
  for (size_t i = 0; i < w.numel; ++i) {
    vals[i] = int32_t(static_q_at(w, i)) * int32_t(block_scale_at(w, i));
    lo = std::min(lo, vals[i]);
    hi = std::max(hi, vals[i]);
  }
  if (lo < -32768 || hi > 32767) {
    return v.fail(ErrorKind::NotSupported, "weight '%s' values with block scales exceed int16", w.name.c_str());
  }
  out.wide = lo < -128 || hi > 127;
  out.data = Buffer(alloc, w.numel * (out.wide ? 2 : 1));
  if (!out.data.valid()) {
    return v.fail(ErrorKind::MemoryAllocationFailed, "cannot allocate packed weight '%s'", w.name.c_str());
  }
  if (out.wide) {
    fill_weights(vals, w.numel, N, out.K, n_last, out.data.as<int16_t>());
  } else {
    fill_weights(vals, w.numel, N, out.K, n_last, out.data.as<int8_t>());
  }
  out.scale.assign(N, 0.0);
  for (size_t i = 0; i < w.numel; ++i) {
    out.scale[n_last ? i % N : i / out.K] = channel_scale_at(w, i);
  }
  return Status::Ok();
}

namespace {

double bias_real_exact(const TensorInfo& b, size_t n) {
  if (b.dtype == DType::FLOAT_32) return static_cast<const float*>(b.static_data)[n];
  int32_t offset = 0;
  const float s = scale_at(b, n, offset);
  return double(static_q_at(b, n) + offset) * double(s);
}

// The bias of channel n dequantized in float32 (HTP folds it in float32).
float bias_real(const TensorInfo& b, size_t n) {
  if (b.dtype == DType::FLOAT_32) return static_cast<const float*>(b.static_data)[n];
  int32_t offset = 0;
  const float s = scale_at(b, n, offset);
  return float(static_q_at(b, n) + offset) * s;
}

template <typename W>
void weight_sums(const W* w, size_t N, size_t K, std::vector<int64_t>& out) {
  out.assign(N, 0);
  for (size_t n = 0; n < N; ++n)
    for (size_t k = 0; k < K; ++k) out[n] += w[n * K + k];
}

}  // namespace

int32_t sub_byte_widening_of(const TensorInfo& x, const TensorInfo& w_info, const QWeights& w, const TensorInfo& b,
                             const TensorInfo& out) {
  if (w_info.dtype != DType::SFIXED_POINT_4 || w_info.quant.blockwise() || w.wide) return 1;
  int64_t max_bias = 0;
  if (b.dtype == DType::SFIXED_POINT_32) {
    for (size_t n = 0; n < b.numel; ++n) max_bias = std::max<int64_t>(max_bias, std::llabs(static_q_at(b, n)));
  }
  const bool a16 = x.dtype == DType::UFIXED_POINT_16 && out.dtype == DType::UFIXED_POINT_16;
  return sub_byte_widening(w_info.quant.bitwidth, a16, max_bias);
}

void prepare_requant(const TensorInfo& x, const TensorInfo& w_info, QWeights& w, const TensorInfo& b,
                     const TensorInfo& out, Requant& rq) {
  const float in_scale = x.quant.scale, out_scale = out.quant.scale;
  // 16-bit activations with sub-byte weights: the 8-bit codes q * f QNN is given (HtpRequant.h)
  const int32_t widen = sub_byte_widening_of(x, w_info, w, b, out);
  if (widen > 1) {
    int8_t* d = w.data.as<int8_t>();
    for (size_t i = 0; i < w.data.size(); ++i) d[i] = int8_t(int32_t(d[i]) * widen);
    for (double& s : w.scale) s = double(float(s) / float(widen));
  }
  rq.in_offset = x.quant.offset;
  rq.out_offset = out.quant.offset;
  rq.qmin = quant_min(out);
  rq.qmax = quant_max(out);
  if (w.wide) {
    weight_sums(w.data.as<int16_t>(), w.N, w.K, rq.wsum);
  } else {
    weight_sums(w.data.as<int8_t>(), w.N, w.K, rq.wsum);
  }
  // LPBQ weights count as 8-bit per-channel weights k * q (folded in w): QNN 2.51 computes an
  // LPBQ FullyConnected / 1x1 Conv2d exactly as that per-channel conv (measured: equal outputs).
  const bool w8 = (w_info.dtype == DType::SFIXED_POINT_8 || w_info.quant.blockwise() || widen > 1) && !w.wide;
  const bool a8 = x.dtype == DType::UFIXED_POINT_8 && out.dtype == DType::UFIXED_POINT_8;
  const bool a16 = x.dtype == DType::UFIXED_POINT_16 && out.dtype == DType::UFIXED_POINT_16;
  rq.htp = w8 && (a8 || a16);
  if (rq.htp) {
    rq.hr.resize(w.N);
    for (size_t n = 0; n < w.N; ++n) {
      const float w_scale = float(w.scale[n]);
      const double m = double(in_scale) * double(w_scale) / double(out_scale);
      if (a16) {
        rq.hr[n] = htp_requant16_of(m, bias_real(b, n), in_scale, w_scale, -int64_t(rq.in_offset), rq.wsum[n]);
      } else {
        rq.hr[n] = htp_requant_of(m);
        rq.hr[n].pre = htp_bias_acc(bias_real(b, n), in_scale, w_scale);
      }
    }
    return;
  }
  rq.mult.resize(w.N);
  rq.bias.resize(w.N);
  for (size_t n = 0; n < w.N; ++n) {
    rq.mult[n] = double(in_scale) * w.scale[n] / double(out_scale);
    rq.bias[n] = bias_real_exact(b, n) / double(out_scale);
  }
}

}  // namespace engine
}  // namespace qnn_delegate
