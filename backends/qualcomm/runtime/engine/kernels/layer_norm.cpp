// LayerNorm and RmsNorm over the last axes (float32), and LayerNorm on uint8 / uint16 as QNN HTP
// computes it. Quantized RmsNorm runs through QuantDispatch's float path.
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "backends/qualcomm/runtime/engine/Quant.h"
#include "backends/qualcomm/runtime/engine/kernels/KernelUtil.h"
#include "backends/qualcomm/runtime/engine/kernels/Normalize.h"

namespace qnn_delegate {
namespace engine {

QNN_FMA_CLONES void normalize_row(const float* x, float* y, size_t n, float m, float inv, const float* gamma,
                                  const float* beta) {
  if (beta == nullptr) {
    for (size_t i = 0; i < n; ++i) y[i] = std::fma((x[i] - m) * inv, gamma[i], 0.f);
  } else {
    for (size_t i = 0; i < n; ++i) y[i] = std::fma((x[i] - m) * inv, gamma[i], beta[i]);
  }
}

namespace {

// "epsilon" and "axes" of LayerNorm / RmsNorm: the axes must be the last k >= 1 of x, in order;
// `cols` is their element count (rows = x.numel / cols).
Status last_axes(const OpView& v, const TensorInfo& x, float& eps, size_t& cols) {
  ParamReader params(v);
  std::vector<int64_t> axes;
  QNN_RETURN_IF_ERROR(params.scalar_float("epsilon", eps));
  QNN_RETURN_IF_ERROR(params.tensor_int("axes", DType::UINT_32, {}, axes));
  const size_t k = axes.size();
  if (k == 0 || k > x.rank()) {
    return v.fail(ErrorKind::InvalidProgram, "'axes' must name 1..%zu axes, got %zu", x.rank(), k);
  }
  for (size_t i = 0; i < k; ++i) {
    if (size_t(axes[i]) != x.rank() - k + i) {
      return v.fail(ErrorKind::NotSupported, "'axes' must be the last %zu axes of input '%s' %s", k, x.name.c_str(),
                    dims_to_string(x.dims).c_str());
    }
  }
  cols = product(x.dims, x.rank() - k);
  return Status::Ok();
}

// ---- LayerNorm / RmsNorm (float) ----------------------------------------------------
// Per row: LayerNorm y = (x - mean) * rsqrt(var + eps) * gamma + beta; RmsNorm (kRms)
// y = x * rsqrt(mean(x^2) + eps) * gamma + beta. Statistics in double.
template <bool kRms>
class LastAxesNormKernel final : public Kernel {
 public:
  LastAxesNormKernel(uint32_t x, uint32_t gamma, uint32_t beta, uint32_t out, size_t rows, size_t cols, float eps)
      : x_(x), g_(gamma), b_(beta), out_(out), rows_(rows), cols_(cols), eps_(eps) {}
  Status run(const RunContext& c) const override {
    const float* x = c.at<const float>(x_);
    const float* gamma = c.at<const float>(g_);
    const float* beta = c.at<const float>(b_);
    float* y = c.at<float>(out_);
    for (size_t r = 0; r < rows_; ++r) {
      const float* px = x + r * cols_;
      float m = 0.f, inv = 0.f;
      if (kRms) {
        double sq = 0.0;
        for (size_t i = 0; i < cols_; ++i) sq += double(px[i]) * double(px[i]);
        inv = float(1.0 / std::sqrt(sq / double(cols_) + double(eps_)));
      } else {
        double mean = 0.0;
        for (size_t i = 0; i < cols_; ++i) mean += px[i];
        mean /= double(cols_);
        double var = 0.0;
        for (size_t i = 0; i < cols_; ++i) var += (px[i] - mean) * (px[i] - mean);
        var /= double(cols_);
        m = float(mean);
        inv = float(1.0 / std::sqrt(var + double(eps_)));
      }
      normalize_row(px, y + r * cols_, cols_, m, inv, gamma, beta);  // RmsNorm: x - 0 is x
    }
    return Status::Ok();
  }

 private:
  uint32_t x_, g_, b_, out_;
  size_t rows_, cols_;
  float eps_;
};

template <bool kRms>
Status create_last_axes_norm(const OpView& v, KernelEnv&, KernelPtr& out) {
  QNN_RETURN_IF_ERROR(v.expect_arity(3, 3, 1));
  const TensorInfo& x = *v.inputs[0];
  const TensorInfo& gamma = *v.inputs[1];
  const TensorInfo& beta = *v.inputs[2];
  for (const TensorInfo* t : {&x, &gamma, &beta}) QNN_RETURN_IF_ERROR(v.expect_float(*t));
  float eps = 0.f;
  size_t cols = 0;
  QNN_RETURN_IF_ERROR(last_axes(v, x, eps, cols));
  if (gamma.numel != cols || beta.numel != cols) {
    return v.fail(ErrorKind::InvalidProgram,
                  "gamma '%s' %s / beta '%s' %s must match the normalized dims of input '%s' %s", gamma.name.c_str(),
                  dims_to_string(gamma.dims).c_str(), beta.name.c_str(), dims_to_string(beta.dims).c_str(),
                  x.name.c_str(), dims_to_string(x.dims).c_str());
  }
  QNN_RETURN_IF_ERROR(v.expect_output(0, x.dims, DType::FLOAT_32));
  return emplace_kernel<LastAxesNormKernel<kRms>>(out, x.id, gamma.id, beta.id, v.outputs[0]->id,
                                                  cols ? x.numel / cols : 0, cols, eps);
}

// ---- LayerNorm, quantized (uint8 / uint16 in and out) ------------------------------
// As QNN HTP computes it (measured on QNN 2.51): beta is added in whole output steps,
// code = round((x - mean) * rsqrt(var + eps) * gamma / out_scale) + round(beta / out_scale)
// - out_offset (8a8w vs QNN: 76.8% -> 97.6% bit-exact, 16a8w: 72.8% -> 96.9%, both max 1 step
// on random rows; the rest are values within ~0.05 step of a half: QNN's normalization is a
// little less precise than this double one). Gamma / out_scale and the rounded beta are
// computed at init.
// One row: codes of x (offset, scale: pin) -> codes of y; gs = gamma / out_scale, bs = the
// rounded beta in output steps. (x - mean) is fused: real(q) - mean rounded once.
template <typename Q>
QNN_FMA_CLONES void quant_layer_norm_row(const Q* px, Q* py, size_t cols, const QuantParams& pin, float eps,
                                         const double* gs, const double* bs, double lo, double hi) {
  const double off = pin.offset, scale = pin.scale;
  double mean = 0.0;
  for (size_t i = 0; i < cols; ++i) mean += (double(px[i]) + off) * scale;
  mean /= double(cols);
  double var = 0.0;
  for (size_t i = 0; i < cols; ++i) {
    const double d = std::fma(double(px[i]) + off, scale, -mean);
    var = std::fma(d, d, var);
  }
  var /= double(cols);
  const double inv = 1.0 / std::sqrt(var + double(eps));
  for (size_t i = 0; i < cols; ++i) {
    const double q = std::nearbyint(std::fma(double(px[i]) + off, scale, -mean) * inv * gs[i]) + bs[i];
    py[i] = Q(q < lo ? lo : (q > hi ? hi : q));
  }
}

template <typename Q>
class QuantLayerNormKernel final : public Kernel {
 public:
  Status init(const OpView& v, KernelEnv& env, size_t rows, size_t cols, float eps) {
    const TensorInfo& x = *v.inputs[0];
    const TensorInfo& gamma = *v.inputs[1];
    const TensorInfo& beta = *v.inputs[2];
    x_ = x.id;
    out_ = v.outputs[0]->id;
    rows_ = rows;
    cols_ = cols;
    eps_ = eps;
    pin_ = quant_params_of(x);
    pout_ = quant_params_of(*v.outputs[0]);
    table_ = Buffer(env.allocator, 2 * cols * sizeof(double));
    if (!table_.valid()) {
      return v.fail(ErrorKind::MemoryAllocationFailed, "cannot allocate %zu bytes for gamma / beta", table_.size());
    }
    std::vector<float> g(cols), b(cols);
    if (gamma.is_quantized())
      dequantize_static(gamma, g.data());
    else
      std::memcpy(g.data(), gamma.static_data, cols * sizeof(float));
    if (beta.is_quantized())
      dequantize_static(beta, b.data());
    else
      std::memcpy(b.data(), beta.static_data, cols * sizeof(float));
    double* gs = table_.as<double>();
    double* bs = gs + cols;
    for (size_t i = 0; i < cols; ++i) {
      gs[i] = double(g[i]) / double(pout_.scale);
      bs[i] = std::nearbyint(double(b[i]) / double(pout_.scale)) - double(pout_.offset);
    }
    return Status::Ok();
  }

  Status run(const RunContext& c) const override {
    const Q* x = c.at<const Q>(x_);
    Q* y = c.at<Q>(out_);
    const double* gs = table_.as<double>();
    for (size_t r = 0; r < rows_; ++r) {
      quant_layer_norm_row<Q>(x + r * cols_, y + r * cols_, cols_, pin_, eps_, gs, gs + cols_, pout_.qmin, pout_.qmax);
    }
    return Status::Ok();
  }
  size_t owned_bytes() const override { return table_.size(); }

 private:
  uint32_t x_ = 0, out_ = 0;
  size_t rows_ = 0, cols_ = 0;
  float eps_ = 0.f;
  QuantParams pin_, pout_;
  Buffer table_;  // gamma / out_scale, then round(beta / out_scale) - out_offset (double each)
};

}  // namespace

// Quantized LayerNorm as QNN computes it: x and output per-tensor uint8 or uint16 activations
// of one data type, STATIC gamma and beta (quantized or float), the last axes normalized.
// Leaves `out` empty when the op is not of that form (the dispatcher then wraps the float kernel).
Status create_layer_norm_quant(const OpView& v, KernelEnv& env, KernelPtr& out) {
  if (v.inputs.size() != 3 || v.outputs.size() != 1) return Status::Ok();
  const TensorInfo& x = *v.inputs[0];
  const TensorInfo& y = *v.outputs[0];
  const TensorInfo& gamma = *v.inputs[1];
  const TensorInfo& beta = *v.inputs[2];
  const bool u8 = x.dtype == DType::UFIXED_POINT_8, u16 = x.dtype == DType::UFIXED_POINT_16;
  if (!(u8 || u16) || y.dtype != x.dtype || y.dims != x.dims || !is_quant_activation(x) || !is_quant_activation(y) ||
      gamma.kind != TensorKind::STATIC || beta.kind != TensorKind::STATIC) {
    return Status::Ok();
  }
  for (const TensorInfo* t : {&gamma, &beta}) {
    if (!t->is_quantized() && t->dtype != DType::FLOAT_32) return Status::Ok();
  }
  float eps = 0.f;
  size_t cols = 0;
  if (!last_axes(v, x, eps, cols).ok()) return Status::Ok();  // the float kernel reports it
  if (gamma.numel != cols || beta.numel != cols || cols == 0) return Status::Ok();
  const size_t rows = x.numel / cols;
  if (u8) {
    std::unique_ptr<QuantLayerNormKernel<uint8_t>> kernel(new QuantLayerNormKernel<uint8_t>());
    QNN_RETURN_IF_ERROR(kernel->init(v, env, rows, cols, eps));
    out = std::move(kernel);
  } else {
    std::unique_ptr<QuantLayerNormKernel<uint16_t>> kernel(new QuantLayerNormKernel<uint16_t>());
    QNN_RETURN_IF_ERROR(kernel->init(v, env, rows, cols, eps));
    out = std::move(kernel);
  }
  return Status::Ok();
}

QNN_REGISTER_KERNEL(Float, LayerNorm, &create_last_axes_norm<false>);
QNN_REGISTER_KERNEL(Float, RmsNorm, &create_last_axes_norm<true>);

}  // namespace engine
}  // namespace qnn_delegate
