// Runtime: a delegate's QNN context binary loaded into Qualcomm's QNN library
// (contextCreateFromBinary + graphRetrieve, once at init); execute binds the
// caller's buffers to the graph's input / output tensors and calls graphExecute.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "qnn_payload_generated.h"

#include "backends/qualcomm/runtime/engine/Status.h"
#include "backends/qualcomm/runtime/engine/Tensor.h"
#include "backends/qualcomm/runtime/qnn/QnnAbi.h"
#include "backends/qualcomm/runtime/qnn/QnnTensorDesc.h"

namespace qnn_delegate {
namespace qnn {

// Per-op timings of one execute (profile levels basic / detailed).
struct QnnProfileSample {
  std::string name;   // QNN's event identifier, e.g. "conv0:OpId_30 (cycles)"
  uint32_t unit = 0;  // kQnnProfileUnitMicroseconds / kQnnProfileUnitCycles
  uint64_t value = 0;
  bool is_node = false;
  uint32_t type = 0;  // QNN event type (400 execute, 404 node, ...)
  int depth = 0;      // 0 = top-level event, 1 = its sub-event, ...
};

class QnnGraphRunner {
 public:
  ~QnnGraphRunner();
  const std::string& name() const { return name_; }
  size_t num_inputs() const { return inputs_.size(); }
  size_t num_outputs() const { return outputs_.size(); }
  // Payload view of input / output i (dtype as the caller sees it: INT_64 stays INT_64).
  const TensorDesc& input(size_t i) const { return *inputs_[i]; }
  const TensorDesc& output(size_t i) const { return *outputs_[i]; }
  // Bytes the caller's buffer of input / output i holds.
  size_t input_bytes(size_t i) const;
  size_t output_bytes(size_t i) const;

  // Payload view (engine::TensorInfo: payload dtype, dims) of output i, for dumps.
  const engine::TensorInfo& output_info(size_t i) const { return output_infos_[i]; }
  // APP_READ tensors that are not graph outputs (intermediate dumps): bound to buffers
  // allocated at init and passed to every graphExecute; readable_data(i) holds tensor
  // i's value (payload dtype: INT_64 widened) after an execute.
  size_t num_readables() const { return readables_.size(); }
  const engine::TensorInfo& readable_info(size_t i) const { return readables_[i].info; }
  void* readable_data(size_t i) { return readables_[i].data(); }

  // shared_buffer: registers one buffer per graph input / output with QNN's memory API
  // (QnnMem_register: DMA-BUF, else ION; memfd-backed, allocated here, once). Execute then
  // copies the caller's inputs into them and the outputs back out, and passes memory handles.
  // NotSupported with QNN's error for each memory type when QNN refuses them (the x86 library
  // refuses every one: QNN error 1000, "QnnMem API is not supported"). Idempotent.
  engine::Status enable_shared_buffers();
  bool shared_buffers() const { return !shared_.empty(); }

  // Creates the QnnProfile handle of `profile_level` (1 basic, 2 detailed; 0: nothing) if
  // it does not exist yet. Called at init so that execute does not allocate it.
  engine::Status prepare_profile(int profile_level);

  // inputs[i] / outputs[i]: caller buffers. profile_level 0 = off, 1 basic, 2 detailed;
  // profile_samples() holds the events of this execute (empty when not profiled);
  // `samples` (optional) receives a copy.
  engine::Status execute(void* const* inputs, void* const* outputs, int profile_level = 0,
                         std::vector<QnnProfileSample>* samples = nullptr);
  const std::vector<QnnProfileSample>& profile_samples() const { return profile_samples_; }

 private:
  friend class QnnLoadedContext;
  engine::Status bind(const ::qnn_delegate::Graph* graph, const std::vector<uint32_t>& ids);
  engine::Status bind_readables(const ::qnn_delegate::Graph* graph, const std::vector<uint32_t>& ids);
  engine::Status bind_bits_views(const ::qnn_delegate::Graph* graph, const std::vector<uint32_t>& ids);

  struct Readable {
    engine::TensorInfo info;
    std::unique_ptr<TensorDesc> desc;
    std::vector<uint64_t> storage;  // QNN's buffer (8-byte aligned)
    std::vector<int64_t> widened;   // INT_64 tensors: the value as int64 (QNN gives int32)
    void* data() { return widened.empty() ? static_cast<void*>(storage.data()) : widened.data(); }
  };

  struct SharedBuffer {
    int fd = -1;
    void* data = nullptr;
    size_t bytes = 0;
    QnnHandle handle = nullptr;
  };
  engine::Status register_buffer(const TensorDesc& d, SharedBuffer& out);
  void release_shared_buffers();

  std::string name_;
  QnnHandle graph_ = nullptr;
  QnnHandle context_ = nullptr;
  std::vector<SharedBuffer> shared_;  // inputs, then outputs (empty: raw client buffers)
  QnnHandle backend_ = nullptr;
  std::vector<std::unique_ptr<TensorDesc>> inputs_;
  std::vector<std::unique_ptr<TensorDesc>> outputs_;
  std::vector<QnnTensor> in_tensors_;  // passed to graphExecute, buffers set per call: the
                                       // inputs, then the views of their buffers (bits_views_)
  // APP_WRITE tensors outside the graph inputs (Tensor.bits_of_input): the caller's buffer of
  // input `input` read in the view's data type (the exact bits of a FLOAT_32 input as INT_32).
  struct BitsView {
    std::unique_ptr<TensorDesc> desc;
    size_t input = 0;
  };
  std::vector<BitsView> bits_views_;
  std::vector<QnnTensor> out_tensors_;  // graph outputs, then the readables (buffers fixed)
  std::vector<engine::TensorInfo> output_infos_;
  std::vector<Readable> readables_;
  std::vector<std::vector<int32_t>> in_scratch_;         // int64 inputs narrowed (allocated at init)
  std::vector<std::vector<int32_t>> out_scratch_;        // int64 outputs widened after execute
  QnnHandle profiles_[3] = {nullptr, nullptr, nullptr};  // per level (see prepare_profile)
  std::vector<QnnProfileSample> profile_samples_;        // reused by every profiled execute
};

class QnnLoadedContext {
 public:
  // Loads the blob's QNN section (verified: signature, graph names match the
  // payload). NotSupported when the library is missing, InvalidProgram when QNN
  // refuses the binary (corrupted, other SoC / API version): the message says why.
  static engine::Status load(const ::qnn_delegate::QnnContextBinary* blob, const ::qnn_delegate::QnnPayload* payload,
                             std::unique_ptr<QnnLoadedContext>& out);
  // (graph name, QNN tensor id per payload tensor) of each graph in a binary.
  using GraphIds = std::vector<std::pair<std::string, std::vector<uint32_t>>>;
  // Loads a context binary held elsewhere (e.g. one just built at init by online prepare;
  // `validate`: ask contextValidateBinary first). The binary may be freed afterwards.
  static engine::Status load_binary(const uint8_t* binary, size_t size, uint32_t soc_model, const GraphIds& ids,
                                    const ::qnn_delegate::QnnPayload* payload, bool validate,
                                    std::unique_ptr<QnnLoadedContext>& out);
  ~QnnLoadedContext();

  QnnGraphRunner* find_graph(const char* name) const;
  QnnGraphRunner* graph(size_t i) const { return graphs_[i].get(); }
  size_t num_graphs() const { return graphs_.size(); }
  size_t binary_size() const { return binary_size_; }

 private:
  QnnLoadedContext() = default;
  std::vector<std::unique_ptr<QnnGraphRunner>> graphs_;
  QnnHandle device_ = nullptr;
  QnnHandle context_ = nullptr;
  size_t binary_size_ = 0;
};

// True when the blob carries a QNN context binary.
bool has_qnn_context(const ::qnn_delegate::QnnContextBinary* blob);

}  // namespace qnn
}  // namespace qnn_delegate
