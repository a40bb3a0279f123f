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

} // namespace engine
} // namespace qnn_delegate
