// AOT: builds the graphs of one payload through the QNN API for a SoC,
// finalizes them (HTP prepare) and returns the context binary.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "qnn_payload_generated.h"

#include "backends/qualcomm/runtime/engine/Status.h"

namespace qnn_delegate {
namespace qnn {

struct CompileRequest {
  uint32_t soc_model = 0;           // QcomChipset value (= QNN's SoC model number); 0 = none
  uint32_t vtcm_mb = 0;             // 0 = library default
  uint32_t optimization_level = 0;  // HTP finalize optimization level 1..3; 0 = default
  uint32_t tensor_version = 1;      // Qnn_Tensor_t version used to describe tensors (1 or 2)
  // Recording through QNN's saver: no HTP custom configs (SoC, precision, VTCM, optimization;
  // the saver refuses them), no context binary read back.
  bool record_only = false;
};

struct CompiledContext {
  std::vector<uint8_t> binary;
  std::vector<std::string> graph_names;
  // Per graph, per payload tensor: the id QNN gave the tensor (0 = not created).
  std::vector<std::vector<uint32_t>> tensor_ids;
};

// Every graph of `payload` in one QNN context. Errors name the graph, op and
// QNN error code, plus what QNN logged.
engine::Status compile_context(const ::qnn_delegate::QnnPayload* payload, const CompileRequest& request,
                               CompiledContext& out);

// Every graph of `payload` built and finalized through QNN's saver (libQnnSaver.so), which
// records the calls into `output_dir` (saver_output.c, params.bin): a program that replays
// them against a QNN backend outside ExecuTorch.
engine::Status record_with_saver(const ::qnn_delegate::QnnPayload* payload, const std::string& output_dir);

// One op of a payload graph checked by backendValidateOpConfig; the message
// says why QNN refused it. `op_index` indexes graph->ops().
// `soc_model` (0 = none): the SoC whose HTP architecture the op is checked against.
engine::Status validate_op(const ::qnn_delegate::Graph* graph, uint32_t op_index, uint32_t soc_model = 0);

// QNN's answer about one op of a graph: accepted, or why not (QNN refused it, or
// the op could not be described to QNN, e.g. it uses a tensor with no QNN type).
struct OpVerdict {
  bool accepted = false;
  std::string reason;  // empty when accepted; the text validate_op's error carries
};

// Every op of `graph` checked by backendValidateOpConfig in one pass: the graph's
// tensors are described once (validate_op describes them again for each op).
// `out[i]` is op i's verdict, with the reasons validate_op gives (except that a
// tensor which cannot be described refuses only the ops using it, named, where
// validate_op fails every op). Returns an error only when nothing can be checked
// (the QNN library does not load).
engine::Status validate_ops(const ::qnn_delegate::Graph* graph, uint32_t soc_model, std::vector<OpVerdict>& out);

}  // namespace qnn
}  // namespace qnn_delegate
