// Conv2d and DepthWiseConv2d (NHWC). Reference: direct loops (the oracle).
// Fast: Conv2d as GEMM on pre-packed weights (1x1 directly, otherwise
// im2col by tiles of output pixels in scratch); depthwise direct NHWC with
// the channel loop innermost.
#include <algorithm>
#include <cstring>

#include "backends/qualcomm/runtime/engine/kernels/ConvGeometry.h"
#include "backends/qualcomm/runtime/engine/kernels/Gemm.h"
#include "backends/qualcomm/runtime/engine/kernels/KernelUtil.h"

namespace qnn_delegate {
namespace engine {
namespace {

constexpr size_t kIm2colTile = 64;  // output pixels per im2col tile

// ---- reference ------------------------------------------------------------
// mult: output channels per input channel for depthwise (0 = grouped conv).
void conv_reference(const ConvGeometry& g, size_t mult, const float* x, const float* w,
                    const float* b, float* out) {
  const size_t cin_g = mult ? 1 : g.cin_g();
  const size_t cout_g = mult ? mult : g.cout_g();
  for (size_t n = 0; n < g.n; ++n)
    for (size_t oy = 0; oy < g.oh; ++oy)
      for (size_t ox = 0; ox < g.ow; ++ox)
        for (size_t co = 0; co < g.cout; ++co) {
          const size_t grp = co / cout_g;
          float acc = b[co];
          for (size_t ky = 0; ky < g.kh; ++ky) {
            const long iy = long(oy * g.sh + ky * g.dh) - long(g.pt);
            if (iy < 0 || iy >= long(g.h)) continue;
            for (size_t kx = 0; kx < g.kw; ++kx) {
              const long ix = long(ox * g.sw + kx * g.dw) - long(g.pl);
              if (ix < 0 || ix >= long(g.w)) continue;
              const float* px = x + ((n * g.h + iy) * g.w + ix) * g.cin + grp * cin_g;
              const float* pw = w + (ky * g.kw + kx) * cin_g * g.cout + co;
              for (size_t ci = 0; ci < cin_g; ++ci) acc += px[ci] * pw[ci * g.cout];
            }
          }
          out[((n * g.oh + oy) * g.ow + ox) * g.cout + co] = acc;
        }
}

class ConvReferenceKernel final : public Kernel {
 public:
  ConvReferenceKernel(const ConvGeometry& g, const ConvIds& ids, size_t mult)
      : g_(g), ids_(ids), mult_(mult) {}
  Status run(const RunContext& c) const override {
    conv_reference(g_, mult_, c.at<const float>(ids_.x), c.at<const float>(ids_.w),
                   c.at<const float>(ids_.b), c.at<float>(ids_.out));
    return Status::Ok();
  }

 private:
  ConvGeometry g_;
  ConvIds ids_;
  size_t mult_;
};

// ---- fast conv: GEMM on packed weights --------------------------------------
class ConvGemmKernel final : public Kernel {
 public:
  ConvGemmKernel(const ConvGeometry& g, const ConvIds& ids, const float* w, TrackingAllocator* a)
      : g_(g), ids_(ids) {
    k_ = g.kh * g.kw * g.cin_g();
    pointwise_ = g.kh == 1 && g.kw == 1 && g.sh == 1 && g.sw == 1 && g.group == 1 &&
                 g.pt + g.pb + g.pl + g.pr == 0;
    group_floats_ = packed_b_floats(k_, g.cout_g());
    packed_ = Buffer(a, group_floats_ * g.group * sizeof(float));
    if (!packed_.valid()) return;
    for (size_t grp = 0; grp < g.group; ++grp) {
      pack_b_kn(w + grp * g.cout_g(), k_, g.cout_g(), g.cout, packed_.as<float>() + grp * group_floats_);
    }
  }
  bool valid() const { return packed_.valid(); }
  size_t scratch_bytes() const override { return pointwise_ ? 0 : kIm2colTile * k_ * sizeof(float); }
  size_t owned_bytes() const override { return packed_.size(); }

  Status run(const RunContext& c) const override {
    const float* x = c.at<const float>(ids_.x);
    const float* b = c.at<const float>(ids_.b);
    float* out = c.at<float>(ids_.out);
    if (pointwise_) {
      gemm_packed(x, g_.cin, packed_.as<float>(), b, out, g_.cout, g_.n * g_.h * g_.w, g_.cout, g_.cin);
      return Status::Ok();
    }
    float* cols = static_cast<float*>(c.scratch);
    const size_t pixels = g_.n * g_.oh * g_.ow;
    for (size_t p0 = 0; p0 < pixels; p0 += kIm2colTile) {
      const size_t np = std::min(kIm2colTile, pixels - p0);
      for (size_t grp = 0; grp < g_.group; ++grp) {
        im2col_rows(g_, k_, x, p0, np, grp, 0.0f, cols);
        gemm_packed(cols, k_, packed_.as<float>() + grp * group_floats_, b + grp * g_.cout_g(),
                    out + p0 * g_.cout + grp * g_.cout_g(), g_.cout, np, g_.cout_g(), k_);
      }
    }
    return Status::Ok();
  }

 private:
  ConvGeometry g_;
  ConvIds ids_;
  size_t k_ = 0, group_floats_ = 0;
  bool pointwise_ = false;
  Buffer packed_;
};

// ---- fast depthwise (multiplier 1): channel loop innermost -----------------
class DepthwiseKernel final : public Kernel {
 public:
  DepthwiseKernel(const ConvGeometry& g, const ConvIds& ids) : g_(g), ids_(ids) {}
  Status run(const RunContext& c) const override {
    const float* x = c.at<const float>(ids_.x);
    const float* w = c.at<const float>(ids_.w);
    const float* b = c.at<const float>(ids_.b);
    float* out = c.at<float>(ids_.out);
    const size_t C = g_.cout;
    for (size_t n = 0; n < g_.n; ++n)
      for (size_t oy = 0; oy < g_.oh; ++oy)
        for (size_t ox = 0; ox < g_.ow; ++ox) {
          float* o = out + ((n * g_.oh + oy) * g_.ow + ox) * C;
          std::memcpy(o, b, C * sizeof(float));
          for (size_t ky = 0; ky < g_.kh; ++ky) {
            const long iy = long(oy * g_.sh + ky * g_.dh) - long(g_.pt);
            if (iy < 0 || iy >= long(g_.h)) continue;
            for (size_t kx = 0; kx < g_.kw; ++kx) {
              const long ix = long(ox * g_.sw + kx * g_.dw) - long(g_.pl);
              if (ix < 0 || ix >= long(g_.w)) continue;
              const float* px = x + ((n * g_.h + iy) * g_.w + ix) * C;
              const float* pw = w + (ky * g_.kw + kx) * C;
              for (size_t ch = 0; ch < C; ++ch) o[ch] += px[ch] * pw[ch];
            }
          }
        }
    return Status::Ok();
  }

 private:
  ConvGeometry g_;
  ConvIds ids_;
};

// ---- create ---------------------------------------------------------------
Status make_geometry(const OpView& v, bool depthwise, ConvGeometry& g, ConvIds& ids) {
  QNN_RETURN_IF_ERROR(v.expect_arity(3, 3, 1));
  for (const TensorInfo* t : v.inputs) QNN_RETURN_IF_ERROR(v.expect_float(*t));
  return conv_geometry(v, depthwise, DType::FLOAT_32, g, ids);
}

Status create_conv2d(const OpView& v, KernelEnv& env, KernelPtr& out) {
  ConvGeometry g;
  ConvIds ids;
  QNN_RETURN_IF_ERROR(make_geometry(v, false, g, ids));
  const TensorInfo& w = *v.inputs[1];
  if (env.reference_only || w.static_data == nullptr) {
    return emplace_kernel<ConvReferenceKernel>(out, g, ids, 0);
  }
  auto* k = new ConvGemmKernel(g, ids, static_cast<const float*>(w.static_data), env.allocator);
  out.reset(k);
  if (!k->valid()) return v.fail(ErrorKind::MemoryAllocationFailed, "cannot allocate packed weights");
  return Status::Ok();
}

Status create_depthwise(const OpView& v, KernelEnv& env, KernelPtr& out) {
  ConvGeometry g;
  ConvIds ids;
  QNN_RETURN_IF_ERROR(make_geometry(v, true, g, ids));
  const size_t mult = g.cout / g.cin;
  if (env.reference_only || mult != 1) return emplace_kernel<ConvReferenceKernel>(out, g, ids, mult);
  return emplace_kernel<DepthwiseKernel>(out, g, ids);
}

} // namespace

QNN_REGISTER_KERNEL(Float, Conv2d, &create_conv2d);
QNN_REGISTER_KERNEL(Float, DepthWiseConv2d, &create_depthwise);

} // namespace engine
} // namespace qnn_delegate
