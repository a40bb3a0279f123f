#include "backends/qualcomm/runtime/QnnDelegateBackend.h"

#include <cstdlib>
#include <cstring>
#include <new>

#include <executorch/runtime/core/exec_aten/exec_aten.h>
#include <executorch/runtime/core/exec_aten/util/scalar_type_util.h>
#include <executorch/runtime/platform/log.h>

#include <algorithm>
#include <mutex>
#include <string>
#include <vector>

#include "backends/qualcomm/runtime/ContextCache.h"
#include "backends/qualcomm/runtime/GraphArgs.h"
#include "backends/qualcomm/runtime/PayloadLoader.h"
#include "backends/qualcomm/runtime/Profiler.h"
#include "backends/qualcomm/runtime/RuntimeOptions.h"
#include "backends/qualcomm/runtime/engine/ThreadPool.h"
#include "backends/qualcomm/runtime/qnn/QnnLibrary.h"

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
    case engine::ErrorKind::Ok:
      return Error::Ok;
    case engine::ErrorKind::InvalidProgram:
      return Error::InvalidProgram;
    case engine::ErrorKind::InvalidArgument:
      return Error::InvalidArgument;
    case engine::ErrorKind::NotSupported:
      return Error::NotSupported;
    case engine::ErrorKind::MemoryAllocationFailed:
      return Error::MemoryAllocationFailed;
    default:
      return Error::Internal;
  }
}

namespace {

bool dtype_matches(ScalarType st, engine::DType dt) {
  switch (st) {
    case ScalarType::Float:
      return dt == engine::DType::FLOAT_32;
    case ScalarType::Half:
      return dt == engine::DType::FLOAT_16;
    case ScalarType::Long:
      return dt == engine::DType::INT_64;
    case ScalarType::Int:
      return dt == engine::DType::INT_32;
    case ScalarType::Bool:
      return dt == engine::DType::BOOL_8;
    case ScalarType::Byte:  // uint8 codes of a quantized graph input / output too
      return dt == engine::DType::UINT_8 || dt == engine::DType::UFIXED_POINT_8;
    default:
      return false;
  }
}

// The memory order of the non-unit dims of a tensor with `sizes` stored in `dim_order`
// (two dim orders give the same memory layout iff these agree). Empty `dim_order` =
// contiguous. Returns the count written to `out` (at most kMaxDimOrderRank).
constexpr size_t kMaxDimOrderRank = 16;
size_t memory_order(ArrayRef<executorch::aten::SizesType> sizes, const uint8_t* dim_order, size_t dim_order_size,
                    uint8_t* out) {
  size_t n = 0;
  for (size_t i = 0; i < sizes.size() && n < kMaxDimOrderRank; ++i) {
    const size_t d = dim_order_size == sizes.size() ? dim_order[i] : i;
    if (d < sizes.size() && sizes[d] != 1) out[n++] = uint8_t(d);
  }
  return n;
}

std::string dim_order_text(const uint8_t* order, size_t rank) {
  std::string text = "(";
  for (size_t i = 0; i < rank; ++i) text += (i ? "," : "") + std::to_string(order[i]);
  return text + ")";
}

// The caller's tensor must be laid out in memory like the graph tensor it binds to: the
// dim order the delegate was lowered for (contiguous unless the payload says otherwise).
Error check_dim_order(const engine::GraphExecutor& g, const executorch::aten::Tensor& t, size_t index,
                      const engine::TensorInfo& info, const char* what) {
  const auto got = t.dim_order();
  const size_t rank = got.size();
  if (rank > kMaxDimOrderRank) return Error::Ok;
  uint8_t identity[kMaxDimOrderRank];
  for (size_t i = 0; i < rank; ++i) identity[i] = uint8_t(i);
  const uint8_t* want = info.dim_order.size() == rank ? info.dim_order.data() : identity;
  uint8_t got_order[kMaxDimOrderRank], want_order[kMaxDimOrderRank];
  const size_t ng = memory_order(t.sizes(), reinterpret_cast<const uint8_t*>(got.data()), rank, got_order);
  const size_t nw = memory_order(t.sizes(), want, rank, want_order);
  if (ng == nw && std::equal(got_order, got_order + ng, want_order)) return Error::Ok;
  ET_LOG(Error,
         "QnnDelegate graph '%s': %s %zu (tensor '%s') has dim order %s, the delegate was lowered "
         "for dim order %s (%s); export with an example input in the memory format you run with",
         g.name().c_str(), what, index, info.name.c_str(),
         dim_order_text(reinterpret_cast<const uint8_t*>(got.data()), rank).c_str(), dim_order_text(want, rank).c_str(),
         want == identity ? "contiguous" : "from the payload");
  return Error::InvalidArgument;
}

// Checks arg `index` against graph tensor `info`; returns its data pointer.
Error check_tensor_arg(const engine::GraphExecutor& g, const EValue* arg, size_t index, const engine::TensorInfo& info,
                       const char* what, void** data) {
  if (arg == nullptr || !arg->isTensor()) {
    ET_LOG(Error, "QnnDelegate graph '%s': %s %zu (tensor '%s') is not a tensor", g.name().c_str(), what, index,
           info.name.c_str());
    return Error::InvalidArgument;
  }
  const auto& t = arg->toTensor();
  if (!dtype_matches(t.scalar_type(), info.dtype)) {
    ET_LOG(Error, "QnnDelegate graph '%s': %s %zu (tensor '%s') has dtype %s, graph expects %s", g.name().c_str(), what,
           index, info.name.c_str(), executorch::runtime::toString(t.scalar_type()), engine::dtype_name(info.dtype));
    return Error::InvalidArgument;
  }
  if (static_cast<size_t>(t.numel()) != info.numel) {
    ET_LOG(Error, "QnnDelegate graph '%s': %s %zu (tensor '%s') has %zu elements, graph expects %zu %s",
           g.name().c_str(), what, index, info.name.c_str(), static_cast<size_t>(t.numel()), info.numel,
           engine::dims_to_string(info.dims).c_str());
    return Error::InvalidArgument;
  }
  ET_CHECK_OK_OR_RETURN_ERROR(check_dim_order(g, t, index, info, what));
  *data = t.mutable_data_ptr();
  if (*data == nullptr && info.nbytes != 0) {
    ET_LOG(Error, "QnnDelegate graph '%s': %s %zu (tensor '%s') has no data", g.name().c_str(), what, index,
           info.name.c_str());
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

}  // namespace

size_t threads_for_performance_mode(PerformanceMode mode) {
  const size_t all = engine::ThreadPool::instance().max_threads();
  switch (mode) {
    case PerformanceMode::kHtpPowerSaver:
    case PerformanceMode::kHtpLowPowerSaver:
    case PerformanceMode::kHtpHighPowerSaver:
      return 1;
    case PerformanceMode::kHtpLowBalanced:
    case PerformanceMode::kHtpBalanced:
      return std::min(all, std::max<size_t>(2, all / 2));
    case PerformanceMode::kHtpDefault:
    case PerformanceMode::kHtpSustainedHighPerformance:
    case PerformanceMode::kHtpBurst:
    case PerformanceMode::kHtpHighPerformance:
      break;
  }
  return all;
}

namespace {

// Live handles, so that destroy of an unknown or already destroyed handle is a no-op.
std::mutex g_handles_mutex;
std::vector<QnnDelegateHandle*> g_handles;

void register_handle(QnnDelegateHandle* h) {
  std::lock_guard<std::mutex> lock(g_handles_mutex);
  g_handles.push_back(h);
}

bool unregister_handle(QnnDelegateHandle* h) {
  std::lock_guard<std::mutex> lock(g_handles_mutex);
  auto it = std::find(g_handles.begin(), g_handles.end(), h);
  if (it == g_handles.end()) return false;
  g_handles.erase(it);
  return true;
}

// The graph a delegate runs: the one its compile spec names, else the one
// named like the method, else the first.
engine::GraphExecutor* select_graph(const QnnContext& ctx, const CompileOptions& options, const char* method_name) {
  if (options.graph_names.size() == 1) {
    if (auto* g = ctx.find_graph(options.graph_names[0].c_str())) return g;
  }
  if (auto* g = ctx.find_graph(method_name)) return g;
  return ctx.graphs.front().get();
}

// The QNN graph a delegate runs (same rule as select_graph).
qnn::QnnGraphRunner* select_qnn_graph(const qnn::QnnLoadedContext& ctx, const CompileOptions& options,
                                      const char* method_name) {
  if (options.graph_names.size() == 1) {
    if (auto* g = ctx.find_graph(options.graph_names[0].c_str())) return g;
  }
  if (auto* g = ctx.find_graph(method_name)) return g;
  return ctx.graph(0);
}

HeapProfileRequest heap_request(const CompileOptions& options) {
  const RuntimeOptionValues values = RuntimeOptions::instance().snapshot();
  HeapProfileRequest r;
  r.path_set = values.heap_profiling_path.has_value();
  r.path = values.heap_profiling_path.value_or(std::string());
  r.profile_level = static_cast<int>(effective_options(options).profile_level);
  return r;
}

// Dumped tensors of a graph: readable APP_READ tensors (arena) and graph outputs (caller buffers).
engine::Status make_dumper(const engine::GraphExecutor& g, std::unique_ptr<TensorDumper>& out) {
  if (g.readable_ids().empty()) return engine::Status::Ok();
  std::vector<DumpSource> sources;
  for (uint32_t id : g.readable_ids()) sources.push_back({&g.tensor_info(id), g.tensor_data(id), -1});
  for (size_t i = 0; i < g.num_outputs(); ++i) sources.push_back({&g.output_info(i), nullptr, int(i)});
  return TensorDumper::build(g.name(), sources, out);
}

// The same rows on the QNN engine: its readable APP_READ tensors (buffers bound at init)
// and the graph outputs, described like the host engine describes them.
engine::Status make_qnn_dumper(qnn::QnnGraphRunner& g, std::unique_ptr<TensorDumper>& out) {
  if (g.num_readables() == 0) return engine::Status::Ok();
  std::vector<DumpSource> sources;
  for (size_t i = 0; i < g.num_readables(); ++i) {
    sources.push_back({&g.readable_info(i), g.readable_data(i), -1});
  }
  for (size_t i = 0; i < g.num_outputs(); ++i) sources.push_back({&g.output_info(i), nullptr, int(i)});
  return TensorDumper::build(g.name(), sources, out);
}

// The runner's --shared_buffer (any program, whatever its compile spec): $QNN_DELEGATE_SHARED_BUFFER=1.
// The host engine reads and writes the caller's buffers directly and ignores it.
bool shared_buffer_from_env() {
  const char* env = std::getenv("QNN_DELEGATE_SHARED_BUFFER");
  return env != nullptr && std::strcmp(env, "1") == 0;
}

// QNN graph of a new handle: its dumper, and the profile handle of the level in effect now
// (created here, not on the execute path).
engine::Status prepare_qnn_graph(QnnDelegateHandle& h) {
  QNN_RETURN_IF_ERROR(make_qnn_dumper(*h.qnn_graph, h.dumper));
  std::lock_guard<std::mutex> lock(h.context->execute_mutex);
  if (h.options.shared_buffer || shared_buffer_from_env()) QNN_RETURN_IF_ERROR(h.qnn_graph->enable_shared_buffers());
  return h.qnn_graph->prepare_profile(static_cast<int>(effective_options(h.options).profile_level));
}

void log_init(const QnnDelegateHandle& h, const char* method) {
  if (h.qnn_graph != nullptr) {
    ET_LOG(Info, "QnnDelegate: method '%s' runs graph '%s' on QNN (context binary %zu bytes)", method,
           h.qnn_graph->name().c_str(), h.context->qnn->binary_size());
    return;
  }
  ET_LOG(Info,
         "QnnDelegate: method '%s' runs graph '%s' (%zu ops) of context %016llx "
         "(%zu graphs, %zu delegates share it)",
         method, h.graph->name().c_str(), h.graph->num_ops(), (unsigned long long)h.context->signature,
         h.context->graphs.size(), h.context->refcount);
}

Error parse_delegate_options(ArrayRef<CompileSpec> compile_specs, CompileOptions& options) {
  const CompileSpec* spec = find_spec(compile_specs, kCompileSpecKey);
  if (spec == nullptr) return Error::Ok;
  const engine::Status s = parse_compile_options(spec->value.buffer, spec->value.nbytes, options);
  if (!s.ok()) {
    ET_LOG(Error, "QnnDelegate: %s", s.message.c_str());
    return to_et_error(s.kind);
  }
  return Error::Ok;
}

}  // namespace

size_t live_handle_count() {
  std::lock_guard<std::mutex> lock(g_handles_mutex);
  return g_handles.size();
}

bool QnnDelegateBackend::is_available() const { return true; }

Result<DelegateHandle*> QnnDelegateBackend::init(BackendInitContext& context, FreeableBuffer* processed,
                                                 ArrayRef<CompileSpec> compile_specs) const {
  if (processed == nullptr || processed->data() == nullptr) {
    ET_LOG(Error, "QnnDelegate: no processed payload");
    return Error::InvalidProgram;
  }
  CompileOptions options;
  ET_CHECK_OK_OR_RETURN_ERROR(parse_delegate_options(compile_specs, options));
  auto* handle = new (std::nothrow) QnnDelegateHandle();
  if (handle == nullptr) return Error::MemoryAllocationFailed;
  engine::ThreadPool::instance();  // workers are created here, never on the execute path
  EngineChoice engine = static_cast<EngineChoice>(
      RuntimeOptions::instance().snapshot().engine.value_or(static_cast<int>(default_engine())));
  qnn::QnnLibrary::set_forward_level(static_cast<int>(effective_options(options).log_level));
  const engine::Status s = ContextCache::instance().acquire(
      processed->data(), processed->size(), engine_options_from_env(), heap_request(options), &handle->context, engine);
  if (!s.ok()) {
    ET_LOG(Error, "QnnDelegate init failed: %s", s.message.c_str());
    delete handle;
    return to_et_error(s.kind);
  }
  processed->Free();  // weights were copied into the engine
  handle->options = std::move(options);
  const char* method = context.get_method_name();
  engine::Status prepared;
  if (handle->context->qnn != nullptr) {
    handle->qnn_graph = select_qnn_graph(*handle->context->qnn, handle->options, method);
    prepared = prepare_qnn_graph(*handle);
  } else {
    handle->graph = select_graph(*handle->context, handle->options, method);
    prepared = make_dumper(*handle->graph, handle->dumper);
  }
  if (!prepared.ok()) {
    ET_LOG(Error, "QnnDelegate init failed: %s", prepared.message.c_str());
    ContextCache::instance().release(handle->context);
    delete handle;
    return to_et_error(prepared.kind);
  }
  register_handle(handle);
  if (log_enabled(kLogLevelInfo, handle->options)) log_init(*handle, method ? method : "?");
  return handle;
}

Error QnnDelegateBackend::execute(BackendExecutionContext& context, DelegateHandle* handle, Span<EValue*> args) const {
  if (handle == nullptr) return Error::InvalidState;
  auto* h = static_cast<QnnDelegateHandle*>(handle);
  if (h->qnn_graph != nullptr) {
    const EffectiveOptions eo = effective_options(h->options);
    std::lock_guard<std::mutex> lock(h->context->execute_mutex);
    return execute_on_qnn(context, *h->qnn_graph, static_cast<int>(eo.profile_level), args, h->dumper.get());
  }
  engine::GraphExecutor& g = *h->graph;
  GraphArgs bound;
  ET_CHECK_OK_OR_RETURN_ERROR(bind_graph_args(
      g.name(), "", args, g.num_inputs(), g.num_outputs(),
      [&](const EValue* arg, size_t i, bool is_output, void** data) {
        return is_output ? check_tensor_arg(g, arg, i, g.output_info(i), "output", data)
                         : check_tensor_arg(g, arg, i, g.input_info(i), "input", data);
      },
      bound));
  void* const* in_ptrs = bound.inputs;
  void* const* out_ptrs = bound.outputs;
  const EffectiveOptions eo = effective_options(h->options);
  if (eo.log_level >= kLogLevelDebug) {
    ET_LOG(Info, "QnnDelegate: execute graph '%s' (profile level %d, performance mode %d)", g.name().c_str(),
           static_cast<int>(eo.profile_level), static_cast<int>(eo.performance_mode));
  }
  engine::ScopedThreadLimit threads(threads_for_performance_mode(eo.performance_mode));
  executorch::runtime::EventTracer* tracer = context.event_tracer();
  engine::Status s;
  {
    std::lock_guard<std::mutex> lock(h->context->execute_mutex);
    if (eo.profile_level == kProfileOff || tracer == nullptr) {
      s = g.execute(in_ptrs, out_ptrs);
    } else {
      ExecuteProfiler profiler(tracer, g, eo.profile_level);
      profiler.graph_started();
      s = g.execute(in_ptrs, out_ptrs, profiler.op_observer());
      profiler.graph_finished();
    }
    if (s.ok() && h->dumper != nullptr && TensorDumper::wanted(tracer)) h->dumper->log(tracer, out_ptrs);
  }
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
  if (h == nullptr || !unregister_handle(h)) return;  // unknown or already destroyed
  ContextCache::instance().release(h->context);       // the last user frees graphs, then the context
  delete h;
}

QnnDelegateBackend& backend_instance() {
  static QnnDelegateBackend backend;
  return backend;
}

namespace {
const executorch::runtime::Error kRegistered =
    executorch::runtime::register_backend(executorch::runtime::Backend{kBackendName, &backend_instance()});
}  // namespace

}  // namespace runtime
}  // namespace qnn_delegate
