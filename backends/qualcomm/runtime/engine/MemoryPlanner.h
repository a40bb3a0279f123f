// Memory plan of NATIVE tensors: one arena, offsets by lifetime, freed space
// reused (greedy by size), every offset 64-byte aligned.
#pragma once

#include <cstddef>
#include <vector>

namespace qnn_delegate {
namespace engine {

struct BufferLifetime {
  size_t bytes = 0;
  size_t first_step = 0;  // step that writes it
  size_t last_step = 0;   // last step that reads it
};

struct MemoryPlan {
  std::vector<size_t> offsets;  // one per BufferLifetime
  size_t arena_bytes = 0;
};

MemoryPlan plan_memory(const std::vector<BufferLifetime>& buffers);

}  // namespace engine
}  // namespace qnn_delegate
