// Integer Conv2d / DepthWiseConv2d on quantized activations (NHWC, HWIO
// weights). Conv2d: GEMM on weights reordered to [Cout][KH*KW*Cin/group]
// (K contiguous, u8 x s8 dot products), 1x1 directly on the input, otherwise
// im2col tiles padded with the input zero point (so padding adds 0).
// Depthwise: direct loops, channel innermost, (q + offset) * w per tap.
#include <algorithm>
#include <cstring>

#include "backends/qualcomm/runtime/engine/kernels/ConvGeometry.h"
#include "backends/qualcomm/runtime/engine/kernels/QuantGemm.h"

namespace qnn_delegate {
namespace engine {
namespace {

constexpr size_t kQIm2colTile = 64;

struct QConvSetup {
  ConvGeometry g;
  ConvIds ids;
  QWeights* w;  // moved into the kernel
  Requant rq;
  TrackingAllocator* alloc;
};

template <typename A, typename W, typename Acc, typename O>
class QConvGemmKernel final : public Kernel {
 public:
  explicit QConvGemmKernel(QConvSetup& s) : g_(s.g), ids_(s.ids) {
    k_ = g_.kh * g_.kw * g_.cin_g();
    pointwise_ =
        g_.kh == 1 && g_.kw == 1 && g_.sh == 1 && g_.sw == 1 && g_.group == 1 && g_.pt + g_.pb + g_.pl + g_.pr == 0;
    zero_point_ = A(-s.rq.in_offset);
    core_.init(std::move(*s.w), std::move(s.rq), g_.group, s.alloc);
  }
  // pointwise: the core's int16 rows per slot; im2col: + one im2col tile per slot.
  size_t scratch_bytes() const override { return core_.slots() * slot_bytes(); }
  size_t owned_bytes() const override { return core_.owned_bytes(); }
  const char* path() const override { return core_.path_name(); }

  Status run(const RunContext& c) const override {
    const A* x = c.at<const A>(ids_.x);
    O* out = c.at<O>(ids_.out);
    char* scratch = static_cast<char*>(c.scratch);
    if (pointwise_) {
      core_.gemm_parallel(x, g_.cin, 0, g_.n * g_.h * g_.w, out, g_.cout, scratch);
      return Status::Ok();
    }
    const size_t pixels = g_.n * g_.oh * g_.ow, cg = g_.cout_g(), S = core_.slots();
    const bool serial = pixels * g_.cout * k_ < kMinParallelQMacs;
    auto run_slot = [&](size_t s) {
      const size_t p_begin = serial ? (s == 0 ? 0 : pixels) : pixels * s / S;
      const size_t p_end = serial ? pixels : pixels * (s + 1) / S;
      char* mine = scratch + s * slot_bytes();
      A* cols = reinterpret_cast<A*>(mine + core_.slot_bytes());
      for (size_t p0 = p_begin; p0 < p_end; p0 += kQIm2colTile) {
        const size_t np = std::min(kQIm2colTile, p_end - p0);
        for (size_t grp = 0; grp < g_.group; ++grp) {
          im2col_rows<A>(g_, k_, x, p0, np, grp, zero_point_, cols);
          core_.gemm(cols, k_, grp, 0, cg, np, out + p0 * g_.cout + grp * cg, g_.cout, mine);
        }
      }
    };
    parallel_slots(S, serial, run_slot);
    return Status::Ok();
  }

 private:
  size_t slot_bytes() const { return core_.slot_bytes() + (pointwise_ ? 0 : align64(kQIm2colTile * k_ * sizeof(A))); }

  ConvGeometry g_;
  ConvIds ids_;
  QGemmCore<A, W, Acc, O> core_;
  size_t k_ = 0;
  bool pointwise_ = false;
  A zero_point_ = 0;
};

// Depthwise: w_ is [Cout][KH*KW]; output channel c reads input channel c / mult.
template <typename A, typename W, typename Acc, typename O>
class QDepthwiseKernel final : public Kernel {
 public:
  explicit QDepthwiseKernel(QConvSetup& s) : g_(s.g), ids_(s.ids), w_(std::move(*s.w)), rq_(std::move(s.rq)) {
    mult_ = g_.cout / g_.cin;
    // Tap-major copy [KH*KW][Cout] so the channel loop is contiguous.
    const size_t taps = g_.kh * g_.kw;
    taps_ = Buffer(s.alloc, taps * g_.cout * sizeof(W));
    if (taps_.valid()) {
      for (size_t c = 0; c < g_.cout; ++c)
        for (size_t t = 0; t < taps; ++t) taps_.as<W>()[t * g_.cout + c] = w_.data.as<W>()[c * taps + t];
    }
    w_.data.reset();
    slots_ = qgemm_slots();
    // |q + offset| <= 65535 (uint16) and |w| <= 2^15: int32 holds taps * 2^31 / 2^(16+bits(W)).
    const int64_t max_w = sizeof(W) == 1 ? 128 : 32768;
    acc32_ = int64_t(taps) * 65535 * max_w < (int64_t(1) << 31);
    if constexpr (sizeof(W) == 1) {
      if (qgemm_path(false) == QGemmPath::Avx2) {
        const int64_t max_acc = int64_t(taps) * (sizeof(A) == 1 ? 255 : 65535) * 128;
        if constexpr (sizeof(A) == 1 && sizeof(O) == 1) {
          build_vec_requant8(rq_, 1, g_.cout, g_.cout, nullptr, max_acc, vec_);
        }
        // uint16 (HTP's 16-bit arithmetic) and strided uint8 (unshifted multiplier).
        if (!vec_.ok && acc32_ && rq_.htp && !rq_.hr.empty()) {
          build_vec_requant_wide(rq_, 1, g_.cout, g_.cout, nullptr, (max_acc >> rq_.hr[0].shift) + 2, vecw_);
        }
        if (acc32_ && mult_ == 1 && taps <= kDwMaxTaps && g_.cout >= 16 && taps_.valid()) {
          dwp_ = Buffer(s.alloc, dw_avx2_packed_elems(taps, g_.cout) * sizeof(int16_t));
          if (dwp_.valid()) pack_dw_avx2(taps_.as<int8_t>(), taps, g_.cout, dwp_.as<int16_t>());
          if (dwp_.valid() && dw_vnni_available() && g_.cout >= 32) {
            dwv_ = Buffer(s.alloc, dw_vnni_packed_elems(taps, g_.cout) * sizeof(int16_t));
            if (dwv_.valid()) pack_dw_vnni(taps_.as<int8_t>(), taps, g_.cout, dwv_.as<int16_t>());
          }
          if (sizeof(A) == 2) {
            corr_.resize(g_.cout + 8);
            for (size_t c = 0; c < g_.cout; ++c) {
              corr_[c] = int32_t((-int64_t(rq_.in_offset) - 32768) * rq_.wsum[c]);
            }
          }
        }
      }
    }  // What run_row / requant_row run: tap pairs when packed, lanes when the sums are int32.
    const bool taps_avx2 = acc32_ && dwp_.size() != 0 && dwp_.valid();
    const bool taps_vnni = taps_avx2 && dwv_.size() != 0 && dwv_.valid();
    const char* requant = !acc32_ ? "scalar" : (vec_.ok ? "lanes8" : (vecw_.ok ? "lanes64" : "scalar"));
    path_ = std::string(taps_vnni ? "vnni" : (taps_avx2 ? "avx2" : "plain")) + "/" + requant;
  }
  size_t scratch_bytes() const override { return slots_ * slot_bytes(); }
  size_t owned_bytes() const override { return taps_.size() + dwp_.size() + dwv_.size(); }
  const char* path() const override { return path_.c_str(); }

  Status run(const RunContext& c) const override {
    const A* x = c.at<const A>(ids_.x);
    O* out = c.at<O>(ids_.out);
    if (!taps_.valid()) return make_error(ErrorKind::MemoryAllocationFailed, "depthwise taps not allocated");
    const size_t rows = g_.n * g_.oh, S = slots_;
    const bool serial = rows * g_.ow * g_.cout * g_.kh * g_.kw < kMinParallelQMacs;
    char* scratch = static_cast<char*>(c.scratch);
    auto run_slot = [&](size_t s) {
      const size_t r0 = serial ? (s == 0 ? 0 : rows) : rows * s / S;
      const size_t r1 = serial ? rows : rows * (s + 1) / S;
      Acc* acc = reinterpret_cast<Acc*>(scratch + s * slot_bytes());
      for (size_t r = r0; r < r1; ++r) {
        if (acc32_) {
          run_row<int32_t>(x, r / g_.oh, r % g_.oh, reinterpret_cast<int32_t*>(acc), out);
        } else {
          run_row<Acc>(x, r / g_.oh, r % g_.oh, acc, out);
        }
      }
    };
    parallel_slots(S, serial, run_slot);
    return Status::Ok();
  }

 private:
  size_t slot_bytes() const { return align64((g_.cout + 8) * sizeof(Acc)); }

  // Output row oy of image n, sums in T (int32 when they fit: acc32_).
  template <typename T>
  void run_row(const A* x, size_t n, size_t oy, T* acc, O* out) const {
    const size_t C = g_.cout;
    const T off = T(rq_.in_offset);
    for (size_t ox = 0; ox < g_.ow; ++ox) {
      O* o = out + ((n * g_.oh + oy) * g_.ow + ox) * C;
      if constexpr (sizeof(W) == 1 && sizeof(T) == 4) {
        if (dwp_.size() != 0 && dwp_.valid()) {
          const A* px[kDwMaxTaps];
          for (size_t ky = 0; ky < g_.kh; ++ky) {
            const long iy = long(oy * g_.sh + ky * g_.dh) - long(g_.pt);
            for (size_t kx = 0; kx < g_.kw; ++kx) {
              const long ix = long(ox * g_.sw + kx * g_.dw) - long(g_.pl);
              const bool in = iy >= 0 && iy < long(g_.h) && ix >= 0 && ix < long(g_.w);
              px[ky * g_.kw + kx] = in ? x + ((n * g_.h + iy) * g_.w + ix) * g_.cin : nullptr;
            }
          }
          if (dwv_.size() != 0 && dwv_.valid()) {
            dw_pixel_vnni<A>(px, g_.kh * g_.kw, C, dwv_.as<int16_t>(), dwp_.as<int16_t>(), taps_.as<int8_t>(),
                             rq_.in_offset, corr_.empty() ? nullptr : corr_.data(), acc);
          } else {
            dw_pixel_avx2<A>(px, g_.kh * g_.kw, C, dwp_.as<int16_t>(), taps_.as<int8_t>(), rq_.in_offset,
                             corr_.empty() ? nullptr : corr_.data(), acc);
          }
          requant_row(acc, o);
          continue;
        }
      }
      std::fill(acc, acc + C, T(0));
      for (size_t ky = 0; ky < g_.kh; ++ky) {
        const long iy = long(oy * g_.sh + ky * g_.dh) - long(g_.pt);
        if (iy < 0 || iy >= long(g_.h)) continue;
        for (size_t kx = 0; kx < g_.kw; ++kx) {
          const long ix = long(ox * g_.sw + kx * g_.dw) - long(g_.pl);
          if (ix < 0 || ix >= long(g_.w)) continue;
          const A* px = x + ((n * g_.h + iy) * g_.w + ix) * g_.cin;
          const W* pw = taps_.as<W>() + (ky * g_.kw + kx) * C;
          if (mult_ == 1) {
            for (size_t ch = 0; ch < C; ++ch) acc[ch] += (T(px[ch]) + off) * T(pw[ch]);
          } else {
            for (size_t ch = 0; ch < C; ++ch) acc[ch] += (T(px[ch / mult_]) + off) * T(pw[ch]);
          }
        }
      }
      requant_row(acc, o);
    }
  }

  template <typename T>
  void requant_row(const T* acc, O* o) const {
    const size_t C = g_.cout;
    if constexpr (sizeof(A) == 1 && sizeof(O) == 1 && sizeof(W) == 1 && sizeof(T) == 4) {
      if (vec_.ok) {
        requant_u8_row(vec_, acc, 0, C, o);
        return;
      }
    }
    if constexpr (sizeof(W) == 1 && sizeof(T) == 4) {
      if (vecw_.ok) {
        requant_wide_row<O>(vecw_, acc, 0, C, o);
        return;
      }
    }
    for (size_t ch = 0; ch < C; ++ch) o[ch] = rq_.apply<O>(int64_t(acc[ch]), ch);
  }

 private:
  ConvGeometry g_;
  ConvIds ids_;
  QWeights w_;
  Requant rq_;
  size_t mult_ = 1, slots_ = 1;
  Buffer taps_;
  VecRequant8 vec_;            // uint8 in and out on AVX2
  VecRequantW vecw_;           // otherwise (uint16, strided uint8) on AVX2 when the sums are int32
  Buffer dwp_;                 // AVX2 tap pairs (pack_dw_avx2), channel multiplier 1
  Buffer dwv_;                 // AVX-512 VNNI tap pairs (pack_dw_vnni), 32 channels per block
  std::vector<int32_t> corr_;  // uint16 x: (zero point - 32768) * wsum per channel
  bool acc32_ = false;
  std::string path_;  // Kernel::path
};

// HTP's strided uint8 depthwise kernel requantizes without the pre-shift
// (htp_requant_unshifted_of); the bias term (pre) stays.
void use_strided_depthwise_requant(const TensorInfo& x, const QWeights& w, const TensorInfo& y, Requant& rq) {
  if (!rq.htp || x.dtype != DType::UFIXED_POINT_8 || y.dtype != DType::UFIXED_POINT_8) return;
  for (size_t n = 0; n < rq.hr.size(); ++n) {
    const double m = double(x.quant.scale) * double(float(w.scale[n])) / double(y.quant.scale);
    HtpRequant r = htp_requant_unshifted_of(m);
    r.pre = rq.hr[n].pre;
    rq.hr[n] = r;
  }
}

// Declines (out stays empty) unless x / out are quantized activations, w is an
// integer weight the kernels take and the bias is STATIC.
template <template <typename, typename, typename, typename> class K>
Status create_qconv(const OpView& v, KernelEnv& env, bool depthwise, KernelPtr& out) {
  QNN_RETURN_IF_ERROR(v.expect_arity(3, 3, 1));
  const TensorInfo& x = *v.inputs[0];
  const TensorInfo& w = *v.inputs[1];
  const TensorInfo& b = *v.inputs[2];
  const TensorInfo& y = *v.outputs[0];
  const bool bias_ok = b.kind == TensorKind::STATIC && (b.is_quantized() || b.is_float());
  if (!is_quant_activation(x) || !is_quant_activation(y) || !bias_ok ||
      !integer_weights_supported(w, 3, depthwise ? -1 : 2)) {
    return Status::Ok();
  }
  QConvSetup s;
  QNN_RETURN_IF_ERROR(conv_geometry(v, depthwise, y.dtype, s.g, s.ids));
  QWeights qw;
  QNN_RETURN_IF_ERROR(prepare_qweights(v, w, s.g.cout, true, env.allocator, qw));
  prepare_requant(x, w, qw, b, y, s.rq);
  if (depthwise && (s.g.sh > 1 || s.g.sw > 1)) use_strided_depthwise_requant(x, qw, y, s.rq);
  s.w = &qw;
  s.alloc = env.allocator;
  out = make_integer_kernel<K>(x.dtype == DType::UFIXED_POINT_16, qw.wide, y.dtype == DType::UFIXED_POINT_16, s);
  if (!out) return v.fail(ErrorKind::Internal, "no integer kernel for these types");
  return Status::Ok();
}

Status create_qconv2d(const OpView& v, KernelEnv& env, KernelPtr& out) {
  return create_qconv<QConvGemmKernel>(v, env, false, out);
}

Status create_qdepthwise(const OpView& v, KernelEnv& env, KernelPtr& out) {
  return create_qconv<QDepthwiseKernel>(v, env, true, out);
}

}  // namespace

QNN_REGISTER_KERNEL(Quant, Conv2d, &create_qconv2d);
QNN_REGISTER_KERNEL(Quant, DepthWiseConv2d, &create_qdepthwise);

}  // namespace engine
}  // namespace qnn_delegate
