// Kernel interface: create (validate params, infer shapes, pack weights) at
// init, run at execute. One kernel file per op family under kernels/.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backends/qualcomm/runtime/engine/Allocator.h"
#include "backends/qualcomm/runtime/engine/Status.h"
#include "backends/qualcomm/runtime/engine/Tensor.h"
#include "qnn_op_table_generated.h"

namespace qnn_delegate {
namespace engine {

// Pointers of every tensor (indexed by tensor id) for one execute.
struct RunContext {
  void* const* ptrs = nullptr;
  void* scratch = nullptr;

  template <typename T>
  T* at(uint32_t id) const {
    return static_cast<T*>(ptrs[id]);
  }
};

// What a kernel factory sees of one op.
struct OpView {
  const ::qnn_delegate::Op* op = nullptr;
  std::string graph_name;
  std::string name;
  std::string type;
  std::vector<const TensorInfo*> inputs;
  std::vector<const TensorInfo*> outputs;

  // Error whose message starts with "graph 'g', op 'n' (Type): ".
  Status fail(ErrorKind kind, const char* fmt, ...) const __attribute__((format(printf, 3, 4)));
  // Checks input / output counts (min_inputs..max_inputs, -1 = unbounded).
  Status expect_arity(int min_inputs, int max_inputs, int num_outputs) const;
  // Checks the output tensor dims / dtype against the inferred ones.
  Status expect_output(size_t index, const Dims& dims, DType dtype) const;
  Status expect_float(const TensorInfo& t) const;
  Status expect_rank(const TensorInfo& t, size_t rank) const;
};

struct KernelEnv {
  TrackingAllocator* allocator = nullptr;
  bool fp16 = false;
  bool reference_only = false;  // force the reference (oracle) kernels
  // fp16 graph: a kernel may round its float outputs to fp16 as it stores them (then it says
  // so with rounds_fp16_outputs() and the executor does not round them again). Cleared for
  // float kernels that run inside a quantized op's wrapper.
  bool round_fp16_outputs = false;
};

class Kernel {
 public:
  virtual ~Kernel() = default;
  virtual Status run(const RunContext& ctx) const = 0;
  // Scratch bytes needed by run (the executor provides one shared buffer).
  virtual size_t scratch_bytes() const { return 0; }
  // Bytes this kernel packed / owns (weights).
  virtual size_t owned_bytes() const { return 0; }
  // The code path picked at init, "<mac>/<requant>" for the integer kernels ("avx2/lanes8",
  // "plain/scalar", ...; kernels with one path: "plain"). Read at init or in the profiler's
  // metadata, never on the execute path; tests assert it (QNN_HOST_ENGINE_KERNELS).
  virtual const char* path() const { return "plain"; }
  // Whether run() rounds its float outputs to fp16 itself (KernelEnv::round_fp16_outputs):
  // the same bits as the executor's rounding pass after it, without a second pass over memory.
  virtual bool rounds_fp16_outputs() const { return false; }
};

using KernelPtr = std::unique_ptr<Kernel>;
using KernelFactory = Status (*)(const OpView&, KernelEnv&, KernelPtr&);
using KernelRegistry = std::map<std::string, KernelFactory>;

// Every op type -> the dispatching factory (float, integer or dequant-wrapped).
const KernelRegistry& kernel_registry();
// Float (and byte-generic) kernels by op type.
const KernelRegistry& float_kernel_registry();
// Kernels for quantized activations. A factory may leave `out` empty to
// decline (the op then runs as float on dequantized inputs).
const KernelRegistry& quant_kernel_registry();
// Picks the kernel for an op from its tensors' data types (QuantDispatch.cpp).
Status create_dispatched_kernel(const OpView& v, KernelEnv& env, KernelPtr& out);
std::vector<std::string> registered_op_types();
// "Float Conv2d" for every op type registered twice in one registry (a test asserts none).
std::vector<std::string> duplicate_kernel_registrations();

// Kernels register themselves next to their code, one line each:
//   QNN_REGISTER_KERNEL(Float, ElementWiseNeg, &create_unary<NegFn>);
// `op` is an enumerator of the generated op table (ops::OpType), so a kernel for an op the table
// lacks does not compile. The registries are function-local statics filled during the static
// initialization of libqnn_delegate_backend.so (every kernel file is linked into it directly).
enum class KernelKind : uint8_t { Float, Quant };

struct KernelRegistrar {
  KernelRegistrar(KernelKind kind, ops::OpType type, KernelFactory factory);
};

#define QNN_KERNEL_CONCAT_INNER(a, b) a##b
#define QNN_KERNEL_CONCAT(a, b) QNN_KERNEL_CONCAT_INNER(a, b)
#define QNN_REGISTER_KERNEL(kind, op, ...)                                                                 \
  static const ::qnn_delegate::engine::KernelRegistrar QNN_KERNEL_CONCAT(qnn_kernel_registrar_, __LINE__)( \
      ::qnn_delegate::engine::KernelKind::kind, ::qnn_delegate::ops::OpType::op, __VA_ARGS__)

}  // namespace engine
}  // namespace qnn_delegate
