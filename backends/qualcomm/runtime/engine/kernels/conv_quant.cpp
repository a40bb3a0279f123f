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
  explicit QConvGemmKernel(QConvSetup& s)
      : g_(s.g), ids_(s.ids), w_(std::move(*s.w)), rq_(std::move(s.rq)) {
    k_ = g_.kh * g_.kw * g_.cin_g();
    pointwise_ = g_.kh == 1 && g_.kw == 1 && g_.sh == 1 && g_.sw == 1 && g_.group == 1 &&
                 g_.pt + g_.pb + g_.pl + g_.pr == 0;
    zero_point_ = A(-rq_.in_offset);
    prepare_vnni<A, W>(w_, g_.group, s.alloc, vnni_);
  }
  size_t scratch_bytes() const override { return pointwise_ ? 0 : kQIm2colTile * k_ * sizeof(A); }
  size_t owned_bytes() const override { return w_.data.size() + vnni_.data.size(); }

  Status run(const RunContext& c) const override {
    const A* x = c.at<const A>(ids_.x);
    O* out = c.at<O>(ids_.out);
    if (pointwise_) {
      gemm(x, g_.cin, 0, g_.n * g_.h * g_.w, out, g_.cout);
      return Status::Ok();
    }
    A* cols = static_cast<A*>(c.scratch);
    const size_t pixels = g_.n * g_.oh * g_.ow, cg = g_.cout_g();
    for (size_t p0 = 0; p0 < pixels; p0 += kQIm2colTile) {
      const size_t np = std::min(kQIm2colTile, pixels - p0);
      for (size_t grp = 0; grp < g_.group; ++grp) {
        im2col_rows<A>(g_, k_, x, p0, np, grp, zero_point_, cols);
        gemm(cols, k_, grp, np, out + p0 * g_.cout + grp * cg, g_.cout);
      }
    }
    return Status::Ok();
  }

 private:
  // Rows of `a` times the weights of group `grp` (VNNI panels when packed).
  void gemm(const A* a, size_t lda, size_t grp, size_t M, O* out, size_t ldo) const {
    const size_t cg = g_.cout_g();
    if constexpr (std::is_same<A, uint8_t>::value && std::is_same<W, int8_t>::value) {
      if (vnni_.ready()) {
        qgemm_vnni<O>(a, lda, vnni_.data.as<int8_t>() + grp * vnni_.group_bytes, k_, grp * cg, cg, M,
                      rq_, out, ldo);
        return;
      }
    }
    qgemm<A, W, Acc, O>(a, lda, w_.data.as<W>(), k_, grp * cg, cg, M, rq_, out, ldo);
  }

  ConvGeometry g_;
  ConvIds ids_;
  QWeights w_;
  VnniWeights vnni_;
  Requant rq_;
  size_t k_ = 0;

  bool pointwise_ = false;
  A zero_point_ = 0;
};

// Depthwise: w_ is [Cout][KH*KW]; output channel c reads input channel c / mult.
template <typename A, typename W, typename Acc, typename O>
class QDepthwiseKernel final : public Kernel {
 public:
  explicit QDepthwiseKernel(QConvSetup& s)
      : g_(s.g), ids_(s.ids), w_(std::move(*s.w)), rq_(std::move(s.rq)) {
    mult_ = g_.cout / g_.cin;
    // Tap-major copy [KH*KW][Cout] so the channel loop is contiguous.
    const size_t taps = g_.kh * g_.kw;
    taps_ = Buffer(s.alloc, taps * g_.cout * sizeof(W));
    if (taps_.valid()) {
      for (size_t c = 0; c < g_.cout; ++c)
        for (size_t t = 0; t < taps; ++t) taps_.as<W>()[t * g_.cout + c] = w_.data.as<W>()[c * taps + t];
    }
    w_.data.reset();
  }
  size_t scratch_bytes() const override { return g_.cout * sizeof(Acc); }
  size_t owned_bytes() const override { return taps_.size(); }

  Status run(const RunContext& c) const override {
    const A* x = c.at<const A>(ids_.x);
    O* out = c.at<O>(ids_.out);
    if (!taps_.valid()) return make_error(ErrorKind::MemoryAllocationFailed, "depthwise taps not allocated");
    Acc* acc = static_cast<Acc*>(c.scratch);
    const size_t C = g_.cout;
    const Acc off = Acc(rq_.in_offset);
    for (size_t n = 0; n < g_.n; ++n)
      for (size_t oy = 0; oy < g_.oh; ++oy)
        for (size_t ox = 0; ox < g_.ow; ++ox) {
          std::fill(acc, acc + C, Acc(0));
          for (size_t ky = 0; ky < g_.kh; ++ky) {
            const long iy = long(oy * g_.sh + ky * g_.dh) - long(g_.pt);
            if (iy < 0 || iy >= long(g_.h)) continue;
            for (size_t kx = 0; kx < g_.kw; ++kx) {
              const long ix = long(ox * g_.sw + kx * g_.dw) - long(g_.pl);
              if (ix < 0 || ix >= long(g_.w)) continue;
              const A* px = x + ((n * g_.h + iy) * g_.w + ix) * g_.cin;
              const W* pw = taps_.as<W>() + (ky * g_.kw + kx) * C;
              if (mult_ == 1) {
                for (size_t ch = 0; ch < C; ++ch) acc[ch] += (Acc(px[ch]) + off) * Acc(pw[ch]);
              } else {
                for (size_t ch = 0; ch < C; ++ch) acc[ch] += (Acc(px[ch / mult_]) + off) * Acc(pw[ch]);
              }
            }
          }
          O* o = out + ((n * g_.oh + oy) * g_.ow + ox) * C;
          for (size_t ch = 0; ch < C; ++ch) o[ch] = rq_.apply<O>(acc[ch], ch);
        }
    return Status::Ok();
  }

 private:
  ConvGeometry g_;
  ConvIds ids_;
  QWeights w_;
  Requant rq_;
  size_t mult_ = 1;
  Buffer taps_;
};

// HTP's strided uint8 depthwise kernel requantizes without the pre-shift
// (htp_requant_unshifted_of); the bias term (pre) stays.
void use_strided_depthwise_requant(const TensorInfo& x, const QWeights& w, const TensorInfo& y,
                                   Requant& rq) {
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
  out = make_integer_kernel<K>(x.dtype == DType::UFIXED_POINT_16, qw.wide,
                               y.dtype == DType::UFIXED_POINT_16, s);
  if (!out) return v.fail(ErrorKind::Internal, "no integer kernel for these types");
  return Status::Ok();
}

Status create_qconv2d(const OpView& v, KernelEnv& env, KernelPtr& out) {
  return create_qconv<QConvGemmKernel>(v, env, false, out);
}

Status create_qdepthwise(const OpView& v, KernelEnv& env, KernelPtr& out) {
  return create_qconv<QDepthwiseKernel>(v, env, true, out);
}

} // namespace

QNN_REGISTER_KERNEL(Quant, Conv2d, &create_qconv2d);
QNN_REGISTER_KERNEL(Quant, DepthWiseConv2d, &create_qdepthwise);

} // namespace engine
} // namespace qnn_delegate
