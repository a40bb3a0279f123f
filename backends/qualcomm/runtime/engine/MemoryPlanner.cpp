#include "backends/qualcomm/runtime/engine/MemoryPlanner.h"

#include <algorithm>
#include <numeric>

#include "backends/qualcomm/runtime/engine/Allocator.h"

namespace qnn_delegate {
namespace engine {

namespace {

bool lifetimes_overlap(const BufferLifetime& a, const BufferLifetime& b) {
  return a.first_step <= b.last_step && b.first_step <= a.last_step;
}

struct Placed {
  size_t offset;
  size_t end;
};

// Lowest aligned offset where [offset, offset+bytes) avoids all `busy` ranges.
size_t first_fit(std::vector<Placed>& busy, size_t bytes) {
  std::sort(busy.begin(), busy.end(), [](const Placed& a, const Placed& b) { return a.offset < b.offset; });
  size_t candidate = 0;
  for (const Placed& p : busy) {
    if (candidate + bytes <= p.offset) break;
    candidate = std::max(candidate, align_up(p.end));
  }
  return candidate;
}

}  // namespace

MemoryPlan plan_memory(const std::vector<BufferLifetime>& buffers) {
  MemoryPlan plan;
  plan.offsets.assign(buffers.size(), 0);
  std::vector<size_t> order(buffers.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return buffers[a].bytes > buffers[b].bytes; });
  std::vector<size_t> placed;
  std::vector<Placed> busy;
  for (size_t idx : order) {
    const size_t bytes = align_up(std::max<size_t>(buffers[idx].bytes, 1));
    busy.clear();
    for (size_t other : placed) {
      if (lifetimes_overlap(buffers[idx], buffers[other])) {
        busy.push_back(
            {plan.offsets[other], plan.offsets[other] + align_up(std::max<size_t>(buffers[other].bytes, 1))});
      }
    }
    const size_t offset = first_fit(busy, bytes);
    plan.offsets[idx] = offset;
    plan.arena_bytes = std::max(plan.arena_bytes, offset + bytes);
    placed.push_back(idx);
  }
  return plan;
}

}  // namespace engine
}  // namespace qnn_delegate
