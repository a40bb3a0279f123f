// Heap checkpoints: a process-wide count of live contexts under a static
// mutex. When the first context is created, the engine heap in use is recorded
// as `before_context_created` (the file is truncated); when the last one is
// freed, `after_context_freed` is appended. One `<checkpoint>(bytes),<value>`
// line each. Needs an effective profile level other than off and a non-empty
// path; otherwise nothing is written (a warning says why when a path was set).
#pragma once

#include <cstddef>
#include <string>

namespace qnn_delegate {
namespace runtime {

struct HeapProfileRequest {
  bool path_set = false;  // qnn_runtime_heap_profiling_path was set at run time
  std::string path;
  int profile_level = 0;  // effective profile level of the context being created
};

class HeapProfiler {
 public:
  // Before a context is created: counts it; the first one records the checkpoint.
  static void context_creating(const HeapProfileRequest& request);
  // The creation announced by context_creating failed: the count is rolled back.
  static void context_creation_failed();
  // After a context was freed: the last one records the checkpoint.
  static void context_freed();
  static size_t live_contexts();

  static constexpr const char* kBeforeCheckpoint = "before_context_created";
  static constexpr const char* kAfterCheckpoint = "after_context_freed";
};

} // namespace runtime
} // namespace qnn_delegate
