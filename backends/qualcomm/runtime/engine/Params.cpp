#include "backends/qualcomm/runtime/engine/Params.h"

#include <cstring>

namespace qnn_delegate {
namespace engine {

using ::qnn_delegate::Param;
using ::qnn_delegate::QnnParamKind;

const Param* ParamReader::find(const char* name) const {
  const auto* params = view_.op->params();
  if (params == nullptr) return nullptr;
  for (const Param* p : *params) {
    if (p != nullptr && p->name() != nullptr && std::strcmp(p->name()->c_str(), name) == 0) {
      return p;
    }
  }
  return nullptr;
}

Status ParamReader::check(const Param* p, const char* name, QnnParamKind kind, DType dtype) const {
  if (p == nullptr) {
    return view_.fail(ErrorKind::InvalidProgram, "required param '%s' is missing", name);
  }
  if (p->kind() != kind) {
    return view_.fail(ErrorKind::InvalidProgram, "param '%s' must be a %s param", name,
                      kind == QnnParamKind::SCALAR ? "SCALAR" : "TENSOR");
  }
  if (p->data_type() != dtype) {
    return view_.fail(ErrorKind::InvalidProgram, "param '%s' has data type %s, expected %s", name,
                      dtype_name(p->data_type()), dtype_name(dtype));
  }
  return Status::Ok();
}

Status ParamReader::scalar_int(const char* name, DType dtype, int64_t& out) const {
  const Param* p = find(name);
  QNN_RETURN_IF_ERROR(check(p, name, QnnParamKind::SCALAR, dtype));
  if (p->int_data() == nullptr || p->int_data()->size() != 1) {
    return view_.fail(ErrorKind::InvalidProgram, "scalar param '%s' must hold one int_data value", name);
  }
  out = p->int_data()->Get(0);
  if (dtype == DType::UINT_32 && (out < 0 || out > UINT32_MAX)) {
    return view_.fail(ErrorKind::InvalidProgram, "param '%s' value %lld is not a valid UINT_32", name,
                      static_cast<long long>(out));
  }
  return Status::Ok();
}

Status ParamReader::scalar_bool(const char* name, bool& out) const {
  int64_t v = 0;
  QNN_RETURN_IF_ERROR(scalar_int(name, DType::BOOL_8, v));
  out = v != 0;
  return Status::Ok();
}

Status ParamReader::scalar_float(const char* name, float& out) const {
  const Param* p = find(name);
  QNN_RETURN_IF_ERROR(check(p, name, QnnParamKind::SCALAR, DType::FLOAT_32));
  if (p->float_data() == nullptr || p->float_data()->size() != 1) {
    return view_.fail(ErrorKind::InvalidProgram, "scalar param '%s' must hold one float_data value", name);
  }
  out = p->float_data()->Get(0);
  return Status::Ok();
}

Status ParamReader::optional_bool(const char* name, bool& out) const {
  return has(name) ? scalar_bool(name, out) : Status::Ok();
}

Status ParamReader::optional_float(const char* name, float& out) const {
  return has(name) ? scalar_float(name, out) : Status::Ok();
}

Status ParamReader::tensor_int(const char* name, DType dtype, const Dims& dims, std::vector<int64_t>& out) const {
  const Param* p = find(name);
  QNN_RETURN_IF_ERROR(check(p, name, QnnParamKind::TENSOR, dtype));
  Dims got;
  if (p->dims() != nullptr) got.assign(p->dims()->begin(), p->dims()->end());
  if (!dims.empty() && got != dims) {
    return view_.fail(ErrorKind::InvalidProgram, "param '%s' has dims %s, expected %s", name,
                      dims_to_string(got).c_str(), dims_to_string(dims).c_str());
  }
  if (got.size() > 2) {
    return view_.fail(ErrorKind::InvalidProgram, "param '%s' has rank %zu, expected <= 2", name, got.size());
  }
  const size_t n = product(got);
  const size_t have = p->int_data() ? p->int_data()->size() : 0;
  if (have != n) {
    return view_.fail(ErrorKind::InvalidProgram, "param '%s' holds %zu int_data values, dims %s need %zu", name, have,
                      dims_to_string(got).c_str(), n);
  }
  out.assign(p->int_data()->begin(), p->int_data()->end());
  if (dtype == DType::UINT_32) {
    for (int64_t v : out) {
      if (v < 0 || v > UINT32_MAX) {
        return view_.fail(ErrorKind::InvalidProgram, "param '%s' holds %lld, not a valid UINT_32", name,
                          static_cast<long long>(v));
      }
    }
  }
  return Status::Ok();
}

}  // namespace engine
}  // namespace qnn_delegate
