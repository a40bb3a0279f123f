// Helpers of qnn_executor_runner: ExecuTorch error and tag names, the log filter,
// and the raw-file I/O.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include <executorch/runtime/core/error.h>
#include <executorch/runtime/core/tag.h>

namespace qnn_delegate {
namespace runner {

// "NotFound", "InvalidProgram", ... for an ExecuTorch error code ("Unknown(0x7f)" otherwise).
std::string error_name(executorch::runtime::Error e);
// "Tensor", "Int", ... for an EValue tag.
const char* tag_name(executorch::runtime::Tag tag);
// Drops the Info lines ExecuTorch's thread pool prints from cpuinfo_utils.cpp unless
// `show_cpuinfo_lines`; every other log message goes to the default emitter.
void install_log_filter(bool show_cpuinfo_lines);

// mkdir -p; false (with a message) when it cannot be created or is not a directory.
bool make_output_folder(const std::string& path);
// Each line: the raw files of one inference.
bool read_input_list(const std::string& path, std::vector<std::vector<std::string>>& out);
// Reads exactly `nbytes` (the file must have that size).
bool read_file_exact(const std::string& path, void* dst, size_t nbytes);
bool write_bytes(const std::string& path, const void* data, size_t nbytes, const char* what);

}  // namespace runner
}  // namespace qnn_delegate
