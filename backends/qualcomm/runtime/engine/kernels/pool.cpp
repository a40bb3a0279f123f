// PoolAvg2d and PoolMax2d (NHWC, float32); channel loop innermost.
#include <algorithm>
#include <cmath>

#include "backends/qualcomm/runtime/engine/kernels/KernelUtil.h"

namespace qnn_delegate {
namespace engine {
namespace {

struct PoolGeometry {
  size_t n, h, w, c, kh, kw, sh, sw, pt, pb, pl, pr, oh, ow;
  bool count_pad = false;
};

template <bool kMax>
class PoolKernel final : public Kernel {
 public:
  PoolKernel(const PoolGeometry& g, uint32_t in, uint32_t out) : g_(g), in_(in), out_(out) {}
  Status run(const RunContext& ctx) const override {
    const float* x = ctx.at<const float>(in_);
    float* y = ctx.at<float>(out_);
    const size_t C = g_.c;
    for (size_t n = 0; n < g_.n; ++n)
      for (size_t oy = 0; oy < g_.oh; ++oy)
        for (size_t ox = 0; ox < g_.ow; ++ox) {
          float* o = y + ((n * g_.oh + oy) * g_.ow + ox) * C;
          std::fill(o, o + C, kMax ? -INFINITY : 0.f);
          size_t count = 0;
          for (size_t ky = 0; ky < g_.kh; ++ky) {
            const long iy = long(oy * g_.sh + ky) - long(g_.pt);
            if (iy < 0 || iy >= long(g_.h)) continue;
            for (size_t kx = 0; kx < g_.kw; ++kx) {
              const long ix = long(ox * g_.sw + kx) - long(g_.pl);
              if (ix < 0 || ix >= long(g_.w)) continue;
              const float* px = x + ((n * g_.h + iy) * g_.w + ix) * C;
              ++count;
              if (kMax) {
                for (size_t ch = 0; ch < C; ++ch) o[ch] = std::max(o[ch], px[ch]);
              } else {
                for (size_t ch = 0; ch < C; ++ch) o[ch] += px[ch];
              }
            }
          }
          if (!kMax) {
            const size_t div = g_.count_pad ? g_.kh * g_.kw : std::max<size_t>(count, 1);
            const float inv = 1.f / float(div);
            for (size_t ch = 0; ch < C; ++ch) o[ch] *= inv;
          }
        }
    return Status::Ok();
  }

 private:
  PoolGeometry g_;
  uint32_t in_, out_;
};

template <bool kMax>
Status create_pool(const OpView& v, KernelEnv&, KernelPtr& out) {
  QNN_RETURN_IF_ERROR(v.expect_arity(1, 1, 1));
  const TensorInfo& x = *v.inputs[0];
  QNN_RETURN_IF_ERROR(v.expect_float(x));
  QNN_RETURN_IF_ERROR(v.expect_rank(x, 4));
  ParamReader params(v);
  std::vector<int64_t> filter, stride, pad;
  QNN_RETURN_IF_ERROR(params.tensor_int("filter_size", DType::UINT_32, {2}, filter));
  QNN_RETURN_IF_ERROR(params.tensor_int("stride", DType::UINT_32, {2}, stride));
  QNN_RETURN_IF_ERROR(params.tensor_int("pad_amount", DType::UINT_32, {2, 2}, pad));
  PoolGeometry g;
  if (!kMax) QNN_RETURN_IF_ERROR(params.optional_bool("count_pad_for_edges", g.count_pad));
  g.n = x.dims[0]; g.h = x.dims[1]; g.w = x.dims[2]; g.c = x.dims[3];
  g.kh = filter[0]; g.kw = filter[1]; g.sh = stride[0]; g.sw = stride[1];
  g.pt = pad[0]; g.pb = pad[1]; g.pl = pad[2]; g.pr = pad[3];
  if (g.kh == 0 || g.kw == 0 || g.sh == 0 || g.sw == 0 || g.h + g.pt + g.pb < g.kh ||
      g.w + g.pl + g.pr < g.kw) {
    return v.fail(ErrorKind::InvalidProgram, "filter %zux%zu / stride %zux%zu do not fit input '%s' %s",
                  g.kh, g.kw, g.sh, g.sw, x.name.c_str(), dims_to_string(x.dims).c_str());
  }
  g.oh = (g.h + g.pt + g.pb - g.kh) / g.sh + 1;
  g.ow = (g.w + g.pl + g.pr - g.kw) / g.sw + 1;
  QNN_RETURN_IF_ERROR(v.expect_output(0, {uint32_t(g.n), uint32_t(g.oh), uint32_t(g.ow), uint32_t(g.c)},
                                      DType::FLOAT_32));
  return emplace_kernel<PoolKernel<kMax>>(out, g, x.id, v.outputs[0]->id);
}

} // namespace

QNN_REGISTER_KERNEL(Float, PoolAvg2d, &create_pool<false>);
QNN_REGISTER_KERNEL(Float, PoolMax2d, &create_pool<true>);

} // namespace engine
} // namespace qnn_delegate
