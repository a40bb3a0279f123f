// GraphExecutor: kernels, step list, memory plan, execute.
#include "backends/qualcomm/runtime/engine/GraphExecutor.h"

#include <algorithm>

#include "backends/qualcomm/runtime/engine/ActivationFusion.h"
#include "backends/qualcomm/runtime/engine/MemoryPlanner.h"

namespace qnn_delegate {
namespace engine {

namespace {
constexpr size_t kNotProduced = SIZE_MAX;

// The step of an activation its producer computed (ActivationFusion.h): kept so
// op indices, names and profiling events stay one per payload op.
class FusedActivationKernel final : public Kernel {
 public:
  Status run(const RunContext&) const override { return Status::Ok(); }
  const char* path() const override { return "fused"; }  // its producer's step wrote it
};
}  // namespace

Status GraphExecutor::build(const ::qnn_delegate::Graph* graph, const EngineOptions& options,
                            std::unique_ptr<GraphExecutor>& out) {
  if (graph == nullptr) {
    return make_error(ErrorKind::InvalidProgram, "payload graph is null");
  }
  std::unique_ptr<GraphExecutor> ex(new GraphExecutor());
  ex->name_ = graph->name()->str();
  ex->fp16_ = graph->fp16_precision();
  ex->options_ = options;
  QNN_RETURN_IF_ERROR(ex->load_tensors(graph));
  QNN_RETURN_IF_ERROR(ex->load_io(graph));
  QNN_RETURN_IF_ERROR(ex->create_kernels(graph));
  QNN_RETURN_IF_ERROR(ex->plan_and_allocate());
  out = std::move(ex);
  return Status::Ok();
}

uint32_t GraphExecutor::fp16_shadow_of(uint32_t id) {
  if (shadow_of_[id] >= 0) return static_cast<uint32_t>(shadow_of_[id]);
  TensorInfo shadow = tensors_[id];
  shadow.id = static_cast<uint32_t>(tensors_.size());
  shadow.kind = TensorKind::NATIVE;
  shadow.name += ".fp16";
  tensors_.push_back(shadow);  // capacity reserved in load_tensors
  shadow_of_.push_back(-1);
  first_step_.push_back(steps_.size());
  last_step_.push_back(steps_.size());
  Step copy;
  copy.copy_src = id;
  copy.copy_dst = shadow.id;
  copy.copy_numel = shadow.numel;
  steps_.push_back(std::move(copy));
  shadow_of_[id] = shadow.id;
  return shadow.id;
}

namespace {

// In fp16 precision, ops read a FLOAT_32 graph input rounded to float16 (its shadow), except a
// Cast to an integer type: QNN 2.51's HTP converts the caller's FLOAT_32 values themselves
// (measured: trunc(2.9995) = 2, where float16 rounding gives 3.0 and 3).
bool reads_input_unrounded(const ::qnn_delegate::Op* op, const std::vector<TensorInfo>& tensors) {
  if (op->type()->str() != "Cast" || op->outputs() == nullptr || op->outputs()->size() != 1) return false;
  const uint32_t out = op->outputs()->Get(0);
  if (out >= tensors.size()) return false;
  switch (tensors[out].dtype) {
    case DType::INT_8:
    case DType::INT_16:
    case DType::INT_32:
    case DType::INT_64:
    case DType::UINT_8:
    case DType::UINT_16:
    case DType::UINT_32:
      return !tensors[out].quant.defined();
    default:
      return false;
  }
}

}  // namespace

Status GraphExecutor::make_view(const ::qnn_delegate::Op* op, size_t index, OpView& view, std::vector<bool>& produced) {
  view.op = op;
  view.graph_name = name_;
  view.name = op->name()->str();
  view.type = op->type()->str();
  const size_t n = produced.size();
  const auto* ins = op->inputs();
  for (size_t i = 0; ins && i < ins->size(); ++i) {
    uint32_t id = ins->Get(i);
    if (id >= n) {
      return view.fail(ErrorKind::InvalidProgram, "input %zu refers to tensor id %u, out of range (%zu tensors)", i, id,
                       n);
    }
    const TensorInfo& t = tensors_[id];
    const bool available = t.kind == TensorKind::STATIC || t.kind == TensorKind::APP_WRITE || produced[id];
    if (!available) {
      return view.fail(ErrorKind::InvalidProgram, "input %zu, tensor '%s', is read before any op produces it", i,
                       t.name.c_str());
    }
    if (fp16_ && t.kind == TensorKind::APP_WRITE && t.dtype == DType::FLOAT_32 &&
        !reads_input_unrounded(op, tensors_)) {
      id = fp16_shadow_of(id);
    }
    view.inputs.push_back(&tensors_[id]);
  }
  const auto* outs = op->outputs();
  for (size_t i = 0; outs && i < outs->size(); ++i) {
    const uint32_t id = outs->Get(i);
    if (id >= n) {
      return view.fail(ErrorKind::InvalidProgram, "output %zu refers to tensor id %u, out of range (%zu tensors)", i,
                       id, n);
    }
    const TensorInfo& t = tensors_[id];
    if (t.kind != TensorKind::NATIVE && t.kind != TensorKind::APP_READ) {
      return view.fail(ErrorKind::InvalidProgram, "output tensor '%s' is %s (must be NATIVE or APP_READ)",
                       t.name.c_str(), kind_name(t.kind));
    }
    if (produced[id]) {
      return view.fail(ErrorKind::InvalidProgram, "output tensor '%s' is produced twice", t.name.c_str());
    }
    view.outputs.push_back(&t);
  }
  (void)index;
  return Status::Ok();
}

const TensorInfo* GraphExecutor::clamped_output(const ActivationFusion& fusion, size_t act,
                                                const ::qnn_delegate::Op* act_op, TensorInfo& clamped) const {
  clamped = tensors_[act_op->outputs()->Get(0)];
  clamped.clamp_min = fusion.clamp_min[act];
  clamped.clamp_max = fusion.clamp_max[act];
  clamped.fused_act = fusion.float_act[act];
  return &clamped;
}

Status GraphExecutor::create_kernels(const ::qnn_delegate::Graph* graph) {
  const size_t n = tensors_.size();
  std::vector<bool> produced(n, false);
  shadow_of_.assign(n, -1);
  first_step_.assign(n, kNotProduced);
  last_step_.assign(n, 0);
  KernelEnv env;
  env.allocator = &allocator_;
  env.fp16 = fp16_;
  env.round_fp16_outputs = fp16_;
  env.reference_only = options_.reference_only;
  const auto& registry = kernel_registry();
  const auto* ops = graph->ops();
  const ActivationFusion fusion = plan_activation_fusion(graph, tensors_);
  for (size_t i = 0; ops && i < ops->size(); ++i) {
    const ::qnn_delegate::Op* op = ops->Get(i);
    const int64_t producer = fusion.producer_of[i];
    if (producer >= 0 && fusion.activation_of[producer] == int64_t(i)) {
      add_fused_activation_step(op);  // its producer wrote its output
      continue;
    }
    OpView view;
    TensorInfo clamped;   // a fused activation's output with its clamp codes (this step's view)
    if (producer >= 0) {  // run the producer again, into this activation's output
      const ::qnn_delegate::Op* p = ops->Get(static_cast<size_t>(producer));
      std::vector<bool> inputs_only(produced);
      inputs_only[p->outputs()->Get(0)] = false;  // produced once already, by the producer's step
      QNN_RETURN_IF_ERROR(make_view(p, i, view, inputs_only));
      view.outputs[0] = clamped_output(fusion, i, op, clamped);
    } else {
      QNN_RETURN_IF_ERROR(make_view(op, i, view, produced));
    }
    if (fusion.activation_of[i] >= 0) {  // write the activation's output directly
      const size_t act = static_cast<size_t>(fusion.activation_of[i]);
      view.outputs[0] = clamped_output(fusion, act, ops->Get(act), clamped);
    }
    auto it = registry.find(view.type);
    if (it == registry.end()) {
      return view.fail(ErrorKind::NotSupported, "unknown op type '%s' (no kernel registered)", view.type.c_str());
    }
    KernelPtr kernel;
    QNN_RETURN_IF_ERROR(it->second(view, env, kernel));
    if (!kernel) return view.fail(ErrorKind::Internal, "kernel factory returned no kernel");
    const size_t step_index = steps_.size();
    Step step;
    step.kernel = kernel.get();
    step.op_index = static_cast<uint32_t>(kernels_.size());
    op_names_.push_back(op->name()->str());  // the payload op's, also for a fused activation
    op_types_.push_back(op->type()->str());
    for (const TensorInfo* t : view.inputs) last_step_[t->id] = step_index;
    for (const TensorInfo* t : view.outputs) {
      produced[t->id] = true;
      first_step_[t->id] = step_index;
      last_step_[t->id] = step_index;
      if (fp16_ && t->dtype == DType::FLOAT_32 && !kernel->rounds_fp16_outputs()) {
        step.round_outputs.push_back(t->id);
      }
    }
    steps_.push_back(std::move(step));
    kernels_.push_back(std::move(kernel));
  }
  for (uint32_t id : output_ids_) {
    if (!produced[id]) {
      return make_error(ErrorKind::InvalidProgram, "graph '%s': graph output '%s' is not produced by any op",
                        name_.c_str(), tensors_[id].name.c_str());
    }
  }
  for (uint32_t id : readable_ids_) {
    if (!produced[id]) {
      return make_error(ErrorKind::InvalidProgram, "graph '%s': APP_READ tensor '%s' is not produced by any op",
                        name_.c_str(), tensors_[id].name.c_str());
    }
    last_step_[id] = steps_.empty() ? 0 : steps_.size() - 1;  // readable until the execute ends
  }
  return Status::Ok();
}

void GraphExecutor::add_fused_activation_step(const ::qnn_delegate::Op* op) {
  Step step;
  step.op_index = static_cast<uint32_t>(kernels_.size());
  kernels_.push_back(KernelPtr(new FusedActivationKernel()));
  step.kernel = kernels_.back().get();
  op_names_.push_back(op->name()->str());
  op_types_.push_back(op->type()->str());
  const uint32_t out = op->outputs()->Get(0);
  last_step_[out] = std::max(last_step_[out], steps_.size());
  steps_.push_back(std::move(step));
}

Status GraphExecutor::plan_and_allocate() {
  std::vector<uint32_t> arena_ids;
  std::vector<BufferLifetime> lifetimes;
  std::vector<bool> in_arena(tensors_.size(), false);  // NATIVE and readable APP_READ tensors
  for (const TensorInfo& t : tensors_) in_arena[t.id] = t.kind == TensorKind::NATIVE;
  for (uint32_t id : readable_ids_) in_arena[id] = true;
  for (const TensorInfo& t : tensors_) {
    if (!in_arena[t.id] || first_step_[t.id] == kNotProduced) continue;
    arena_ids.push_back(t.id);
    lifetimes.push_back({t.nbytes, first_step_[t.id], std::max(first_step_[t.id], last_step_[t.id])});
  }
  const MemoryPlan plan = plan_memory(lifetimes);
  arena_ = Buffer(&allocator_, plan.arena_bytes);
  size_t scratch = 0;
  for (const KernelPtr& k : kernels_) scratch = std::max(scratch, k->scratch_bytes());
  scratch_ = Buffer(&allocator_, scratch);
  if (!arena_.valid() || !scratch_.valid()) {
    return make_error(ErrorKind::MemoryAllocationFailed,
                      "graph '%s': cannot allocate arena (%zu bytes) / scratch (%zu bytes)", name_.c_str(),
                      plan.arena_bytes, scratch);
  }
  ptrs_.assign(tensors_.size(), nullptr);
  for (const TensorInfo& t : tensors_) {
    if (t.kind == TensorKind::STATIC) ptrs_[t.id] = const_cast<void*>(t.static_data);
  }
  for (size_t i = 0; i < arena_ids.size(); ++i) {
    ptrs_[arena_ids[i]] = arena_.as<char>() + plan.offsets[i];
  }
  return Status::Ok();
}

Status GraphExecutor::execute(void* const* inputs, void* const* outputs, OpObserver* observer) {
  for (size_t i = 0; i < input_ids_.size(); ++i) ptrs_[input_ids_[i]] = inputs[i];
  for (const BitsView& v : bits_views_) ptrs_[v.id] = inputs[v.input];
  for (size_t i = 0; i < output_ids_.size(); ++i) ptrs_[output_ids_[i]] = outputs[i];
  RunContext ctx;
  ctx.ptrs = ptrs_.data();
  ctx.scratch = scratch_.data();
  for (const Step& step : steps_) {
    if (step.kernel == nullptr) {
      round_to_half_copy(static_cast<const float*>(ptrs_[step.copy_src]), static_cast<float*>(ptrs_[step.copy_dst]),
                         step.copy_numel);
      continue;
    }
    if (observer != nullptr) observer->op_started(step.op_index);
    const Status s = step.kernel->run(ctx);
    if (observer != nullptr) observer->op_finished(step.op_index);
    if (!s.ok()) {
      release_io_pointers();
      return s;
    }
    for (uint32_t id : step.round_outputs) {
      round_to_half_inplace(static_cast<float*>(ptrs_[id]), tensors_[id].numel);
    }
  }
  release_io_pointers();
  return Status::Ok();
}

void GraphExecutor::release_io_pointers() {
  // Do not keep the caller's pointers beyond this call.
  for (uint32_t id : input_ids_) ptrs_[id] = nullptr;
  for (const BitsView& v : bits_views_) ptrs_[v.id] = nullptr;
  for (uint32_t id : output_ids_) ptrs_[id] = nullptr;
}

}  // namespace engine
}  // namespace qnn_delegate
