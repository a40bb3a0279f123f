// backends.qualcomm._qnn_delegate: loading it registers the QnnDelegate
// backend in the process; it also runs payloads directly on the engine.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <executorch/runtime/backend/interface.h>

#include "backends/qualcomm/runtime/PayloadLoader.h"
#include "backends/qualcomm/runtime/QnnDelegateBackend.h"
#include "backends/qualcomm/runtime/RuntimeOptions.h"
#include "backends/qualcomm/runtime/engine/ThreadPool.h"
#include "backends/qualcomm/runtime/python/engine_arrays.h"
#include "backends/qualcomm/runtime/python/qnn_pybind.h"

namespace py = pybind11;
using namespace qnn_delegate;

namespace {

using pyengine::raise_status;
using pyengine::throw_value_error;

void verify_payload(const py::bytes& blob) {
  const std::string data(blob);
  std::vector<std::unique_ptr<engine::GraphExecutor>> graphs;
  const engine::Status s =
      runtime::load_graphs(data.data(), data.size(), runtime::engine_options_from_env(), -1, graphs);
  if (!s.ok()) raise_status(s);
}

py::list run_payload(const py::bytes& blob, const std::vector<py::array>& inputs, int graph_index) {
  const std::unique_ptr<engine::GraphExecutor> g = pyengine::build_graph(std::string(blob), graph_index);
  return pyengine::execute_once(*g, inputs);
}

bool is_known_option(const std::string& key) { return runtime::RuntimeOptions::is_known_key(key.c_str()); }

executorch::runtime::BackendOption make_option_key(const std::string& key) {
  if (key.size() >= executorch::runtime::kMaxOptionKeyLength) {
    throw py::key_error("runtime option key too long: " + key);
  }
  executorch::runtime::BackendOption opt;
  std::memcpy(opt.key, key.c_str(), key.size() + 1);
  return opt;
}

// A BackendOption of `value`'s Python type (int, bool or str); TypeError otherwise.
executorch::runtime::BackendOption make_option(const std::string& key, const py::object& value) {
  executorch::runtime::BackendOption opt = make_option_key(key);
  if (py::isinstance<py::bool_>(value)) {
    opt.value = value.cast<bool>();
  } else if (py::isinstance<py::int_>(value)) {
    opt.value = value.cast<int>();
  } else if (py::isinstance<py::str>(value)) {
    const std::string s = value.cast<std::string>();
    std::array<char, executorch::runtime::kMaxOptionValueLength> arr{};
    if (s.size() >= arr.size()) throw_value_error("runtime option '" + key + "': value too long");
    std::memcpy(arr.data(), s.c_str(), s.size());
    opt.value = arr;
  } else {
    throw py::type_error("runtime option '" + key + "' takes int, bool or str");
  }
  return opt;
}

std::string type_name(const py::object& value) { return std::string(py::str(py::type::of(value).attr("__name__"))); }

// Sets every option in one backend call; the valid ones apply even when some
// are rejected. Raises KeyError (unknown keys) or TypeError (wrong types)
// naming every rejected option afterwards.
void set_runtime_options(const py::dict& options) {
  std::vector<executorch::runtime::BackendOption> opts;
  std::string unknown, wrong_type, out_of_range;
  for (const auto& item : options) {
    const std::string key = py::cast<std::string>(item.first);
    const py::object value = py::reinterpret_borrow<py::object>(item.second);
    executorch::runtime::BackendOption opt = make_option(key, value);
    int lo = 0, hi = 0;
    const char* reason = runtime::RuntimeOptions::rejection_reason(opt);
    if (!is_known_option(key)) {
      unknown += (unknown.empty() ? "'" : ", '") + key + "'";
    } else if (reason != nullptr && std::holds_alternative<int>(opt.value) &&
               runtime::RuntimeOptions::int_option_range(key.c_str(), lo, hi)) {
      out_of_range += (out_of_range.empty() ? "'" : "; '") + key + "' value " +
                      std::to_string(std::get<int>(opt.value)) + " is out of range " + std::to_string(lo) + ".." +
                      std::to_string(hi) + " (" + runtime::RuntimeOptions::int_option_values(key.c_str()) + ")";
    } else if (reason != nullptr && key == runtime::kEngineKey &&
               (py::isinstance<py::str>(value) || py::isinstance<py::int_>(value))) {
      out_of_range += (out_of_range.empty() ? "'" : "; '") + key + "' value " + std::string(py::repr(value)) +
                      " is not allowed: it " + reason;
    } else if (reason != nullptr) {
      wrong_type += (wrong_type.empty() ? "'" : "; '") + key + "' " + reason + " (got " + type_name(value) + ")";
    }
    opts.push_back(opt);
  }
  const executorch::runtime::Error e =
      executorch::runtime::set_option(runtime::kBackendName, {opts.data(), opts.size()});
  if (!unknown.empty()) {
    throw py::key_error("unknown runtime option(s) " + unknown + " (the other options were applied)");
  }
  if (!wrong_type.empty()) {
    throw py::type_error("runtime option " + wrong_type + " (the other options were applied)");
  }
  if (!out_of_range.empty()) {
    throw py::value_error("runtime option " + out_of_range + " (the other options were applied)");
  }
  if (e != executorch::runtime::Error::Ok) {
    throw std::runtime_error("set_option failed with error " + std::to_string(static_cast<int>(e)));
  }
}

void set_runtime_option(const std::string& key, const py::object& value) {
  py::dict d;
  d[py::str(key)] = value;
  set_runtime_options(d);
}

py::object get_runtime_option(const std::string& key) {
  if (!is_known_option(key)) throw py::key_error("unknown runtime option '" + key + "'");
  executorch::runtime::BackendOption opt = make_option_key(key);
  executorch::runtime::Span<executorch::runtime::BackendOption> span(&opt, 1);
  const executorch::runtime::Error e = executorch::runtime::get_option(runtime::kBackendName, span);
  if (e == executorch::runtime::Error::NotFound) {
    throw py::key_error("runtime option '" + key + "' was never set");
  }
  if (e != executorch::runtime::Error::Ok) {
    throw std::runtime_error("get_option('" + key + "') failed with error " + std::to_string(static_cast<int>(e)));
  }
  if (const int* v = std::get_if<int>(&opt.value)) return py::int_(*v);
  if (const bool* v = std::get_if<bool>(&opt.value)) return py::bool_(*v);
  const auto& arr = std::get<std::array<char, executorch::runtime::kMaxOptionValueLength>>(opt.value);
  return py::str(std::string(arr.data()));
}

}  // namespace

PYBIND11_MODULE(_qnn_delegate, m) {
  m.doc() = "qnn-delegate native extension (registers the QnnDelegate backend)";
  // Referencing the backend keeps its registration (static initializer) linked in.
  (void)runtime::backend_instance();
  m.def("backend_name", [] { return std::string(runtime::kBackendName); });
  m.def("verify_payload", &verify_payload, py::arg("blob"),
        "Verify a delegate blob and build its graphs; raises ValueError naming the problem.");
  m.def("run_payload", &run_payload, py::arg("blob"), py::arg("inputs"), py::arg("graph_index") = 0,
        "Init + execute + destroy a payload graph on the engine (no ExecuTorch).");
  m.def("set_runtime_option", &set_runtime_option, py::arg("key"), py::arg("value"));
  m.def("set_runtime_options", &set_runtime_options, py::arg("options"),
        "Set several runtime options in one backend call (valid ones apply even if others fail).");
  m.def(
      "reset_runtime_options", [] { runtime::RuntimeOptions::instance().reset(); },
      "Forget every run-time value: the values compiled into each payload hold again.");
  m.def(
      "thread_pool_size", [] { return engine::ThreadPool::instance().max_threads(); },
      "Threads of the engine's pool (the caller included).");
  m.def(
      "threads_for_performance_mode",
      [](int mode) {
        if (mode < static_cast<int>(runtime::PerformanceMode::MIN) ||
            mode > static_cast<int>(runtime::PerformanceMode::MAX)) {
          throw py::value_error("performance mode " + std::to_string(mode) + " is out of range");
        }
        return runtime::threads_for_performance_mode(static_cast<runtime::PerformanceMode>(mode));
      },
      py::arg("mode"), "Engine threads used for an HTP performance mode value.");
  m.def("get_runtime_option", &get_runtime_option, py::arg("key"));
  m.def(
      "fnv1a64",
      [](py::buffer data) {
        py::buffer_info info = data.request();
        return runtime::fnv1a64(static_cast<const uint8_t*>(info.ptr), static_cast<size_t>(info.size * info.itemsize));
      },
      py::arg("data"), "FNV-1a 64-bit hash (the payload signature) of a bytes-like object.");
  register_qnn_bindings(m);
}
