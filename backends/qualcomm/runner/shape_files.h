// --input_shape_path / --output_shape_path of qnn_executor_runner (upstream's format): one line
// per method input / output, its dims separated by ", " (spaces or commas accepted).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace qnn_delegate {
namespace runner {

using Shape = std::vector<int32_t>;

// False (message on stderr naming the file and line) for a missing file, a non-integer or
// negative dim, or no line at all.
bool read_shape_file(const std::string& path, const char* flag, std::vector<Shape>& out);

// Bytes of a tensor of `shape` with elements of `element_size` bytes; false on overflow.
bool shape_bytes(const Shape& shape, size_t element_size, size_t& out);

}  // namespace runner
}  // namespace qnn_delegate
