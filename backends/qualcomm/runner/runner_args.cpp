#include "backends/qualcomm/runner/runner_args.h"

#include <cstdio>
#include <cstdlib>

#include "backends/qualcomm/runtime/RuntimeOptions.h"

namespace qnn_delegate {
namespace runner {

namespace rt_options = qnn_delegate::runtime;

namespace {

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
    std::fprintf(stderr, "error: %s %s is out of range: valid values are %d..%d (%s)\n", flag.c_str(), value.c_str(),
                 lo, hi, rt_options::RuntimeOptions::int_option_values(key));
    return false;
  }
  return true;
}

// Returns 0 when the flag was applied, 1 on a bad or unknown flag.
int apply_flag(const std::string& key, const std::string& value, Args& a) {
  bool ok = true;
  if (key == "--model_path")
    a.model_path = value;
  else if (key == "--input_list_path")
    a.input_list_path = value;
  else if (key == "--output_folder_path")
    a.output_folder_path = value;
  else if (key == "--etdump_path")
    a.etdump_path = value;
  else if (key == "--performance_output_path")
    a.performance_output_path = value;
  else if (key == "--method_index")
    ok = parse_int(value, a.method_index);
  else if (key == "--iteration")
    ok = parse_int(value, a.iteration) && a.iteration > 0;
  else if (key == "--warm_up")
    ok = parse_int(value, a.warm_up);
  else if (key == "--log_level")
    return parse_option_int(key, value, rt_options::kLogLevelKey, a.log_level) ? 0 : 1;
  else if (key == "--profile_level")
    return parse_option_int(key, value, rt_options::kProfileLevelKey, a.profile_level) ? 0 : 1;
  else if (key == "--htp_performance_mode") {
    return parse_option_int(key, value, rt_options::kPerformanceModeKey, a.htp_performance_mode) ? 0 : 1;
  } else if (key == "--debug_output_path")
    a.debug_output_path = value;
  else if (key == "--engine") {
    a.engine = value == "auto" ? 0 : value == "qnn" ? 1 : value == "host" ? 2 : -1;
    ok = a.engine >= 0;
  } else if (key == "--input_shape_path")
    a.input_shape_path = value;
  else if (key == "--output_shape_path")
    a.output_shape_path = value;
  else if (key == "--debug_buffer_size")
    ok = parse_int(value, a.debug_buffer_size) && a.debug_buffer_size > 0;
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

}  // namespace

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
      "  --engine auto|qnn|host     engine of the delegates: Qualcomm's QNN library (context\n"
      "                             binary), the host engine, or auto (QNN on a device's NPU;\n"
      "                             the host engine on x86, where QNN's library is an emulator)\n"
      "  --dump_intermediate_outputs  log every dumped delegate tensor into the ETDump (needs\n"
      "                             --etdump_path and a .pte lowered with dump_intermediate_outputs)\n"
      "  --debug_output_path <file> the debug buffer holding the dumped tensors\n"
      "                             (default <etdump_path>.debug_buffer)\n"
      "  --debug_buffer_size <bytes>  size of the debug buffer (default 67108864); when it is\n"
      "                             full, later dumps are skipped with one warning\n"
      "  --input_shape_path <file>  one line per input: its dims (\"1, 3, 224, 224\"), for\n"
      "                             programs with dynamic shapes; input files have that size\n"
      "  --output_shape_path <file> one line per output: its dims; outputs are written at that size\n"
      "  --shared_buffer            inputs and outputs in buffers registered with QNN's memory\n"
      "                             API (zero copy on a device; refused by the x86 library)\n"
      "  --help\n");
}

int parse_args(int argc, char** argv, Args& a) {
  for (int i = 1; i < argc; ++i) {
    std::string key = argv[i], value;
    if (key == "--help" || key == "-h") return 2;
    if (key == "--dump_intermediate_outputs") {  // switches: no value
      a.dump_intermediate_outputs = true;
      continue;
    }
    if (key == "--shared_buffer") {
      a.shared_buffer = true;
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

}  // namespace runner
}  // namespace qnn_delegate
