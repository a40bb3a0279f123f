#include "backends/qualcomm/runtime/QnnDelegateBackend.h"

#include <cstring>
#include <new>

#include <executorch/runtime/core/exec_aten/exec_aten.h>
#include <executorch/runtime/platform/log.h>

#include "backends/qualcomm/runtime/PayloadLoader.h"
#include "backends/qualcomm/runtime/RuntimeOptions.h"

namespace qnn_delegate {
namespace runtime {

using executorch::aten::ScalarType;
using executorch::runtime::ArrayRef;
using executorch::runtime::BackendExecutionContext;
using executorch::runtime::BackendInitContext;
using executorch::runtime::BackendOption;
using executorch::runtime::BackendOptionContext;
using executorch::runtime::CompileSpec;
using executorch::runtime::DelegateHandle;
using executorch::runtime::Error;
using executorch::runtime::EValue;
using executorch::runtime::FreeableBuffer;
using executorch::runtime::Result;
using executorch::runtime::Span;

Error to_et_error(engine::ErrorKind kind) {
  switch (kind) {
    case engine::ErrorKind::Ok: return Error::Ok;
    case engine::ErrorKind::InvalidProgram: return Error::InvalidProgram;
    case engine::ErrorKind::InvalidArgument: return Error::InvalidArgument;
    case engine::ErrorKind::NotSupported: return Error::NotSupported;
    case engine::ErrorKind::MemoryAllocationFailed: return Error::MemoryAllocationFailed;
    default: return Error::Internal;
  }
}

namespace {

bool dtype_matches(ScalarType st, engine::DType dt) {
  switch (st) {
    case ScalarType::Float: return dt == engine::DType::FLOAT_32;
    case ScalarType::Long: return dt == engine::DType::INT_64;
    case ScalarType::Int: return dt == engine::DType::INT_32;
    case ScalarType::Bool: return dt == engine::DType::BOOL_8;
    case ScalarType::Byte: return dt == engine::DType::UINT_8;
    default: return false;
  }
}

// Checks arg `index` against graph tensor `info`; returns its data pointer.
Error check_tensor_arg(const engine::GraphExecutor& g, const EValue* arg, size_t index,
                       const engine::TensorInfo& info, const char* what, void** data) {
  if (arg == nullptr || !arg->isTensor()) {
    ET_LOG(Error, "QnnDelegate graph '%s': %s %zu (tensor '%s') is not a tensor", g.name().c_str(),
           what, index, info.name.c_str());
    return Error::InvalidArgument;
  }
  const auto& t = arg->toTensor();
  if (!dtype_matches(t.scalar_type(), info.dtype)) {
    ET_LOG(Error, "QnnDelegate graph '%s': %s %zu (tensor '%s') has dtype %d, graph expects %s",
           g.name().c_str(), what, index, info.name.c_str(), static_cast<int>(t.scalar_type()),
           engine::dtype_name(info.dtype));
    return Error::InvalidArgument;
  }
  if (static_cast<size_t>(t.numel()) != info.numel) {
    ET_LOG(Error, "QnnDelegate graph '%s': %s %zu (tensor '%s') has %zu elements, graph expects %zu %s",
           g.name().c_str(), what, index, info.name.c_str(), static_cast<size_t>(t.numel()),
           info.numel, engine::dims_to_string(info.dims).c_str());
    return Error::InvalidArgument;
  }
  *data = t.mutable_data_ptr();
  if (*data == nullptr && info.nbytes != 0) {
    ET_LOG(Error, "QnnDelegate graph '%s': %s %zu (tensor '%s') has no data", g.name().c_str(), what,
           index, info.name.c_str());
    return Error::InvalidArgument;
  }
  return Error::Ok;
}

const CompileSpec* find_spec(ArrayRef<CompileSpec> specs, const char* key) {
  for (const CompileSpec& s : specs) {
    if (s.key != nullptr && std::strcmp(s.key, key) == 0) return &s;
  }
  return nullptr;
}

} // namespace

bool QnnDelegateBackend::is_available() const { return true; }

Result<DelegateHandle*> QnnDelegateBackend::init(BackendInitContext& context,
                                                 FreeableBuffer* processed,
                                                 ArrayRef<CompileSpec> compile_specs) const {
  if (processed == nullptr || processed->data() == nullptr) {
    ET_LOG(Error, "QnnDelegate: no processed payload");
    return Error::InvalidProgram;
  }
  CompileOptions options;
  if (const CompileSpec* spec = find_spec(compile_specs, kCompileSpecKey)) {
    const engine::Status s = parse_compile_options(spec->value.buffer, spec->value.nbytes, options);
    if (!s.ok()) {
      ET_LOG(Error, "QnnDelegate: %s", s.message.c_str());
      return to_et_error(s.kind);
    }
  }
  std::unique_ptr<engine::GraphExecutor> graph;
  const engine::Status s = load_graph_for_method(processed->data(), processed->size(),
                                                 engine_options_from_env(),
                                                 context.get_method_name(), graph);
  if (!s.ok()) {
    ET_LOG(Error, "QnnDelegate init failed: %s", s.message.c_str());
    return to_et_error(s.kind);
  }
  processed->Free();  // weights were copied into the engine
  auto* handle = new (std::nothrow) QnnDelegateHandle();
  if (handle == nullptr) return Error::MemoryAllocationFailed;
  handle->graph = std::move(graph);
  handle->options = std::move(options);
  return handle;
}

Error QnnDelegateBackend::execute(BackendExecutionContext&, DelegateHandle* handle,
                                  Span<EValue*> args) const {
  if (handle == nullptr) return Error::InvalidState;
  engine::GraphExecutor& g = *static_cast<QnnDelegateHandle*>(handle)->graph;
  const size_t ni = g.num_inputs(), no = g.num_outputs();
  if (args.size() != ni + no) {
    ET_LOG(Error, "QnnDelegate graph '%s': got %zu args, expected %zu inputs + %zu outputs",
           g.name().c_str(), args.size(), ni, no);
    return Error::InvalidArgument;
  }
  constexpr size_t kMaxIo = 256;
  if (ni > kMaxIo || no > kMaxIo) return Error::NotSupported;
  void* in_ptrs[kMaxIo];
  void* out_ptrs[kMaxIo];
  for (size_t i = 0; i < ni; ++i) {
    ET_CHECK_OK_OR_RETURN_ERROR(check_tensor_arg(g, args[i], i, g.input_info(i), "input", &in_ptrs[i]));
  }
  for (size_t i = 0; i < no; ++i) {
    ET_CHECK_OK_OR_RETURN_ERROR(
        check_tensor_arg(g, args[ni + i], i, g.output_info(i), "output", &out_ptrs[i]));
  }
  const engine::Status s = g.execute(in_ptrs, out_ptrs);
  if (!s.ok()) {
    ET_LOG(Error, "QnnDelegate execute failed: %s", s.message.c_str());
    return to_et_error(s.kind);
  }
  return Error::Ok;
}

Error QnnDelegateBackend::set_option(BackendOptionContext&, const Span<BackendOption>& options) {
  return RuntimeOptions::instance().set(options);
}

Error QnnDelegateBackend::get_option(BackendOptionContext&, Span<BackendOption>& options) {
  return RuntimeOptions::instance().get(options);
}

void QnnDelegateBackend::destroy(DelegateHandle* handle) const {
  auto* h = static_cast<QnnDelegateHandle*>(handle);
  if (h == nullptr) return;
  h->graph.reset();  // kernels, arena, weights, then the allocator
  delete h;
}

QnnDelegateBackend& backend_instance() {
  static QnnDelegateBackend backend;
  return backend;
}

namespace {
const executorch::runtime::Error kRegistered = executorch::runtime::register_backend(
    executorch::runtime::Backend{kBackendName, &backend_instance()});
} // namespace

} // namespace runtime
} // namespace qnn_delegate
