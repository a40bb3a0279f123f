// Conv2d and DepthWiseConv2d (NHWC). Reference: direct loops (the oracle).
// Fast: Conv2d as GEMM on pre-packed weights (1x1 directly, otherwise
// im2col by tiles of output pixels in scratch); depthwise direct NHWC with
// the channel loop innermost.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "backends/qualcomm/runtime/engine/DataType.h"
#include "backends/qualcomm/runtime/engine/ThreadPool.h"
#include "backends/qualcomm/runtime/engine/kernels/ConvGeometry.h"
#include "backends/qualcomm/runtime/engine/kernels/Gemm.h"
#include "backends/qualcomm/runtime/engine/kernels/KernelUtil.h"

#ifdef QNN_X86
#include <immintrin.h>
#endif

namespace qnn_delegate {
namespace engine {
namespace {

constexpr size_t kIm2colTile = 64;  // output pixels per im2col tile

// ---- reference ------------------------------------------------------------
// mult: output channels per input channel for depthwise (0 = grouped conv).
void conv_reference(const ConvGeometry& g, size_t mult, const float* x, const float* w, const float* b, float* out) {
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
              acc = dot_tail_fused<2>(acc, px, 1, pw, g.cout, cin_g);
            }
          }
          out[((n * g.oh + oy) * g.ow + ox) * g.cout + co] = acc;
        }
}

class ConvReferenceKernel final : public Kernel {
 public:
  ConvReferenceKernel(const ConvGeometry& g, const ConvIds& ids, size_t mult, FloatActivation act)
      : g_(g), ids_(ids), mult_(mult), act_(act) {}
  Status run(const RunContext& c) const override {
    float* out = c.at<float>(ids_.out);
    conv_reference(g_, mult_, c.at<const float>(ids_.x), c.at<const float>(ids_.w), c.at<const float>(ids_.b), out);
    if (act_.kind != FloatActivation::None) {
      for (size_t i = 0, n = g_.n * g_.oh * g_.ow * g_.cout; i < n; ++i) out[i] = act_.apply(out[i]);
    }
    return Status::Ok();
  }

 private:
  ConvGeometry g_;
  ConvIds ids_;
  size_t mult_;
  FloatActivation act_;  // fused Relu / ReluMinMax (ActivationFusion.h)
};

// ---- fast conv: GEMM on packed weights --------------------------------------
class ConvGemmKernel final : public Kernel {
 public:
  ConvGemmKernel(const ConvGeometry& g, const ConvIds& ids, const float* w, TrackingAllocator* a,
                 const GemmEpilogue& ep)
      : g_(g), ids_(ids), path_(gemm_path()), ep_(ep) {
    k_ = g.kh * g.kw * g.cin_g();
    pointwise_ = g.kh == 1 && g.kw == 1 && g.sh == 1 && g.sw == 1 && g.group == 1 && g.pt + g.pb + g.pl + g.pr == 0;
    group_floats_ = packed_b_floats(path_, k_, g.cout_g());
    packed_ = Buffer(a, group_floats_ * g.group * sizeof(float));
    if (!packed_.valid()) return;
    for (size_t grp = 0; grp < g.group; ++grp) {
      pack_b_kn(path_, w + grp * g.cout_g(), k_, g.cout_g(), g.cout, packed_.as<float>() + grp * group_floats_);
    }
  }
  bool valid() const { return packed_.valid(); }
  const char* path() const override { return gemm_path_name(path_); }
  // im2col: one tile per pool thread.
  size_t scratch_bytes() const override { return pointwise_ ? 0 : slots_ * tile_bytes(); }
  size_t owned_bytes() const override { return packed_.size(); }
  bool rounds_fp16_outputs() const override { return ep_.round_half; }

  Status run(const RunContext& c) const override {
    const float* x = c.at<const float>(ids_.x);
    const float* b = c.at<const float>(ids_.b);
    float* out = c.at<float>(ids_.out);
    if (pointwise_) {
      gemm_packed(path_, x, g_.cin, packed_.as<float>(), b, out, g_.cout, g_.n * g_.h * g_.w, g_.cout, g_.cin, ep_);
      return Status::Ok();
    }
    const size_t pixels = g_.n * g_.oh * g_.ow;
    const size_t S = pixels * g_.cout * k_ < kMinParallelIm2colMacs ? 1 : slots_;
    Im2colJob job{this, x, b, out, static_cast<char*>(c.scratch), S};
    if (S == 1) {
      im2col_slots(&job, 0, 1);
    } else {
      ThreadPool::instance().parallel_for(S, &im2col_slots, &job);
    }
    return Status::Ok();
  }

 private:
  ConvGeometry g_;
  ConvIds ids_;
  static constexpr size_t kMinParallelIm2colMacs = size_t(1) << 20;
  struct Im2colJob {
    const ConvGemmKernel* k;
    const float* x;
    const float* b;
    float* out;
    char* scratch;
    size_t S;  // slots the pixels are split into
  };
  size_t tile_bytes() const { return (kIm2colTile * k_ * sizeof(float) + 63) & ~size_t(63); }

  // Slots [begin, end) of j.S: slot s takes pixels [P s / S, P (s + 1) / S) in im2col tiles,
  // its own tile of scratch.
  static void im2col_slots(void* ctx, size_t begin, size_t end) {
    const Im2colJob& j = *static_cast<const Im2colJob*>(ctx);
    const ConvGemmKernel& k = *j.k;
    const ConvGeometry& g = k.g_;
    const size_t pixels = g.n * g.oh * g.ow, S = j.S;
    for (size_t s = begin; s < end; ++s) {
      float* cols = reinterpret_cast<float*>(j.scratch + s * k.tile_bytes());
      const size_t p_end = pixels * (s + 1) / S;
      for (size_t p0 = pixels * s / S; p0 < p_end; p0 += kIm2colTile) {
        const size_t np = std::min(kIm2colTile, p_end - p0);
        for (size_t grp = 0; grp < g.group; ++grp) {
          im2col_rows(g, k.k_, j.x, p0, np, grp, 0.0f, cols);
          gemm_packed(k.path_, cols, k.k_, k.packed_.as<float>() + grp * k.group_floats_, j.b + grp * g.cout_g(),
                      j.out + p0 * g.cout + grp * g.cout_g(), g.cout, np, g.cout_g(), k.k_, k.ep_);
        }
      }
    }
  }

  GemmPath path_;
  size_t k_ = 0, group_floats_ = 0;
  size_t slots_ = ThreadPool::instance().max_threads();
  bool pointwise_ = false;
  GemmEpilogue ep_;  // fused activation, fp16 rounding
  Buffer packed_;
};

// ---- fast depthwise (multiplier 1) ------------------------------------------
// Output rows split over the pool. Each output is b, then fma(x, w, acc) per tap in (ky, kx)
// order. Blocked path (AVX2 + FMA, Simd.h): per pixel the channels go in blocks of 32 held in
// ymm registers across the taps; plain path: the channel loop per tap. Same bits.
constexpr size_t kDwMaxTapsF = 64;

class DepthwiseKernel final : public Kernel {
 public:
  DepthwiseKernel(const ConvGeometry& g, const ConvIds& ids, FloatActivation act, bool round_half)
      : g_(g),
        ids_(ids),
        act_(act),
        round_(round_half),
        blocked_(g.kh * g.kw <= kDwMaxTapsF && simd_level() >= SimdLevel::Avx2) {}
  const char* path() const override { return blocked_ ? "blocked" : "plain"; }
  bool rounds_fp16_outputs() const override { return round_; }
  Status run(const RunContext& c) const override {
    Job job{this, c.at<const float>(ids_.x), c.at<const float>(ids_.w), c.at<const float>(ids_.b),
            c.at<float>(ids_.out)};
    const size_t rows = g_.n * g_.oh;
    if (rows * g_.ow * g_.cout * g_.kh * g_.kw < kMinParallelDwMacs) {
      run_rows(&job, 0, rows);
    } else {
      ThreadPool::instance().parallel_for(rows, &run_rows, &job);
    }
    return Status::Ok();
  }

 private:
  static constexpr size_t kMinParallelDwMacs = size_t(1) << 16;
  struct Job {
    const DepthwiseKernel* k;
    const float *x, *w, *b;
    float* out;
  };

  static void run_rows(void* ctx, size_t begin, size_t end) {
    const Job& j = *static_cast<const Job*>(ctx);
    const ConvGeometry& g = j.k->g_;
    for (size_t r = begin; r < end; ++r) {
      const size_t n = r / g.oh, oy = r % g.oh;
      for (size_t ox = 0; ox < g.ow; ++ox) {
        float* o = j.out + ((n * g.oh + oy) * g.ow + ox) * g.cout;
        if (j.k->blocked_) {
          j.k->pixel_blocked(j.x, j.w, j.b, n, oy, ox, o);
        } else {
          j.k->pixel_plain(j.x, j.w, j.b, n, oy, ox, o);
        }
      }
    }
  }

  // Input pixel of tap (ky, kx) for output (oy, ox), nullptr outside the input.
  const float* tap_pixel(const float* x, size_t n, size_t oy, size_t ox, size_t ky, size_t kx) const {
    const long iy = long(oy * g_.sh + ky * g_.dh) - long(g_.pt);
    const long ix = long(ox * g_.sw + kx * g_.dw) - long(g_.pl);
    if (iy < 0 || iy >= long(g_.h) || ix < 0 || ix >= long(g_.w)) return nullptr;
    return x + ((n * g_.h + iy) * g_.w + ix) * g_.cin;
  }

  void pixel_plain(const float* x, const float* w, const float* b, size_t n, size_t oy, size_t ox, float* o) const {
    const size_t C = g_.cout;
    std::memcpy(o, b, C * sizeof(float));
    for (size_t ky = 0; ky < g_.kh; ++ky)
      for (size_t kx = 0; kx < g_.kw; ++kx) {
        const float* px = tap_pixel(x, n, oy, ox, ky, kx);
        if (px == nullptr) continue;
        const float* pw = w + (ky * g_.kw + kx) * C;
        for (size_t ch = 0; ch < C; ++ch) o[ch] = std::fma(px[ch], pw[ch], o[ch]);
      }
    if (act_.kind != FloatActivation::None) {
      for (size_t ch = 0; ch < C; ++ch) o[ch] = act_.apply(o[ch]);
    }
    if (round_) round_to_half_inplace(o, C);
  }

#ifdef QNN_X86
  QNN_TARGET_AVX2 void pixel_blocked(const float* x, const float* w, const float* b, size_t n, size_t oy, size_t ox,
                                     float* o) const {
    const size_t C = g_.cout;
    const float* px[kDwMaxTapsF];
    const float* pw[kDwMaxTapsF];
    size_t taps = 0;
    for (size_t ky = 0; ky < g_.kh; ++ky)
      for (size_t kx = 0; kx < g_.kw; ++kx) {
        const float* p = tap_pixel(x, n, oy, ox, ky, kx);
        if (p == nullptr) continue;
        px[taps] = p;
        pw[taps++] = w + (ky * g_.kw + kx) * C;
      }
    size_t c0 = 0;
    for (; c0 + 32 <= C; c0 += 32) {
      __m256 a0 = _mm256_loadu_ps(b + c0), a1 = _mm256_loadu_ps(b + c0 + 8);
      __m256 a2 = _mm256_loadu_ps(b + c0 + 16), a3 = _mm256_loadu_ps(b + c0 + 24);
      for (size_t t = 0; t < taps; ++t) {
        const float* xp = px[t] + c0;
        const float* wp = pw[t] + c0;
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(xp), _mm256_loadu_ps(wp), a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(xp + 8), _mm256_loadu_ps(wp + 8), a1);
        a2 = _mm256_fmadd_ps(_mm256_loadu_ps(xp + 16), _mm256_loadu_ps(wp + 16), a2);
        a3 = _mm256_fmadd_ps(_mm256_loadu_ps(xp + 24), _mm256_loadu_ps(wp + 24), a3);
      }
      _mm256_storeu_ps(o + c0, finish(a0));
      _mm256_storeu_ps(o + c0 + 8, finish(a1));
      _mm256_storeu_ps(o + c0 + 16, finish(a2));
      _mm256_storeu_ps(o + c0 + 24, finish(a3));
    }
    for (; c0 + 8 <= C; c0 += 8) {
      __m256 acc = _mm256_loadu_ps(b + c0);
      for (size_t t = 0; t < taps; ++t)
        acc = _mm256_fmadd_ps(_mm256_loadu_ps(px[t] + c0), _mm256_loadu_ps(pw[t] + c0), acc);
      _mm256_storeu_ps(o + c0, finish(acc));
    }
    for (size_t ch = c0; ch < C; ++ch) {
      float acc = b[ch];
      for (size_t t = 0; t < taps; ++t) acc = std::fma(px[t][ch], pw[t][ch], acc);
      acc = act_.apply(acc);
      o[ch] = round_ ? round_to_half(acc) : acc;
    }
  }

  // The fused activation (as FloatActivation::apply: ordered compares, so NaN stays NaN for
  // ReluMinMax and becomes 0 for Relu), then round_to_half when the kernel rounds its outputs.
  QNN_TARGET_AVX2 __m256 finish(__m256 v) const {
    if (act_.kind == FloatActivation::Relu) {
      v = _mm256_and_ps(_mm256_cmp_ps(v, _mm256_setzero_ps(), _CMP_GT_OQ), v);
    } else if (act_.kind == FloatActivation::ReluMinMax) {
      const __m256 lo = _mm256_set1_ps(act_.lo), hi = _mm256_set1_ps(act_.hi);
      const __m256 below = _mm256_cmp_ps(v, lo, _CMP_LT_OQ), above = _mm256_cmp_ps(v, hi, _CMP_GT_OQ);
      v = _mm256_blendv_ps(_mm256_blendv_ps(v, hi, above), lo, below);
    }
    return round_ ? _mm256_cvtph_ps(_mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT)) : v;
  }
#else
  void pixel_blocked(const float* x, const float* w, const float* b, size_t n, size_t oy, size_t ox, float* o) const {
    pixel_plain(x, w, b, n, oy, ox, o);
  }
#endif

  ConvGeometry g_;
  ConvIds ids_;
  FloatActivation act_;  // fused Relu / ReluMinMax (ActivationFusion.h)
  bool round_ = false;   // fp16: outputs rounded as they are stored
  bool blocked_ = false;
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
  const FloatActivation act = v.outputs[0]->fused_act;
  if (env.reference_only || w.static_data == nullptr) {
    return emplace_kernel<ConvReferenceKernel>(out, g, ids, 0, act);
  }
  GemmEpilogue ep;
  ep.act = act;
  ep.round_half = env.round_fp16_outputs;
  auto* k = new ConvGemmKernel(g, ids, static_cast<const float*>(w.static_data), env.allocator, ep);
  out.reset(k);
  if (!k->valid()) return v.fail(ErrorKind::MemoryAllocationFailed, "cannot allocate packed weights");
  return Status::Ok();
}

Status create_depthwise(const OpView& v, KernelEnv& env, KernelPtr& out) {
  ConvGeometry g;
  ConvIds ids;
  QNN_RETURN_IF_ERROR(make_geometry(v, true, g, ids));
  const size_t mult = g.cout / g.cin;
  const FloatActivation act = v.outputs[0]->fused_act;
  if (env.reference_only || mult != 1) return emplace_kernel<ConvReferenceKernel>(out, g, ids, mult, act);
  return emplace_kernel<DepthwiseKernel>(out, g, ids, act, env.round_fp16_outputs);
}

}  // namespace

QNN_REGISTER_KERNEL(Float, Conv2d, &create_conv2d);
QNN_REGISTER_KERNEL(Float, DepthWiseConv2d, &create_depthwise);

}  // namespace engine
}  // namespace qnn_delegate
