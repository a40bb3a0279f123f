// GridSample (float32; quantized through the dequantize wrapper): x [N, H, W, C] sampled at
// grid [N, OH, OW, 2] = (gx, gy) normalized to [-1, 1], as torch's grid_sample (QNN's op
// definition; the tests compare it with QNN 2.51's HTP). mode 0 bilinear, 1 nearest (round half to
// even, std::nearbyint); padding_mode 0 zeros (taps outside the image read 0), 1 border (the
// source coordinate is clamped to the image), 2 reflection (the coordinate reflected at the image's
// edges, then clamped: torch's reflect_coordinates). The grid is data, so the taps are computed per
// element at run time; nothing is allocated on the execute path.
#include <algorithm>
#include <cmath>

#include "backends/qualcomm/runtime/engine/kernels/KernelUtil.h"

namespace qnn_delegate {
namespace engine {
namespace {

enum class SampleMode : int64_t { kBilinear = 0, kNearest = 1 };
enum class PaddingMode : int64_t { kZeros = 0, kBorder = 1, kReflection = 2 };

struct GridGeometry {
  size_t n, ih, iw, c, oh, ow;
  bool align;
  SampleMode mode;
  PaddingMode padding;
};

// `in` reflected into [twice_low / 2, twice_high / 2] (torch's reflect_coordinates).
float reflect(float in, float twice_low, float twice_high) {
  if (twice_low == twice_high) return 0.f;
  const float low = twice_low * 0.5f, span = (twice_high - twice_low) * 0.5f;
  in = std::fabs(in - low);
  const float extra = std::fmod(in, span);
  const bool even_flips = std::fmod(std::floor(in / span), 2.f) == 0.f;
  return even_flips ? extra + low : span - extra + low;
}

// Pixel coordinate of normalized g along an axis of `size` pixels (torch's unnormalize), then
// clamped to the image for border padding, reflected then clamped for reflection padding.
float source_coordinate(float g, size_t size, bool align, PaddingMode padding) {
  const float s = float(size);
  float src = align ? (g + 1.f) * 0.5f * (s - 1.f) : std::fma(g + 1.f, s, -1.f) * 0.5f;
  if (padding == PaddingMode::kReflection && std::isfinite(src)) {
    src = align ? reflect(src, 0.f, 2.f * (s - 1.f)) : reflect(src, -1.f, 2.f * s - 1.f);
  }
  if (padding != PaddingMode::kZeros) src = std::min(std::max(src, 0.f), s - 1.f);
  return src;
}

class GridSampleKernel final : public Kernel {
 public:
  GridSampleKernel(uint32_t x, uint32_t grid, uint32_t y, const GridGeometry& g) : x_(x), grid_(grid), y_(y), g_(g) {}

  Status run(const RunContext& c) const override {
    const float* x = c.at<const float>(x_);
    const float* grid = c.at<const float>(grid_);
    float* y = c.at<float>(y_);
    for (size_t n = 0; n < g_.n; ++n) {
      const float* image = x + n * g_.ih * g_.iw * g_.c;
      for (size_t p = 0; p < g_.oh * g_.ow; ++p) {
        const float* coords = grid + (n * g_.oh * g_.ow + p) * 2;
        float* out = y + (n * g_.oh * g_.ow + p) * g_.c;
        const float sx = source_coordinate(coords[0], g_.iw, g_.align, g_.padding);
        const float sy = source_coordinate(coords[1], g_.ih, g_.align, g_.padding);
        if (g_.mode == SampleMode::kNearest) {
          sample_nearest(image, sx, sy, out);
        } else {
          sample_bilinear(image, sx, sy, out);
        }
      }
    }
    return Status::Ok();
  }

 private:
  bool inside(long yy, long xx) const { return yy >= 0 && xx >= 0 && yy < long(g_.ih) && xx < long(g_.iw); }

  void sample_nearest(const float* image, float sx, float sy, float* out) const {
    const float fx = std::nearbyint(sx), fy = std::nearbyint(sy);
    const bool ok = std::isfinite(fx) && std::isfinite(fy) && inside(long(fy), long(fx));
    const float* px = ok ? image + (size_t(fy) * g_.iw + size_t(fx)) * g_.c : nullptr;
    for (size_t ch = 0; ch < g_.c; ++ch) out[ch] = px ? px[ch] : 0.f;
  }

  void sample_bilinear(const float* image, float sx, float sy, float* out) const {
    std::fill(out, out + g_.c, 0.f);
    if (!std::isfinite(sx) || !std::isfinite(sy)) return;
    const float x0f = std::floor(sx), y0f = std::floor(sy);
    const float fx = sx - x0f, fy = sy - y0f;
    const long x0 = long(x0f), y0 = long(y0f);
    const float weights[4] = {(1.f - fy) * (1.f - fx), (1.f - fy) * fx, fy * (1.f - fx), fy * fx};
    for (int t = 0; t < 4; ++t) {
      const long yy = y0 + (t >> 1), xx = x0 + (t & 1);
      if (!inside(yy, xx)) continue;
      const float* px = image + (size_t(yy) * g_.iw + size_t(xx)) * g_.c;
      fma_axpy(weights[t], px, out, g_.c);
    }
  }

  uint32_t x_, grid_, y_;
  GridGeometry g_;
};

Status read_modes(const OpView& v, GridGeometry& g) {
  ParamReader params(v);
  int64_t mode = 0, padding = 0;
  bool align = false;
  QNN_RETURN_IF_ERROR(params.optional_bool("align_corners", align));
  if (params.has("mode")) QNN_RETURN_IF_ERROR(params.scalar_int("mode", DType::UINT_32, mode));
  if (params.has("padding_mode")) QNN_RETURN_IF_ERROR(params.scalar_int("padding_mode", DType::UINT_32, padding));
  if (mode < 0 || mode > 1 || padding < 0 || padding > 2) {
    return v.fail(ErrorKind::NotSupported,
                  "only mode bilinear (0) / nearest (1) and padding_mode zeros (0) / border (1) / "
                  "reflection (2) are supported, got mode %lld, padding_mode %lld",
                  static_cast<long long>(mode), static_cast<long long>(padding));
  }
  g.align = align;
  g.mode = SampleMode(mode);
  g.padding = PaddingMode(padding);
  return Status::Ok();
}

Status create_grid_sample(const OpView& v, KernelEnv&, KernelPtr& out) {
  QNN_RETURN_IF_ERROR(v.expect_arity(2, 2, 1));
  const TensorInfo& x = *v.inputs[0];
  const TensorInfo& grid = *v.inputs[1];
  const TensorInfo& y = *v.outputs[0];
  for (const TensorInfo* t : {&x, &grid, &y}) {
    QNN_RETURN_IF_ERROR(v.expect_rank(*t, 4));
    QNN_RETURN_IF_ERROR(v.expect_float(*t));
  }
  if (grid.dims[0] != x.dims[0] || grid.dims[3] != 2) {
    return v.fail(ErrorKind::InvalidProgram, "grid '%s' %s must be [N, OH, OW, 2] for input '%s' %s", grid.name.c_str(),
                  dims_to_string(grid.dims).c_str(), x.name.c_str(), dims_to_string(x.dims).c_str());
  }
  QNN_RETURN_IF_ERROR(v.expect_output(0, {x.dims[0], grid.dims[1], grid.dims[2], x.dims[3]}, x.dtype));
  GridGeometry g{size_t(x.dims[0]),
                 size_t(x.dims[1]),
                 size_t(x.dims[2]),
                 size_t(x.dims[3]),
                 size_t(grid.dims[1]),
                 size_t(grid.dims[2]),
                 false,
                 SampleMode::kBilinear,
                 PaddingMode::kZeros};
  QNN_RETURN_IF_ERROR(read_modes(v, g));
  return emplace_kernel<GridSampleKernel>(out, x.id, grid.id, y.id, g);
}

}  // namespace

QNN_REGISTER_KERNEL(Float, GridSample, &create_grid_sample);

}  // namespace engine
}  // namespace qnn_delegate
