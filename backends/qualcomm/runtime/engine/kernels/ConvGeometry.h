// Geometry of Conv2d / DepthWiseConv2d (NHWC x, HWIO w), shared by the float
// and integer conv kernels: params, shape checks and output shape inference.
#pragma once

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
Status conv_geometry(const OpView& v, bool depthwise, DType out_dtype, ConvGeometry& g,
                     ConvIds& ids);

} // namespace engine
} // namespace qnn_delegate
