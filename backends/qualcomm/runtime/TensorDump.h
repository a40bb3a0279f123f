// Intermediate tensor dumps into ETDump. With dump_intermediate_outputs in the
// compile spec, every tensor an op writes is APP_READ and named
// "<node>_debugID_<handle>". At init the dumper parses each handle once and
// prepares how to log it as the edge node it stands for: in the node's layout (a
// channel-last tensor carries its logical dim order in the payload and is logged
// permuted back) and dtype (quantized and fp16 tensors logged dequantized as
// float); a buffer for the converted copy is allocated then, so that after each
// execute, when the event tracer asks for intermediate outputs, it converts and
// logs every tensor under its debug handle without allocating.
// ExecuTorch's Inspector gives every event inside a delegate call the delegate's
// number of outputs k and reads the i-th of them for i < k from each event's
// list of logged tensors: each handle's tensors are therefore followed by
// one-element placeholders up to k (the Inspector keeps the first logged one;
// qnn_preprocess's debug-handle map pads the handle tuples to match).
// ExecuTorch's ETDumpGen aborts when its debug buffer is full, so each execute's
// tensors are logged only when all of them fit, with room left for the method
// outputs that ExecuTorch logs after the delegate. Otherwise nothing is logged,
// the tracer's debug level is set to no logging (no later write, ours or
// ExecuTorch's, can hit the full buffer) and one warning says so.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <executorch/runtime/core/event_tracer.h>
#include <executorch/runtime/core/exec_aten/exec_aten.h>

#include "backends/qualcomm/runtime/engine/Status.h"
#include "backends/qualcomm/runtime/engine/Tensor.h"

namespace qnn_delegate {
namespace runtime {

// One candidate: a graph tensor and where its data lives after an execute
// (`data` for arena tensors, else `output_index` into the caller's outputs).
struct DumpSource {
  const engine::TensorInfo* info = nullptr;
  void* data = nullptr;
  int output_index = -1;
};

// Debug handle carried by a tensor name ("..._debugID_<digits>"), or -1.
int64_t debug_handle_from_name(const std::string& name);

class TensorDumper {
 public:
  // Keeps the sources whose names carry a debug handle; error on a type it cannot log.
  static engine::Status build(const std::string& graph_name, const std::vector<DumpSource>& sources,
                              std::unique_ptr<TensorDumper>& out);

  size_t size() const { return entries_.size(); }
  bool empty() const { return entries_.empty(); }

  // True when `tracer` asks for intermediate outputs (the only case in which log() does anything).
  static bool wanted(executorch::runtime::EventTracer* tracer);

  // Logs every dumped tensor; `outputs` are the caller's output buffers of this execute.
  // Returns false (nothing logged) when the tracer's debug buffer cannot hold them all.
  bool log(executorch::runtime::EventTracer* tracer, void* const* outputs);

  // Debug-buffer bytes one execute's dump may take (each logged tensor and placeholder plus
  // its alignment, the graph outputs twice: ExecuTorch logs the method outputs after the
  // delegate).
  size_t bytes_per_execute() const { return bytes_per_execute_; }
  // Bytes `tracer`'s debug buffer can still take: SIZE_MAX when unknown (a tracer or
  // data sink other than ETDumpGen's buffer), 0 without a debug buffer.
  static size_t debug_buffer_room(executorch::runtime::EventTracer* tracer);
  // Debug buffers align each write to this many bytes (BufferDataSink's default).
  static constexpr size_t kDebugBufferAlignment = 64;

 private:
  struct Entry {
    executorch::runtime::DebugHandle handle = 0;
    int output_index = -1;
    const void* source = nullptr;  // arena data (graph outputs: set per execute)
    engine::DType source_dtype = engine::DType::FLOAT_32;
    size_t numel = 0;
    // conversion into `converted` (empty: the source is logged as is)
    bool dequantize = false;
    float scale = 1.f;
    int32_t offset = 0;
    std::vector<size_t> source_strides;  // element stride in the source of each logged dim
    std::vector<uint8_t> converted;
    // the logged tensor: logical sizes, contiguous
    std::vector<executorch::aten::SizesType> sizes;
    std::vector<executorch::aten::DimOrderType> dim_order;
    std::vector<executorch::aten::StridesType> strides;
    std::unique_ptr<executorch::aten::TensorImpl> impl;
    size_t placeholders_after = 0;  // placeholders logged after this entry (last of its handle)
  };
  static engine::Status make_entry(const DumpSource& source, int64_t handle, Entry& entry);
  static void plan_conversion(const engine::TensorInfo& info, Entry& entry);
  static void convert(Entry& entry);
  void add_placeholders(size_t delegate_outputs);

  std::vector<Entry> entries_;
  std::string graph_name_;
  size_t bytes_per_execute_ = 0;
  float placeholder_value_ = 0.f;
  executorch::aten::SizesType placeholder_size_ = 1;
  executorch::aten::DimOrderType placeholder_dim_order_ = 0;
  executorch::aten::StridesType placeholder_stride_ = 1;
  std::unique_ptr<executorch::aten::TensorImpl> placeholder_;
};

}  // namespace runtime
}  // namespace qnn_delegate
