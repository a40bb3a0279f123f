#include "backends/qualcomm/runtime/qnn/QnnEngine.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <executorch/runtime/core/event_tracer_hooks_delegate.h>
#include <executorch/runtime/core/exec_aten/exec_aten.h>
#include <executorch/runtime/core/exec_aten/util/scalar_type_util.h>
#include <executorch/runtime/platform/log.h>
#include <executorch/runtime/platform/platform.h>

#include "backends/qualcomm/runtime/GraphArgs.h"
#include "backends/qualcomm/runtime/PayloadLoader.h"
#include "backends/qualcomm/runtime/qnn/QnnCompiler.h"
#include "backends/qualcomm/runtime/qnn/QnnLibrary.h"

namespace qnn_delegate {
namespace runtime {

using engine::ErrorKind;
using engine::make_error;
using engine::Status;
using executorch::aten::ScalarType;
using executorch::runtime::Error;
using executorch::runtime::EValue;
using executorch::runtime::Span;

namespace {

std::atomic<bool> g_said_no_binary{false};
std::atomic<bool> g_said_no_library{false};
std::atomic<bool> g_said_emulator{false};

// Qualcomm's HTP library drives an NPU only on the device's own (ARM) CPU; on an x86 host it
// is the HTP emulator: exact, and ~50x slower than the host engine (MobileNetV2 fp16 743 ms
// vs 13 ms per inference). `auto` picks the host engine there; `qnn` still runs the emulator.
constexpr bool kQnnIsEmulated =
#if defined(__x86_64__) || defined(__i386__)
    true;
#else
    false;
#endif

void say_once(std::atomic<bool>& flag, const char* what, const std::string& why) {
  if (!flag.exchange(true)) {
    ET_LOG(Info, "QnnDelegate: engine auto -> host engine (%s): %s", what, why.c_str());
  }
}

bool dtype_matches(ScalarType st, const qnn::TensorDesc& d) {
  if (d.int64_narrowed) return st == ScalarType::Long;
  switch (qnn::core(d.tensor).dtype) {
    case qnn::kQnnFloat32:
      return st == ScalarType::Float;
    case qnn::kQnnInt32:
      return st == ScalarType::Int;
    case qnn::kQnnBool8:
      return st == ScalarType::Bool;
    case qnn::kQnnUInt8:
    case qnn::kQnnUFixed8:
      return st == ScalarType::Byte;
    // graph I/O of context binaries made elsewhere (from_context_binary)
    case qnn::kQnnFloat16:
      return st == ScalarType::Half;
    case qnn::kQnnUInt16:
    case qnn::kQnnUFixed16:
      return st == ScalarType::UInt16;
    case qnn::kQnnInt8:
    case qnn::kQnnSFixed8:
      return st == ScalarType::Char;
    case qnn::kQnnInt16:
    case qnn::kQnnSFixed16:
      return st == ScalarType::Short;
    default:
      return false;
  }
}

Error check_arg(const qnn::QnnGraphRunner& g, const EValue* arg, size_t index, const qnn::TensorDesc& d,
                const char* what, void** data) {
  if (arg == nullptr || !arg->isTensor()) {
    ET_LOG(Error, "QnnDelegate graph '%s' (QNN): %s %zu (tensor '%s') is not a tensor", g.name().c_str(), what, index,
           d.name.c_str());
    return Error::InvalidArgument;
  }
  const auto& t = arg->toTensor();
  if (!dtype_matches(t.scalar_type(), d) || size_t(t.numel()) != d.numel) {
    ET_LOG(Error,
           "QnnDelegate graph '%s' (QNN): %s %zu (tensor '%s') has dtype %s and %zu "
           "elements, graph expects QNN data type 0x%x and %zu elements",
           g.name().c_str(), what, index, d.name.c_str(), executorch::runtime::toString(t.scalar_type()),
           size_t(t.numel()), unsigned(qnn::core(d.tensor).dtype), d.numel);
    return Error::InvalidArgument;
  }
  *data = t.mutable_data_ptr();
  if (*data == nullptr && d.numel != 0) return Error::InvalidArgument;
  return Error::Ok;
}

// QNN reports per-node cycles, not start / end times: node events are laid out one
// after the other inside the execute's wall time, in proportion to their cycles.
void log_profile(executorch::runtime::EventTracer* tracer, const qnn::QnnGraphRunner& g,
                 const std::vector<qnn::QnnProfileSample>& samples, uint64_t start, uint64_t end) {
  uint64_t total_cycles = 0;
  for (const auto& s : samples) total_cycles += s.is_node ? s.value : 0;
  char metadata[160];
  int n = std::snprintf(metadata, sizeof(metadata), "type=Graph;engine=qnn");
  executorch::runtime::event_tracer_log_profiling_delegate(
      tracer, g.name().c_str(), executorch::runtime::kUnsetDelegateDebugIntId, start, end, metadata, size_t(n));
  uint64_t cursor = start;
  for (const auto& s : samples) {
    if (!s.is_node) continue;
    const uint64_t span = total_cycles ? uint64_t(double(end - start) * double(s.value) / double(total_cycles)) : 0;
    n = std::snprintf(metadata, sizeof(metadata), "type=QnnNode;cycles=%llu", static_cast<unsigned long long>(s.value));
    // "<op name>:OpId_<n> (cycles)" -> "<op name>" (the payload op's name), no allocation.
    char name[256];
    size_t cut = s.name.find_first_of(": ");
    if (cut == std::string::npos || cut == 0) cut = s.name.size();
    cut = std::min(cut, sizeof(name) - 1);
    std::memcpy(name, s.name.data(), cut);
    name[cut] = '\0';
    executorch::runtime::event_tracer_log_profiling_delegate(
        tracer, name, executorch::runtime::kUnsetDelegateDebugIntId, cursor, cursor + span, metadata, size_t(n));
    cursor += span;
  }
}

}  // namespace

const char* engine_choice_name(EngineChoice choice) {
  switch (choice) {
    case EngineChoice::Qnn:
      return "qnn";
    case EngineChoice::Host:
      return "host";
    default:
      return "auto";
  }
}

bool parse_engine_choice(const char* text, EngineChoice* out) {
  if (text == nullptr) return false;
  if (!std::strcmp(text, "auto") || !std::strcmp(text, "0")) {
    *out = EngineChoice::Auto;
    return true;
  }
  if (!std::strcmp(text, "qnn") || !std::strcmp(text, "1")) {
    *out = EngineChoice::Qnn;
    return true;
  }
  if (!std::strcmp(text, "host") || !std::strcmp(text, "2")) {
    *out = EngineChoice::Host;
    return true;
  }
  return false;
}

EngineChoice default_engine() {
  EngineChoice choice = EngineChoice::Auto;
  parse_engine_choice(std::getenv("QNN_DELEGATE_ENGINE"), &choice);
  return choice;
}

namespace {

// A delegate wrapping a context binary made elsewhere (from_context_binary): its graphs exist
// only in QNN's binary, so QNN runs it under `auto` too (on x86: the HTP emulator); engine
// host never gets here, and load_graphs refuses such a payload.
Status load_wrapped_context(const uint8_t* data, size_t size, const ::qnn_delegate::QnnContextBinary* container,
                            const ::qnn_delegate::QnnPayload* payload, std::unique_ptr<qnn::QnnLoadedContext>& out) {
  const char* graph = payload->graphs()->Get(0)->name()->c_str();
  if (!qnn::has_qnn_context(container)) {
    return make_error(ErrorKind::InvalidProgram, "the delegate of graph '%s' wraps no QNN context binary", graph);
  }
  flatbuffers::Verifier verifier(data, size);
  if (!container->qnn_context()->Verify(verifier)) {
    return make_error(ErrorKind::InvalidProgram,
                      "the delegate of graph '%s': QNN section failed the flatbuffers verifier", graph);
  }
  std::string why;
  if (qnn::QnnLibrary::get(&why) == nullptr) {
    return make_error(ErrorKind::NotSupported,
                      "the delegate of graph '%s' wraps a QNN context binary (from_context_binary) and "
                      "Qualcomm's QNN library does not load: %s",
                      graph, why.c_str());
  }
  const Status s = qnn::QnnLoadedContext::load(container, payload, out);
  if (!s.ok()) {
    out.reset();
    return make_error(s.kind, "the delegate of graph '%s' (a wrapped QNN context binary): %s", graph,
                      s.message.c_str());
  }
  return s;
}

// Whether QNN runs the delegate (`use_qnn`): not on the x86 emulator unless the engine is forced
// to qnn, not without QNN's library (an error naming `what` when forced); each reason said once.
Status qnn_runs_it(bool forced, const char* what, bool& use_qnn) {
  use_qnn = false;
  if (kQnnIsEmulated && !forced) {
    say_once(g_said_emulator, "QNN's library is the x86 HTP emulator",
             "exact but ~50x slower than the host engine, which follows its numerics; set "
             "qnn_runtime_engine=qnn (runner: --engine qnn) to run the emulator");
    return Status::Ok();
  }
  std::string why;
  if (qnn::QnnLibrary::get(&why) == nullptr) {
    if (forced) return make_error(ErrorKind::NotSupported, "%s: %s", what, why.c_str());
    say_once(g_said_no_library, "QNN libraries not loaded", why);
    return Status::Ok();
  }
  use_qnn = true;
  return Status::Ok();
}

// A failed QNN load: the error when the engine is forced to qnn, else the host engine runs the
// delegate (the reason logged).
Status host_unless_forced(bool forced, const Status& failure, std::unique_ptr<qnn::QnnLoadedContext>& out) {
  out.reset();
  if (forced) return failure;
  ET_LOG(Error, "QnnDelegate: engine auto -> host engine: %s", failure.message.c_str());
  return Status::Ok();
}

// Online prepare (the blob carries no context binary): QNN builds and finalizes the graphs
// now, once, then loads the binary it made. Same engine rule as a carried binary.
Status prepare_online(const ::qnn_delegate::QnnPayload* payload, EngineChoice choice,
                      std::unique_ptr<qnn::QnnLoadedContext>& out) {
  const bool forced = choice == EngineChoice::Qnn;
  bool use_qnn = false;
  QNN_RETURN_IF_ERROR(qnn_runs_it(forced, "engine qnn (online prepare)", use_qnn));
  if (!use_qnn) return Status::Ok();
  qnn::CompileRequest request;
  request.soc_model = payload->online_prepare()->soc_model();
  request.vtcm_mb = payload->online_prepare()->vtcm_mb();
  qnn::CompiledContext compiled;
  Status s = qnn::compile_context(payload, request, compiled);
  if (s.ok()) {
    qnn::QnnLoadedContext::GraphIds ids;
    for (size_t i = 0; i < compiled.graph_names.size(); ++i) {
      ids.emplace_back(compiled.graph_names[i], std::move(compiled.tensor_ids[i]));
    }
    s = qnn::QnnLoadedContext::load_binary(compiled.binary.data(), compiled.binary.size(), request.soc_model, ids,
                                           payload, false, out);
  }
  if (s.ok()) return s;
  return host_unless_forced(forced, make_error(s.kind, "online prepare: %s", s.message.c_str()), out);
}

}  // namespace

Status load_qnn_engine(const void* data, size_t size, EngineChoice choice,
                       std::unique_ptr<qnn::QnnLoadedContext>& out) {
  out.reset();
  if (choice == EngineChoice::Host) return Status::Ok();
  const bool forced = choice == EngineChoice::Qnn;
  const AlignedBlob blob(data, size);
  const ::qnn_delegate::QnnPayload* payload = nullptr;
  QNN_RETURN_IF_ERROR(verify_context_binary(blob.data, size, &payload));
  const auto* container = ::qnn_delegate::GetQnnContextBinary(blob.data);
  if (payload->context_binary_only()) return load_wrapped_context(blob.data, size, container, payload, out);
  if (!qnn::has_qnn_context(container) && payload->online_prepare() != nullptr) {
    return prepare_online(payload, choice, out);
  }
  if (!qnn::has_qnn_context(container)) {
    const char* why =
        "the delegate has no QNN context binary (lowered without the QNN "
        "libraries, or QNN refused a graph at lowering)";
    if (forced) return make_error(ErrorKind::NotSupported, "engine qnn: %s", why);
    say_once(g_said_no_binary, "no context binary", why);
    return Status::Ok();
  }
  flatbuffers::Verifier verifier(blob.data, size);
  if (!container->qnn_context()->Verify(verifier)) {
    return host_unless_forced(
        forced, make_error(ErrorKind::InvalidProgram, "QNN section of the blob failed the flatbuffers verifier"), out);
  }
  bool use_qnn = false;
  QNN_RETURN_IF_ERROR(qnn_runs_it(forced, "engine qnn", use_qnn));
  if (!use_qnn) return Status::Ok();
  const Status s = qnn::QnnLoadedContext::load(container, payload, out);
  if (s.ok()) return s;
  return host_unless_forced(forced, s, out);
}

Error execute_on_qnn(executorch::runtime::BackendExecutionContext& context, qnn::QnnGraphRunner& g, int profile_level,
                     Span<EValue*> args, TensorDumper* dumper) {
  GraphArgs bound;
  ET_CHECK_OK_OR_RETURN_ERROR(bind_graph_args(
      g.name(), " (QNN)", args, g.num_inputs(), g.num_outputs(),
      [&](const EValue* arg, size_t i, bool is_output, void** data) {
        return is_output ? check_arg(g, arg, i, g.output(i), "output", data)
                         : check_arg(g, arg, i, g.input(i), "input", data);
      },
      bound));
  void* const* in_ptrs = bound.inputs;
  void* const* out_ptrs = bound.outputs;
  executorch::runtime::EventTracer* tracer = context.event_tracer();
  const bool profiling = profile_level > 0 && tracer != nullptr;
  Status s;
  if (!profiling) {
    s = g.execute(in_ptrs, out_ptrs);
  } else {
    const uint64_t start = et_pal_current_ticks();
    s = g.execute(in_ptrs, out_ptrs, profile_level);
    const uint64_t end = et_pal_current_ticks();
    if (s.ok()) log_profile(tracer, g, g.profile_samples(), start, end);
  }
  if (!s.ok()) {
    ET_LOG(Error, "QnnDelegate execute failed: %s", s.message.c_str());
    return Error::Internal;
  }
  if (dumper != nullptr && TensorDumper::wanted(tracer)) dumper->log(tracer, out_ptrs);
  return Error::Ok;
}

}  // namespace runtime
}  // namespace qnn_delegate
