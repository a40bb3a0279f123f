// Channel norms on channel-last [N, ..., C], float32 (quantized: the dispatcher's dequantize /
// requantize wrapper; 8-bit GroupNorm / InstanceNorm outputs quantized in float16 as HTP does):
// GroupNorm and InstanceNorm (statistics per image and channel group over every spatial
// position; InstanceNorm: one group per channel) and Batchnorm (x * scale + offset per channel).
#include <cmath>
#include <vector>

#include "backends/qualcomm/runtime/engine/kernels/KernelUtil.h"
#include "backends/qualcomm/runtime/engine/kernels/Normalize.h"

namespace qnn_delegate {
namespace engine {
namespace {

// ---- GroupNorm / InstanceNorm -------------------------------------------------------------
class GroupNormKernel final : public Kernel {
 public:
  GroupNormKernel(uint32_t x, uint32_t gamma, int64_t beta, uint32_t out, size_t n, size_t pixels, size_t c,
                  size_t groups, float eps)
      : x_(x), g_(gamma), b_(beta), out_(out), n_(n), pixels_(pixels), c_(c), groups_(groups), eps_(eps) {}
  Status run(const RunContext& ctx) const override {
    const float* x = ctx.at<const float>(x_);
    const float* gamma = ctx.at<const float>(g_);
    const float* beta = b_ >= 0 ? ctx.at<const float>(uint32_t(b_)) : nullptr;
    float* y = ctx.at<float>(out_);
    const size_t per_group = c_ / groups_;
    const double count = double(pixels_ * per_group);
    for (size_t n = 0; n < n_; ++n) {
      const float* xi = x + n * pixels_ * c_;
      float* yi = y + n * pixels_ * c_;
      for (size_t g = 0; g < groups_; ++g) {
        const size_t c0 = g * per_group;
        double mean = 0.0;
        for (size_t p = 0; p < pixels_; ++p)
          for (size_t c = c0; c < c0 + per_group; ++c) mean += xi[p * c_ + c];
        mean /= count;
        double var = 0.0;
        for (size_t p = 0; p < pixels_; ++p)
          for (size_t c = c0; c < c0 + per_group; ++c) {
            const double d = xi[p * c_ + c] - mean;
            var += d * d;
          }
        var /= count;
        const float m = float(mean);
        const float inv = float(1.0 / std::sqrt(var + double(eps_)));
        for (size_t p = 0; p < pixels_; ++p) {
          normalize_row(xi + p * c_ + c0, yi + p * c_ + c0, per_group, m, inv, gamma + c0, beta ? beta + c0 : nullptr);
        }
      }
    }
    return Status::Ok();
  }

 private:
  uint32_t x_, g_;
  int64_t b_;  // -1: no beta
  uint32_t out_;
  size_t n_, pixels_, c_, groups_;
  float eps_;
};

Status make_group_norm(const OpView& v, size_t groups, float eps, KernelPtr& out) {
  const TensorInfo& x = *v.inputs[0];
  const TensorInfo& gamma = *v.inputs[1];
  const TensorInfo* beta = v.inputs.size() > 2 ? v.inputs[2] : nullptr;
  for (const TensorInfo* t : {&x, &gamma}) QNN_RETURN_IF_ERROR(v.expect_float(*t));
  if (beta) QNN_RETURN_IF_ERROR(v.expect_float(*beta));
  if (x.rank() < 2) return v.fail(ErrorKind::InvalidProgram, "input '%s' must have rank >= 2", x.name.c_str());
  const size_t c = size_t(x.dims.back());
  if (gamma.numel != c || (beta && beta->numel != c)) {
    return v.fail(ErrorKind::InvalidProgram, "gamma / beta must have C = %zu elements", c);
  }
  if (groups == 0 || c % groups) {
    return v.fail(ErrorKind::InvalidProgram, "group %zu must divide the %zu channels", groups, c);
  }
  QNN_RETURN_IF_ERROR(v.expect_output(0, x.dims, DType::FLOAT_32));
  const size_t n = size_t(x.dims[0]);
  const size_t pixels = (n && c) ? x.numel / (n * c) : 0;
  return emplace_kernel<GroupNormKernel>(out, x.id, gamma.id, beta ? int64_t(beta->id) : int64_t(-1), v.outputs[0]->id,
                                         n, pixels, c, groups, eps);
}

Status create_group_norm(const OpView& v, KernelEnv&, KernelPtr& out) {
  QNN_RETURN_IF_ERROR(v.expect_arity(3, 3, 1));
  ParamReader params(v);
  float eps = 1e-5f;
  int64_t group = 1;
  QNN_RETURN_IF_ERROR(params.optional_float("epsilon", eps));
  if (params.has("group")) QNN_RETURN_IF_ERROR(params.scalar_int("group", DType::UINT_32, group));
  return make_group_norm(v, size_t(group), eps, out);
}

// InstanceNorm: mode 0 (mu_sigma), normalize_variance true, region 0 (across spatial) only.
Status create_instance_norm(const OpView& v, KernelEnv&, KernelPtr& out) {
  QNN_RETURN_IF_ERROR(v.expect_arity(2, 3, 1));
  ParamReader params(v);
  float eps = 1e-12f;
  int64_t mode = 0, region = 0;
  bool normalize_variance = true;
  QNN_RETURN_IF_ERROR(params.optional_float("epsilon", eps));
  if (params.has("mode")) QNN_RETURN_IF_ERROR(params.scalar_int("mode", DType::UINT_32, mode));
  if (params.has("region")) QNN_RETURN_IF_ERROR(params.scalar_int("region", DType::UINT_32, region));
  QNN_RETURN_IF_ERROR(params.optional_bool("normalize_variance", normalize_variance));
  if (mode != 0 || region != 0 || !normalize_variance) {
    return v.fail(ErrorKind::NotSupported,
                  "only mode 0 (mu_sigma), region 0 (across spatial), normalize_variance = true are "
                  "supported, got mode %lld, region %lld, normalize_variance %d",
                  static_cast<long long>(mode), static_cast<long long>(region), int(normalize_variance));
  }
  const TensorInfo& x = *v.inputs[0];
  return make_group_norm(v, x.rank() ? size_t(x.dims.back()) : 0, eps, out);
}

// ---- Batchnorm ----------------------------------------------------------------
class BatchnormKernel final : public Kernel {
 public:
  BatchnormKernel(uint32_t x, uint32_t scale, uint32_t offset, uint32_t out, size_t rows, size_t c)
      : x_(x), s_(scale), o_(offset), out_(out), rows_(rows), c_(c) {}
  Status run(const RunContext& ctx) const override {
    const float* x = ctx.at<const float>(x_);
    const float* s = ctx.at<const float>(s_);
    const float* o = ctx.at<const float>(o_);
    float* y = ctx.at<float>(out_);
    for (size_t r = 0; r < rows_; ++r)
      for (size_t i = 0; i < c_; ++i) y[r * c_ + i] = std::fma(x[r * c_ + i], s[i], o[i]);
    return Status::Ok();
  }

 private:
  uint32_t x_, s_, o_, out_;
  size_t rows_, c_;
};

Status create_batchnorm(const OpView& v, KernelEnv&, KernelPtr& out) {
  QNN_RETURN_IF_ERROR(v.expect_arity(3, 3, 1));
  const TensorInfo& x = *v.inputs[0];
  const TensorInfo& scale = *v.inputs[1];
  const TensorInfo& offset = *v.inputs[2];
  for (const TensorInfo* t : {&x, &scale, &offset}) QNN_RETURN_IF_ERROR(v.expect_float(*t));
  const size_t c = x.rank() ? x.dims.back() : 1;
  if (scale.numel != c || offset.numel != c) {
    return v.fail(ErrorKind::InvalidProgram, "scale '%s' / offset '%s' must have C = %zu elements", scale.name.c_str(),
                  offset.name.c_str(), c);
  }
  QNN_RETURN_IF_ERROR(v.expect_output(0, x.dims, DType::FLOAT_32));
  return emplace_kernel<BatchnormKernel>(out, x.id, scale.id, offset.id, v.outputs[0]->id, c ? x.numel / c : 0, c);
}

}  // namespace

QNN_REGISTER_KERNEL(Float, GroupNorm, &create_group_norm);
QNN_REGISTER_KERNEL(Float, InstanceNorm, &create_instance_norm);
QNN_REGISTER_KERNEL(Float, Batchnorm, &create_batchnorm);

}  // namespace engine
}  // namespace qnn_delegate
