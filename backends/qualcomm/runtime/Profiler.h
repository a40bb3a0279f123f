// Profiling of one execute into ExecuTorch's event tracer (ETDump) through the
// delegate profiling hooks. Basic: one event per graph execute, named after
// the graph. Detailed: also one event per op, named after the QNN op, with
// "type=<QNN type>;us=<microseconds>;cycles=<rdtsc cycles>;path=<kernel path>" as metadata
// (path: the host engine kernel's code path, Kernel::path).
#pragma once

#include <cstdint>

#include <executorch/runtime/core/event_tracer.h>

#include "backends/qualcomm/runtime/CompileOptions.h"
#include "backends/qualcomm/runtime/engine/GraphExecutor.h"

namespace qnn_delegate {
namespace runtime {

class ExecuteProfiler final : public engine::OpObserver {
 public:
  ExecuteProfiler(executorch::runtime::EventTracer* tracer, const engine::GraphExecutor& graph,
                  ProfileLevel profile_level);

  // Observer for the executor: nullptr below the detailed level.
  engine::OpObserver* op_observer() { return detailed_ ? this : nullptr; }
  void graph_started();
  void graph_finished();

  void op_started(size_t op_index) override;
  void op_finished(size_t op_index) override;

 private:
  // path: the op kernel's code path (Kernel::path), nullptr for the graph event.
  void log_event(const char* name, const char* type, const char* path, uint64_t start_ticks, uint64_t end_ticks,
                 uint64_t cycles) const;

  executorch::runtime::EventTracer* tracer_;
  const engine::GraphExecutor& graph_;
  bool detailed_;
  uint64_t graph_start_ticks_ = 0;
  uint64_t graph_start_cycles_ = 0;
  uint64_t op_start_ticks_ = 0;
  uint64_t op_start_cycles_ = 0;
};

// CPU cycle counter (rdtsc on x86; 0 where there is none).
uint64_t read_cycle_counter();

}  // namespace runtime
}  // namespace qnn_delegate
