// backends.qualcomm.tests._qnn_test_hooks: test-only entry points into the
// runtime, built next to the product extension (backends.qualcomm._qnn_delegate)
// but installed with the tests and never imported by the package. Both link
// libqnn_delegate_backend.so, so they share its backend instance and context cache.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <string>
#include <vector>

#include <executorch/runtime/backend/interface.h>

#include "backends/qualcomm/runtime/ContextCache.h"
#include "backends/qualcomm/runtime/QnnDelegateBackend.h"
#include "backends/qualcomm/runtime/python/engine_arrays.h"

namespace py = pybind11;
using namespace qnn_delegate;

namespace {

// Builds the graph once and executes it per input set, each time with the
// caller's input buffers and new output buffers (tests buffer rebinding).
py::list execute_many(const py::bytes& blob, const std::vector<std::vector<py::array>>& input_sets,
                      int graph_index) {
  const std::unique_ptr<engine::GraphExecutor> g = pyengine::build_graph(std::string(blob), graph_index);
  py::list results;
  for (const auto& inputs : input_sets) results.append(pyengine::execute_once(*g, inputs));
  return results;
}

// Inits two delegate handles from one blob through the backend interface
// (one shared context), destroys the first twice, then the second. Returns
// the live context count after each step: (after init, after destroy x2, after last).
py::tuple init_destroy_twice(const py::bytes& blob) {
  const std::string data(blob);
  std::vector<uint8_t> pool(1 << 16);
  executorch::runtime::MemoryAllocator allocator(pool.size(), pool.data());
  executorch::runtime::BackendInitContext ctx(&allocator);
  auto& backend = runtime::backend_instance();
  executorch::runtime::DelegateHandle* handles[2] = {nullptr, nullptr};
  for (auto& handle : handles) {
    executorch::runtime::FreeableBuffer buffer(data.data(), data.size(),
                                              executorch::runtime::FreeableBuffer::FreeFn(nullptr));
    auto result = backend.init(ctx, &buffer, {});
    if (!result.ok()) pyengine::throw_value_error("init failed with error " + std::to_string(int(result.error())));
    handle = *result;
  }
  auto& cache = runtime::ContextCache::instance();
  const size_t after_init = cache.live_contexts();
  backend.destroy(handles[0]);
  backend.destroy(handles[0]);  // already destroyed: a no-op
  const size_t after_first = cache.live_contexts();
  backend.destroy(handles[1]);
  return py::make_tuple(after_init, after_first, cache.live_contexts());
}

}  // namespace

PYBIND11_MODULE(_qnn_test_hooks, m) {
  m.doc() = "qnn-delegate test hooks (test-only; not part of the package API)";
  m.def("execute_many", &execute_many, py::arg("blob"), py::arg("input_sets"), py::arg("graph_index") = 0,
        "Build a payload graph once, execute it per input set with new output buffers each time.");
  m.def("init_destroy_twice", &init_destroy_twice, py::arg("blob"),
        "Lifecycle check: two handles of one blob, the first destroyed twice; live contexts per step.");
}
