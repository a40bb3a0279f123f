#include "backends/qualcomm/runtime/HeapProfiler.h"

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
  std::string session_path;  // non-empty while a profiling session is open
};

HeapProfileState& state() {
  static HeapProfileState s;
  return s;
}

void write_checkpoint(const std::string& path, const char* mode, const char* checkpoint) {
  std::FILE* f = std::fopen(path.c_str(), mode);
  if (f == nullptr) {
    ET_LOG(Error, "QnnDelegate: cannot open heap-profiling file '%s'", path.c_str());
    return;
  }
  std::fprintf(f, "%s(bytes),%zu\n", checkpoint, engine::TrackingAllocator::process_bytes_in_use());
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
    ET_LOG(Error, "QnnDelegate warning: heap profiling to '%s' needs a profile level other than "
           "off (qnn_runtime_profile_level); no heap checkpoints", r.path.c_str());
    return std::string();
  }
  return r.path;
}

} // namespace

void HeapProfiler::context_creating(const HeapProfileRequest& request) {
  HeapProfileState& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.live++ != 0) return;
  s.session_path = session_path_for(request);
  if (!s.session_path.empty()) write_checkpoint(s.session_path, "w", kBeforeCheckpoint);
}

void HeapProfiler::context_creation_failed() {
  HeapProfileState& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.live > 0) --s.live;
  if (s.live == 0) s.session_path.clear();  // the failed first context opened no session
}

void HeapProfiler::context_freed() {
  HeapProfileState& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.live == 0) return;
  if (--s.live != 0) return;
  if (!s.session_path.empty()) write_checkpoint(s.session_path, "a", kAfterCheckpoint);
  s.session_path.clear();
}

size_t HeapProfiler::live_contexts() {
  HeapProfileState& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  return s.live;
}

} // namespace runtime
} // namespace qnn_delegate
