// Conv3d, TransposeConv2d and TransposeConv3d in float (integer kernels for
// quantized activations: conv_nd_quant.cpp). Channel-last activations
// [N, (D,) H, W, C]; weights [(KD,) KH, KW, Cin/group, Cout] for Conv3d and
// [(KD,) KH, KW, Cin, Cout/group] for the transposed convs (QNN's layouts).
// One geometry for 2 and 3 spatial dims (2-D: a unit depth). Direct loops
// that write every output element once (the transposed conv gathers the
// input pixels that reach an output pixel), no allocation at execute.
#include <algorithm>

#include "backends/qualcomm/runtime/engine/kernels/ConvNdGeometry.h"

namespace qnn_delegate {
namespace engine {
namespace {

// Reads stride / pad_amount / dilation or output_padding / group of an op with `s` spatial dims.
Status read_nd_params(const OpView& v, size_t s, bool transposed, NdGeometry& g) {
  ParamReader params(v);
  std::vector<int64_t> stride, pad, extra;
  const uint32_t su = uint32_t(s);
  QNN_RETURN_IF_ERROR(params.tensor_int("stride", DType::UINT_32, {su}, stride));
  QNN_RETURN_IF_ERROR(params.tensor_int("pad_amount", DType::UINT_32, {su, 2}, pad));
  QNN_RETURN_IF_ERROR(params.tensor_int(transposed ? "output_padding" : "dilation", DType::UINT_32, {su}, extra));
  int64_t group = 1;
  QNN_RETURN_IF_ERROR(params.scalar_int("group", DType::UINT_32, group));
  if (group <= 0) return v.fail(ErrorKind::InvalidProgram, "group must be >= 1");
  g.group = size_t(group);
  const size_t first = kMaxSpatial - s;
  for (size_t i = 0; i < s; ++i) {
    if (stride[i] == 0) return v.fail(ErrorKind::InvalidProgram, "stride must be >= 1");
    g.stride[first + i] = size_t(stride[i]);
    g.pad_lo[first + i] = size_t(pad[2 * i]);
    g.pad_hi[first + i] = size_t(pad[2 * i + 1]);
    if (transposed) {
      if (extra[i] >= stride[i]) {
        return v.fail(ErrorKind::InvalidProgram, "output_padding %lld must be smaller than stride %lld",
                      (long long)extra[i], (long long)stride[i]);
      }
      g.out_pad[first + i] = size_t(extra[i]);
    } else {
      if (extra[i] == 0) return v.fail(ErrorKind::InvalidProgram, "dilation must be >= 1");
      g.dilation[first + i] = size_t(extra[i]);
    }
  }
  return Status::Ok();
}

}  // namespace

Status nd_geometry(const OpView& v, size_t s, bool transposed, DType out_dtype, NdGeometry& g, NdIds& ids) {
  QNN_RETURN_IF_ERROR(v.expect_arity(3, 3, 1));
  const TensorInfo& x = *v.inputs[0];
  const TensorInfo& w = *v.inputs[1];
  const TensorInfo& b = *v.inputs[2];
  QNN_RETURN_IF_ERROR(v.expect_rank(x, s + 2));
  QNN_RETURN_IF_ERROR(v.expect_rank(w, s + 2));
  QNN_RETURN_IF_ERROR(read_nd_params(v, s, transposed, g));
  const size_t first = kMaxSpatial - s;
  g.n = x.dims[0];
  g.cin = x.dims[s + 1];
  for (size_t i = 0; i < s; ++i) {
    g.in[first + i] = x.dims[1 + i];
    g.k[first + i] = w.dims[i];
  }
  const size_t w_in = w.dims[s], w_out = w.dims[s + 1];
  g.cout = transposed ? w_out * g.group : w_out;
  const size_t expected_w_in = transposed ? g.cin : g.cin / g.group;
  if (g.cin % g.group != 0 || g.cout % g.group != 0 || w_in != expected_w_in || g.taps() == 0) {
    return v.fail(ErrorKind::InvalidProgram, "weight '%s' dims %s do not fit input '%s' %s with group %zu",
                  w.name.c_str(), dims_to_string(w.dims).c_str(), x.name.c_str(), dims_to_string(x.dims).c_str(),
                  g.group);
  }
  if (b.numel != g.cout) {
    return v.fail(ErrorKind::InvalidProgram, "bias '%s' has %zu elements, expected Cout = %zu", b.name.c_str(), b.numel,
                  g.cout);
  }
  for (size_t i = first; i < kMaxSpatial; ++i) {
    const size_t eff = (g.k[i] - 1) * g.dilation[i] + 1;
    if (transposed) {
      const size_t full = (g.in[i] - 1) * g.stride[i] + eff + g.out_pad[i];
      if (g.in[i] == 0 || g.pad_lo[i] + g.pad_hi[i] >= full) {
        return v.fail(ErrorKind::InvalidProgram, "pad_amount crops the whole output of input %s",
                      dims_to_string(x.dims).c_str());
      }
      g.out[i] = full - g.pad_lo[i] - g.pad_hi[i];
    } else {
      if (g.in[i] + g.pad_lo[i] + g.pad_hi[i] < eff) {
        return v.fail(ErrorKind::InvalidProgram, "kernel is larger than the padded input %s",
                      dims_to_string(x.dims).c_str());
      }
      g.out[i] = (g.in[i] + g.pad_lo[i] + g.pad_hi[i] - eff) / g.stride[i] + 1;
    }
  }
  Dims out_dims = {uint32_t(g.n)};
  for (size_t i = first; i < kMaxSpatial; ++i) out_dims.push_back(uint32_t(g.out[i]));
  out_dims.push_back(uint32_t(g.cout));
  QNN_RETURN_IF_ERROR(v.expect_output(0, out_dims, out_dtype));
  ids = {x.id, w.id, b.id, v.outputs[0]->id};
  return Status::Ok();
}

namespace {

template <bool kTransposed>
class ConvNdKernel final : public Kernel {
 public:
  ConvNdKernel(const NdGeometry& g, const NdIds& ids) : g_(g), ids_(ids) {}

  Status run(const RunContext& c) const override {
    const float* x = c.at<const float>(ids_.x);
    const float* w = c.at<const float>(ids_.w);
    const float* b = c.at<const float>(ids_.b);
    float* out = c.at<float>(ids_.out);
    const NdGeometry& g = g_;
    const size_t cin_g = g.cin_g(), cout_g = g.cout_g();
    // weight strides: one tap holds [w_in][w_out]
    const size_t w_out = kTransposed ? cout_g : g.cout;
    const size_t tap_size = (kTransposed ? g.cin : cin_g) * w_out;
    for_each_output_pixel(g, [&](const NdPixel& p) {
      float* o = out + p.index * g.cout;
      std::copy(b, b + g.cout, o);
      for_each_tap(g, kTransposed, p, [&](size_t in_pixel, size_t tap) {
        accumulate(x + in_pixel * g.cin, w + tap * tap_size, cin_g, cout_g, w_out, o);
      });
    });
    return Status::Ok();
  }

 private:
  // o[co] += sum over the group's input channels of px[ci] * w(ci, co).
  void accumulate(const float* px, const float* tap, size_t cin_g, size_t cout_g, size_t w_out, float* o) const {
    for (size_t grp = 0; grp < g_.group; ++grp) {
      const float* xg = px + grp * cin_g;
      for (size_t ci = 0; ci < cin_g; ++ci) {
        const float xv = xg[ci];
        // conv: row ci of [Cin/group][Cout], columns of this group; transposed: row
        // grp*cin_g+ci of [Cin][Cout/group]
        const float* wr = kTransposed ? tap + (grp * cin_g + ci) * w_out : tap + ci * w_out + grp * cout_g;
        fma_axpy(xv, wr, o + grp * cout_g, cout_g);
      }
    }
  }

  NdGeometry g_;
  NdIds ids_;
};

template <size_t kSpatial, bool kTransposed>
Status create_conv_nd(const OpView& v, KernelEnv&, KernelPtr& out) {
  NdGeometry g;
  NdIds ids;
  for (const TensorInfo* t : v.inputs) QNN_RETURN_IF_ERROR(v.expect_float(*t));
  QNN_RETURN_IF_ERROR(nd_geometry(v, kSpatial, kTransposed, DType::FLOAT_32, g, ids));
  return emplace_kernel<ConvNdKernel<kTransposed>>(out, g, ids);
}

}  // namespace

QNN_REGISTER_KERNEL(Float, Conv3d, (&create_conv_nd<3, false>));
QNN_REGISTER_KERNEL(Float, TransposeConv2d, (&create_conv_nd<2, true>));
QNN_REGISTER_KERNEL(Float, TransposeConv3d, (&create_conv_nd<3, true>));

}  // namespace engine
}  // namespace qnn_delegate
