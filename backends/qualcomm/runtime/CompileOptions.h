// Compile options carried in the "qnn_compile_spec" CompileSpec
// (QnnExecuTorchOptions flatbuffer, qc_compiler_spec.fbs).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "backends/qualcomm/runtime/engine/Status.h"
#include "qc_compiler_spec_generated.h"

namespace qnn_delegate {
namespace runtime {

inline constexpr char kCompileSpecKey[] = "qnn_compile_spec";

// The option enums of qc_compiler_spec.fbs (flatc-generated, scoped).
using LogLevel = ::qnn_delegate::QnnExecuTorchLogLevel;
using ProfileLevel = ::qnn_delegate::QnnExecuTorchProfileLevel;
using PerformanceMode = ::qnn_delegate::QnnExecuTorchHtpPerformanceMode;

// Defaults: the .fbs defaults of QnnExecuTorchOptions / QnnExecuTorchHtpBackendOptions.
struct CompileOptions {
  LogLevel log_level = LogLevel::kLogLevelError;
  ProfileLevel profile_level = ProfileLevel::kProfileOff;
  PerformanceMode performance_mode = PerformanceMode::kHtpBurst;
  bool dump_intermediate_outputs = false;
  bool shared_buffer = false;  // graph I/O in buffers registered with QNN's memory API
  std::vector<std::string> graph_names;
};

// Parses the options blob; an empty blob gives the defaults.
engine::Status parse_compile_options(const void* data, size_t size, CompileOptions& out);

}  // namespace runtime
}  // namespace qnn_delegate
