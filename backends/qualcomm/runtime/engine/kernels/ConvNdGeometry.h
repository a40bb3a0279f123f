// Geometry of Conv3d / TransposeConv2d / TransposeConv3d (channel-last x, QNN's
// weight layouts), shared by the float (conv_nd.cpp) and integer (conv_nd_quant.cpp)
// kernels: params, shape checks, output shape, and which input pixel a tap reads.
#pragma once

#include "backends/qualcomm/runtime/engine/kernels/KernelUtil.h"

namespace qnn_delegate {
namespace engine {

constexpr size_t kMaxSpatial = 3;

// Spatial axes are depth, height, width; a 2-D op has depth 1 (k 1, stride 1, pads 0).
struct NdGeometry {
  size_t n = 0, cin = 0, cout = 0, group = 1;
  size_t in[kMaxSpatial] = {1, 1, 1}, k[kMaxSpatial] = {1, 1, 1}, out[kMaxSpatial] = {1, 1, 1};
  size_t stride[kMaxSpatial] = {1, 1, 1}, dilation[kMaxSpatial] = {1, 1, 1};
  size_t pad_lo[kMaxSpatial] = {0, 0, 0}, pad_hi[kMaxSpatial] = {0, 0, 0};
  size_t out_pad[kMaxSpatial] = {0, 0, 0};
  size_t cin_g() const { return cin / group; }
  size_t cout_g() const { return cout / group; }
  size_t taps() const { return k[0] * k[1] * k[2]; }
  size_t in_pixels() const { return in[0] * in[1] * in[2]; }
  size_t out_pixels() const { return out[0] * out[1] * out[2]; }
};

struct NdIds {
  uint32_t x, w, b, out;
};

// Reads params and checks x [N, spatial.., Cin], w [k.., Cin/group, Cout] (transposed
// [k.., Cin, Cout/group]) and b [Cout] (not their dtypes); checks the output dims and that its
// dtype is `out_dtype`.
Status nd_geometry(const OpView& v, size_t s, bool transposed, DType out_dtype, NdGeometry& g, NdIds& ids);

// Input index along spatial axis `a` read by output `o` through tap `t` (conv), or -1.
inline long conv_source(const NdGeometry& g, size_t a, size_t o, size_t t) {
  const long i = long(o * g.stride[a] + t * g.dilation[a]) - long(g.pad_lo[a]);
  return i >= 0 && i < long(g.in[a]) ? i : -1;
}

// Input index along axis `a` that reaches output `o` through tap `t` (transposed), or -1:
// o + pad_lo = i * stride + t.
inline long transposed_source(const NdGeometry& g, size_t a, size_t o, size_t t) {
  const long num = long(o + g.pad_lo[a]) - long(t);
  if (num < 0 || num % long(g.stride[a]) != 0) return -1;
  const long i = num / long(g.stride[a]);
  return i < long(g.in[a]) ? i : -1;
}

// One output pixel: image n, spatial coordinates o (depth, height, width), flat pixel index.
struct NdPixel {
  size_t n = 0, o[kMaxSpatial] = {0, 0, 0}, index = 0;
};

// f(pixel) for every output pixel, in memory order.
template <typename F>
void for_each_output_pixel(const NdGeometry& g, F f) {
  NdPixel p;
  for (p.n = 0; p.n < g.n; ++p.n)
    for (p.o[0] = 0; p.o[0] < g.out[0]; ++p.o[0])
      for (p.o[1] = 0; p.o[1] < g.out[1]; ++p.o[1])
        for (p.o[2] = 0; p.o[2] < g.out[2]; ++p.o[2], ++p.index) f(static_cast<const NdPixel&>(p));
}

// f(input pixel index, tap index) for each tap of output pixel p that reads an input pixel,
// in (kd, kh, kw) order (transposed: the taps an input pixel reaches p through).
template <typename F>
void for_each_tap(const NdGeometry& g, bool transposed, const NdPixel& p, F f) {
  auto source = [&g, transposed](size_t a, size_t o, size_t t) {
    return transposed ? transposed_source(g, a, o, t) : conv_source(g, a, o, t);
  };
  for (size_t kd = 0; kd < g.k[0]; ++kd) {
    const long id = source(0, p.o[0], kd);
    if (id < 0) continue;
    for (size_t kh = 0; kh < g.k[1]; ++kh) {
      const long ih = source(1, p.o[1], kh);
      if (ih < 0) continue;
      for (size_t kw = 0; kw < g.k[2]; ++kw) {
        const long iw = source(2, p.o[2], kw);
        if (iw < 0) continue;
        f(((p.n * g.in[0] + size_t(id)) * g.in[1] + size_t(ih)) * g.in[2] + size_t(iw),
          (kd * g.k[1] + kh) * g.k[2] + kw);
      }
    }
  }
}

}  // namespace engine
}  // namespace qnn_delegate
