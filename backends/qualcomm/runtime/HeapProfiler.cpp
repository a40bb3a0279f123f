#include "backends/qualcomm/runtime/HeapProfiler.h"

#include <malloc.h>

#include <cstdio>
#include <mutex>

#include <executorch/runtime/platform/log.h>

#include "backends/qualcomm/runtime/engine/Allocator.h"

namespace qnn_delegate {
namespace runtime {

namespace {

struct HeapProfileState {
  std::mutex mutex;
  size_t live = 0;
  size_t baseline = 0;          // engine heap in use when the first live context started to be created
  size_t process_baseline = 0;  // process heap in use at that moment
  bool process_heap = false;    // the session measures the process heap (first context on QNN)
  int first_level = 0;          // effective profile level of that context
  bool first_pending = false;   // the first context is being created
  std::string pending_path;     // its session path, opened once it exists
  std::string session_path;     // non-empty while a profiling session is open
};

HeapProfileState& state() {
  static HeapProfileState s;
  return s;
}

void write_checkpoint(const std::string& path, const char* mode, const char* checkpoint, size_t value) {
  std::FILE* f = std::fopen(path.c_str(), mode);
  if (f == nullptr) {
    ET_LOG(Error, "QnnDelegate: cannot open heap-profiling file '%s'", path.c_str());
    return;
  }
  std::fprintf(f, "%s(bytes),%zu\n", checkpoint, value);
  std::fclose(f);
}

// Path of the session to open, or "" (with a warning when one was asked for).
std::string session_path_for(const HeapProfileRequest& r) {
  if (!r.path_set) return std::string();
  if (r.path.empty()) {
    ET_LOG(Error, "QnnDelegate warning: heap profiling path is empty; no heap checkpoints");
    return std::string();
  }
  if (r.profile_level == 0) {
    ET_LOG(Error,
           "QnnDelegate warning: heap profiling to '%s' needs a profile level other than "
           "off (qnn_runtime_profile_level); no heap checkpoints",
           r.path.c_str());
    return std::string();
  }
  return r.path;
}

void open_session(HeapProfileState& s, const std::string& path) {
  s.session_path = path;
  write_checkpoint(path, "w", HeapProfiler::kBeforeCheckpoint, s.process_heap ? s.process_baseline : s.baseline);
}

size_t heap_in_use(const HeapProfileState& s) {
  return s.process_heap ? HeapProfiler::process_heap_in_use() : engine::TrackingAllocator::process_bytes_in_use();
}

}  // namespace

void HeapProfiler::context_creating(const HeapProfileRequest& request) {
  HeapProfileState& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.live++ != 0) return;
  s.baseline = engine::TrackingAllocator::process_bytes_in_use();
  s.process_baseline = process_heap_in_use();
  s.process_heap = false;
  s.first_level = request.profile_level;
  s.first_pending = true;
  s.pending_path = session_path_for(request);
}

void HeapProfiler::context_created(bool on_qnn) {
  HeapProfileState& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (!s.first_pending) return;
  s.first_pending = false;
  s.process_heap = on_qnn;
  if (!s.pending_path.empty() && s.session_path.empty()) open_session(s, s.pending_path);
  s.pending_path.clear();
}

void HeapProfiler::context_creation_failed() {
  HeapProfileState& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.live > 0) --s.live;
  if (s.live != 0) return;
  s.first_pending = false;  // the failed first context opened no session and wrote nothing
  s.pending_path.clear();
}

void HeapProfiler::context_freed() {
  HeapProfileState& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.live == 0) return;
  if (--s.live != 0) return;
  if (!s.session_path.empty()) {
    write_checkpoint(s.session_path, "a", kAfterCheckpoint, heap_in_use(s));
  }
  s.session_path.clear();
}

void HeapProfiler::runtime_options_changed(const std::optional<std::string>& path,
                                           const std::optional<int>& profile_level) {
  HeapProfileState& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.live == 0 || s.first_pending || !s.session_path.empty()) return;
  if (!path || path->empty() || profile_level.value_or(s.first_level) == 0) return;
  open_session(s, *path);
}

size_t HeapProfiler::process_heap_in_use() {
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
  const struct mallinfo2 m = ::mallinfo2();
  return m.uordblks + m.hblkhd;
#elif defined(__ANDROID__) || defined(__GLIBC__)
  const struct mallinfo m = ::mallinfo();
  return size_t(m.uordblks) + size_t(m.hblkhd);
#else
  return 0;
#endif
}

size_t HeapProfiler::live_contexts() {
  HeapProfileState& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  return s.live;
}

}  // namespace runtime
}  // namespace qnn_delegate
