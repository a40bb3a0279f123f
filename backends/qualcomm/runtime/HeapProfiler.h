// Heap checkpoints: a process-wide count of live contexts under a static
// mutex. The engine heap in use is sampled when the first context starts to be
// created (the baseline). Once that context was really created, the file is
// truncated and `before_context_created` = the baseline is written; a first
// context that fails to load writes nothing and leaves the file untouched. When
// the last context is freed, `after_context_freed` is appended. One
// `<checkpoint>(bytes),<value>` line each.
// A session needs a non-empty path and a profile level other than off. When
// they are set at run time while contexts are already live (no session open),
// the session opens at that moment: the file gets the baseline sampled when the
// first of those contexts was created, so the two lines keep their meaning.
// Otherwise nothing is written (a warning says why when a path was set).
//
// What is measured depends on the engine of the session's first context. Host
// engine: the bytes our engine's allocator holds (weights, packed weights, arenas,
// scratch). QNN engine: the process's malloc heap in use (glibc mallinfo2 uordblks +
// hblkhd), which includes what Qualcomm's library allocates in contextCreateFromBinary
// / graphRetrieve and frees in contextFree, but also anything else the process
// allocates meanwhile (e.g. Python objects).
#pragma once

#include <cstddef>
#include <optional>
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
  // Before a context is created: counts it; the first one samples the baseline.
  static void context_creating(const HeapProfileRequest& request);
  // The context announced by context_creating exists: the first one opens the session
  // (`on_qnn`: it runs on the QNN engine, the session measures the process heap).
  static void context_created(bool on_qnn = false);
  // The creation announced by context_creating failed: the count is rolled back.
  static void context_creation_failed();
  // After a context was freed: the last one closes the session.
  static void context_freed();
  // Run-time options changed (path and profile level set at run time, if any):
  // opens a session when contexts are live and none is open.
  static void runtime_options_changed(const std::optional<std::string>& path, const std::optional<int>& profile_level);
  static size_t live_contexts();
  // Bytes of the process's malloc heap in use (0 where the C library cannot say).
  static size_t process_heap_in_use();

  static constexpr const char* kBeforeCheckpoint = "before_context_created";
  static constexpr const char* kAfterCheckpoint = "after_context_freed";
};

}  // namespace runtime
}  // namespace qnn_delegate
