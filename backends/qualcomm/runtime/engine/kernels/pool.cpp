// PoolAvg2d / PoolMax2d (NHWC) and PoolAvg3d (NDHWC), float32; a 2-D pool is a
// 3-D one with a unit depth. Channel loop innermost. Max propagates NaN (as torch does).
#include <algorithm>
#include <cmath>

#include "backends/qualcomm/runtime/engine/kernels/KernelUtil.h"

namespace qnn_delegate {
namespace engine {
namespace {

constexpr int kMaxSpatial = 3;

struct PoolGeometry {
  size_t n = 1, c = 1;
  size_t in[kMaxSpatial] = {1, 1, 1};  // d, h, w
  size_t out[kMaxSpatial] = {1, 1, 1};
  size_t k[kMaxSpatial] = {1, 1, 1};
  size_t s[kMaxSpatial] = {1, 1, 1};
  size_t before[kMaxSpatial] = {0, 0, 0};
  size_t after[kMaxSpatial] = {0, 0, 0};
  bool count_pad = false;
};

inline float max_nan(float a, float b) { return (std::isnan(a) || a >= b) ? a : b; }

template <bool kMax>
class PoolKernel final : public Kernel {
 public:
  PoolKernel(const PoolGeometry& g, uint32_t in, uint32_t out) : g_(g), in_(in), out_(out) {}

  Status run(const RunContext& ctx) const override {
    const float* x = ctx.at<const float>(in_);
    float* y = ctx.at<float>(out_);
    for (size_t n = 0; n < g_.n; ++n)
      for (size_t od = 0; od < g_.out[0]; ++od)
        for (size_t oh = 0; oh < g_.out[1]; ++oh)
          for (size_t ow = 0; ow < g_.out[2]; ++ow) {
            float* o = y + (((n * g_.out[0] + od) * g_.out[1] + oh) * g_.out[2] + ow) * g_.c;
            window(x, n, {od, oh, ow}, o);
          }
    return Status::Ok();
  }

 private:
  struct Pos {
    size_t d, h, w;
  };

  void window(const float* x, size_t n, Pos o, float* y) const {
    const size_t C = g_.c;
    std::fill(y, y + C, kMax ? -INFINITY : 0.f);
    const long start[3] = {long(o.d * g_.s[0]) - long(g_.before[0]), long(o.h * g_.s[1]) - long(g_.before[1]),
                           long(o.w * g_.s[2]) - long(g_.before[2])};
    size_t count = 0;
    for (long iz = std::max(start[0], 0L); iz < std::min(start[0] + long(g_.k[0]), long(g_.in[0])); ++iz)
      for (long iy = std::max(start[1], 0L); iy < std::min(start[1] + long(g_.k[1]), long(g_.in[1])); ++iy)
        for (long ix = std::max(start[2], 0L); ix < std::min(start[2] + long(g_.k[2]), long(g_.in[2])); ++ix) {
          const float* px = x + (((n * g_.in[0] + iz) * g_.in[1] + iy) * g_.in[2] + ix) * C;
          ++count;
          if (kMax) {
            for (size_t ch = 0; ch < C; ++ch) y[ch] = max_nan(y[ch], px[ch]);
          } else {
            for (size_t ch = 0; ch < C; ++ch) y[ch] += px[ch];
          }
        }
    if (kMax) return;
    const size_t div = g_.count_pad ? g_.k[0] * g_.k[1] * g_.k[2] : std::max<size_t>(count, 1);
    const float inv = 1.f / float(div);
    for (size_t ch = 0; ch < C; ++ch) y[ch] *= inv;
  }

  PoolGeometry g_;
  uint32_t in_, out_;
};

// Reads filter_size / stride / pad_amount of a `spatial`-D pool into g (2-D: unit depth).
Status read_window(const OpView& v, const TensorInfo& x, size_t spatial, PoolGeometry& g) {
  ParamReader params(v);
  std::vector<int64_t> filter, stride, pad;
  const uint32_t sp = uint32_t(spatial);
  QNN_RETURN_IF_ERROR(params.tensor_int("filter_size", DType::UINT_32, {sp}, filter));
  QNN_RETURN_IF_ERROR(params.tensor_int("stride", DType::UINT_32, {sp}, stride));
  QNN_RETURN_IF_ERROR(params.tensor_int("pad_amount", DType::UINT_32, {sp, 2}, pad));
  const size_t first = kMaxSpatial - spatial;
  g.n = x.dims[0];
  g.c = x.dims[spatial + 1];
  for (size_t i = 0; i < spatial; ++i) {
    const size_t a = first + i;
    g.in[a] = x.dims[1 + i];
    g.k[a] = size_t(filter[i]);
    g.s[a] = size_t(stride[i]);
    g.before[a] = size_t(pad[2 * i]);
    g.after[a] = size_t(pad[2 * i + 1]);
    if (g.k[a] == 0 || g.s[a] == 0 || g.in[a] + g.before[a] + g.after[a] < g.k[a]) {
      return v.fail(ErrorKind::InvalidProgram,
                    "filter %zu / stride %zu / padding %zu+%zu do not fit axis %zu of '%s' %s", g.k[a], g.s[a],
                    g.before[a], g.after[a], i + 1, x.name.c_str(), dims_to_string(x.dims).c_str());
    }
    g.out[a] = (g.in[a] + g.before[a] + g.after[a] - g.k[a]) / g.s[a] + 1;
  }
  return Status::Ok();
}

template <bool kMax, size_t kSpatial>
Status create_pool(const OpView& v, KernelEnv&, KernelPtr& out) {
  QNN_RETURN_IF_ERROR(v.expect_arity(1, 1, 1));
  const TensorInfo& x = *v.inputs[0];
  QNN_RETURN_IF_ERROR(v.expect_float(x));
  QNN_RETURN_IF_ERROR(v.expect_rank(x, uint32_t(kSpatial + 2)));
  PoolGeometry g;
  QNN_RETURN_IF_ERROR(read_window(v, x, kSpatial, g));
  if (!kMax) {
    ParamReader params(v);
    QNN_RETURN_IF_ERROR(params.optional_bool("count_pad_for_edges", g.count_pad));
  }
  Dims expected{uint32_t(g.n)};
  for (size_t a = kMaxSpatial - kSpatial; a < kMaxSpatial; ++a) expected.push_back(uint32_t(g.out[a]));
  expected.push_back(uint32_t(g.c));
  QNN_RETURN_IF_ERROR(v.expect_output(0, expected, DType::FLOAT_32));
  return emplace_kernel<PoolKernel<kMax>>(out, g, x.id, v.outputs[0]->id);
}

}  // namespace

QNN_REGISTER_KERNEL(Float, PoolAvg2d, (&create_pool<false, 2>));
QNN_REGISTER_KERNEL(Float, PoolMax2d, (&create_pool<true, 2>));
QNN_REGISTER_KERNEL(Float, PoolAvg3d, (&create_pool<false, 3>));

}  // namespace engine
}  // namespace qnn_delegate
