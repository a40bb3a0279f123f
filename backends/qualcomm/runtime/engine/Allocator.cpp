#include "backends/qualcomm/runtime/engine/Allocator.h"

#include <cstdlib>
#include <cstring>

namespace qnn_delegate {
namespace engine {

namespace {
std::atomic<size_t> g_process_bytes{0};
}

void* TrackingAllocator::allocate(size_t bytes) {
  const size_t rounded = align_up(bytes == 0 ? 1 : bytes);
  void* p = std::aligned_alloc(kAlignment, rounded);
  if (p == nullptr) return nullptr;
  in_use_ += bytes;
  total_ += bytes;
  if (in_use_ > peak_) peak_ = in_use_;
  g_process_bytes += bytes;
  return p;
}

void TrackingAllocator::release(void* ptr, size_t bytes) {
  if (ptr == nullptr) return;
  std::free(ptr);
  in_use_ -= bytes;
  g_process_bytes -= bytes;
}

size_t TrackingAllocator::process_bytes_in_use() { return g_process_bytes.load(); }

}  // namespace engine
}  // namespace qnn_delegate
