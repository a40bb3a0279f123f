// Engine graphs on numpy arrays: shared by the product extension
// (backends.qualcomm._qnn_delegate) and the test-only one
// (backends.qualcomm.tests._qnn_test_hooks).
#include "backends/qualcomm/runtime/python/engine_arrays.h"

#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <cstdio>
#include <stdexcept>

#include "backends/qualcomm/runtime/PayloadLoader.h"

namespace py = pybind11;

namespace qnn_delegate {
namespace pyengine {

// Escapes bytes that are not printable ASCII (names from a corrupted payload
// may not be valid UTF-8).
std::string printable(const std::string& text) {
  std::string out;
  for (unsigned char c : text) {
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
    }
  }
  return out;
}

[[noreturn]] void throw_value_error(const std::string& message) { throw py::value_error(printable(message)); }

[[noreturn]] void raise_status(const engine::Status& s) {
  if (s.kind == engine::ErrorKind::InvalidArgument || s.kind == engine::ErrorKind::InvalidProgram ||
      s.kind == engine::ErrorKind::NotSupported) {
    throw py::value_error(printable(s.message));
  }
  throw std::runtime_error(printable(s.message));
}

py::dtype numpy_dtype_of(engine::DType dt, const std::string& tensor) {
  switch (dt) {
    case engine::DType::FLOAT_32:
      return py::dtype::of<float>();
    case engine::DType::FLOAT_16:
      return py::dtype("float16");
    case engine::DType::INT_32:
      return py::dtype::of<int32_t>();
    case engine::DType::INT_64:
      return py::dtype::of<int64_t>();
    case engine::DType::UINT_8:
      return py::dtype::of<uint8_t>();
    case engine::DType::BOOL_8:
      return py::dtype::of<bool>();
    default:
      throw_value_error("tensor '" + tensor + "' has data type " + engine::dtype_name(dt) +
                        ", which has no numpy mapping");
  }
}

py::array checked_input(const engine::GraphExecutor& g, size_t i, const py::array& arr) {
  const engine::TensorInfo& info = g.input_info(i);
  const py::dtype want = numpy_dtype_of(info.dtype, info.name);
  if (!arr.dtype().is(want) && !arr.dtype().equal(want)) {
    throw_value_error("graph '" + g.name() + "': input " + std::to_string(i) + " (tensor '" + info.name +
                      "') has dtype " + std::string(py::str(arr.dtype())) + ", expected " + std::string(py::str(want)) +
                      " (" + engine::dtype_name(info.dtype) + ")");
  }
  if (static_cast<size_t>(arr.size()) != info.numel) {
    throw_value_error("graph '" + g.name() + "': input " + std::to_string(i) + " (tensor '" + info.name + "') has " +
                      std::to_string(arr.size()) + " elements, expected " + std::to_string(info.numel) + " " +
                      engine::dims_to_string(info.dims));
  }
  return py::array::ensure(arr, py::array::c_style);
}

// Fresh output arrays of graph `g` and their data pointers.
py::list new_outputs(const engine::GraphExecutor& g, std::vector<void*>& out_ptrs) {
  py::list outputs;
  out_ptrs.clear();
  for (size_t i = 0; i < g.num_outputs(); ++i) {
    const engine::TensorInfo& info = g.output_info(i);
    std::vector<py::ssize_t> shape(info.dims.begin(), info.dims.end());
    py::array out(numpy_dtype_of(info.dtype, info.name), shape);
    out_ptrs.push_back(out.mutable_data());
    outputs.append(out);
  }
  return outputs;
}

// Executes the built graph once with the caller's input arrays into new output arrays.
py::list execute_once(engine::GraphExecutor& g, const std::vector<py::array>& inputs) {
  if (inputs.size() != g.num_inputs()) {
    throw_value_error("graph '" + g.name() + "' has " + std::to_string(g.num_inputs()) + " inputs, got " +
                      std::to_string(inputs.size()));
  }
  std::vector<py::array> in_arrays;
  std::vector<void*> in_ptrs, out_ptrs;
  for (size_t i = 0; i < inputs.size(); ++i) {
    in_arrays.push_back(checked_input(g, i, inputs[i]));
    in_ptrs.push_back(const_cast<void*>(in_arrays.back().data()));
  }
  py::list outputs = new_outputs(g, out_ptrs);
  engine::Status s;
  {
    py::gil_scoped_release release;
    s = g.execute(in_ptrs.data(), out_ptrs.data());
  }
  if (!s.ok()) raise_status(s);
  return outputs;
}

std::unique_ptr<engine::GraphExecutor> build_graph(const std::string& data, int graph_index) {
  if (graph_index < 0) throw_value_error("graph_index must be >= 0");
  std::vector<std::unique_ptr<engine::GraphExecutor>> graphs;
  const engine::Status s =
      runtime::load_graphs(data.data(), data.size(), runtime::engine_options_from_env(), graph_index, graphs);
  if (!s.ok()) raise_status(s);
  return std::move(graphs.front());
}

}  // namespace pyengine
}  // namespace qnn_delegate
