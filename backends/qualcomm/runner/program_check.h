// Checks of a .pte that ExecuTorch's own verification does not make: a
// flatbuffer table may legally omit any field, and ExecuTorch's loader
// dereferences some of them without a null check (a delegate's id, processed
// data reference, compile specs and their keys / values), so a corrupted
// vtable that drops one crashes the process. Run after Program::load.
#pragma once

#include <cstddef>
#include <string>

namespace qnn_delegate {
namespace runner {

// True when every field ExecuTorch's loader relies on is present and in range;
// otherwise false with `why` naming the plan, delegate and field.
bool check_program_fields(const std::string& path, size_t file_size, std::string& why);

}  // namespace runner
}  // namespace qnn_delegate
