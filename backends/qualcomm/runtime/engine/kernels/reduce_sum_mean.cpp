// ReduceMean and ReduceSum over a set of axes (float32), one templated kernel. (Quantized
// ReduceMean with HTP's integer arithmetic: reduce_mean_quant.cpp.)
#include <cstring>

#include "backends/qualcomm/runtime/engine/kernels/ReduceGeometry.h"

namespace qnn_delegate {
namespace engine {
namespace {

class ReduceKernel final : public Kernel {
 public:
  ReduceKernel(uint32_t in, uint32_t out, const ReduceGeometry& g, float scale)
      : in_(in), out_(out), g_(g), scale_(scale) {}
  Status run(const RunContext& c) const override {
    const float* x = c.at<const float>(in_);
    float* y = c.at<float>(out_);
    std::memset(y, 0, g_.out_numel * sizeof(float));
    g_.for_each_run([x, y](size_t i, size_t o, size_t n, size_t stride) {
      for (size_t j = 0; j < n; ++j) y[o + j * stride] += x[i + j];
    });
    if (scale_ != 1.f) {
      for (size_t k = 0; k < g_.out_numel; ++k) y[k] /= scale_;
    }
    return Status::Ok();
  }

 private:
  uint32_t in_, out_;
  ReduceGeometry g_;
  float scale_;  // divisor
};

template <bool kMean>
Status create_reduce(const OpView& v, KernelEnv&, KernelPtr& out) {
  QNN_RETURN_IF_ERROR(v.expect_arity(1, 1, 1));
  const TensorInfo& x = *v.inputs[0];
  QNN_RETURN_IF_ERROR(v.expect_float(x));
  ReduceGeometry g;
  QNN_RETURN_IF_ERROR(reduce_geometry(v, x, false, g));
  QNN_RETURN_IF_ERROR(v.expect_output(0, g.out_dims, DType::FLOAT_32));
  const float scale = kMean && g.count ? float(g.count) : 1.f;
  return emplace_kernel<ReduceKernel>(out, x.id, v.outputs[0]->id, g, scale);
}

}  // namespace

QNN_REGISTER_KERNEL(Float, ReduceMean, &create_reduce<true>);
QNN_REGISTER_KERNEL(Float, ReduceSum, &create_reduce<false>);

}  // namespace engine
}  // namespace qnn_delegate
