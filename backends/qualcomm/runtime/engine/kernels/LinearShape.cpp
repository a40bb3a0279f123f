#include "backends/qualcomm/runtime/engine/kernels/LinearShape.h"

namespace qnn_delegate {
namespace engine {

Status fc_shape(const OpView& v, DType out_dtype, FcShape& s) {
  QNN_RETURN_IF_ERROR(v.expect_arity(3, 3, 1));
  const TensorInfo& x = *v.inputs[0];
  const TensorInfo& w = *v.inputs[1];
  const TensorInfo& b = *v.inputs[2];
  QNN_RETURN_IF_ERROR(v.expect_rank(w, 2));
  bool keep_dims = false;
  QNN_RETURN_IF_ERROR(ParamReader(v).optional_bool("keep_dims", keep_dims));
  s.N = w.dims[0];
  s.K = w.dims[1];
  if (x.rank() == 0 || x.dims.back() != s.K) {
    return v.fail(ErrorKind::InvalidProgram, "input '%s' dims %s do not end in K = %zu of weight '%s' %s",
                  x.name.c_str(), dims_to_string(x.dims).c_str(), s.K, w.name.c_str(), dims_to_string(w.dims).c_str());
  }
  if (b.numel != s.N) {
    return v.fail(ErrorKind::InvalidProgram, "bias '%s' has %zu elements, expected N = %zu", b.name.c_str(), b.numel,
                  s.N);
  }
  s.M = product(x.dims, 0, x.rank() - 1);
  Dims out_dims;
  if (keep_dims) {
    out_dims.assign(x.dims.begin(), x.dims.end() - 1);
    out_dims.push_back(uint32_t(s.N));
  } else {
    out_dims = {uint32_t(s.M), uint32_t(s.N)};
  }
  QNN_RETURN_IF_ERROR(v.expect_output(0, out_dims, out_dtype));
  s.x = x.id;
  s.w = w.id;
  s.b = b.id;
  s.out = v.outputs[0]->id;
  return Status::Ok();
}

Status matmul_shape(const OpView& v, DType out_dtype, MatMulShape& s) {
  QNN_RETURN_IF_ERROR(v.expect_arity(2, 2, 1));
  const TensorInfo& a = *v.inputs[0];
  const TensorInfo& b = *v.inputs[1];
  s.ta = s.tb = false;
  ParamReader params(v);
  QNN_RETURN_IF_ERROR(params.optional_bool("transpose_in0", s.ta));
  QNN_RETURN_IF_ERROR(params.optional_bool("transpose_in1", s.tb));
  if (a.rank() < 2 || b.rank() < 2) {
    return v.fail(ErrorKind::InvalidProgram, "inputs '%s' %s and '%s' %s must have rank >= 2", a.name.c_str(),
                  dims_to_string(a.dims).c_str(), b.name.c_str(), dims_to_string(b.dims).c_str());
  }
  const size_t ra = a.rank(), rb = b.rank();
  s.M = s.ta ? a.dims[ra - 1] : a.dims[ra - 2];
  s.K = s.ta ? a.dims[ra - 2] : a.dims[ra - 1];
  const size_t kb = s.tb ? b.dims[rb - 1] : b.dims[rb - 2];
  s.N = s.tb ? b.dims[rb - 2] : b.dims[rb - 1];
  const Dims ba(a.dims.begin(), a.dims.end() - 2), bb(b.dims.begin(), b.dims.end() - 2);
  if (kb != s.K || !broadcast_dims(ba, bb, s.batch)) {
    return v.fail(ErrorKind::InvalidProgram, "inputs '%s' %s and '%s' %s do not multiply", a.name.c_str(),
                  dims_to_string(a.dims).c_str(), b.name.c_str(), dims_to_string(b.dims).c_str());
  }
  s.sa = broadcast_strides(ba, s.batch);
  s.sb = broadcast_strides(bb, s.batch);
  s.batches = product(s.batch);
  Dims out_dims = s.batch;
  out_dims.push_back(uint32_t(s.M));
  out_dims.push_back(uint32_t(s.N));
  QNN_RETURN_IF_ERROR(v.expect_output(0, out_dims, out_dtype));
  s.a = a.id;
  s.b = b.id;
  s.out = v.outputs[0]->id;
  return Status::Ok();
}

}  // namespace engine
}  // namespace qnn_delegate
