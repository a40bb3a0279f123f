#include "backends/qualcomm/runtime/TensorDump.h"

#include <cstdint>

#include <executorch/devtools/etdump/etdump_flatcc.h>
#include <executorch/runtime/core/event_tracer_hooks_delegate.h>
#include <executorch/runtime/platform/log.h>

namespace qnn_delegate {
namespace runtime {

using executorch::aten::ScalarType;
using executorch::aten::Tensor;
using executorch::aten::TensorImpl;
using executorch::runtime::EventTracer;
using executorch::runtime::EventTracerDebugLogLevel;

namespace {

constexpr char kDebugIdMarker[] = "_debugID_";

// ScalarType of a stored dtype (quantized types as their storage integer); false if none.
bool scalar_type_of(engine::DType dt, ScalarType& out) {
  using D = engine::DType;
  switch (dt) {
    case D::FLOAT_32: out = ScalarType::Float; return true;
    case D::FLOAT_16: out = ScalarType::Half; return true;
    case D::INT_8: case D::SFIXED_POINT_8: out = ScalarType::Char; return true;
    case D::UINT_8: case D::UFIXED_POINT_8: out = ScalarType::Byte; return true;
    case D::BOOL_8: out = ScalarType::Bool; return true;
    case D::INT_16: case D::SFIXED_POINT_16: out = ScalarType::Short; return true;
    case D::UINT_16: case D::UFIXED_POINT_16: out = ScalarType::UInt16; return true;
    case D::INT_32: case D::UINT_32: case D::SFIXED_POINT_32: out = ScalarType::Int; return true;
    case D::INT_64: out = ScalarType::Long; return true;
    default: return false;
  }
}

} // namespace

int64_t debug_handle_from_name(const std::string& name) {
  const size_t pos = name.rfind(kDebugIdMarker);
  if (pos == std::string::npos) return -1;
  const size_t begin = pos + sizeof(kDebugIdMarker) - 1;
  if (begin >= name.size() || name.size() - begin > 9) return -1;
  int64_t handle = 0;
  for (size_t i = begin; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return -1;
    handle = handle * 10 + (name[i] - '0');
  }
  return handle;
}

engine::Status TensorDumper::make_entry(const DumpSource& source, int64_t handle, Entry& entry) {
  const engine::TensorInfo& info = *source.info;
  ScalarType type;
  if (!scalar_type_of(info.dtype, type)) {
    return engine::make_error(engine::ErrorKind::NotSupported,
                              "dumped tensor '%s' (debug handle %lld) has type %s, which ETDump cannot hold",
                              info.name.c_str(), static_cast<long long>(handle), engine::dtype_name(info.dtype));
  }
  const size_t rank = info.dims.size();
  entry.handle = static_cast<executorch::runtime::DebugHandle>(handle);
  entry.output_index = source.output_index;
  entry.sizes.assign(info.dims.begin(), info.dims.end());
  entry.dim_order.resize(rank);
  entry.strides.resize(rank);
  executorch::aten::StridesType stride = 1;
  for (size_t i = rank; i-- > 0;) {
    entry.dim_order[i] = static_cast<executorch::aten::DimOrderType>(i);
    entry.strides[i] = stride;
    stride *= static_cast<executorch::aten::StridesType>(info.dims[i]);
  }
  entry.impl.reset(new TensorImpl(type, static_cast<ssize_t>(rank), entry.sizes.data(), source.data,
                                  entry.dim_order.data(), entry.strides.data()));
  return engine::Status::Ok();
}

engine::Status TensorDumper::build(const std::string& graph_name, const std::vector<DumpSource>& sources,
                                   std::unique_ptr<TensorDumper>& out) {
  std::unique_ptr<TensorDumper> dumper(new TensorDumper());
  dumper->graph_name_ = graph_name;
  for (const DumpSource& source : sources) {
    const int64_t handle = source.info != nullptr ? debug_handle_from_name(source.info->name) : -1;
    if (handle < 0) continue;
    Entry entry;
    QNN_RETURN_IF_ERROR(make_entry(source, handle, entry));
    const size_t bytes = entry.impl->nbytes() + kDebugBufferAlignment;
    dumper->bytes_per_execute_ += bytes;
    // ExecuTorch logs the method outputs after the delegate: keep room for them too.
    if (entry.output_index >= 0) dumper->bytes_per_execute_ += bytes;
    dumper->entries_.push_back(std::move(entry));
  }
  out = std::move(dumper);
  return engine::Status::Ok();
}

bool TensorDumper::wanted(EventTracer* tracer) {
  return tracer != nullptr &&
         tracer->event_tracer_debug_level() == EventTracerDebugLogLevel::kIntermediateOutputs;
}

size_t TensorDumper::debug_buffer_room(EventTracer* tracer) {
  auto* gen = dynamic_cast<executorch::etdump::ETDumpGen*>(tracer);
  if (gen == nullptr) return SIZE_MAX;
  executorch::etdump::DataSinkBase* sink = gen->get_data_sink();
  if (sink == nullptr) return 0;
  auto* buffer = dynamic_cast<executorch::etdump::BufferDataSink*>(sink);
  if (buffer == nullptr) return SIZE_MAX;
  const executorch::runtime::Result<size_t> total = buffer->get_storage_size();
  if (!total.ok()) return SIZE_MAX;
  const size_t used = buffer->get_used_bytes();
  return *total > used ? *total - used : 0;
}

bool TensorDumper::log(EventTracer* tracer, void* const* outputs) {
  if (!wanted(tracer) || entries_.empty()) return true;
  const size_t room = debug_buffer_room(tracer);
  if (room < bytes_per_execute_) {
    // Any later write into the full buffer (ours or ExecuTorch's own output logging)
    // would abort the process: stop logging into it, keep what it holds.
    tracer->set_event_tracer_debug_level(EventTracerDebugLogLevel::kNoLogging);
    ET_LOG(Error, "QnnDelegate warning: the ETDump debug buffer is full (%zu bytes left, graph "
           "'%s' needs %zu per execute for %zu dumped tensors and the outputs); logging into it "
           "stops here (the event tracer's debug level is set to no logging), the ETDump keeps "
           "what was logged before. Use a larger debug buffer (debug_buffer_size / "
           "--debug_buffer_size)", room, graph_name_.c_str(), bytes_per_execute_, entries_.size());
    return false;
  }
  for (Entry& entry : entries_) {
    if (entry.output_index >= 0) entry.impl->set_data(outputs[entry.output_index]);
    executorch::runtime::event_tracer_log_output_delegate<Tensor>(tracer, nullptr, entry.handle,
                                                                  Tensor(entry.impl.get()));
  }
  return true;
}

} // namespace runtime
} // namespace qnn_delegate
