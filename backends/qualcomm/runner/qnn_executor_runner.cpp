// qnn_executor_runner: loads a .pte, feeds raw inputs, executes, writes raw
// outputs, reports the average execute latency. Command line: runner_args.h;
// error names, log filter and file I/O: runner_util.h.
//
// run() = load (program, verified) -> prepare (bounded memory, method, input
// tensors) -> loop (inputs bound before every execute) -> report. A corrupted
// or hostile .pte gives an error message and exit code 1, never a signal.
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <executorch/devtools/etdump/etdump_flatcc.h>
#include <executorch/extension/data_loader/file_data_loader.h>
#include <executorch/runtime/backend/interface.h>
#include <executorch/runtime/backend/options.h>
#include <executorch/runtime/core/exec_aten/util/dim_order_util.h>
#include <executorch/runtime/core/exec_aten/util/scalar_type_util.h>
#include <executorch/runtime/executor/method.h>
#include <executorch/runtime/executor/program.h>
#include <executorch/runtime/platform/runtime.h>

#include "backends/qualcomm/runner/program_check.h"
#include "backends/qualcomm/runner/runner_args.h"
#include "backends/qualcomm/runner/runner_util.h"
#include "backends/qualcomm/runner/shape_files.h"
#include "backends/qualcomm/runtime/RuntimeOptions.h"

using executorch::extension::FileDataLoader;
using executorch::runtime::BackendOption;
using executorch::runtime::Error;
using executorch::runtime::EValue;
using executorch::runtime::HierarchicalAllocator;
using executorch::runtime::MemoryAllocator;
using executorch::runtime::MemoryManager;
using executorch::runtime::Method;
using executorch::runtime::MethodMeta;
using executorch::runtime::Program;
using executorch::runtime::Span;
using executorch::runtime::Tag;
using namespace qnn_delegate::runner;
namespace rt_options = qnn_delegate::runtime;

namespace {

constexpr char kBackendName[] = "QnnDelegate";
constexpr size_t kMethodPoolBytes = 4u << 20;
constexpr size_t kTempPoolBytes = 4u << 20;

// ---- the session: everything a loaded method needs, destroyed in reverse order ----

// Owned storage + TensorImpl for one method input.
struct InputTensor {
  std::vector<executorch::aten::SizesType> sizes;
  std::vector<executorch::aten::DimOrderType> dim_order;
  std::vector<executorch::aten::StridesType> strides;
  Buffer data;
  size_t nbytes = 0;
  std::unique_ptr<executorch::aten::TensorImpl> impl;
};

struct Session {
  std::optional<FileDataLoader> loader;
  std::optional<Program> program;
  const char* method_name = nullptr;
  size_t file_size = 0;
  std::vector<Buffer> planned;
  std::vector<Span<uint8_t>> spans;
  std::unique_ptr<HierarchicalAllocator> planned_memory;
  Buffer method_pool, temp_pool;
  std::unique_ptr<MemoryAllocator> method_allocator, temp_allocator;
  std::unique_ptr<MemoryManager> memory_manager;
  std::unique_ptr<executorch::etdump::ETDumpGen> etdump;
  Buffer debug_buffer;
  std::vector<InputTensor> inputs;
  std::vector<Shape> output_shapes;  // --output_shape_path: bytes written per output
  std::optional<Method> method;      // last: destroyed first
};

struct Timing {
  double total_ms = 0.0;
  size_t executes = 0;
};

// The most memory a method may plan: half the physical memory. Sizes come from
// the file, so a corrupted size is rejected here instead of exhausting memory.
uint64_t planned_memory_limit() {
  const long pages = sysconf(_SC_PHYS_PAGES), page_size = sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page_size <= 0) return uint64_t(4) << 30;
  return static_cast<uint64_t>(pages) * static_cast<uint64_t>(page_size) / 2;
}

// ---- load -------------------------------------------------------------------------

bool load_program(const Args& a, Session& s) {
  auto loader = FileDataLoader::from(a.model_path.c_str());
  if (!loader.ok()) {
    std::fprintf(stderr, "error: cannot open model '%s' (%s)\n", a.model_path.c_str(),
                 error_name(loader.error()).c_str());
    return false;
  }
  s.loader.emplace(std::move(loader.get()));
  auto size = s.loader->size();
  s.file_size = size.ok() ? *size : 0;
  auto program = Program::load(&*s.loader, Program::Verification::InternalConsistency);
  if (!program.ok()) {
    std::fprintf(stderr, "error: '%s' is not a valid program (%s)\n", a.model_path.c_str(),
                 error_name(program.error()).c_str());
    return false;
  }
  s.program.emplace(std::move(program.get()));
  std::string why;
  if (!check_program_fields(a.model_path, s.file_size, why)) {
    std::fprintf(stderr, "error: '%s' is not a valid program (InvalidProgram): %s\n", a.model_path.c_str(),
                 why.c_str());
    return false;
  }
  auto name = s.program->get_method_name(a.method_index);
  if (!name.ok()) {
    std::fprintf(stderr, "error: method index %d out of range (%zu methods)\n", a.method_index,
                 s.program->num_methods());
    return false;
  }
  s.method_name = *name;
  return true;
}

// ---- prepare ----------------------------------------------------------------------

bool allocate_planned_memory(const MethodMeta& meta, Session& s) {
  const uint64_t limit = planned_memory_limit();
  uint64_t total = 0;
  for (size_t i = 0; i < meta.num_memory_planned_buffers(); ++i) {
    auto size = meta.memory_planned_buffer_size(i);
    if (!size.ok() || *size < 0 || static_cast<uint64_t>(*size) > limit - total) {
      std::fprintf(stderr,
                   "error: method '%s' memory-planned buffer %zu has an invalid size (%lld bytes; "
                   "limit %llu bytes, half the physical memory, for a %zu-byte file): the program "
                   "is corrupted\n",
                   s.method_name, i, size.ok() ? static_cast<long long>(*size) : -1LL,
                   static_cast<unsigned long long>(limit), s.file_size);
      return false;
    }
    total += static_cast<uint64_t>(*size);
    s.planned.push_back(zeroed(static_cast<size_t>(*size)));
    if (!s.planned.back()) {
      std::fprintf(stderr, "error: cannot allocate %lld bytes of planned memory\n", (long long)*size);
      return false;
    }
    s.spans.emplace_back(s.planned.back().get(), static_cast<size_t>(*size));
  }
  s.planned_memory.reset(new HierarchicalAllocator({s.spans.data(), s.spans.size()}));
  return true;
}

bool make_memory_manager(Session& s) {
  s.method_pool = zeroed(kMethodPoolBytes);
  s.temp_pool = zeroed(kTempPoolBytes);
  if (!s.method_pool || !s.temp_pool) {
    std::fprintf(stderr, "error: cannot allocate the method memory pools\n");
    return false;
  }
  s.method_allocator.reset(new MemoryAllocator(kMethodPoolBytes, s.method_pool.get()));
  s.temp_allocator.reset(new MemoryAllocator(kTempPoolBytes, s.temp_pool.get()));
  s.memory_manager.reset(new MemoryManager(s.method_allocator.get(), s.planned_memory.get(), s.temp_allocator.get()));
  return true;
}

// ETDump, with a debug buffer and the intermediate-output level when dumps were asked for.
bool make_event_tracer(const Args& a, Session& s) {
  if (a.etdump_path.empty()) return true;
  s.etdump.reset(new executorch::etdump::ETDumpGen());
  if (!a.dump_intermediate_outputs) return true;
  const size_t size = static_cast<size_t>(a.debug_buffer_size);
  s.debug_buffer = zeroed(size);
  if (!s.debug_buffer || !s.etdump->set_debug_buffer(Span<uint8_t>(s.debug_buffer.get(), size)).ok()) {
    std::fprintf(stderr, "error: cannot set the ETDump debug buffer (%zu bytes)\n", size);
    return false;
  }
  s.etdump->set_event_tracer_debug_level(executorch::runtime::EventTracerDebugLogLevel::kIntermediateOutputs);
  return true;
}

// Sizes, dim order, strides and byte size of a tensor input, checked before use: all
// of them come from the file.
bool describe_input(const MethodMeta& meta, size_t i, uint64_t limit, InputTensor& t) {
  auto tag = meta.input_tag(i);
  if (!tag.ok() || *tag != Tag::Tensor) {
    std::fprintf(stderr, "error: method input %zu is a %s, not a tensor: the runner feeds tensors only\n", i,
                 tag.ok() ? tag_name(*tag) : "value of unknown kind");
    return false;
  }
  auto info = meta.input_tensor_meta(i);
  if (!info.ok() || !executorch::runtime::isValid(info->scalar_type()) ||
      info->dim_order().size() != info->sizes().size()) {
    std::fprintf(stderr, "error: method input %zu has invalid tensor metadata\n", i);
    return false;
  }
  const size_t rank = info->sizes().size();
  uint64_t nbytes = executorch::runtime::elementSize(info->scalar_type());
  for (size_t d = 0; d < rank; ++d) {
    const int32_t dim = info->sizes()[d];
    if (dim < 0 || info->dim_order()[d] >= rank || (dim != 0 && nbytes > limit / uint64_t(dim))) {
      std::fprintf(stderr, "error: method input %zu has invalid sizes or dim order\n", i);
      return false;
    }
    nbytes *= uint64_t(dim);
    t.sizes.push_back(dim);
    t.dim_order.push_back(info->dim_order()[d]);
  }
  t.strides.assign(rank, 1);  // from the dim order: channels_last inputs get NHWC strides
  if (executorch::runtime::dim_order_to_stride(t.sizes.data(), t.dim_order.data(), rank, t.strides.data()) !=
      Error::Ok) {
    std::fprintf(stderr, "error: method input %zu has an invalid dim order (not a permutation)\n", i);
    return false;
  }
  t.nbytes = static_cast<size_t>(nbytes);
  t.data = zeroed(t.nbytes);
  if (!t.data) {
    std::fprintf(stderr, "error: cannot allocate %zu bytes for method input %zu\n", t.nbytes, i);
    return false;
  }
  t.impl.reset(new executorch::aten::TensorImpl(info->scalar_type(), static_cast<ssize_t>(rank), t.sizes.data(),
                                                t.data.get(), t.dim_order.data(), t.strides.data()));
  return true;
}

bool make_inputs(const MethodMeta& meta, Session& s) {
  s.inputs.resize(meta.num_inputs());
  for (size_t i = 0; i < meta.num_inputs(); ++i) {
    if (!describe_input(meta, i, planned_memory_limit(), s.inputs[i])) return false;
  }
  return true;
}

// --input_shape_path: each input takes its listed dims (same rank, at most the bytes its
// metadata plans); its raw file must then have that size.
bool apply_input_shapes(const Args& a, Session& s) {
  if (a.input_shape_path.empty()) return true;
  std::vector<Shape> shapes;
  if (!read_shape_file(a.input_shape_path, "--input_shape_path", shapes)) return false;
  if (shapes.size() != s.inputs.size()) {
    std::fprintf(stderr, "error: --input_shape_path lists %zu shapes, the method has %zu inputs\n", shapes.size(),
                 s.inputs.size());
    return false;
  }
  for (size_t i = 0; i < shapes.size(); ++i) {
    InputTensor& t = s.inputs[i];
    const auto dtype = t.impl->scalar_type();
    size_t nbytes = 0;
    if (shapes[i].size() != t.sizes.size() ||
        !shape_bytes(shapes[i], executorch::runtime::elementSize(dtype), nbytes) || nbytes > t.nbytes) {
      std::fprintf(stderr,
                   "error: --input_shape_path shape %zu has rank %zu or more than the %zu bytes input %zu "
                   "holds (rank %zu)\n",
                   i, shapes[i].size(), t.nbytes, i, t.sizes.size());
      return false;
    }
    t.sizes.assign(shapes[i].begin(), shapes[i].end());
    if (executorch::runtime::dim_order_to_stride(t.sizes.data(), t.dim_order.data(), t.sizes.size(),
                                                 t.strides.data()) != Error::Ok) {
      return false;
    }
    t.nbytes = nbytes;
    t.impl.reset(new executorch::aten::TensorImpl(dtype, static_cast<ssize_t>(t.sizes.size()), t.sizes.data(),
                                                  t.data.get(), t.dim_order.data(), t.strides.data()));
  }
  return true;
}

bool read_output_shapes(const Args& a, Session& s) {
  if (a.output_shape_path.empty()) return true;
  if (!read_shape_file(a.output_shape_path, "--output_shape_path", s.output_shapes)) return false;
  if (s.output_shapes.size() != s.method->outputs_size()) {
    std::fprintf(stderr, "error: --output_shape_path lists %zu shapes, the method has %zu outputs\n",
                 s.output_shapes.size(), s.method->outputs_size());
    return false;
  }
  return true;
}

bool prepare_method(const Args& a, Session& s) {
  auto meta = s.program->method_meta(s.method_name);
  if (!meta.ok()) {
    std::fprintf(stderr, "error: no metadata for method '%s' (%s)\n", s.method_name, error_name(meta.error()).c_str());
    return false;
  }
  if (!allocate_planned_memory(*meta, s) || !make_memory_manager(s) || !make_event_tracer(a, s)) return false;
  if (!make_inputs(*meta, s) || !apply_input_shapes(a, s)) return false;
  auto method = s.program->load_method(s.method_name, s.memory_manager.get(), s.etdump.get());
  if (!method.ok()) {
    std::fprintf(stderr, "error: cannot load method '%s' (%s)\n", s.method_name, error_name(method.error()).c_str());
    return false;
  }
  s.method.emplace(std::move(method.get()));
  if (s.method->inputs_size() != s.inputs.size()) {
    std::fprintf(stderr, "error: method '%s' has %zu inputs, its metadata %zu\n", s.method_name,
                 s.method->inputs_size(), s.inputs.size());
    return false;
  }
  return read_output_shapes(a, s);
}

// ---- loop -------------------------------------------------------------------------

// Copies every input into the method. Needed before each execute: planned memory
// that held an input may be reused by intermediate values of a CPU section.
bool bind_inputs(Session& s) {
  for (size_t i = 0; i < s.inputs.size(); ++i) {
    const Error e = s.method->set_input(EValue(executorch::aten::Tensor(s.inputs[i].impl.get())), i);
    if (e != Error::Ok) {
      std::fprintf(stderr, "error: set_input(%zu) failed (%s)\n", i, error_name(e).c_str());
      return false;
    }
  }
  return true;
}

bool execute_once(Session& s, size_t inference, const char* phase, Timing* timing) {
  if (!bind_inputs(s)) return false;
  const auto t0 = std::chrono::steady_clock::now();
  const Error e = s.method->execute();
  const auto t1 = std::chrono::steady_clock::now();
  if (e != Error::Ok) {
    std::fprintf(stderr, "error: execute of inference %zu failed during %s (%s)\n", inference, phase,
                 error_name(e).c_str());
    return false;
  }
  if (timing != nullptr) {
    timing->total_ms += std::chrono::duration<double, std::milli>(t1 - t0).count();
    ++timing->executes;
  }
  return true;
}

bool write_outputs(const Session& s, const std::string& folder, size_t inference) {
  const Method& method = *s.method;
  for (size_t i = 0; i < method.outputs_size(); ++i) {
    const EValue& v = method.get_output(i);
    if (!v.isTensor()) continue;
    const auto& t = v.toTensor();
    size_t nbytes = t.nbytes();
    if (!s.output_shapes.empty()) {
      size_t wanted = 0;
      if (!shape_bytes(s.output_shapes[i], executorch::runtime::elementSize(t.scalar_type()), wanted) ||
          wanted > nbytes) {
        std::fprintf(stderr, "error: --output_shape_path shape %zu asks for more than the %zu bytes output %zu has\n",
                     i, nbytes, i);
        return false;
      }
      nbytes = wanted;
    }
    const std::string path = folder + "/output_" + std::to_string(inference) + "_" + std::to_string(i) + ".raw";
    if (!write_bytes(path, t.const_data_ptr(), nbytes, "output")) return false;
  }
  return true;
}

bool load_inference_inputs(const std::vector<std::string>& files, size_t inference, Session& s) {
  if (!files.empty() && files.size() != s.inputs.size()) {
    std::fprintf(stderr, "error: input list line %zu has %zu files, the method has %zu inputs\n", inference + 1,
                 files.size(), s.inputs.size());
    return false;
  }
  for (size_t i = 0; i < files.size(); ++i) {
    if (!read_file_exact(files[i], s.inputs[i].data.get(), s.inputs[i].nbytes)) return false;
  }
  return true;
}

bool run_inferences(const Args& a, Session& s, Timing& timing) {
  std::vector<std::vector<std::string>> inferences;
  if (!a.input_list_path.empty() && !read_input_list(a.input_list_path, inferences)) return false;
  if (inferences.empty()) inferences.push_back({});  // zero-filled inputs
  for (size_t inf = 0; inf < inferences.size(); ++inf) {
    if (!load_inference_inputs(inferences[inf], inf, s)) return false;
    for (int w = 0; w < a.warm_up; ++w) {
      if (!execute_once(s, inf, "warm-up", nullptr)) return false;
    }
    for (int it = 0; it < a.iteration; ++it) {
      if (!execute_once(s, inf, "timed iterations", &timing)) return false;
    }
    if (!a.output_folder_path.empty() && !write_outputs(s, a.output_folder_path, inf)) return false;
  }
  return true;
}

// ---- report -----------------------------------------------------------------------

bool write_etdump(executorch::etdump::ETDumpGen& gen, const std::string& path) {
  const executorch::etdump::ETDumpResult r = gen.get_etdump_data();
  if (r.buf == nullptr || r.size == 0) {
    std::fprintf(stderr, "error: the ETDump is empty\n");
    return false;
  }
  const bool ok = write_bytes(path, r.buf, r.size, "ETDump");
  std::free(r.buf);
  return ok;
}

bool report(const Args& a, Session& s, const Timing& timing) {
  const double avg = timing.executes ? timing.total_ms / double(timing.executes) : 0.0;
  std::printf("average latency: %.3f ms (%zu executes)\n", avg, timing.executes);
  if (!a.performance_output_path.empty()) {
    std::ofstream f(a.performance_output_path);
    if (!(f << avg << "\n")) {
      std::fprintf(stderr, "error: cannot write '%s'\n", a.performance_output_path.c_str());
      return false;
    }
  }
  if (s.etdump && !write_etdump(*s.etdump, a.etdump_path)) return false;
  if (a.dump_intermediate_outputs &&
      !write_bytes(a.debug_output_path, s.debug_buffer.get(), size_t(a.debug_buffer_size), "debug buffer")) {
    return false;
  }
  return true;
}

// ---- backend options --------------------------------------------------------------

void add_int_option(std::vector<BackendOption>& opts, const char* key, int value) {
  if (value < 0) return;
  BackendOption o;
  std::snprintf(o.key, sizeof(o.key), "%s", key);
  o.value = value;
  opts.push_back(o);
}

// Forwards the runtime-option flags that were given to the QnnDelegate backend.
bool forward_backend_options(const Args& a) {
  std::vector<BackendOption> opts;
  add_int_option(opts, rt_options::kLogLevelKey, a.log_level);
  add_int_option(opts, rt_options::kProfileLevelKey, a.profile_level);
  add_int_option(opts, rt_options::kPerformanceModeKey, a.htp_performance_mode);
  add_int_option(opts, rt_options::kEngineKey, a.engine);
  if (a.heap_profiling_path_given) {
    BackendOption o;
    std::snprintf(o.key, sizeof(o.key), "%s", rt_options::kHeapProfilingPathKey);
    std::array<char, executorch::runtime::kMaxOptionValueLength> path{};
    if (a.heap_profiling_path.size() >= path.size()) {
      std::fprintf(stderr, "error: --heap_profiling_path is too long\n");
      return false;
    }
    std::memcpy(path.data(), a.heap_profiling_path.c_str(), a.heap_profiling_path.size());
    o.value = path;
    opts.push_back(o);
  }
  if (opts.empty()) return true;
  const Error e = executorch::runtime::set_option(kBackendName, {opts.data(), opts.size()});
  if (e != Error::Ok) {
    std::fprintf(stderr, "error: set_option on backend %s failed (%s)\n", kBackendName, error_name(e).c_str());
    return false;
  }
  return true;
}

int run(const Args& a) {
  install_log_filter(a.log_level >= static_cast<int>(rt_options::LogLevel::kLogLevelVerbose));
  // --shared_buffer: delegates on QNN register their graph I/O with QNN's memory API at init
  // (read by the backend, whatever the program's compile spec).
  if (a.shared_buffer) ::setenv("QNN_DELEGATE_SHARED_BUFFER", "1", 1);
  executorch::runtime::runtime_init();
  if (!make_output_folder(a.output_folder_path) || !forward_backend_options(a)) return 1;
  Session s;
  if (!load_program(a, s) || !prepare_method(a, s)) return 1;
  Timing timing;
  if (!run_inferences(a, s, timing)) return 1;
  return report(a, s, timing) ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  const int rc = parse_args(argc, argv, args);
  if (rc == 2) {
    print_usage();
    return 0;
  }
  if (rc != 0) {
    print_usage();
    return 1;
  }
  return run(args);
}
