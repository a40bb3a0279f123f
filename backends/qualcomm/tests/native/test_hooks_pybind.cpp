// backends.qualcomm.tests._qnn_test_hooks: test-only entry points into the runtime
// (lifecycle, buffer rebinding, introspection: live contexts and handles, allocator bytes,
// kernel registrations and paths), built next to the product extension
// (backends.qualcomm._qnn_delegate) only with -DQNN_BUILD_TEST_HOOKS=ON, installed with the
// tests and never imported by the package. Both link libqnn_delegate_backend.so, so they
// share its backend instance, context cache and kernel registry.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include <executorch/runtime/backend/interface.h>

#include "backends/qualcomm/runtime/ContextCache.h"
#include "backends/qualcomm/runtime/QnnDelegateBackend.h"
#include "backends/qualcomm/runtime/engine/Allocator.h"
#include "backends/qualcomm/runtime/engine/Kernel.h"
#include "backends/qualcomm/runtime/engine/Simd.h"
#include "backends/qualcomm/runtime/python/engine_arrays.h"

namespace py = pybind11;
using namespace qnn_delegate;

namespace {

// Builds the graph once and executes it per input set, each time with the
// caller's input buffers and new output buffers (tests buffer rebinding).
py::list execute_many(const py::bytes& blob, const std::vector<std::vector<py::array>>& input_sets, int graph_index) {
  const std::unique_ptr<engine::GraphExecutor> g = pyengine::build_graph(std::string(blob), graph_index);
  py::list results;
  for (const auto& inputs : input_sets) results.append(pyengine::execute_once(*g, inputs));
  return results;
}

// (op name, op type, kernel path) of every op of a payload graph built on the host engine
// (Kernel::path: the code path each kernel picked at init, e.g. "avx2/lanes8").
std::vector<std::tuple<std::string, std::string, std::string>> kernel_paths(const py::bytes& blob, int graph_index) {
  const std::unique_ptr<engine::GraphExecutor> g = pyengine::build_graph(std::string(blob), graph_index);
  std::vector<std::tuple<std::string, std::string, std::string>> out;
  for (size_t i = 0; i < g->num_ops(); ++i) out.emplace_back(g->op_name(i), g->op_type(i), g->op_path(i));
  return out;
}

// Which SIMD paths the engine's kernels can pick on this CPU (Simd.h): {"avx2": AVX2 + FMA +
// F16C, "avx512": AVX-512 F/BW/DQ/VL too, "vnni": AVX-512 VNNI too}.
py::dict kernel_features() {
  py::dict d;
  d["avx2"] = engine::cpu_simd_level() >= engine::SimdLevel::Avx2;
  d["avx512"] = engine::cpu_simd_level() >= engine::SimdLevel::Avx512;
  d["vnni"] = engine::cpu_has_avx512_vnni();
  return d;
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
  m.def("kernel_paths", &kernel_paths, py::arg("blob"), py::arg("graph_index") = 0,
        "(op name, op type, code path) per op of a payload graph built on the host engine.");
  m.def("kernel_features", &kernel_features, "Which SIMD paths the host engine's kernels can pick here.");
  m.def("init_destroy_twice", &init_destroy_twice, py::arg("blob"),
        "Lifecycle check: two handles of one blob, the first destroyed twice; live contexts per step.");
  m.def(
      "live_context_count", [] { return runtime::ContextCache::instance().live_contexts(); },
      "Loaded (cached, shared) contexts alive in this process.");
  m.def(
      "live_qnn_context_count", [] { return runtime::ContextCache::instance().live_qnn_contexts(); },
      "Loaded contexts that run on the QNN engine.");
  m.def("live_handle_count", &runtime::live_handle_count, "Delegate handles alive in this process.");
  m.def("engine_bytes_in_use", &engine::TrackingAllocator::process_bytes_in_use,
        "Bytes currently held by all engine allocators of the process.");
  m.def("registered_op_types", &engine::registered_op_types, "Op types with a registered host kernel.");
  m.def("duplicate_kernel_registrations", &engine::duplicate_kernel_registrations,
        "Op types registered more than once per kernel registry (should be empty).");
}
