// The QNN engine inside the QnnDelegate backend: engine choice at init
// (runtime option qnn_runtime_engine: auto / qnn / host) and the execute path
// that binds ExecuTorch tensors to a QNN graph.
#pragma once

#include <cstddef>
#include <memory>

#include <executorch/runtime/backend/interface.h>

#include "backends/qualcomm/runtime/TensorDump.h"
#include "backends/qualcomm/runtime/engine/Status.h"
#include "backends/qualcomm/runtime/qnn/QnnRuntime.h"

namespace qnn_delegate {
namespace runtime {

// Values of the runtime option qnn_runtime_engine (also accepted as "auto" / "qnn" / "host").
enum class EngineChoice : int { Auto = 0, Qnn = 1, Host = 2 };

const char* engine_choice_name(EngineChoice choice);
// "auto" / "qnn" / "host" (or "0" / "1" / "2") -> choice; false for anything else.
bool parse_engine_choice(const char* text, EngineChoice* out);

// The engine used when the runtime option is not set: $QNN_DELEGATE_ENGINE if it
// names one, else auto.
EngineChoice default_engine();

// The QNN context of a delegate blob when `choice` asks for QNN and it loads; `out`
// stays null when the host engine runs it (auto says why once per reason). Error only
// when QNN is forced and cannot run the blob.
engine::Status load_qnn_engine(const void* data, size_t size, EngineChoice choice,
                               std::unique_ptr<qnn::QnnLoadedContext>& out);

// Execute of a delegate on its QNN graph: checks and binds args (inputs then outputs);
// `dumper` (optional) logs the dumped tensors into the event tracer after the execute.
executorch::runtime::Error execute_on_qnn(executorch::runtime::BackendExecutionContext& context,
                                          qnn::QnnGraphRunner& graph, int profile_level,
                                          executorch::runtime::Span<executorch::runtime::EValue*> args,
                                          TensorDumper* dumper = nullptr);

}  // namespace runtime
}  // namespace qnn_delegate
