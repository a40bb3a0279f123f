#include "backends/qualcomm/runtime/qnn/QnnCompiler.h"

#include <cstring>
#include <initializer_list>
#include <memory>

#include "backends/qualcomm/runtime/qnn/QnnLibrary.h"
#include "backends/qualcomm/runtime/qnn/QnnTensorDesc.h"

namespace qnn_delegate {
namespace qnn {

namespace {

constexpr const char* kDefaultPackage = "qti.aisw";

// Device, context and the graphs' storage; freed in reverse order.
struct Session {
  const QnnLibrary* lib = nullptr;
  QnnHandle device = nullptr;
  QnnHandle context = nullptr;
  ~Session() {
    if (context) lib->fn().context_free(context, nullptr);
    if (device) lib->fn().device_free(device);
  }
};

// The QNN op config of payload op `index`, built from the tensor descriptions.
struct OpBuild {
  std::vector<QnnParam> params;
  std::vector<QnnTensor> inputs;
  std::vector<QnnTensor> outputs;
  std::vector<std::unique_ptr<TensorDesc>> param_tensors;
  QnnOpConfig config{};
};

Status make_params(const fb::Op* op, OpBuild& b, const QnnLibrary* lib, QnnHandle graph) {
  const size_t n = op->params() ? op->params()->size() : 0;
  b.params.assign(n, QnnParam{});
  for (size_t i = 0; i < n; ++i) {
    const fb::Param* p = op->params()->Get(i);
    QnnParam& out = b.params[i];
    std::memset(&out, 0, sizeof(out));
    out.name = p->name()->c_str();
    if (p->kind() == fb::QnnParamKind::TENSOR) {
      std::unique_ptr<TensorDesc> d;
      QNN_RETURN_IF_ERROR(describe_param_tensor(p, op->name()->str() + "__" + p->name()->str(), d));
      if (graph != nullptr) {
        const QnnStatus s = lib->fn().tensor_create_graph_tensor(graph, &d->tensor);
        if (s != 0) {
          return make_error(ErrorKind::NotSupported, "%s",
                            with_qnn_log("op '" + op->name()->str() + "' (" + op->type()->str() + "): param '" +
                                         p->name()->str() + "' refused: " + qnn_error_text(s))
                                .c_str());
        }
      }
      out.kind = kQnnParamTensor;
      out.tensor = d->tensor;
      b.param_tensors.push_back(std::move(d));
      continue;
    }
    out.kind = kQnnParamScalar;
    const auto dtype = static_cast<QnnDType>(static_cast<int32_t>(p->data_type()));
    out.scalar.dtype = dtype;
    const int64_t iv = (p->int_data() && p->int_data()->size()) ? p->int_data()->Get(0) : 0;
    const float fv = (p->float_data() && p->float_data()->size()) ? p->float_data()->Get(0) : 0.f;
    switch (dtype) {
      case kQnnFloat32:
        out.scalar.f32 = fv;
        break;
      case kQnnBool8:
      case kQnnUInt8:
        out.scalar.u8 = uint8_t(iv);
        break;
      case kQnnInt8:
        out.scalar.i8 = int8_t(iv);
        break;
      case kQnnInt16:
        out.scalar.i16 = int16_t(iv);
        break;
      case kQnnUInt16:
        out.scalar.u16 = uint16_t(iv);
        break;
      case kQnnInt32:
        out.scalar.i32 = int32_t(iv);
        break;
      case kQnnUInt32:
        out.scalar.u32 = uint32_t(iv);
        break;
      case kQnnInt64:
        out.scalar.dtype = kQnnInt32;
        out.scalar.i32 = int32_t(iv);
        break;
      default:
        return make_error(ErrorKind::NotSupported, "op '%s': scalar param '%s' has data type %d", op->name()->c_str(),
                          p->name()->c_str(), int(dtype));
    }
  }
  return Status::Ok();
}

Status make_op(const fb::Op* op, const std::vector<std::unique_ptr<TensorDesc>>& tensors, const QnnLibrary* lib,
               QnnHandle graph, OpBuild& b) {
  QNN_RETURN_IF_ERROR(make_params(op, b, lib, graph));
  auto pick = [&](const flatbuffers::Vector<uint32_t>* ids, std::vector<QnnTensor>& out) -> Status {
    const size_t n = ids ? ids->size() : 0;
    for (size_t i = 0; i < n; ++i) {
      const uint32_t id = ids->Get(i);
      if (id >= tensors.size() || !tensors[id]) {
        return make_error(ErrorKind::InvalidProgram,
                          "op '%s' refers to tensor %u, which does not "
                          "exist",
                          op->name()->c_str(), id);
      }
      out.push_back(tensors[id]->tensor);
    }
    return Status::Ok();
  };
  QNN_RETURN_IF_ERROR(pick(op->inputs(), b.inputs));
  QNN_RETURN_IF_ERROR(pick(op->outputs(), b.outputs));
  b.config.version = 1;
  QnnOpConfigV1& c = b.config.v1;
  c.name = op->name()->c_str();
  c.package = (op->package() && op->package()->size()) ? op->package()->c_str() : kDefaultPackage;
  c.type = op->type()->c_str();
  c.num_params = uint32_t(b.params.size());
  c.params = b.params.empty() ? nullptr : b.params.data();
  c.num_inputs = uint32_t(b.inputs.size());
  c.inputs = b.inputs.empty() ? nullptr : b.inputs.data();
  c.num_outputs = uint32_t(b.outputs.size());
  c.outputs = b.outputs.empty() ? nullptr : b.outputs.data();
  return Status::Ok();
}

Status describe_all(const fb::Graph* g, uint32_t version, std::vector<std::unique_ptr<TensorDesc>>& tensors) {
  const size_t n = g->tensors() ? g->tensors()->size() : 0;
  tensors.resize(n);
  for (size_t i = 0; i < n; ++i) {
    QNN_RETURN_IF_ERROR(describe_tensor(g->tensors()->Get(i), version, tensors[i]));
  }
  widen_sub_byte_weights(g, tensors);
  return Status::Ok();
}

Status create_device(const QnnLibrary* lib, const CompileRequest& r, Session& s) {
  HtpDeviceConfig soc{};
  soc.option = kHtpDeviceOptionSoc;
  soc.soc_model = r.soc_model;
  QnnConfig custom{};
  custom.option = kQnnConfigCustom;
  custom.custom = &soc;
  const QnnConfig* configs[] = {&custom, nullptr};
  const bool with_soc = r.soc_model != 0 && !r.record_only;
  const QnnStatus st = lib->fn().device_create(lib->log(), with_soc ? configs : nullptr, &s.device);
  if (st != 0) {
    return make_error(
        ErrorKind::NotSupported, "%s",
        with_qnn_log("QNN deviceCreate for SoC model " + std::to_string(r.soc_model) + " failed: " + qnn_error_text(st))
            .c_str());
  }
  return Status::Ok();
}

Status create_graph(const QnnLibrary* lib, const fb::Graph* g, const CompileRequest& r, QnnHandle context,
                    QnnHandle* graph) {
  HtpGraphConfig htp[3];
  QnnConfig wrapped[3];
  const QnnConfig* configs[4] = {nullptr, nullptr, nullptr, nullptr};
  size_t n = 0;
  auto add = [&](const HtpGraphConfig& c) {
    htp[n] = c;
    wrapped[n].option = kQnnConfigCustom;
    wrapped[n].custom = &htp[n];
    configs[n] = &wrapped[n];
    ++n;
  };
  if (g->fp16_precision()) {
    HtpGraphConfig c{};
    c.option = kHtpGraphOptionPrecision;
    c.precision = kQnnPrecisionFloat16;
    add(c);
  }
  if (r.vtcm_mb) {
    HtpGraphConfig c{};
    c.option = kHtpGraphOptionVtcmMb;
    c.vtcm_mb = r.vtcm_mb;
    add(c);
  }
  if (r.optimization_level) {
    HtpGraphConfig c{};
    c.option = kHtpGraphOptionOptimization;
    c.optimization.type = kHtpOptimizationFinalizeFlag;
    c.optimization.value = float(r.optimization_level);
    add(c);
  }
  if (r.record_only) n = 0;
  const QnnStatus st = lib->fn().graph_create(context, g->name()->c_str(), n ? configs : nullptr, graph);
  if (st != 0) {
    return make_error(
        ErrorKind::NotSupported, "%s",
        with_qnn_log("graph '" + g->name()->str() + "': QNN graphCreate failed: " + qnn_error_text(st)).c_str());
  }
  return Status::Ok();
}

std::string graph_prefix(const fb::Graph* g) { return "graph '" + g->name()->str() + "': "; }

Status build_graph(const QnnLibrary* lib, const fb::Graph* g, const CompileRequest& r, QnnHandle context,
                   std::vector<uint32_t>& ids) {
  QnnHandle graph = nullptr;
  QNN_RETURN_IF_ERROR(create_graph(lib, g, r, context, &graph));
  std::vector<std::unique_ptr<TensorDesc>> tensors;
  QNN_RETURN_IF_ERROR(describe_all(g, r.tensor_version, tensors));
  ids.assign(tensors.size(), 0);
  for (size_t i = 0; i < tensors.size(); ++i) {
    const QnnStatus st = lib->fn().tensor_create_graph_tensor(graph, &tensors[i]->tensor);
    if (st != 0) {
      return make_error(
          ErrorKind::NotSupported, "%s",
          with_qnn_log(graph_prefix(g) + "tensor '" + tensors[i]->name + "' refused: " + qnn_error_text(st)).c_str());
    }
    ids[i] = core(tensors[i]->tensor).id;
  }
  std::vector<std::unique_ptr<OpBuild>> ops;  // alive until finalize
  const size_t num_ops = g->ops() ? g->ops()->size() : 0;
  for (size_t i = 0; i < num_ops; ++i) {
    const fb::Op* op = g->ops()->Get(i);
    ops.emplace_back(new OpBuild());
    const Status s = make_op(op, tensors, lib, graph, *ops.back());
    if (!s.ok()) return make_error(s.kind, "%s%s", graph_prefix(g).c_str(), s.message.c_str());
    const QnnStatus st = lib->fn().graph_add_node(graph, ops.back()->config);
    if (st != 0) {
      return make_error(ErrorKind::NotSupported, "%s",
                        with_qnn_log(graph_prefix(g) + "op '" + op->name()->str() + "' (" + op->type()->str() +
                                     ") refused: " + qnn_error_text(st))
                            .c_str());
    }
  }
  const QnnStatus st = lib->fn().graph_finalize(graph, nullptr, nullptr);
  if (st != 0) {
    return make_error(ErrorKind::NotSupported, "%s",
                      with_qnn_log(graph_prefix(g) + "QNN graphFinalize failed: " + qnn_error_text(st)).c_str());
  }
  return Status::Ok();
}

Status read_binary(const QnnLibrary* lib, QnnHandle context, std::vector<uint8_t>& out) {
  uint64_t size = 0;
  QnnStatus st = lib->fn().context_get_binary_size(context, &size);
  if (st != 0 || size == 0) {
    return make_error(ErrorKind::Internal, "QNN contextGetBinarySize: %s", qnn_error_text(st).c_str());
  }
  out.resize(size);
  uint64_t written = 0;
  st = lib->fn().context_get_binary(context, out.data(), size, &written);
  if (st != 0) {
    return make_error(ErrorKind::Internal, "QNN contextGetBinary: %s", qnn_error_text(st).c_str());
  }
  out.resize(written);
  return Status::Ok();
}

// Op `op` built from `tensors` and put to backendValidateOpConfig; the error says why
// QNN refused it (with what QNN logged) or why it could not be built.
Status check_op(const QnnLibrary* lib, const fb::Op* op, const std::vector<std::unique_ptr<TensorDesc>>& tensors) {
  OpBuild b;
  QNN_RETURN_IF_ERROR(make_op(op, tensors, lib, nullptr, b));
  QnnLibrary::take_messages();
  QnnStatus st;
  {
    // What QNN logs here becomes the refusal's reason (the partition summary prints it): not
    // forwarded to the log as well, which repeated every line of every refused op.
    QnnLibrary::ScopedQuiet quiet;
    st = lib->fn().backend_validate_op_config(lib->backend(), b.config);
  }
  if (st != 0) {
    return make_error(
        ErrorKind::NotSupported, "%s",
        with_qnn_log("op '" + op->name()->str() + "' (" + op->type()->str() + ") refused by QNN: " + qnn_error_text(st))
            .c_str());
  }
  return Status::Ok();
}

// Why a tensor of `op` could not be described (empty when all could): describe_tensor's
// message for the first input or output whose description failed.
std::string undescribed_tensor(const fb::Op* op, const std::vector<std::string>& tensor_errors) {
  for (const auto* ids : {op->inputs(), op->outputs()}) {
    if (ids == nullptr) continue;
    for (const uint32_t id : *ids) {
      if (id < tensor_errors.size() && !tensor_errors[id].empty()) {
        return "op '" + op->name()->str() + "' (" + op->type()->str() + "): " + tensor_errors[id];
      }
    }
  }
  return std::string();
}

}  // namespace

namespace {

Status compile_with(const QnnLibrary* lib, const fb::QnnPayload* payload, const CompileRequest& request,
                    CompiledContext& out) {
  QnnLibrary::take_messages();
  Session session;
  session.lib = lib;
  QNN_RETURN_IF_ERROR(create_device(lib, request, session));
  QnnStatus st = lib->fn().context_create(lib->backend(), session.device, nullptr, &session.context);
  if (st != 0) {
    return make_error(ErrorKind::Internal, "%s",
                      with_qnn_log("QNN contextCreate failed: " + qnn_error_text(st)).c_str());
  }
  out = CompiledContext();
  for (const fb::Graph* g : *payload->graphs()) {
    out.graph_names.push_back(g->name()->str());
    out.tensor_ids.emplace_back();
    QNN_RETURN_IF_ERROR(build_graph(lib, g, request, session.context, out.tensor_ids.back()));
  }
  if (request.record_only) return Status::Ok();
  return read_binary(lib, session.context, out.binary);
}

}  // namespace

Status compile_context(const fb::QnnPayload* payload, const CompileRequest& request, CompiledContext& out) {
  std::string why;
  const QnnLibrary* lib = QnnLibrary::get(&why);
  if (lib == nullptr) return make_error(ErrorKind::NotSupported, "%s", why.c_str());
  return compile_with(lib, payload, request, out);
}

Status record_with_saver(const fb::QnnPayload* payload, const std::string& output_dir) {
  std::string why;
  const QnnLibrary* lib = QnnLibrary::saver(output_dir, &why);
  if (lib == nullptr) return make_error(ErrorKind::NotSupported, "saver: %s", why.c_str());
  CompileRequest request;
  request.record_only = true;
  CompiledContext unused;
  return compile_with(lib, payload, request, unused);
}

// HTP validates an op against the architecture of the device created last (without one,
// its oldest: a 16-bit MatMul is then refused with 'incorrect Value 68, expected >= 73').
Status device_for_validation(const QnnLibrary* lib, uint32_t soc_model, Session& session) {
  session.lib = lib;
  if (soc_model == 0) return Status::Ok();
  CompileRequest request;
  request.soc_model = soc_model;
  return create_device(lib, request, session);
}

Status validate_op(const fb::Graph* g, uint32_t op_index, uint32_t soc_model) {
  std::string why;
  const QnnLibrary* lib = QnnLibrary::get(&why);
  if (lib == nullptr) return make_error(ErrorKind::NotSupported, "%s", why.c_str());
  if (g->ops() == nullptr || op_index >= g->ops()->size()) {
    return make_error(ErrorKind::InvalidArgument, "op index %u out of range", op_index);
  }
  std::vector<std::unique_ptr<TensorDesc>> tensors;
  QNN_RETURN_IF_ERROR(describe_all(g, 1, tensors));
  Session session;
  QNN_RETURN_IF_ERROR(device_for_validation(lib, soc_model, session));
  return check_op(lib, g->ops()->Get(op_index), tensors);
}

Status validate_ops(const fb::Graph* g, uint32_t soc_model, std::vector<OpVerdict>& out) {
  out.clear();
  std::string why;
  const QnnLibrary* lib = QnnLibrary::get(&why);
  if (lib == nullptr) return make_error(ErrorKind::NotSupported, "%s", why.c_str());
  // Each tensor described once; one that cannot be described refuses only the ops using it.
  const size_t num_tensors = g->tensors() ? g->tensors()->size() : 0;
  std::vector<std::unique_ptr<TensorDesc>> tensors(num_tensors);
  std::vector<std::string> tensor_errors(num_tensors);
  for (size_t i = 0; i < num_tensors; ++i) {
    const Status s = describe_tensor(g->tensors()->Get(i), 1, tensors[i]);
    if (!s.ok()) {
      tensors[i].reset();
      tensor_errors[i] = s.message;
    }
  }
  widen_sub_byte_weights(g, tensors);
  Session session;
  QNN_RETURN_IF_ERROR(device_for_validation(lib, soc_model, session));
  const size_t num_ops = g->ops() ? g->ops()->size() : 0;
  out.resize(num_ops);
  for (size_t i = 0; i < num_ops; ++i) {
    const fb::Op* op = g->ops()->Get(i);
    out[i].reason = undescribed_tensor(op, tensor_errors);
    if (!out[i].reason.empty()) continue;
    const Status s = check_op(lib, op, tensors);
    out[i].accepted = s.ok();
    if (!s.ok()) out[i].reason = s.message.empty() ? "refused (no reason given)" : s.message;
  }
  return Status::Ok();
}

}  // namespace qnn
}  // namespace qnn_delegate
