// Python bindings of the real-QNN side: library status, AOT compile of a
// payload into a QNN context binary, op validation, and running a blob's
// context binary directly (tests, fidelity report).
#include "backends/qualcomm/runtime/python/qnn_pybind.h"

#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "backends/qualcomm/runtime/PayloadLoader.h"
#include "backends/qualcomm/runtime/qnn/QnnCompiler.h"
#include "backends/qualcomm/runtime/qnn/QnnLibrary.h"
#include "backends/qualcomm/runtime/qnn/QnnRuntime.h"
#include "backends/qualcomm/runtime/qnn/QnnSystem.h"

namespace py = pybind11;

namespace qnn_delegate {
namespace {

// A blob's bytes, 16-byte aligned (flatbuffers scalars must be aligned): the bytes
// object's own buffer when it is aligned (CPython's usually is), else one aligned
// copy. Valid while the bytes object it was made from is alive.
class Blob {
 public:
  explicit Blob(const py::bytes& b) {
    char* buf = nullptr;
    Py_ssize_t len = 0;
    if (PyBytes_AsStringAndSize(b.ptr(), &buf, &len) != 0) throw py::error_already_set();
    size_ = size_t(len);
    if (reinterpret_cast<uintptr_t>(buf) % 16 == 0) {
      data_ = reinterpret_cast<const uint8_t*>(buf);
      return;
    }
    storage_.reset(new uint64_t[size_ / 8 + 2]);  // new[] storage: 16-byte aligned
    std::memcpy(storage_.get(), buf, size_);
    data_ = reinterpret_cast<const uint8_t*>(storage_.get());
  }
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  std::unique_ptr<uint64_t[]> storage_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

[[noreturn]] void raise(const engine::Status& s) {
  if (s.kind == engine::ErrorKind::InvalidArgument || s.kind == engine::ErrorKind::InvalidProgram) {
    throw py::value_error(s.message);
  }
  throw std::runtime_error(s.message);
}

const ::qnn_delegate::QnnPayload* verified(const Blob& blob) {
  const ::qnn_delegate::QnnPayload* payload = nullptr;
  const engine::Status s = runtime::verify_context_binary(blob.data(), blob.size(), &payload);
  if (!s.ok()) raise(s);
  return payload;
}

py::tuple library_status() {
  std::string why;
  const qnn::QnnLibrary* lib = qnn::QnnLibrary::get(&why);
  if (lib == nullptr) return py::make_tuple(false, why);
  return py::make_tuple(true, lib->describe());
}

py::tuple compile(const py::bytes& blob_bytes, uint32_t soc_model, uint32_t vtcm_mb, uint32_t optimization_level,
                  uint32_t tensor_version) {
  const Blob blob(blob_bytes);
  const auto* payload = verified(blob);
  qnn::CompileRequest request;
  request.soc_model = soc_model;
  request.vtcm_mb = vtcm_mb;
  request.optimization_level = optimization_level;
  request.tensor_version = tensor_version;
  qnn::CompiledContext out;
  engine::Status s;
  {
    py::gil_scoped_release release;
    s = qnn::compile_context(payload, request, out);
  }
  if (!s.ok()) throw std::runtime_error(s.message);
  py::list graphs;
  for (size_t i = 0; i < out.graph_names.size(); ++i) {
    graphs.append(py::make_tuple(out.graph_names[i], out.tensor_ids[i]));
  }
  return py::make_tuple(py::bytes(reinterpret_cast<const char*>(out.binary.data()), out.binary.size()), graphs);
}

py::object validate(const py::bytes& blob_bytes, uint32_t graph_index, uint32_t op_index, uint32_t soc_model) {
  const Blob blob(blob_bytes);
  const auto* payload = verified(blob);
  if (graph_index >= payload->graphs()->size()) throw py::value_error("graph_index out of range");
  const engine::Status s = qnn::validate_op(payload->graphs()->Get(graph_index), op_index, soc_model);
  if (s.ok()) return py::none();
  return py::str(s.message);
}

// Every op of one graph of the blob checked by QNN, the blob verified and the graph's
// tensors described once: [(op index, None when QNN accepts the op, else QNN's reason)].
// ValueError for a malformed blob or a graph index out of range, RuntimeError when the
// QNN library does not load.
py::list validate_all(const py::bytes& blob_bytes, uint32_t graph_index, uint32_t soc_model) {
  const Blob blob(blob_bytes);
  const auto* payload = verified(blob);
  if (graph_index >= payload->graphs()->size()) {
    throw py::value_error("graph_index " + std::to_string(graph_index) +
                          " out of range (the blob "
                          "has " +
                          std::to_string(payload->graphs()->size()) + " graph(s))");
  }
  std::vector<qnn::OpVerdict> verdicts;
  const engine::Status s = qnn::validate_ops(payload->graphs()->Get(graph_index), soc_model, verdicts);
  if (!s.ok()) raise(s);
  py::list out;
  for (size_t i = 0; i < verdicts.size(); ++i) {
    out.append(
        py::make_tuple(i, verdicts[i].accepted ? py::object(py::none()) : py::object(py::str(verdicts[i].reason))));
  }
  return out;
}

py::dtype numpy_dtype(const qnn::TensorDesc& d) {
  if (d.int64_narrowed) return py::dtype::of<int64_t>();
  switch (qnn::core(d.tensor).dtype) {
    case qnn::kQnnFloat32:
      return py::dtype::of<float>();
    case qnn::kQnnInt32:
      return py::dtype::of<int32_t>();
    case qnn::kQnnUInt8:
    case qnn::kQnnUFixed8:
      return py::dtype::of<uint8_t>();
    case qnn::kQnnBool8:
      return py::dtype::of<bool>();
    case qnn::kQnnUFixed16:
    case qnn::kQnnUInt16:
      return py::dtype::of<uint16_t>();
    case qnn::kQnnFloat16:
      return py::dtype("float16");
    case qnn::kQnnInt8:
    case qnn::kQnnSFixed8:
      return py::dtype::of<int8_t>();
    case qnn::kQnnInt16:
    case qnn::kQnnSFixed16:
      return py::dtype::of<int16_t>();
    default:
      throw py::value_error("tensor '" + d.name + "' has a data type with no numpy mapping");
  }
}

// Loads the blob's QNN context and runs graph `graph_index` once. Returns the
// outputs and, with profile_level > 0, the profile events [(name, unit, value, is_node)].
py::tuple run(const py::bytes& blob_bytes, const std::vector<py::array>& inputs, uint32_t graph_index,
              int profile_level) {
  const Blob blob(blob_bytes);
  const auto* payload = verified(blob);
  const auto* container = ::qnn_delegate::GetQnnContextBinary(blob.data());
  std::unique_ptr<qnn::QnnLoadedContext> ctx;
  engine::Status s = qnn::QnnLoadedContext::load(container, payload, ctx);
  if (!s.ok()) raise(s);
  if (graph_index >= ctx->num_graphs()) throw py::value_error("graph_index out of range");
  qnn::QnnGraphRunner& g = *ctx->graph(graph_index);
  if (inputs.size() != g.num_inputs()) {
    throw py::value_error("graph '" + g.name() + "' has " + std::to_string(g.num_inputs()) + " inputs, got " +
                          std::to_string(inputs.size()));
  }
  std::vector<py::array> in_arrays;
  std::vector<void*> in_ptrs, out_ptrs;
  for (size_t i = 0; i < inputs.size(); ++i) {
    py::array a = py::array::ensure(inputs[i], py::array::c_style);
    if (!a || size_t(a.nbytes()) != g.input_bytes(i) || !a.dtype().equal(numpy_dtype(g.input(i)))) {
      throw py::value_error("graph '" + g.name() + "': input " + std::to_string(i) + " (tensor '" + g.input(i).name +
                            "') needs " + std::to_string(g.input_bytes(i)) + " bytes of " +
                            std::string(py::str(numpy_dtype(g.input(i)))));
    }
    in_arrays.push_back(a);
    in_ptrs.push_back(const_cast<void*>(a.data()));
  }
  py::list outputs;
  for (size_t i = 0; i < g.num_outputs(); ++i) {
    std::vector<py::ssize_t> shape(g.output(i).dims.begin(), g.output(i).dims.end());
    py::array out(numpy_dtype(g.output(i)), shape);
    out_ptrs.push_back(out.mutable_data());
    outputs.append(out);
  }
  std::vector<qnn::QnnProfileSample> samples;
  {
    py::gil_scoped_release release;
    s = g.execute(in_ptrs.data(), out_ptrs.data(), profile_level, &samples);
  }
  if (!s.ok()) raise(s);
  py::list events;
  for (const auto& e : samples) events.append(py::make_tuple(e.name, e.unit, e.value, e.is_node, e.type, e.depth));
  return py::make_tuple(outputs, events);
}

py::dict version_dict(const qnn::QnnVersion& v) {
  py::dict d;
  d["major"] = v.major;
  d["minor"] = v.minor;
  d["patch"] = v.patch;
  return d;
}

py::list tensor_list(const std::vector<qnn::ContextTensorInfo>& tensors) {
  py::list out;
  for (const auto& t : tensors) {
    py::dict d;
    d["id"] = t.id;
    d["name"] = t.name;
    d["kind"] = t.kind;
    d["dtype"] = t.dtype;
    d["dims"] = t.dims;
    d["encoding"] = t.encoding;
    d["bitwidth"] = t.bitwidth;
    d["scale"] = t.scale;
    d["offset"] = t.offset;
    d["axis"] = t.axis;
    d["scales"] = t.scales;
    d["offsets"] = t.offsets;
    out.append(d);
  }
  return out;
}

// QnnSystem's view of a context binary, as plain Python values.
py::dict context_binary_info(const py::bytes& binary) {
  char* buf = nullptr;
  Py_ssize_t len = 0;
  if (PyBytes_AsStringAndSize(binary.ptr(), &buf, &len) != 0) throw py::error_already_set();
  qnn::ContextBinaryInfo info;
  engine::Status s;
  {
    py::gil_scoped_release release;
    s = qnn::read_context_binary_info(buf, size_t(len), info);
  }
  if (!s.ok()) raise(s);
  py::dict d;
  d["info_version"] = info.info_version;
  d["backend_id"] = info.backend_id;
  d["build_id"] = info.build_id;
  d["core_api"] = version_dict(info.core_api);
  d["backend_api"] = version_dict(info.backend_api);
  d["context_blob_version"] = version_dict(info.context_blob_version);
  d["soc_version"] = info.soc_version;
  d["soc_model"] = info.soc_model;
  d["context_blob_size"] = info.context_blob_size;
  py::list graphs;
  for (const auto& g : info.graphs) {
    py::dict gd;
    gd["name"] = g.name;
    gd["inputs"] = tensor_list(g.inputs);
    gd["outputs"] = tensor_list(g.outputs);
    graphs.append(gd);
  }
  d["graphs"] = graphs;
  return d;
}

void record_saver(const py::bytes& blob_bytes, const std::string& output_dir) {
  const Blob blob(blob_bytes);
  const auto* payload = verified(blob);
  engine::Status s;
  {
    py::gil_scoped_release release;
    s = qnn::record_with_saver(payload, output_dir);
  }
  if (!s.ok()) raise(s);
}

py::tuple system_status() {
  bool loaded = false;
  std::string text = qnn::qnn_system_status(&loaded);
  return py::make_tuple(loaded, text);
}

}  // namespace

void register_qnn_bindings(py::module_& m) {
  m.def("qnn_context_binary_info", &context_binary_info, py::arg("binary"),
        "What a QNN context binary holds, read by libQnnSystem.so (not from a payload): build id, "
        "API versions, SoC model, graphs with their input / output tensors (id, name, kind, QNN "
        "data type, dims, quantization). ValueError when QNN cannot read it (with QNN's error), "
        "RuntimeError when libQnnSystem.so does not load.");
  m.def("qnn_record_with_saver", &record_saver, py::arg("blob"), py::arg("output_dir"),
        "Build every graph of a delegate blob through QNN's saver (libQnnSaver.so), which records the "
        "QNN calls into output_dir (saver_output.c, params.bin). RuntimeError when the saver does "
        "not load or refuses a graph.");
  m.def("qnn_system_status", &system_status,
        "(loaded, text): whether libQnnSystem.so loads, and its system API version or why not.");
  m.def("qnn_library_status", &library_status,
        "(loaded, text): whether Qualcomm's QNN HTP library loads, and its versions or why not.");
  m.def("qnn_compile", &compile, py::arg("blob"), py::arg("soc_model"), py::arg("vtcm_mb") = 0,
        py::arg("optimization_level") = 0, py::arg("tensor_version") = 1,
        "Build and finalize every graph of a delegate blob in one QNN context for a SoC; returns "
        "(context binary, [(graph name, QNN tensor ids per payload tensor)]). RuntimeError "
        "naming graph, op and QNN error when QNN refuses.");
  m.def("qnn_validate_op", &validate, py::arg("blob"), py::arg("graph_index"), py::arg("op_index"),
        py::arg("soc_model") = 0,
        "None when QNN's backendValidateOpConfig accepts the op (on the HTP of SoC `soc_model`; 0: "
        "QNN's default architecture), else QNN's reason.");
  m.def("qnn_validate_ops", &validate_all, py::arg("blob"), py::arg("graph_index") = 0, py::arg("soc_model") = 0,
        "Every op of one graph checked by QNN's backendValidateOpConfig in one call (blob "
        "verified, tensors described once): [(op index, None when accepted, else QNN's "
        "reason)], the reasons qnn_validate_op gives. ValueError for a malformed blob.");
  m.def("run_payload_qnn", &run, py::arg("blob"), py::arg("inputs"), py::arg("graph_index") = 0,
        py::arg("profile_level") = 0,
        "Load the blob's QNN context binary, execute one graph once: (outputs, profile events).");
}

}  // namespace qnn_delegate
