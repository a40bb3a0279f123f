// Geometry of Conv2d / DepthWiseConv2d (NHWC x, HWIO w), shared by the float
// and integer conv kernels: params, shape checks and output shape inference.
#pragma once

#include <algorithm>
#include <cstring>

#include "backends/qualcomm/runtime/engine/kernels/KernelUtil.h"

namespace qnn_delegate {
namespace engine {

struct ConvGeometry {
  size_t n, h, w, cin, kh, kw, cout, oh, ow, group;
  size_t sh, sw, dh, dw, pt, pb, pl, pr;
  size_t cin_g() const { return cin / group; }
  size_t cout_g() const { return cout / group; }
};

struct ConvIds {
  uint32_t x, w, b, out;
};

// Reads params and checks x / w / b dims (not dtypes); checks the output dims
// and that its dtype is `out_dtype`. `depthwise` fixes w dim 2 to 1.
Status conv_geometry(const OpView& v, bool depthwise, DType out_dtype, ConvGeometry& g, ConvIds& ids);

// im2col of output pixels p0..p0+np for group `grp`: row r holds the (ky, kx, ci)
// patch of pixel p0+r (row stride `k`); taps outside the input read `pad`
// (0 for float, the input zero point for quantized inputs).
template <typename T>
void im2col_rows(const ConvGeometry& g, size_t k, const T* x, size_t p0, size_t np, size_t grp, T pad, T* cols) {
  const size_t cin_g = g.cin_g();
  for (size_t r = 0; r < np; ++r) {
    const size_t p = p0 + r;
    const size_t ox = p % g.ow, oy = (p / g.ow) % g.oh, n = p / (g.ow * g.oh);
    T* row = cols + r * k;
    for (size_t ky = 0; ky < g.kh; ++ky) {
      const long iy = long(oy * g.sh + ky * g.dh) - long(g.pt);
      for (size_t kx = 0; kx < g.kw; ++kx) {
        const long ix = long(ox * g.sw + kx * g.dw) - long(g.pl);
        T* dst = row + (ky * g.kw + kx) * cin_g;
        if (iy < 0 || iy >= long(g.h) || ix < 0 || ix >= long(g.w)) {
          std::fill(dst, dst + cin_g, pad);
        } else {
          std::memcpy(dst, x + ((n * g.h + iy) * g.w + ix) * g.cin + grp * cin_g, cin_g * sizeof(T));
        }
      }
    }
  }
}

}  // namespace engine
}  // namespace qnn_delegate
