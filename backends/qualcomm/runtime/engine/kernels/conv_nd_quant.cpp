// Integer Conv3d / TransposeConv2d / TransposeConv3d on quantized activations
// (channel-last, QNN's weight layouts; geometry: ConvNdGeometry.h). Direct loops:
// acc[co] = sum over the taps that reach the output pixel of (q + in_offset) * w,
// exact in Acc, then requantized per output channel as Conv2d does (QuantGemm.h
// Requant: HTP's fixed-point arithmetic for uint8 / uint16 activations with 8-bit
// weights, the weight sums of the whole kernel folding the input zero point in as
// if the taps outside the input read it). Weights are repacked at init to
// [taps * Cin/group][Cout] (output channel innermost); no allocation at execute.
#include <algorithm>

#include "backends/qualcomm/runtime/engine/kernels/ConvNdGeometry.h"
#include "backends/qualcomm/runtime/engine/kernels/QuantGemm.h"

namespace qnn_delegate {
namespace engine {
namespace {

struct QConvNdSetup {
  NdGeometry g;
  NdIds ids;
  QWeights* w;  // [Cout][taps * Cin/group]
  Requant rq;
  TrackingAllocator* alloc;
  bool transposed;
};

template <typename A, typename W, typename Acc, typename O>
class QConvNdKernel final : public Kernel {
 public:
  explicit QConvNdKernel(QConvNdSetup& s) : g_(s.g), ids_(s.ids), rq_(std::move(s.rq)), transposed_(s.transposed) {
    const QWeights& w = *s.w;
    k_ = w.K;
    taps_ = Buffer(s.alloc, w.N * w.K * sizeof(W));
    if (taps_.valid()) {
      for (size_t co = 0; co < w.N; ++co)
        for (size_t k = 0; k < w.K; ++k) taps_.as<W>()[k * w.N + co] = w.data.as<W>()[co * w.K + k];
    }
  }
  size_t scratch_bytes() const override { return g_.cout * sizeof(Acc); }
  size_t owned_bytes() const override { return taps_.size(); }

  Status run(const RunContext& c) const override {
    if (!taps_.valid()) return make_error(ErrorKind::MemoryAllocationFailed, "conv weights not allocated");
    const A* x = c.at<const A>(ids_.x);
    O* out = c.at<O>(ids_.out);
    Acc* acc = static_cast<Acc*>(c.scratch);
    const NdGeometry& g = g_;
    for_each_output_pixel(g, [&](const NdPixel& p) {
      std::fill(acc, acc + g.cout, Acc(0));
      for_each_tap(g, transposed_, p, [&](size_t in_pixel, size_t tap) { accumulate(x + in_pixel * g.cin, tap, acc); });
      O* o = out + p.index * g.cout;
      for (size_t co = 0; co < g.cout; ++co) o[co] = rq_.apply<O>(acc[co], co);
    });
    return Status::Ok();
  }

 private:
  // acc[co] += (px[ci] + in_offset) * w(tap, ci, co) over each group's channels.
  void accumulate(const A* px, size_t tap, Acc* acc) const {
    const size_t cin_g = g_.cin_g(), cout_g = g_.cout_g();
    const Acc off = Acc(rq_.in_offset);
    for (size_t grp = 0; grp < g_.group; ++grp) {
      const W* wt = taps_.as<W>() + tap * cin_g * g_.cout + grp * cout_g;
      Acc* ag = acc + grp * cout_g;
      for (size_t ci = 0; ci < cin_g; ++ci) {
        const Acc xv = Acc(px[grp * cin_g + ci]) + off;
        const W* wr = wt + ci * g_.cout;
        for (size_t co = 0; co < cout_g; ++co) ag[co] += xv * Acc(wr[co]);
      }
    }
  }

  NdGeometry g_;
  NdIds ids_;
  Requant rq_;
  bool transposed_;
  size_t k_ = 0;
  Buffer taps_;
};

// A grouped transposed weight [k.., Cin, Cout/group] unpacked as rows [Cout/group][taps * Cin]
// -> rows [Cout][taps * Cin/group] (channel co = grp * Cout/group + j reads its group's Cin).
template <typename W>
void regroup_rows(const QWeights& src, const NdGeometry& g, W* dst) {
  const size_t taps = g.taps(), cin_g = g.cin_g(), cout_g = g.cout_g(), k = taps * cin_g;
  for (size_t co = 0; co < g.cout; ++co) {
    const size_t grp = co / cout_g, j = co % cout_g;
    for (size_t t = 0; t < taps; ++t)
      for (size_t ci = 0; ci < cin_g; ++ci)
        dst[co * k + t * cin_g + ci] = src.data.as<W>()[j * src.K + t * g.cin + grp * cin_g + ci];
  }
}

Status regroup_transposed(const OpView& v, const NdGeometry& g, TrackingAllocator* alloc, QWeights& w) {
  QWeights out;
  out.N = g.cout;
  out.K = g.taps() * g.cin_g();
  out.wide = w.wide;
  out.data = Buffer(alloc, out.N * out.K * (w.wide ? 2 : 1));
  if (!out.data.valid()) return v.fail(ErrorKind::MemoryAllocationFailed, "cannot regroup the weights");
  if (w.wide) {
    regroup_rows(w, g, out.data.as<int16_t>());
  } else {
    regroup_rows(w, g, out.data.as<int8_t>());
  }
  out.scale.assign(g.cout, w.scale.empty() ? 0.0 : w.scale[0]);  // per tensor (grouped)
  w = std::move(out);
  return Status::Ok();
}

// Declines (out stays empty) unless x / out are quantized activations, w is an integer
// per-tensor / per-output-channel weight and the bias is STATIC; blockwise (LPBQ) weights
// stay on the dequantizing path.
template <size_t kSpatial, bool kTransposed>
Status create_qconv_nd(const OpView& v, KernelEnv& env, KernelPtr& out) {
  QNN_RETURN_IF_ERROR(v.expect_arity(3, 3, 1));
  const TensorInfo& x = *v.inputs[0];
  const TensorInfo& w = *v.inputs[1];
  const TensorInfo& b = *v.inputs[2];
  const TensorInfo& y = *v.outputs[0];
  const int out_axis = int(kSpatial) + 1;
  const bool bias_ok = b.kind == TensorKind::STATIC && (b.is_quantized() || b.is_float());
  if (!is_quant_activation(x) || !is_quant_activation(y) || !bias_ok || w.quant.blockwise() ||
      !integer_weights_supported(w, out_axis, -1)) {
    return Status::Ok();
  }
  QConvNdSetup s;
  QNN_RETURN_IF_ERROR(nd_geometry(v, kSpatial, kTransposed, y.dtype, s.g, s.ids));
  const bool regroup = kTransposed && s.g.group > 1;
  if (regroup && !w.quant.per_tensor()) return Status::Ok();
  QWeights qw;
  QNN_RETURN_IF_ERROR(prepare_qweights(v, w, kTransposed ? s.g.cout_g() : s.g.cout, true, env.allocator, qw));
  if (regroup) QNN_RETURN_IF_ERROR(regroup_transposed(v, s.g, env.allocator, qw));
  prepare_requant(x, w, qw, b, y, s.rq);
  s.w = &qw;
  s.alloc = env.allocator;
  s.transposed = kTransposed;
  out = make_integer_kernel<QConvNdKernel>(x.dtype == DType::UFIXED_POINT_16, qw.wide,
                                           y.dtype == DType::UFIXED_POINT_16, s);
  if (!out) return v.fail(ErrorKind::Internal, "no integer kernel for these types");
  return Status::Ok();
}

}  // namespace

QNN_REGISTER_KERNEL(Quant, Conv3d, (&create_qconv_nd<3, false>));
QNN_REGISTER_KERNEL(Quant, TransposeConv2d, (&create_qconv_nd<2, true>));
QNN_REGISTER_KERNEL(Quant, TransposeConv3d, (&create_qconv_nd<3, true>));

}  // namespace engine
}  // namespace qnn_delegate
