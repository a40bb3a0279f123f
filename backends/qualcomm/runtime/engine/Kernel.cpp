#include "backends/qualcomm/runtime/engine/Kernel.h"

#include <cstdarg>
#include <cstdio>

namespace qnn_delegate {
namespace engine {

std::string dims_to_string(const Dims& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i) s += ",";
    s += std::to_string(dims[i]);
  }
  return s + "]";
}

Status OpView::fail(ErrorKind kind, const char* fmt, ...) const {
  char buf[768];
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(buf, sizeof(buf), fmt, args);
  va_end(args);
  Status s;
  s.kind = kind;
  s.message = "graph '" + graph_name + "', op '" + name + "' (" + type + "): " + buf;
  return s;
}

Status OpView::expect_arity(int min_inputs, int max_inputs, int num_outputs) const {
  const int nin = static_cast<int>(inputs.size());
  if (nin < min_inputs || (max_inputs >= 0 && nin > max_inputs)) {
    if (min_inputs == max_inputs) {
      return fail(ErrorKind::InvalidProgram, "expects %d inputs, got %d", min_inputs, nin);
    }
    return fail(ErrorKind::InvalidProgram, "expects at least %d inputs, got %d", min_inputs, nin);
  }
  if (static_cast<int>(outputs.size()) != num_outputs) {
    return fail(ErrorKind::InvalidProgram, "expects %d outputs, got %zu", num_outputs, outputs.size());
  }
  return Status::Ok();
}

Status OpView::expect_output(size_t index, const Dims& dims, DType dtype) const {
  const TensorInfo& out = *outputs.at(index);
  if (out.dims != dims) {
    return fail(ErrorKind::InvalidProgram, "output tensor '%s' has dims %s but shape inference gives %s",
                out.name.c_str(), dims_to_string(out.dims).c_str(), dims_to_string(dims).c_str());
  }
  if (out.dtype != dtype) {
    return fail(ErrorKind::InvalidProgram, "output tensor '%s' has data type %s, expected %s", out.name.c_str(),
                dtype_name(out.dtype), dtype_name(dtype));
  }
  return Status::Ok();
}

Status OpView::expect_float(const TensorInfo& t) const {
  if (t.dtype != DType::FLOAT_32) {
    return fail(ErrorKind::NotSupported, "tensor '%s' has data type %s, only FLOAT_32 is supported", t.name.c_str(),
                dtype_name(t.dtype));
  }
  return Status::Ok();
}

Status OpView::expect_rank(const TensorInfo& t, size_t rank) const {
  if (t.rank() != rank) {
    return fail(ErrorKind::InvalidProgram, "tensor '%s' has rank %zu (dims %s), expected rank %zu", t.name.c_str(),
                t.rank(), dims_to_string(t.dims).c_str(), rank);
  }
  return Status::Ok();
}

namespace {

struct Registries {
  KernelRegistry floats, quants;
  std::vector<std::string> duplicates;
};

// Function-local: constructed on first use, whichever kernel file's registrar runs first.
Registries& registries() {
  static Registries r;
  return r;
}

}  // namespace

KernelRegistrar::KernelRegistrar(KernelKind kind, ops::OpType type, KernelFactory factory) {
  Registries& all = registries();
  KernelRegistry& r = kind == KernelKind::Float ? all.floats : all.quants;
  const char* name = ops::op_name(type);
  if (!r.emplace(name, factory).second) {
    all.duplicates.push_back(std::string(kind == KernelKind::Float ? "Float " : "Quant ") + name);
  }
}

const KernelRegistry& float_kernel_registry() { return registries().floats; }

const KernelRegistry& quant_kernel_registry() { return registries().quants; }

std::vector<std::string> duplicate_kernel_registrations() { return registries().duplicates; }

const KernelRegistry& kernel_registry() {
  static const KernelRegistry registry = [] {
    KernelRegistry r;
    for (const auto& kv : float_kernel_registry()) r[kv.first] = &create_dispatched_kernel;
    for (const auto& kv : quant_kernel_registry()) r[kv.first] = &create_dispatched_kernel;
    return r;
  }();
  return registry;
}

std::vector<std::string> registered_op_types() {
  std::vector<std::string> names;
  for (const auto& kv : kernel_registry()) names.push_back(kv.first);
  return names;
}

}  // namespace engine
}  // namespace qnn_delegate
