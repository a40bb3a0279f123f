// Integer FullyConnected (weights [N,K], K contiguous: u8 x s8 dot products)
// and MatMul of two quantized activations: sum_k (qa + offa) * (qb + offb),
// exact in Acc, requantized with sa * sb / s_out (QuantGemm.h Requant: HTP's arithmetic
// for uint8 a, b and out).
#include "backends/qualcomm/runtime/engine/kernels/LinearShape.h"
#include "backends/qualcomm/runtime/engine/kernels/QuantGemm.h"

namespace qnn_delegate {
namespace engine {
namespace {

struct QFcSetup {
  FcShape s;
  QWeights* w;
  Requant rq;
  TrackingAllocator* alloc;
};

template <typename A, typename W, typename Acc, typename O>
class QFcKernel final : public Kernel {
 public:
  explicit QFcKernel(QFcSetup& s) : s_(s.s) { core_.init(std::move(*s.w), std::move(s.rq), 1, s.alloc); }
  size_t owned_bytes() const override { return core_.owned_bytes(); }
  size_t scratch_bytes() const override { return core_.slots() * core_.slot_bytes(); }
  Status run(const RunContext& c) const override {
    core_.gemm_parallel(c.at<const A>(s_.x), s_.K, 0, s_.M, c.at<O>(s_.out), s_.N,
                        static_cast<char*>(c.scratch));
    return Status::Ok();
  }

 private:
  FcShape s_;
  QGemmCore<A, W, Acc, O> core_;
};

Status create_qfc(const OpView& v, KernelEnv& env, KernelPtr& out) {
  QNN_RETURN_IF_ERROR(v.expect_arity(3, 3, 1));
  const TensorInfo& x = *v.inputs[0];
  const TensorInfo& w = *v.inputs[1];
  const TensorInfo& b = *v.inputs[2];
  const TensorInfo& y = *v.outputs[0];
  const bool bias_ok = b.kind == TensorKind::STATIC && (b.is_quantized() || b.is_float());
  if (!is_quant_activation(x) || !is_quant_activation(y) || !bias_ok ||
      !integer_weights_supported(w, 0, 1)) {
    return Status::Ok();  // declined: float kernel on dequantized tensors
  }
  QFcSetup s;
  QNN_RETURN_IF_ERROR(fc_shape(v, y.dtype, s.s));
  QWeights qw;
  QNN_RETURN_IF_ERROR(prepare_qweights(v, w, s.s.N, false, env.allocator, qw));
  prepare_requant(x, w, qw, b, y, s.rq);
  s.w = &qw;
  s.alloc = env.allocator;
  out = make_integer_kernel<QFcKernel>(x.dtype == DType::UFIXED_POINT_16, qw.wide,
                                       y.dtype == DType::UFIXED_POINT_16, s);
  return Status::Ok();
}

// ---- MatMul -----------------------------------------------------------------
struct QMatMulSetup {
  MatMulShape s;
  int32_t off_a, off_b;
  Requant rq;  // hr[0]: no bias
};

// A / B: input element types; Acc: int32 when both are 8-bit; O: output type.
template <typename A, typename B, typename Acc, typename O>
class QMatMulKernel final : public Kernel {
 public:
  explicit QMatMulKernel(QMatMulSetup& s) : q_(std::move(s)) {}
  size_t scratch_bytes() const override { return q_.s.N * sizeof(Acc); }
  Status run(const RunContext& c) const override {
    const MatMulShape& s = q_.s;
    const A* a = c.at<const A>(s.a);
    const B* b = c.at<const B>(s.b);
    O* out = c.at<O>(s.out);
    Acc* acc = static_cast<Acc*>(c.scratch);
    Index idx{};
    for (size_t bi = 0; bi < s.batches; ++bi) {
      size_t oa = 0, ob = 0;
      for (size_t d = 0; d < s.batch.size(); ++d) {
        oa += idx[d] * s.sa[d];
        ob += idx[d] * s.sb[d];
      }
      multiply(a + oa * s.M * s.K, b + ob * s.K * s.N, acc, out + bi * s.M * s.N);
      next_index(idx, s.batch);
    }
    return Status::Ok();
  }

 private:
  void multiply(const A* a, const B* b, Acc* acc, O* c) const {
    const MatMulShape& s = q_.s;
    const size_t M = s.M, N = s.N, K = s.K;
    const size_t sam = s.ta ? 1 : K, sak = s.ta ? M : 1;
    const size_t sbk = s.tb ? 1 : N, sbn = s.tb ? K : 1;
    const Acc oa = Acc(q_.off_a), ob = Acc(q_.off_b);
    for (size_t m = 0; m < M; ++m) {
      std::fill(acc, acc + N, Acc(0));
      for (size_t k = 0; k < K; ++k) {
        const Acc av = Acc(a[m * sam + k * sak]) + oa;
        const B* brow = b + k * sbk;
        for (size_t n = 0; n < N; ++n) acc[n] += av * (Acc(brow[n * sbn]) + ob);
      }
      for (size_t n = 0; n < N; ++n) c[m * N + n] = q_.rq.apply<O>(acc[n], 0);
    }
  }

  QMatMulSetup q_;
};

Status create_qmatmul(const OpView& v, KernelEnv&, KernelPtr& out) {
  QNN_RETURN_IF_ERROR(v.expect_arity(2, 2, 1));
  const TensorInfo& a = *v.inputs[0];
  const TensorInfo& b = *v.inputs[1];
  const TensorInfo& y = *v.outputs[0];
  if (!is_quant_activation(a) || !is_quant_activation(b) || !is_quant_activation(y)) {
    return Status::Ok();  // declined
  }
  QMatMulSetup s;
  QNN_RETURN_IF_ERROR(matmul_shape(v, y.dtype, s.s));
  s.off_a = a.quant.offset;
  s.off_b = b.quant.offset;
  const double m = double(a.quant.scale) * double(b.quant.scale) / double(y.quant.scale);
  s.rq.htp = a.dtype == DType::UFIXED_POINT_8 && b.dtype == DType::UFIXED_POINT_8 &&
             y.dtype == DType::UFIXED_POINT_8;
  if (s.rq.htp) {
    s.rq.hr = {htp_requant_of(m)};
  } else {
    s.rq.mult = {m};
    s.rq.bias = {0.0};
  }
  s.rq.out_offset = y.quant.offset;
  s.rq.qmin = quant_min(y);
  s.rq.qmax = quant_max(y);
  // Reuse the (x, w, out) instantiation helper: "W" is B's type here.
  const bool a16 = a.dtype == DType::UFIXED_POINT_16, b16 = b.dtype == DType::UFIXED_POINT_16;
  const bool y16 = y.dtype == DType::UFIXED_POINT_16;
  auto make = [&](auto ta, auto tb, auto to) -> KernelPtr {
    using A = decltype(ta);
    using B = decltype(tb);
    using O = decltype(to);
    using Acc = typename std::conditional<sizeof(A) == 1 && sizeof(B) == 1, int32_t, int64_t>::type;
    return KernelPtr(new QMatMulKernel<A, B, Acc, O>(s));
  };
  if (!a16 && !b16) out = y16 ? make(uint8_t(), uint8_t(), uint16_t()) : make(uint8_t(), uint8_t(), uint8_t());
  else if (!a16) out = y16 ? make(uint8_t(), uint16_t(), uint16_t()) : make(uint8_t(), uint16_t(), uint8_t());
  else if (!b16) out = y16 ? make(uint16_t(), uint8_t(), uint16_t()) : make(uint16_t(), uint8_t(), uint8_t());
  else out = y16 ? make(uint16_t(), uint16_t(), uint16_t()) : make(uint16_t(), uint16_t(), uint8_t());
  return Status::Ok();
}

} // namespace

QNN_REGISTER_KERNEL(Quant, FullyConnected, &create_qfc);
QNN_REGISTER_KERNEL(Quant, MatMul, &create_qmatmul);

} // namespace engine
} // namespace qnn_delegate
