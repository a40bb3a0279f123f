#include "backends/qualcomm/runtime/Profiler.h"

#include <cstdio>

#include <executorch/runtime/core/event_tracer_hooks_delegate.h>
#include <executorch/runtime/platform/clock.h>
#include <executorch/runtime/platform/platform.h>

#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#endif

#include "backends/qualcomm/runtime/RuntimeOptions.h"

namespace qnn_delegate {
namespace runtime {

uint64_t read_cycle_counter() {
#if defined(__x86_64__) || defined(__i386__)
  return __rdtsc();
#else
  return 0;
#endif
}

ExecuteProfiler::ExecuteProfiler(executorch::runtime::EventTracer* tracer, const engine::GraphExecutor& graph,
                                 ProfileLevel profile_level)
    : tracer_(tracer), graph_(graph), detailed_(profile_level >= kProfileDetailed) {}

void ExecuteProfiler::log_event(const char* name, const char* type, const char* path, uint64_t start_ticks,
                                uint64_t end_ticks, uint64_t cycles) const {
  const double us = double(executorch::runtime::ticks_to_ns(end_ticks - start_ticks)) / 1000.0;
  char metadata[192];
  const int n = path ? std::snprintf(metadata, sizeof(metadata), "type=%s;us=%.3f;cycles=%llu;path=%s", type, us,
                                     static_cast<unsigned long long>(cycles), path)
                     : std::snprintf(metadata, sizeof(metadata), "type=%s;us=%.3f;cycles=%llu", type, us,
                                     static_cast<unsigned long long>(cycles));
  const size_t len = n < 0 ? 0 : std::min(sizeof(metadata) - 1, size_t(n));
  // A name with kUnsetDelegateDebugIntId (ETDumpGen accepts nothing else with a name).
  executorch::runtime::event_tracer_log_profiling_delegate(tracer_, name, executorch::runtime::kUnsetDelegateDebugIntId,
                                                           start_ticks, end_ticks, metadata, len);
}

void ExecuteProfiler::graph_started() {
  graph_start_cycles_ = read_cycle_counter();
  graph_start_ticks_ = et_pal_current_ticks();
}

void ExecuteProfiler::graph_finished() {
  const uint64_t end = et_pal_current_ticks();
  const uint64_t cycles = read_cycle_counter() - graph_start_cycles_;
  log_event(graph_.name().c_str(), "Graph", nullptr, graph_start_ticks_, end, cycles);
}

void ExecuteProfiler::op_started(size_t) {
  op_start_cycles_ = read_cycle_counter();
  op_start_ticks_ = et_pal_current_ticks();
}

void ExecuteProfiler::op_finished(size_t op_index) {
  const uint64_t end = et_pal_current_ticks();
  const uint64_t cycles = read_cycle_counter() - op_start_cycles_;
  log_event(graph_.op_name(op_index).c_str(), graph_.op_type(op_index).c_str(), graph_.op_path(op_index),
            op_start_ticks_, end, cycles);
}

}  // namespace runtime
}  // namespace qnn_delegate
