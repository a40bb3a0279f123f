// Engine graphs on numpy arrays (engine_arrays.cpp): shared by the product
// extension backends.qualcomm._qnn_delegate and the test-only extension
// backends.qualcomm.tests._qnn_test_hooks.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <memory>
#include <string>
#include <vector>

#include "backends/qualcomm/runtime/engine/GraphExecutor.h"
#include "backends/qualcomm/runtime/engine/Status.h"

namespace qnn_delegate {
namespace pyengine {

// Escapes bytes that are not printable ASCII (names from a corrupted payload
// may not be valid UTF-8).
std::string printable(const std::string& text);
[[noreturn]] void throw_value_error(const std::string& message);
// ValueError for invalid arguments / programs / unsupported ops, RuntimeError otherwise.
[[noreturn]] void raise_status(const engine::Status& s);
// Graph `graph_index` of a payload, built (verified, kernels resolved) on the engine.
std::unique_ptr<engine::GraphExecutor> build_graph(const std::string& data, int graph_index);
// Executes the built graph once with the caller's input arrays into new output arrays.
pybind11::list execute_once(engine::GraphExecutor& g, const std::vector<pybind11::array>& inputs);

}  // namespace pyengine
}  // namespace qnn_delegate
