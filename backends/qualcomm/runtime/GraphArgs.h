// Binding of a delegate's args (graph inputs, then graph outputs) to data pointers,
// shared by the host engine and the QNN engine: the count check, the I/O limit and the
// per-arg check loop. The per-arg check (dtype, size, layout) stays with each engine.
#pragma once

#include <cstddef>
#include <string>

#include <executorch/runtime/core/error.h>
#include <executorch/runtime/core/evalue.h>
#include <executorch/runtime/core/span.h>
#include <executorch/runtime/platform/log.h>

namespace qnn_delegate {
namespace runtime {

// Most inputs / outputs a graph may have (the pointer arrays live on the stack).
inline constexpr size_t kMaxGraphIo = 256;

// Data pointers of one execute's args; no allocation.
struct GraphArgs {
  void* inputs[kMaxGraphIo];
  void* outputs[kMaxGraphIo];
};

// Checks that `args` holds `num_inputs` inputs then `num_outputs` outputs and fills `out`
// by calling `check_arg(const EValue* arg, size_t index, bool is_output, void** data)`
// (returns an Error) for each. Messages name the graph, then `engine` (e.g. "" or " (QNN)").
template <typename CheckArg>
executorch::runtime::Error bind_graph_args(const std::string& graph, const char* engine,
                                           executorch::runtime::Span<executorch::runtime::EValue*> args,
                                           size_t num_inputs, size_t num_outputs, CheckArg&& check_arg,
                                           GraphArgs& out) {
  if (args.size() != num_inputs + num_outputs) {
    ET_LOG(Error, "QnnDelegate graph '%s'%s: got %zu args, expected %zu inputs + %zu outputs", graph.c_str(), engine,
           args.size(), num_inputs, num_outputs);
    return executorch::runtime::Error::InvalidArgument;
  }
  if (num_inputs > kMaxGraphIo || num_outputs > kMaxGraphIo) {
    ET_LOG(Error,
           "QnnDelegate graph '%s'%s: %zu inputs / %zu outputs, at most %zu each are "
           "supported",
           graph.c_str(), engine, num_inputs, num_outputs, kMaxGraphIo);
    return executorch::runtime::Error::NotSupported;
  }
  for (size_t i = 0; i < num_inputs; ++i) {
    ET_CHECK_OK_OR_RETURN_ERROR(check_arg(args[i], i, false, &out.inputs[i]));
  }
  for (size_t i = 0; i < num_outputs; ++i) {
    ET_CHECK_OK_OR_RETURN_ERROR(check_arg(args[num_inputs + i], i, true, &out.outputs[i]));
  }
  return executorch::runtime::Error::Ok;
}

}  // namespace runtime
}  // namespace qnn_delegate
