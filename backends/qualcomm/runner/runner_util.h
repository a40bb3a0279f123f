// Helpers of the runners (qnn_executor_runner, qnn_llama_runner): ExecuTorch error and tag
// names, the log filter, owned zeroed buffers and the raw-file I/O.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
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

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<uint8_t, FreeDeleter>;
// calloc: zero pages are mapped lazily, so a large buffer costs nothing until used; a null
// Buffer when the memory is not there.
inline Buffer zeroed(size_t nbytes) { return Buffer(static_cast<uint8_t*>(std::calloc(nbytes ? nbytes : 1, 1))); }

// mkdir -p; false (with a message) when it cannot be created or is not a directory.
bool make_output_folder(const std::string& path);
// Each line: the raw files of one inference.
bool read_input_list(const std::string& path, std::vector<std::vector<std::string>>& out);
// Reads exactly `nbytes` (the file must have that size).
bool read_file_exact(const std::string& path, void* dst, size_t nbytes);
bool write_bytes(const std::string& path, const void* data, size_t nbytes, const char* what);

}  // namespace runner
}  // namespace qnn_delegate
