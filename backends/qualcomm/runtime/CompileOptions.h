// Compile options carried in the "qnn_compile_spec" CompileSpec
// (QnnExecuTorchOptions flatbuffer, qc_compiler_spec.fbs).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "backends/qualcomm/runtime/engine/Status.h"

namespace qnn_delegate {
namespace runtime {

inline constexpr char kCompileSpecKey[] = "qnn_compile_spec";

struct CompileOptions {
  int log_level = 1;         // kLogLevelError
  int profile_level = 0;     // kProfileOff
  int performance_mode = 2;  // kHtpBurst
  bool dump_intermediate_outputs = false;
  std::vector<std::string> graph_names;
};

// Parses the options blob; an empty blob gives the defaults.
engine::Status parse_compile_options(const void* data, size_t size, CompileOptions& out);

} // namespace runtime
} // namespace qnn_delegate
