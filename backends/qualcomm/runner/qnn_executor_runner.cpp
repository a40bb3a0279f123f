// qnn_executor_runner: loads a .pte, feeds raw inputs, executes, writes raw
// outputs, reports the average execute latency. Arguments parsed by hand.
//
// run() = load (program, verified) -> prepare (bounded memory, method, input
// tensors) -> loop (inputs bound before every execute) -> report. A corrupted
// or hostile .pte gives an error message and exit code 1, never a signal.
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <executorch/devtools/etdump/etdump_flatcc.h>
#include <executorch/extension/data_loader/file_data_loader.h>
#include <executorch/runtime/backend/interface.h>
#include <executorch/runtime/backend/options.h>
#include <executorch/runtime/core/exec_aten/util/scalar_type_util.h>
#include <executorch/runtime/executor/method.h>
#include <executorch/runtime/executor/program.h>
#include <executorch/runtime/platform/platform.h>
#include <executorch/runtime/platform/runtime.h>

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
namespace rt_options = qnn_delegate::runtime;

namespace {

constexpr char kBackendName[] = "QnnDelegate";
constexpr size_t kMethodPoolBytes = 4u << 20;
constexpr size_t kTempPoolBytes = 4u << 20;

// ---- messages -------------------------------------------------------------------

// "NotFound", "InvalidProgram", ... for an ExecuTorch error code ("Unknown(0x7f)" otherwise).
std::string error_name(Error e) {
  const char* name = executorch::runtime::to_string(e);
  constexpr char kPrefix[] = "Error::";
  if (std::strncmp(name, kPrefix, sizeof(kPrefix) - 1) == 0) name += sizeof(kPrefix) - 1;
  if (std::strcmp(name, "Unknown") != 0) return name;
  char buf[32];
  std::snprintf(buf, sizeof(buf), "Unknown(0x%x)", static_cast<unsigned>(e));
  return buf;
}

const char* tag_name(Tag tag) {
  switch (tag) {
#define QNN_RUNNER_TAG_NAME(x) \
  case Tag::x:                 \
    return #x;
    EXECUTORCH_FORALL_TAGS(QNN_RUNNER_TAG_NAME)
#undef QNN_RUNNER_TAG_NAME
    default:
      return "unknown";
  }
}

bool ends_with(const char* s, const char* suffix) {
  const size_t n = std::strlen(s), m = std::strlen(suffix);
  return n >= m && std::strcmp(s + n - m, suffix) == 0;
}

// ExecuTorch's thread pool probes the CPU when a CPU kernel first asks for it and
// logs five Info lines from cpuinfo_utils.cpp about ARM-only files. They are
// dropped below --log_level 4 (verbose); every other message goes through.
pal_emit_log_message_method g_default_emit = nullptr;
bool g_show_cpuinfo_lines = false;

void filtered_emit(et_timestamp_t timestamp, et_pal_log_level_t level, const char* filename,
                   const char* function, size_t line, const char* message, size_t length) {
  if (!g_show_cpuinfo_lines && level == kInfo && filename != nullptr &&
      ends_with(filename, "cpuinfo_utils.cpp")) {
    return;
  }
  if (g_default_emit != nullptr) g_default_emit(timestamp, level, filename, function, line, message, length);
}

void install_log_filter(bool show_cpuinfo_lines) {
  g_show_cpuinfo_lines = show_cpuinfo_lines;
  const executorch::runtime::PalImpl* current = executorch::runtime::get_pal_impl();
  g_default_emit = current != nullptr ? current->emit_log_message : nullptr;
  if (g_default_emit == nullptr) return;  // nothing to forward to: keep the default
  executorch::runtime::register_pal(executorch::runtime::PalImpl::create(&filtered_emit, __FILE__));
}

// ---- command line -----------------------------------------------------------------

struct Args {
  std::string model_path, input_list_path, output_folder_path, etdump_path, performance_output_path;
  int method_index = 0, iteration = 1, warm_up = 0;
  // Backend runtime options: forwarded only when given (-1 / unset = not given).
  int log_level = -1, profile_level = -1, htp_performance_mode = -1;
  bool heap_profiling_path_given = false;
  std::string heap_profiling_path;
  // Intermediate tensor dumps into the ETDump's debug buffer.
  bool dump_intermediate_outputs = false;
  std::string debug_output_path;
  int debug_buffer_size = 64 << 20;
};

void print_usage() {
  std::printf(
      "usage: qnn_executor_runner --model_path <file.pte> [options]\n"
      "  --input_list_path <file>   one inference per line: raw input files separated by spaces\n"
      "  --output_folder_path <dir> writes output_<inference>_<index>.raw (created if missing)\n"
      "  --method_index <n>         method to run (default 0)\n"
      "  --iteration <n>            timed executes per inference (default 1)\n"
      "  --warm_up <n>              untimed executes before timing (default 0)\n"
      "  --etdump_path <file>       write an ETDump of the run\n"
      "  --performance_output_path <file>  write the average execute time in ms\n"
      "  --log_level <n>            QnnDelegate runtime log level (0 off .. 5 debug)\n"
      "  --profile_level <n>        QnnDelegate profile level (0 off, 1 basic, 2 detailed)\n"
      "  --htp_performance_mode <n> QnnDelegate HTP performance mode (0..8, 2 = burst)\n"
      "  --heap_profiling_path <file>  QnnDelegate heap checkpoints (needs a profile level)\n"
      "  --dump_intermediate_outputs  log every dumped delegate tensor into the ETDump (needs\n"
      "                             --etdump_path and a .pte lowered with dump_intermediate_outputs)\n"
      "  --debug_output_path <file> the debug buffer holding the dumped tensors\n"
      "                             (default <etdump_path>.debug_buffer)\n"
      "  --debug_buffer_size <bytes>  size of the debug buffer (default 67108864); when it is\n"
      "                             full, later dumps are skipped with one warning\n"
      "  --help\n");
}

bool parse_int(const std::string& s, int& out) {
  char* end = nullptr;
  const long v = std::strtol(s.c_str(), &end, 10);
  if (s.empty() || *end != '\0' || v < 0 || v > 1000000000) return false;
  out = static_cast<int>(v);
  return true;
}

// A runtime-option flag: an integer in the range of its .fbs enum.
bool parse_option_int(const std::string& flag, const std::string& value, const char* key, int& out) {
  int lo = 0, hi = 0;
  rt_options::RuntimeOptions::int_option_range(key, lo, hi);
  if (!parse_int(value, out) || out < lo || out > hi) {
    std::fprintf(stderr, "error: %s %s is out of range: valid values are %d..%d (%s)\n", flag.c_str(),
                 value.c_str(), lo, hi, rt_options::RuntimeOptions::int_option_values(key));
    return false;
  }
  return true;
}

// Returns 0 when the flag was applied, 1 on a bad or unknown flag.
int apply_flag(const std::string& key, const std::string& value, Args& a) {
  bool ok = true;
  if (key == "--model_path") a.model_path = value;
  else if (key == "--input_list_path") a.input_list_path = value;
  else if (key == "--output_folder_path") a.output_folder_path = value;
  else if (key == "--etdump_path") a.etdump_path = value;
  else if (key == "--performance_output_path") a.performance_output_path = value;
  else if (key == "--method_index") ok = parse_int(value, a.method_index);
  else if (key == "--iteration") ok = parse_int(value, a.iteration) && a.iteration > 0;
  else if (key == "--warm_up") ok = parse_int(value, a.warm_up);
  else if (key == "--log_level") return parse_option_int(key, value, rt_options::kLogLevelKey, a.log_level) ? 0 : 1;
  else if (key == "--profile_level") return parse_option_int(key, value, rt_options::kProfileLevelKey, a.profile_level) ? 0 : 1;
  else if (key == "--htp_performance_mode") {
    return parse_option_int(key, value, rt_options::kPerformanceModeKey, a.htp_performance_mode) ? 0 : 1;
  }
  else if (key == "--debug_output_path") a.debug_output_path = value;
  else if (key == "--debug_buffer_size") ok = parse_int(value, a.debug_buffer_size) && a.debug_buffer_size > 0;
  else if (key == "--heap_profiling_path") {
    a.heap_profiling_path = value;
    a.heap_profiling_path_given = true;
  } else {
    std::fprintf(stderr, "error: unknown flag %s\n", key.c_str());
    return 1;
  }
  if (!ok) std::fprintf(stderr, "error: bad value '%s' for %s\n", value.c_str(), key.c_str());
  return ok ? 0 : 1;
}

int check_args(Args& a) {
  if (a.model_path.empty()) {
    std::fprintf(stderr, "error: --model_path is required\n");
    return 1;
  }
  if (a.dump_intermediate_outputs && a.etdump_path.empty()) {
    std::fprintf(stderr, "error: --dump_intermediate_outputs needs --etdump_path\n");
    return 1;
  }
  if (a.dump_intermediate_outputs && a.debug_output_path.empty()) {
    a.debug_output_path = a.etdump_path + ".debug_buffer";
  }
  return 0;
}

// Returns 0 on success, 1 on a bad command line, 2 for --help.
int parse_args(int argc, char** argv, Args& a) {
  for (int i = 1; i < argc; ++i) {
    std::string key = argv[i], value;
    if (key == "--help" || key == "-h") return 2;
    if (key == "--dump_intermediate_outputs") {  // a switch: no value
      a.dump_intermediate_outputs = true;
      continue;
    }
    const size_t eq = key.find('=');
    if (eq != std::string::npos) {
      value = key.substr(eq + 1);
      key = key.substr(0, eq);
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      std::fprintf(stderr, "error: flag %s needs a value\n", key.c_str());
      return 1;
    }
    if (apply_flag(key, value, a) != 0) return 1;
  }
  return check_args(a);
}

// ---- files ------------------------------------------------------------------------

// mkdir -p; false (with a message) when it cannot be created or is not a directory.
bool make_output_folder(const std::string& path) {
  if (path.empty()) return true;
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  if (ec || !std::filesystem::is_directory(path)) {
    std::fprintf(stderr, "error: cannot create output folder '%s': %s\n", path.c_str(),
                 ec ? ec.message().c_str() : "a file of that name exists");
    return false;
  }
  return true;
}

// Each line: the raw files of one inference.
bool read_input_list(const std::string& path, std::vector<std::vector<std::string>>& out) {
  std::ifstream f(path);
  if (!f) {
    std::fprintf(stderr, "error: cannot open input list '%s'\n", path.c_str());
    return false;
  }
  std::string line;
  while (std::getline(f, line)) {
    std::istringstream ss(line);
    std::vector<std::string> files;
    for (std::string tok; ss >> tok;) files.push_back(tok);
    if (!files.empty()) out.push_back(files);
  }
  return true;
}

bool read_file_exact(const std::string& path, void* dst, size_t nbytes) {
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  if (!f) {
    std::fprintf(stderr, "error: cannot open raw input '%s'\n", path.c_str());
    return false;
  }
  const std::streamoff size = f.tellg();
  if (size < 0 || static_cast<size_t>(size) != nbytes) {
    std::fprintf(stderr, "error: raw input '%s' has %lld bytes, the input tensor needs %zu\n",
                 path.c_str(), static_cast<long long>(size), nbytes);
    return false;
  }
  f.seekg(0);
  if (nbytes && !f.read(static_cast<char*>(dst), static_cast<std::streamsize>(nbytes))) {
    std::fprintf(stderr, "error: cannot read raw input '%s'\n", path.c_str());
    return false;
  }
  return true;
}

bool write_bytes(const std::string& path, const void* data, size_t nbytes, const char* what) {
  std::ofstream f(path, std::ios::binary);
  const bool ok = f && f.write(static_cast<const char*>(data), static_cast<std::streamsize>(nbytes));
  if (!ok) std::fprintf(stderr, "error: cannot write %s '%s'\n", what, path.c_str());
  return ok;
}

// ---- the session: everything a loaded method needs, destroyed in reverse order ----

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<uint8_t, FreeDeleter>;

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
  std::optional<Method> method;  // last: destroyed first
};

struct Timing {
  double total_ms = 0.0;
  size_t executes = 0;
};

// calloc: zero pages are mapped lazily, so a large buffer costs nothing until used.
Buffer zeroed(size_t nbytes) { return Buffer(static_cast<uint8_t*>(std::calloc(nbytes ? nbytes : 1, 1))); }

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
  s.memory_manager.reset(new MemoryManager(s.method_allocator.get(), s.planned_memory.get(),
                                           s.temp_allocator.get()));
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
    std::fprintf(stderr, "error: method input %zu is a %s, not a tensor: the runner feeds tensors only\n",
                 i, tag.ok() ? tag_name(*tag) : "value of unknown kind");
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
  t.strides.assign(rank, 1);
  for (size_t d = rank; d-- > 1;) t.strides[d - 1] = t.strides[d] * t.sizes[d];
  t.nbytes = static_cast<size_t>(nbytes);
  t.data = zeroed(t.nbytes);
  if (!t.data) {
    std::fprintf(stderr, "error: cannot allocate %zu bytes for method input %zu\n", t.nbytes, i);
    return false;
  }
  t.impl.reset(new executorch::aten::TensorImpl(info->scalar_type(), static_cast<ssize_t>(rank),
                                                t.sizes.data(), t.data.get(), t.dim_order.data(),
                                                t.strides.data()));
  return true;
}

bool make_inputs(const MethodMeta& meta, Session& s) {
  s.inputs.resize(meta.num_inputs());
  for (size_t i = 0; i < meta.num_inputs(); ++i) {
    if (!describe_input(meta, i, planned_memory_limit(), s.inputs[i])) return false;
  }
  return true;
}

bool prepare_method(const Args& a, Session& s) {
  auto meta = s.program->method_meta(s.method_name);
  if (!meta.ok()) {
    std::fprintf(stderr, "error: no metadata for method '%s' (%s)\n", s.method_name,
                 error_name(meta.error()).c_str());
    return false;
  }
  if (!allocate_planned_memory(*meta, s) || !make_memory_manager(s) || !make_event_tracer(a, s)) return false;
  if (!make_inputs(*meta, s)) return false;
  auto method = s.program->load_method(s.method_name, s.memory_manager.get(), s.etdump.get());
  if (!method.ok()) {
    std::fprintf(stderr, "error: cannot load method '%s' (%s)\n", s.method_name,
                 error_name(method.error()).c_str());
    return false;
  }
  s.method.emplace(std::move(method.get()));
  if (s.method->inputs_size() != s.inputs.size()) {
    std::fprintf(stderr, "error: method '%s' has %zu inputs, its metadata %zu\n", s.method_name,
                 s.method->inputs_size(), s.inputs.size());
    return false;
  }
  return true;
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

bool write_outputs(const Method& method, const std::string& folder, size_t inference) {
  for (size_t i = 0; i < method.outputs_size(); ++i) {
    const EValue& v = method.get_output(i);
    if (!v.isTensor()) continue;
    const auto& t = v.toTensor();
    const std::string path = folder + "/output_" + std::to_string(inference) + "_" + std::to_string(i) + ".raw";
    if (!write_bytes(path, t.const_data_ptr(), t.nbytes(), "output")) return false;
  }
  return true;
}

bool load_inference_inputs(const std::vector<std::string>& files, size_t inference, Session& s) {
  if (!files.empty() && files.size() != s.inputs.size()) {
    std::fprintf(stderr, "error: input list line %zu has %zu files, the method has %zu inputs\n",
                 inference + 1, files.size(), s.inputs.size());
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
    if (!a.output_folder_path.empty() && !write_outputs(*s.method, a.output_folder_path, inf)) return false;
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
  install_log_filter(a.log_level >= 4);
  executorch::runtime::runtime_init();
  if (!make_output_folder(a.output_folder_path) || !forward_backend_options(a)) return 1;
  Session s;
  if (!load_program(a, s) || !prepare_method(a, s)) return 1;
  Timing timing;
  if (!run_inferences(a, s, timing)) return 1;
  return report(a, s, timing) ? 0 : 1;
}

} // namespace

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
