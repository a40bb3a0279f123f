#include "backends/qualcomm/runtime/TensorDump.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

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
    case D::FLOAT_32:
      out = ScalarType::Float;
      return true;
    case D::FLOAT_16:
      out = ScalarType::Half;
      return true;
    case D::INT_8:
    case D::SFIXED_POINT_8:
      out = ScalarType::Char;
      return true;
    case D::UINT_8:
    case D::UFIXED_POINT_8:
      out = ScalarType::Byte;
      return true;
    case D::BOOL_8:
      out = ScalarType::Bool;
      return true;
    case D::INT_16:
    case D::SFIXED_POINT_16:
      out = ScalarType::Short;
      return true;
    case D::UINT_16:
    case D::UFIXED_POINT_16:
      out = ScalarType::UInt16;
      return true;
    case D::INT_32:
    case D::UINT_32:
    case D::SFIXED_POINT_32:
      out = ScalarType::Int;
      return true;
    case D::INT_64:
      out = ScalarType::Long;
      return true;
    default:
      return false;
  }
}

}  // namespace

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

namespace {

// Stored value `i` of a quantized / fp16 source as a float (quantized: the stored integer).
float stored_value(const void* data, engine::DType dt, size_t i) {
  using D = engine::DType;
  switch (dt) {
    case D::FLOAT_16:
      return static_cast<float>(static_cast<const executorch::aten::Half*>(data)[i]);
    case D::SFIXED_POINT_8:
    case D::INT_8:
      return static_cast<const int8_t*>(data)[i];
    case D::UFIXED_POINT_8:
    case D::UINT_8:
      return static_cast<const uint8_t*>(data)[i];
    case D::SFIXED_POINT_16:
    case D::INT_16:
      return static_cast<const int16_t*>(data)[i];
    case D::UFIXED_POINT_16:
    case D::UINT_16:
      return static_cast<const uint16_t*>(data)[i];
    case D::SFIXED_POINT_32:
    case D::INT_32:
      return static_cast<float>(static_cast<const int32_t*>(data)[i]);
    default:
      return static_cast<const float*>(data)[i];
  }
}

// A dim order that permutes the dims (a permutation of 0..rank-1 other than the identity).
bool is_permutation(const std::vector<uint8_t>& order, size_t rank) {
  if (order.size() != rank) return false;
  std::vector<bool> seen(rank, false);
  bool identity = true;
  for (size_t i = 0; i < rank; ++i) {
    if (order[i] >= rank || seen[order[i]]) return false;
    seen[order[i]] = true;
    identity = identity && order[i] == i;
  }
  return !identity;
}

}  // namespace

// Logged as the edge node: logical dims (the payload's dim order undone), float for fp16 and
// per-tensor quantized tensors (real = scale * (q + offset)).
void TensorDumper::plan_conversion(const engine::TensorInfo& info, Entry& entry) {
  using D = engine::DType;
  const size_t rank = info.dims.size();
  std::vector<size_t> stored_strides(rank, 1);
  for (size_t i = rank; i-- > 1;) stored_strides[i - 1] = stored_strides[i] * info.dims[i];
  const bool permuted = is_permutation(info.dim_order, rank);
  entry.sizes.resize(rank);
  entry.source_strides.resize(rank);
  for (size_t p = 0; p < rank; ++p) {
    const size_t d = permuted ? info.dim_order[p] : p;
    entry.sizes[d] = static_cast<executorch::aten::SizesType>(info.dims[p]);
    entry.source_strides[d] = stored_strides[p];
  }
  entry.dequantize = (info.dtype == D::FLOAT_16 || info.quant.per_tensor());
  if (entry.dequantize && info.quant.per_tensor()) {
    entry.scale = info.quant.scale;
    entry.offset = info.quant.offset;
  }
  const size_t element = entry.dequantize ? sizeof(float) : engine::storage_bytes(info.dtype, 1);
  if (permuted || entry.dequantize) entry.converted.assign(entry.numel * element, 0);
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
  entry.source = source.data;
  entry.source_dtype = info.dtype;
  entry.numel = info.numel;
  plan_conversion(info, entry);
  if (entry.dequantize) type = ScalarType::Float;
  entry.dim_order.resize(rank);
  entry.strides.resize(rank);
  executorch::aten::StridesType stride = 1;
  for (size_t i = rank; i-- > 0;) {
    entry.dim_order[i] = static_cast<executorch::aten::DimOrderType>(i);
    entry.strides[i] = stride;
    stride *= entry.sizes[i];
  }
  void* logged = entry.converted.empty() ? source.data : entry.converted.data();
  entry.impl.reset(new TensorImpl(type, static_cast<ssize_t>(rank), entry.sizes.data(), logged, entry.dim_order.data(),
                                  entry.strides.data()));
  return engine::Status::Ok();
}

// Source -> converted buffer in logical row-major order (an odometer over the logical dims).
void TensorDumper::convert(Entry& entry) {
  if (entry.converted.empty() || entry.source == nullptr) return;
  const size_t rank = entry.sizes.size();
  const size_t element = entry.dequantize ? sizeof(float) : entry.converted.size() / std::max<size_t>(entry.numel, 1);
  const auto* src = static_cast<const uint8_t*>(entry.source);
  auto* out_float = reinterpret_cast<float*>(entry.converted.data());
  size_t index[8] = {0};
  size_t offset = 0;  // source element offset of the current logical index
  for (size_t n = 0; n < entry.numel; ++n) {
    if (entry.dequantize) {
      const float q = stored_value(entry.source, entry.source_dtype, offset);
      out_float[n] = entry.source_dtype == engine::DType::FLOAT_16 ? q : entry.scale * (q + float(entry.offset));
    } else {
      std::memcpy(entry.converted.data() + n * element, src + offset * element, element);
    }
    for (size_t d = rank; d-- > 0;) {  // next logical index
      offset += entry.source_strides[d];
      if (++index[d] < static_cast<size_t>(entry.sizes[d])) break;
      offset -= entry.source_strides[d] * index[d];
      index[d] = 0;
    }
  }
}

// Placeholders after the last entry of each handle, up to the delegate's number of outputs.
void TensorDumper::add_placeholders(size_t delegate_outputs) {
  for (size_t i = 0; i < entries_.size();) {
    size_t j = i;
    while (j < entries_.size() && entries_[j].handle == entries_[i].handle) ++j;
    const size_t logged = j - i;
    entries_[j - 1].placeholders_after = delegate_outputs > logged ? delegate_outputs - logged : 0;
    bytes_per_execute_ += entries_[j - 1].placeholders_after * (sizeof(float) + kDebugBufferAlignment);
    i = j;
  }
  placeholder_.reset(new TensorImpl(ScalarType::Float, 1, &placeholder_size_, &placeholder_value_,
                                    &placeholder_dim_order_, &placeholder_stride_));
}

engine::Status TensorDumper::build(const std::string& graph_name, const std::vector<DumpSource>& sources,
                                   std::unique_ptr<TensorDumper>& out) {
  std::unique_ptr<TensorDumper> dumper(new TensorDumper());
  dumper->graph_name_ = graph_name;
  size_t delegate_outputs = 0;
  for (const DumpSource& source : sources) {
    if (source.output_index >= 0) ++delegate_outputs;
    const int64_t handle = source.info != nullptr ? debug_handle_from_name(source.info->name) : -1;
    if (handle < 0) continue;
    if (source.info->dims.size() > 8) {
      return engine::make_error(engine::ErrorKind::NotSupported, "dumped tensor '%s' has rank %zu (at most 8)",
                                source.info->name.c_str(), source.info->dims.size());
    }
    Entry entry;
    QNN_RETURN_IF_ERROR(make_entry(source, handle, entry));
    const size_t bytes = entry.impl->nbytes() + kDebugBufferAlignment;
    dumper->bytes_per_execute_ += bytes;
    // ExecuTorch logs the method outputs after the delegate: keep room for them too.
    if (entry.output_index >= 0) dumper->bytes_per_execute_ += bytes;
    dumper->entries_.push_back(std::move(entry));
  }
  // one handle's tensors (a multi-output op) together, in their order
  std::stable_sort(dumper->entries_.begin(), dumper->entries_.end(),
                   [](const Entry& a, const Entry& b) { return a.handle < b.handle; });
  dumper->add_placeholders(delegate_outputs);
  out = std::move(dumper);
  return engine::Status::Ok();
}

bool TensorDumper::wanted(EventTracer* tracer) {
  return tracer != nullptr && tracer->event_tracer_debug_level() == EventTracerDebugLogLevel::kIntermediateOutputs;
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
    ET_LOG(Error,
           "QnnDelegate warning: the ETDump debug buffer is full (%zu bytes left, graph "
           "'%s' needs %zu per execute for %zu dumped tensors and the outputs); logging into it "
           "stops here (the event tracer's debug level is set to no logging), the ETDump keeps "
           "what was logged before. Use a larger debug buffer (debug_buffer_size / "
           "--debug_buffer_size)",
           room, graph_name_.c_str(), bytes_per_execute_, entries_.size());
    return false;
  }
  for (Entry& entry : entries_) {
    if (entry.output_index >= 0) {
      entry.source = outputs[entry.output_index];
      if (entry.converted.empty()) entry.impl->set_data(outputs[entry.output_index]);
    }
    convert(entry);
    executorch::runtime::event_tracer_log_output_delegate<Tensor>(tracer, nullptr, entry.handle,
                                                                  Tensor(entry.impl.get()));
    for (size_t i = 0; i < entry.placeholders_after; ++i) {
      executorch::runtime::event_tracer_log_output_delegate<Tensor>(tracer, nullptr, entry.handle,
                                                                    Tensor(placeholder_.get()));
    }
  }
  return true;
}

}  // namespace runtime
}  // namespace qnn_delegate
