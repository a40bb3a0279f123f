// Executable graph: built once from a verified payload Graph (tensors,
// kernels, memory plan); execute binds the caller's pointers and runs the
// step list without allocating.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "backends/qualcomm/runtime/engine/ActivationFusion.h"
#include "backends/qualcomm/runtime/engine/Allocator.h"
#include "backends/qualcomm/runtime/engine/Kernel.h"
#include "backends/qualcomm/runtime/engine/Status.h"
#include "backends/qualcomm/runtime/engine/Tensor.h"

namespace qnn_delegate {
namespace engine {

struct EngineOptions {
  bool reference_only = false;  // use the oracle kernels only
};

// Per-op hooks of an execute (profiling). Not given = no cost beyond one branch per op.
class OpObserver {
 public:
  virtual ~OpObserver() = default;
  virtual void op_started(size_t op_index) = 0;
  virtual void op_finished(size_t op_index) = 0;
};

// One step of the step list: an op, or the fp16 rounding copy of an input.
struct Step {
  const Kernel* kernel = nullptr;
  uint32_t op_index = 0;  // index of the op in the payload graph
  uint32_t copy_src = 0;  // rounding copy: APP_WRITE tensor
  uint32_t copy_dst = 0;  //                its arena shadow
  size_t copy_numel = 0;
  std::vector<uint32_t> round_outputs;  // fp16: float outputs rounded after the op
};

class GraphExecutor {
 public:
  static Status build(const ::qnn_delegate::Graph* graph, const EngineOptions& options,
                      std::unique_ptr<GraphExecutor>& out);

  const std::string& name() const { return name_; }
  size_t num_inputs() const { return input_ids_.size(); }
  size_t num_outputs() const { return output_ids_.size(); }
  const TensorInfo& input_info(size_t i) const { return tensors_[input_ids_[i]]; }
  const TensorInfo& output_info(size_t i) const { return tensors_[output_ids_[i]]; }
  size_t num_ops() const { return kernels_.size(); }
  const std::string& op_name(size_t i) const { return op_names_[i]; }
  const std::string& op_type(size_t i) const { return op_types_[i]; }
  // The code path op i's kernel picked at init (Kernel::path).
  const char* op_path(size_t i) const { return kernels_[i]->path(); }
  size_t arena_bytes() const { return arena_.size(); }
  // APP_READ tensors that are not graph outputs (intermediate dumps): produced by an op,
  // kept in the arena for the whole execute, readable at tensor_data(id) after it.
  const std::vector<uint32_t>& readable_ids() const { return readable_ids_; }
  const TensorInfo& tensor_info(uint32_t id) const { return tensors_[id]; }
  void* tensor_data(uint32_t id) const { return ptrs_[id]; }
  const TrackingAllocator& allocator() const { return allocator_; }

  // inputs[i] / outputs[i]: caller buffers of input_info(i) / output_info(i).
  // `observer` (optional) sees every op start and finish.
  Status execute(void* const* inputs, void* const* outputs, OpObserver* observer = nullptr);

 private:
  GraphExecutor() = default;
  Status load_tensors(const ::qnn_delegate::Graph* graph);
  Status load_tensor(const ::qnn_delegate::Tensor* t, size_t index);
  Status copy_static_data(TensorInfo& info, const ::qnn_delegate::Tensor* t);
  Status load_dim_order(const ::qnn_delegate::Tensor* t, TensorInfo& info);
  Status load_io(const ::qnn_delegate::Graph* graph);
  Status load_bits_view(int32_t input_index, const TensorInfo& view);
  Status create_kernels(const ::qnn_delegate::Graph* graph);
  Status make_view(const ::qnn_delegate::Op* op, size_t index, OpView& view, std::vector<bool>& produced);
  void add_fused_activation_step(const ::qnn_delegate::Op* op);
  // `clamped` = the output of activation op `act` with the codes its fused clamp keeps.
  const TensorInfo* clamped_output(const ActivationFusion& fusion, size_t act, const ::qnn_delegate::Op* act_op,
                                   TensorInfo& clamped) const;
  uint32_t fp16_shadow_of(uint32_t id);
  Status plan_and_allocate();
  void release_io_pointers();

  TrackingAllocator allocator_;  // first member: destroyed last
  std::string name_;
  bool fp16_ = false;
  EngineOptions options_;
  std::vector<TensorInfo> tensors_;
  std::vector<Buffer> static_buffers_;
  std::vector<KernelPtr> kernels_;
  std::vector<std::string> op_names_;  // per op index
  std::vector<std::string> op_types_;
  std::vector<Step> steps_;
  std::vector<int64_t> shadow_of_;  // tensor id -> fp16 shadow id (-1 none)
  std::vector<uint32_t> input_ids_;
  // APP_WRITE views of input buffers (Tensor.bits_of_input): {tensor id, input index}.
  struct BitsView {
    uint32_t id;
    uint32_t input;
  };
  std::vector<BitsView> bits_views_;
  std::vector<uint32_t> output_ids_;
  std::vector<uint32_t> readable_ids_;
  // Lifetimes (step indices) of arena tensors.
  std::vector<size_t> first_step_;
  std::vector<size_t> last_step_;
  Buffer arena_;
  Buffer scratch_;
  std::vector<void*> ptrs_;
};

}  // namespace engine
}  // namespace qnn_delegate
