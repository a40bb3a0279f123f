// Typed access to op params with checks of kind / data type / size.
#pragma once

#include <cstdint>
#include <vector>

#include "backends/qualcomm/runtime/engine/Kernel.h"

namespace qnn_delegate {
namespace engine {

class ParamReader {
 public:
  explicit ParamReader(const OpView& view) : view_(view) {}

  bool has(const char* name) const { return find(name) != nullptr; }

  // SCALAR params. `dtype` is the required Param.data_type.
  Status scalar_int(const char* name, DType dtype, int64_t& out) const;
  Status scalar_bool(const char* name, bool& out) const;
  Status scalar_float(const char* name, float& out) const;
  // Optional variants: keep `out` when the param is absent.
  Status optional_bool(const char* name, bool& out) const;
  Status optional_float(const char* name, float& out) const;

  // TENSOR params of integer data. `dims` is the required dims (empty = any 1-D).
  Status tensor_int(const char* name, DType dtype, const Dims& dims, std::vector<int64_t>& out) const;

 private:
  const ::qnn_delegate::Param* find(const char* name) const;
  Status check(const ::qnn_delegate::Param* p, const char* name, ::qnn_delegate::QnnParamKind kind, DType dtype) const;

  const OpView& view_;
};

}  // namespace engine
}  // namespace qnn_delegate
