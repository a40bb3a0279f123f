#include "backends/qualcomm/runtime/engine/kernels/ReduceGeometry.h"

namespace qnn_delegate {
namespace engine {

Status reduce_geometry(const OpView& v, const TensorInfo& x, bool reject_empty, ReduceGeometry& g) {
  ParamReader params(v);
  std::vector<int64_t> axes;
  bool keep_dims = false;
  QNN_RETURN_IF_ERROR(params.tensor_int("axes", DType::UINT_32, {}, axes));
  QNN_RETURN_IF_ERROR(params.optional_bool("keep_dims", keep_dims));
  g.reduced.assign(x.rank(), false);
  for (int64_t a : axes) {
    if (a < 0 || size_t(a) >= x.rank() || g.reduced[a]) {
      return v.fail(ErrorKind::InvalidProgram, "axis %lld is out of range or repeated for input '%s' %s",
                    static_cast<long long>(a), x.name.c_str(), dims_to_string(x.dims).c_str());
    }
    if (reject_empty && x.dims[a] == 0) {
      return v.fail(ErrorKind::InvalidProgram, "reduced axis %lld of input '%s' %s is empty", static_cast<long long>(a),
                    x.name.c_str(), dims_to_string(x.dims).c_str());
    }
    g.reduced[a] = true;
  }
  g.in_dims = x.dims;
  g.out_dims.clear();
  g.count = 1;
  Dims kept_dims;  // input rank with 1 on reduced axes
  for (size_t d = 0; d < x.rank(); ++d) {
    kept_dims.push_back(g.reduced[d] ? 1 : x.dims[d]);
    if (g.reduced[d]) g.count *= x.dims[d];
    if (!g.reduced[d] || keep_dims) g.out_dims.push_back(g.reduced[d] ? 1 : x.dims[d]);
  }
  g.out_strides = contiguous_strides(kept_dims);
  for (size_t d = 0; d < x.rank(); ++d) {
    if (g.reduced[d]) g.out_strides[d] = 0;
  }
  g.out_numel = product(g.out_dims);
  g.outer.assign(x.dims.begin(), x.dims.empty() ? x.dims.begin() : x.dims.end() - 1);
  return Status::Ok();
}

}  // namespace engine
}  // namespace qnn_delegate
