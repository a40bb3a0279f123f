// More elementwise math (issue 13, part 2):
// - IsNan: FLOAT_32 -> BOOL_8 (isinf / isnan of a graph input are INT_32 comparisons of its
//   bits instead, builders/op_logic.py ClassifyBuilder: QNN 2.51 HTP cannot finalize IsInf);
// - LogSoftmax: x - max - log(sum(exp(x - max))) along `axis` (beta scales x first).
// Quantized inputs run through QuantDispatch's float path.
#include <algorithm>
#include <cmath>

#include "backends/qualcomm/runtime/engine/kernels/KernelUtil.h"

namespace qnn_delegate {
namespace engine {
namespace {

// ---- IsNan ------------------------------------------------------------------------
struct IsNanFn {
  static bool apply(float x) { return std::isnan(x); }
};

template <typename Fn>
class ClassifyKernel final : public Kernel {
 public:
  explicit ClassifyKernel(const OpView& v)
      : in_(v.inputs[0]->id), out_(v.outputs[0]->id), numel_(v.inputs[0]->numel) {}

  Status run(const RunContext& ctx) const override {
    const float* in = ctx.at<const float>(in_);
    uint8_t* out = ctx.at<uint8_t>(out_);
    for (size_t i = 0; i < numel_; ++i) out[i] = Fn::apply(in[i]) ? 1 : 0;
    return Status::Ok();
  }

 private:
  uint32_t in_, out_;
  size_t numel_;
};

template <typename Fn>
Status create_classify(const OpView& v, KernelEnv&, KernelPtr& out) {
  QNN_RETURN_IF_ERROR(v.expect_arity(1, 1, 1));
  QNN_RETURN_IF_ERROR(v.expect_float(*v.inputs[0]));
  QNN_RETURN_IF_ERROR(v.expect_output(0, v.inputs[0]->dims, DType::BOOL_8));
  return emplace_kernel<ClassifyKernel<Fn>>(out, v);
}

// ---- LogSoftmax ----------------------------------------------------------------------
class LogSoftmaxKernel final : public Kernel {
 public:
  LogSoftmaxKernel(uint32_t in, uint32_t out, size_t outer, size_t axis, size_t inner, float beta)
      : in_(in), out_(out), outer_(outer), axis_(axis), inner_(inner), beta_(beta) {}

  Status run(const RunContext& c) const override {
    const float* x = c.at<const float>(in_);
    float* y = c.at<float>(out_);
    for (size_t o = 0; o < outer_; ++o) {
      for (size_t i = 0; i < inner_; ++i) {
        const float* px = x + o * axis_ * inner_ + i;
        float* py = y + o * axis_ * inner_ + i;
        float mx = -INFINITY;
        for (size_t a = 0; a < axis_; ++a) mx = std::max(mx, beta_ * px[a * inner_]);
        double sum = 0.0;
        for (size_t a = 0; a < axis_; ++a) sum += std::exp(double(std::fma(beta_, px[a * inner_], -mx)));
        const float lse = mx + float(std::log(sum));
        for (size_t a = 0; a < axis_; ++a) py[a * inner_] = std::fma(beta_, px[a * inner_], -lse);
      }
    }
    return Status::Ok();
  }

 private:
  uint32_t in_, out_;
  size_t outer_, axis_, inner_;
  float beta_;
};

Status create_log_softmax(const OpView& v, KernelEnv&, KernelPtr& out) {
  QNN_RETURN_IF_ERROR(v.expect_arity(1, 1, 1));
  const TensorInfo& x = *v.inputs[0];
  QNN_RETURN_IF_ERROR(v.expect_float(x));
  ParamReader params(v);
  int64_t axis = 0;
  float beta = 1.f;
  QNN_RETURN_IF_ERROR(params.scalar_int("axis", DType::UINT_32, axis));
  QNN_RETURN_IF_ERROR(params.optional_float("beta", beta));
  if (axis < 0 || size_t(axis) >= x.rank()) {
    return v.fail(ErrorKind::InvalidProgram, "axis %lld out of range for input '%s' %s",
                  static_cast<long long>(axis), x.name.c_str(), dims_to_string(x.dims).c_str());
  }
  QNN_RETURN_IF_ERROR(v.expect_output(0, x.dims, DType::FLOAT_32));
  return emplace_kernel<LogSoftmaxKernel>(out, x.id, v.outputs[0]->id, product(x.dims, 0, axis),
                                          size_t(x.dims[axis]), product(x.dims, axis + 1), beta);
}

} // namespace

QNN_REGISTER_KERNEL(Float, IsNan, &create_classify<IsNanFn>);
QNN_REGISTER_KERNEL(Float, LogSoftmax, &create_log_softmax);

} // namespace engine
} // namespace qnn_delegate
