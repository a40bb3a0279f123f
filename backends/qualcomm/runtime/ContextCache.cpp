#include "backends/qualcomm/runtime/ContextCache.h"

#include <cstring>

#include "backends/qualcomm/runtime/PayloadLoader.h"
#include "backends/qualcomm/runtime/qnn/QnnLibrary.h"

namespace qnn_delegate {
namespace runtime {

engine::GraphExecutor* QnnContext::find_graph(const char* name) const {
  for (const auto& g : graphs) {
    if (name != nullptr && g->name() == name) return g.get();
  }
  return nullptr;
}

QnnContext::~QnnContext() {
  while (!graphs.empty()) graphs.pop_back();  // reverse build order
  qnn.reset();                                // QNN graphs, context, device
}

ContextCache& ContextCache::instance() {
  static ContextCache cache;
  return cache;
}

engine::Status ContextCache::acquire(const void* data, size_t size, const engine::EngineOptions& options,
                                     const HeapProfileRequest& heap, QnnContext** out, EngineChoice engine) {
  const uint64_t signature = fnv1a64(static_cast<const uint8_t*>(data), size);
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& c : contexts_) {
    if (c->signature == signature && c->blob_size == size &&
        (engine == EngineChoice::Auto || (engine == EngineChoice::Qnn) == (c->qnn != nullptr))) {
      ++c->refcount;
      *out = c.get();
      return engine::Status::Ok();
    }
  }
  if (heap.path_set && engine != EngineChoice::Host) {
    // Load Qualcomm's library (once per process, never freed) before the baseline is sampled:
    // the checkpoints then measure the context (contextCreateFromBinary .. contextFree), not
    // the library's one-time load.
    qnn::QnnLibrary::get();
  }
  HeapProfiler::context_creating(heap);
  std::unique_ptr<QnnContext> context(new QnnContext());
  context->signature = signature;
  context->blob_size = size;
  engine::Status s = load_qnn_engine(data, size, engine, context->qnn);
  if (s.ok() && context->qnn == nullptr) s = load_graphs(data, size, options, -1, context->graphs);
  if (!s.ok()) {
    context.reset();
    HeapProfiler::context_creation_failed();
    return s;
  }
  context->refcount = 1;
  HeapProfiler::context_created(context->qnn != nullptr);
  *out = context.get();
  contexts_.push_back(std::move(context));
  return engine::Status::Ok();
}

void ContextCache::release(QnnContext* context) {
  std::unique_ptr<QnnContext> doomed;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (size_t i = 0; i < contexts_.size(); ++i) {
      if (contexts_[i].get() != context) continue;
      if (--context->refcount == 0) {
        doomed = std::move(contexts_[i]);
        contexts_.erase(contexts_.begin() + i);
      }
      break;
    }
  }
  if (!doomed) return;
  doomed.reset();  // graphs, memory, then the context
  HeapProfiler::context_freed();
}

size_t ContextCache::live_qnn_contexts() const {
  std::lock_guard<std::mutex> lock(mutex_);
  size_t n = 0;
  for (const auto& c : contexts_) n += c->qnn != nullptr;
  return n;
}

size_t ContextCache::live_contexts() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return contexts_.size();
}

}  // namespace runtime
}  // namespace qnn_delegate
