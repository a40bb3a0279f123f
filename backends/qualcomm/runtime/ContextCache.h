// Loaded contexts, cached by payload signature: delegates (methods or
// partitions) whose blobs are identical share one context (one set of engine
// graphs), reference counted. Teardown order of a context: graphs (kernels,
// arena, weights, in reverse build order), then the context itself; the
// backend object lives for the whole process.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "backends/qualcomm/runtime/HeapProfiler.h"
#include "backends/qualcomm/runtime/engine/GraphExecutor.h"
#include "backends/qualcomm/runtime/qnn/QnnEngine.h"

namespace qnn_delegate {
namespace runtime {

struct QnnContext {
  uint64_t signature = 0;  // FNV-1a of the whole blob
  size_t blob_size = 0;
  size_t refcount = 0;
  std::vector<std::unique_ptr<engine::GraphExecutor>> graphs;  // host engine (empty on QNN)
  std::unique_ptr<qnn::QnnLoadedContext> qnn;                  // QNN engine, else null
  std::mutex execute_mutex;                                    // graphs hold per-execute state: one execute at a time

  // The graph named `name`, else nullptr.
  engine::GraphExecutor* find_graph(const char* name) const;
  ~QnnContext();
};

class ContextCache {
 public:
  static ContextCache& instance();

  // The cached context of this blob (refcount + 1), or a newly loaded one.
  // `engine`: auto / qnn / host (see load_qnn_engine); contexts are shared per engine.
  engine::Status acquire(const void* data, size_t size, const engine::EngineOptions& options,
                         const HeapProfileRequest& heap, QnnContext** out, EngineChoice engine = EngineChoice::Host);
  // Refcount - 1; the last release destroys the context. Unknown contexts are ignored.
  void release(QnnContext* context);

  size_t live_contexts() const;
  size_t live_qnn_contexts() const;  // of those, the ones on the QNN engine

 private:
  mutable std::mutex mutex_;
  std::vector<std::unique_ptr<QnnContext>> contexts_;
};

}  // namespace runtime
}  // namespace qnn_delegate
