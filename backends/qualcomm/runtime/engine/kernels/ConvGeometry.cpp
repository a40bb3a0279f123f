#include "backends/qualcomm/runtime/engine/kernels/ConvGeometry.h"

namespace qnn_delegate {
namespace engine {
namespace {

Status read_conv_params(const OpView& v, ConvGeometry& g) {
  ParamReader params(v);
  std::vector<int64_t> stride, pad, dilation;
  QNN_RETURN_IF_ERROR(params.tensor_int("stride", DType::UINT_32, {2}, stride));
  QNN_RETURN_IF_ERROR(params.tensor_int("pad_amount", DType::UINT_32, {2, 2}, pad));
  QNN_RETURN_IF_ERROR(params.tensor_int("dilation", DType::UINT_32, {2}, dilation));
  if (stride[0] == 0 || stride[1] == 0 || dilation[0] == 0 || dilation[1] == 0) {
    return v.fail(ErrorKind::InvalidProgram, "stride and dilation must be >= 1");
  }
  g.sh = stride[0];
  g.sw = stride[1];
  g.dh = dilation[0];
  g.dw = dilation[1];
  g.pt = pad[0];
  g.pb = pad[1];
  g.pl = pad[2];
  g.pr = pad[3];
  return Status::Ok();
}

}  // namespace

Status conv_geometry(const OpView& v, bool depthwise, DType out_dtype, ConvGeometry& g, ConvIds& ids) {
  QNN_RETURN_IF_ERROR(v.expect_arity(3, 3, 1));
  const TensorInfo& x = *v.inputs[0];
  const TensorInfo& w = *v.inputs[1];
  const TensorInfo& b = *v.inputs[2];
  QNN_RETURN_IF_ERROR(v.expect_rank(x, 4));
  QNN_RETURN_IF_ERROR(v.expect_rank(w, 4));
  QNN_RETURN_IF_ERROR(read_conv_params(v, g));
  g.n = x.dims[0];
  g.h = x.dims[1];
  g.w = x.dims[2];
  g.cin = x.dims[3];
  g.kh = w.dims[0];
  g.kw = w.dims[1];
  g.cout = w.dims[3];
  g.group = 1;
  if (depthwise) {
    if (w.dims[2] != 1 || g.cin == 0 || g.cout % g.cin != 0) {
      return v.fail(ErrorKind::InvalidProgram, "weight '%s' dims %s do not fit input '%s' %s (need [KH,KW,1,Cin*mult])",
                    w.name.c_str(), dims_to_string(w.dims).c_str(), x.name.c_str(), dims_to_string(x.dims).c_str());
    }
  } else {
    int64_t group = 1;
    QNN_RETURN_IF_ERROR(ParamReader(v).scalar_int("group", DType::UINT_32, group));
    g.group = static_cast<size_t>(group);
    if (g.group == 0 || g.cin % g.group != 0 || g.cout % g.group != 0 || w.dims[2] != g.cin / g.group) {
      return v.fail(ErrorKind::InvalidProgram, "weight '%s' dims %s do not fit input '%s' %s with group %zu",
                    w.name.c_str(), dims_to_string(w.dims).c_str(), x.name.c_str(), dims_to_string(x.dims).c_str(),
                    g.group);
    }
  }
  if (b.numel != g.cout) {
    return v.fail(ErrorKind::InvalidProgram, "bias '%s' has %zu elements, expected Cout = %zu", b.name.c_str(), b.numel,
                  g.cout);
  }
  const size_t eff_h = (g.kh - 1) * g.dh + 1, eff_w = (g.kw - 1) * g.dw + 1;
  if (g.kh == 0 || g.kw == 0 || g.h + g.pt + g.pb < eff_h || g.w + g.pl + g.pr < eff_w) {
    return v.fail(ErrorKind::InvalidProgram, "kernel %zux%zu is larger than padded input %s", g.kh, g.kw,
                  dims_to_string(x.dims).c_str());
  }
  g.oh = (g.h + g.pt + g.pb - eff_h) / g.sh + 1;
  g.ow = (g.w + g.pl + g.pr - eff_w) / g.sw + 1;
  Dims out_dims = {uint32_t(g.n), uint32_t(g.oh), uint32_t(g.ow), uint32_t(g.cout)};
  QNN_RETURN_IF_ERROR(v.expect_output(0, out_dims, out_dtype));
  ids = {x.id, w.id, b.id, v.outputs[0]->id};
  return Status::Ok();
}

}  // namespace engine
}  // namespace qnn_delegate
