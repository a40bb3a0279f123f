// The QnnDelegate ExecuTorch backend: init verifies the payload and builds
// the engine graph once; execute checks and binds the caller's tensors.
#pragma once

#include <cstddef>
#include <memory>

#include <executorch/runtime/backend/interface.h>

#include "backends/qualcomm/runtime/CompileOptions.h"
#include "backends/qualcomm/runtime/TensorDump.h"
#include "backends/qualcomm/runtime/engine/GraphExecutor.h"
#include "backends/qualcomm/runtime/qnn/QnnRuntime.h"

namespace qnn_delegate {
namespace runtime {

inline constexpr char kBackendName[] = "QnnDelegate";

struct QnnContext;

// The delegate handle: one graph of a (possibly shared) context plus the
// compile options of its delegate.
struct QnnDelegateHandle {
  QnnContext* context = nullptr;
  engine::GraphExecutor* graph = nullptr;    // host engine, or null when on QNN
  qnn::QnnGraphRunner* qnn_graph = nullptr;  // QNN engine, or null when on the host
  CompileOptions options;
  std::unique_ptr<TensorDumper> dumper;  // null when the graph dumps no tensor
};

// Threads the engine uses for an HTP performance mode: burst / high /
// sustained high performance (and default) = all cores, balanced modes = 2
// (or half the cores when more), power-saver modes = 1.
size_t threads_for_performance_mode(PerformanceMode performance_mode);

// Delegate handles alive in this process.
size_t live_handle_count();

class QnnDelegateBackend final : public executorch::runtime::BackendInterface {
 public:
  bool is_available() const override;
  executorch::runtime::Result<executorch::runtime::DelegateHandle*> init(
      executorch::runtime::BackendInitContext& context, executorch::runtime::FreeableBuffer* processed,
      executorch::runtime::ArrayRef<executorch::runtime::CompileSpec> compile_specs) const override;
  executorch::runtime::Error execute(executorch::runtime::BackendExecutionContext& context,
                                     executorch::runtime::DelegateHandle* handle,
                                     executorch::runtime::Span<executorch::runtime::EValue*> args) const override;
  executorch::runtime::Error set_option(
      executorch::runtime::BackendOptionContext& context,
      const executorch::runtime::Span<executorch::runtime::BackendOption>& options) override;
  executorch::runtime::Error get_option(
      executorch::runtime::BackendOptionContext& context,
      executorch::runtime::Span<executorch::runtime::BackendOption>& options) override;
  void destroy(executorch::runtime::DelegateHandle* handle) const override;
};

// ExecuTorch Error for an engine error kind.
executorch::runtime::Error to_et_error(engine::ErrorKind kind);

// The backend instance registered in this process.
QnnDelegateBackend& backend_instance();

}  // namespace runtime
}  // namespace qnn_delegate
