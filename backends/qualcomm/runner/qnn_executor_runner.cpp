// qnn_executor_runner: loads a .pte, feeds raw inputs, executes, writes raw
// outputs, reports the average execute latency. Arguments parsed by hand.
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <executorch/devtools/etdump/etdump_flatcc.h>
#include <executorch/extension/data_loader/file_data_loader.h>
#include <executorch/runtime/backend/interface.h>
#include <executorch/runtime/backend/options.h>
#include <executorch/runtime/executor/method.h>
#include <executorch/runtime/executor/program.h>
#include <executorch/runtime/platform/runtime.h>

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

namespace {

constexpr char kBackendName[] = "QnnDelegate";

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
      "  --output_folder_path <dir> writes output_<inference>_<index>.raw\n"
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
      "  --debug_buffer_size <bytes>  size of the debug buffer (default 67108864)\n"
      "  --help\n");
}

bool parse_int(const std::string& s, int& out) {
  char* end = nullptr;
  const long v = std::strtol(s.c_str(), &end, 10);
  if (s.empty() || *end != '\0' || v < 0 || v > 1000000000) return false;
  out = static_cast<int>(v);
  return true;
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
    bool ok = true;
    if (key == "--model_path") a.model_path = value;
    else if (key == "--input_list_path") a.input_list_path = value;
    else if (key == "--output_folder_path") a.output_folder_path = value;
    else if (key == "--etdump_path") a.etdump_path = value;
    else if (key == "--performance_output_path") a.performance_output_path = value;
    else if (key == "--method_index") ok = parse_int(value, a.method_index);
    else if (key == "--iteration") ok = parse_int(value, a.iteration) && a.iteration > 0;
    else if (key == "--warm_up") ok = parse_int(value, a.warm_up);
    else if (key == "--log_level") ok = parse_int(value, a.log_level);
    else if (key == "--profile_level") ok = parse_int(value, a.profile_level);
    else if (key == "--htp_performance_mode") ok = parse_int(value, a.htp_performance_mode);
    else if (key == "--debug_output_path") a.debug_output_path = value;
    else if (key == "--debug_buffer_size") ok = parse_int(value, a.debug_buffer_size) && a.debug_buffer_size > 0;
    else if (key == "--heap_profiling_path") {
      a.heap_profiling_path = value;
      a.heap_profiling_path_given = true;
    }
    else {
      std::fprintf(stderr, "error: unknown flag %s\n", key.c_str());
      return 1;
    }
    if (!ok) {
      std::fprintf(stderr, "error: bad value '%s' for %s\n", value.c_str(), key.c_str());
      return 1;
    }
  }
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

// Owned storage + TensorImpl for one method input.
struct InputTensor {
  std::vector<executorch::aten::SizesType> sizes;
  std::vector<executorch::aten::DimOrderType> dim_order;
  std::vector<executorch::aten::StridesType> strides;
  std::vector<uint8_t> data;
  std::unique_ptr<executorch::aten::TensorImpl> impl;
  size_t nbytes = 0;
};

bool make_inputs(const MethodMeta& meta, std::vector<InputTensor>& inputs) {
  inputs.resize(meta.num_inputs());
  for (size_t i = 0; i < meta.num_inputs(); ++i) {
    auto info = meta.input_tensor_meta(i);
    if (!info.ok()) {
      std::fprintf(stderr, "error: method input %zu is not a tensor (unsupported)\n", i);
      return false;
    }
    InputTensor& t = inputs[i];
    for (int32_t s : info->sizes()) t.sizes.push_back(s);
    for (uint8_t d : info->dim_order()) t.dim_order.push_back(d);
    t.strides.assign(t.sizes.size(), 1);
    for (size_t d = t.sizes.size(); d-- > 1;) t.strides[d - 1] = t.strides[d] * t.sizes[d];
    t.nbytes = info->nbytes();
    t.data.assign(t.nbytes, 0);
    t.impl.reset(new executorch::aten::TensorImpl(
        info->scalar_type(), static_cast<ssize_t>(t.sizes.size()), t.sizes.data(), t.data.data(),
        t.dim_order.data(), t.strides.data()));
  }
  return true;
}

bool set_inputs(Method& method, std::vector<InputTensor>& inputs) {
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Error e = method.set_input(EValue(executorch::aten::Tensor(inputs[i].impl.get())), i);
    if (e != Error::Ok) {
      std::fprintf(stderr, "error: set_input(%zu) failed (error %d)\n", i, static_cast<int>(e));
      return false;
    }
  }
  return true;
}

bool write_outputs(const Method& method, const std::string& folder, size_t inference) {
  for (size_t i = 0; i < method.outputs_size(); ++i) {
    const EValue& v = method.get_output(i);
    if (!v.isTensor()) continue;
    const auto& t = v.toTensor();
    const std::string path = folder + "/output_" + std::to_string(inference) + "_" + std::to_string(i) + ".raw";
    std::ofstream f(path, std::ios::binary);
    if (!f || !f.write(static_cast<const char*>(t.const_data_ptr()), t.nbytes())) {
      std::fprintf(stderr, "error: cannot write output '%s'\n", path.c_str());
      return false;
    }
  }
  return true;
}

bool write_etdump(executorch::etdump::ETDumpGen& gen, const std::string& path) {
  const executorch::etdump::ETDumpResult r = gen.get_etdump_data();
  if (r.buf == nullptr || r.size == 0) {
    std::fprintf(stderr, "error: the ETDump is empty\n");
    return false;
  }
  std::ofstream f(path, std::ios::binary);
  const bool ok = f && f.write(static_cast<const char*>(r.buf), r.size);
  std::free(r.buf);
  if (!ok) std::fprintf(stderr, "error: cannot write ETDump '%s'\n", path.c_str());
  return ok;
}

// Debug buffer + debug level so that delegates log their intermediate outputs.
bool enable_intermediate_dumps(executorch::etdump::ETDumpGen& gen, std::vector<uint8_t>& buffer) {
  if (!gen.set_debug_buffer(Span<uint8_t>(buffer.data(), buffer.size())).ok()) {
    std::fprintf(stderr, "error: cannot set the ETDump debug buffer (%zu bytes)\n", buffer.size());
    return false;
  }
  gen.set_event_tracer_debug_level(executorch::runtime::EventTracerDebugLogLevel::kIntermediateOutputs);
  return true;
}

bool write_debug_buffer(const std::vector<uint8_t>& buffer, const std::string& path) {
  std::ofstream f(path, std::ios::binary);
  const bool ok = f && f.write(reinterpret_cast<const char*>(buffer.data()), buffer.size());
  if (!ok) std::fprintf(stderr, "error: cannot write the debug buffer '%s'\n", path.c_str());
  return ok;
}

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
  add_int_option(opts, "qnn_runtime_log_level", a.log_level);
  add_int_option(opts, "qnn_runtime_profile_level", a.profile_level);
  add_int_option(opts, "qnn_runtime_htp_performance_mode", a.htp_performance_mode);
  if (a.heap_profiling_path_given) {
    BackendOption o;
    std::snprintf(o.key, sizeof(o.key), "%s", "qnn_runtime_heap_profiling_path");
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
    std::fprintf(stderr, "error: set_option on backend %s failed (error %d)\n", kBackendName, int(e));
    return false;
  }
  return true;
}

int run(const Args& a) {
  executorch::runtime::runtime_init();
  if (!forward_backend_options(a)) return 1;
  auto loader = FileDataLoader::from(a.model_path.c_str());
  if (!loader.ok()) {
    std::fprintf(stderr, "error: cannot open model '%s' (error %d)\n", a.model_path.c_str(), int(loader.error()));
    return 1;
  }
  auto program = Program::load(&loader.get());
  if (!program.ok()) {
    std::fprintf(stderr, "error: '%s' is not a valid program (error %d)\n", a.model_path.c_str(), int(program.error()));
    return 1;
  }
  auto method_name = program->get_method_name(a.method_index);
  if (!method_name.ok()) {
    std::fprintf(stderr, "error: method index %d out of range (%zu methods)\n", a.method_index, program->num_methods());
    return 1;
  }
  auto meta = program->method_meta(*method_name);
  if (!meta.ok()) {
    std::fprintf(stderr, "error: no metadata for method '%s'\n", *method_name);
    return 1;
  }
  std::vector<std::vector<uint8_t>> planned(meta->num_memory_planned_buffers());
  std::vector<Span<uint8_t>> spans;
  for (size_t i = 0; i < planned.size(); ++i) {
    planned[i].resize(static_cast<size_t>(meta->memory_planned_buffer_size(i).get()));
    spans.emplace_back(planned[i].data(), planned[i].size());
  }
  HierarchicalAllocator planned_memory({spans.data(), spans.size()});
  std::vector<uint8_t> method_pool(4u << 20), temp_pool(4u << 20);
  MemoryAllocator method_allocator(method_pool.size(), method_pool.data());
  MemoryAllocator temp_allocator(temp_pool.size(), temp_pool.data());
  MemoryManager memory_manager(&method_allocator, &planned_memory, &temp_allocator);
  std::unique_ptr<executorch::etdump::ETDumpGen> etdump;
  if (!a.etdump_path.empty()) etdump.reset(new executorch::etdump::ETDumpGen());
  std::vector<uint8_t> debug_buffer;
  if (a.dump_intermediate_outputs) {
    debug_buffer.assign(static_cast<size_t>(a.debug_buffer_size), 0);
    if (!enable_intermediate_dumps(*etdump, debug_buffer)) return 1;
  }
  auto method = program->load_method(*method_name, &memory_manager, etdump.get());
  if (!method.ok()) {
    std::fprintf(stderr, "error: cannot load method '%s' (error %d)\n", *method_name, int(method.error()));
    return 1;
  }
  std::vector<InputTensor> inputs;
  if (!make_inputs(*meta, inputs)) return 1;
  std::vector<std::vector<std::string>> inferences;
  if (!a.input_list_path.empty() && !read_input_list(a.input_list_path, inferences)) return 1;
  if (inferences.empty()) inferences.push_back({});  // zero-filled inputs
  double total_ms = 0.0;
  size_t timed = 0;
  for (size_t inf = 0; inf < inferences.size(); ++inf) {
    const auto& files = inferences[inf];
    if (!files.empty() && files.size() != inputs.size()) {
      std::fprintf(stderr, "error: input list line %zu has %zu files, the method has %zu inputs\n",
                   inf + 1, files.size(), inputs.size());
      return 1;
    }
    for (size_t i = 0; i < files.size(); ++i) {
      if (!read_file_exact(files[i], inputs[i].data.data(), inputs[i].nbytes)) return 1;
    }
    if (!set_inputs(*method, inputs)) return 1;
    for (int w = 0; w < a.warm_up; ++w) {
      if (method->execute() != Error::Ok) {
        std::fprintf(stderr, "error: execute failed during warm-up\n");
        return 1;
      }
    }
    for (int it = 0; it < a.iteration; ++it) {
      const auto t0 = std::chrono::steady_clock::now();
      const Error e = method->execute();
      const auto t1 = std::chrono::steady_clock::now();
      if (e != Error::Ok) {
        std::fprintf(stderr, "error: execute of inference %zu failed (error %d)\n", inf, int(e));
        return 1;
      }
      total_ms += std::chrono::duration<double, std::milli>(t1 - t0).count();
      ++timed;
    }
    if (!a.output_folder_path.empty() && !write_outputs(*method, a.output_folder_path, inf)) return 1;
  }
  const double avg = timed ? total_ms / double(timed) : 0.0;
  std::printf("average latency: %.3f ms (%zu executes)\n", avg, timed);
  if (!a.performance_output_path.empty()) {
    std::ofstream f(a.performance_output_path);
    if (!(f << avg << "\n")) {
      std::fprintf(stderr, "error: cannot write '%s'\n", a.performance_output_path.c_str());
      return 1;
    }
  }
  if (etdump && !write_etdump(*etdump, a.etdump_path)) return 1;
  if (a.dump_intermediate_outputs && !write_debug_buffer(debug_buffer, a.debug_output_path)) return 1;
  return 0;
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
