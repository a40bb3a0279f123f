// Command line of qnn_executor_runner, parsed by hand.
#pragma once

#include <string>

namespace qnn_delegate {
namespace runner {

struct Args {
  std::string model_path, input_list_path, output_folder_path, etdump_path, performance_output_path;
  int method_index = 0, iteration = 1, warm_up = 0;
  // Backend runtime options: forwarded only when given (-1 / unset = not given).
  int log_level = -1, profile_level = -1, htp_performance_mode = -1;
  int engine = -1;  // -1 = not given; 0 auto, 1 qnn, 2 host
  bool heap_profiling_path_given = false;
  std::string heap_profiling_path;
  // Intermediate tensor dumps into the ETDump's debug buffer.
  bool dump_intermediate_outputs = false;
  std::string debug_output_path;
  int debug_buffer_size = 64 << 20;
  // Shapes of the inputs / outputs of every inference (dynamic shapes), upstream's files.
  std::string input_shape_path, output_shape_path;
  // Inputs and outputs in buffers registered with QNN's memory API (QnnMem_register).
  bool shared_buffer = false;
};

void print_usage();
// Returns 0 on success, 1 on a bad command line (message on stderr), 2 for --help.
int parse_args(int argc, char** argv, Args& a);

}  // namespace runner
}  // namespace qnn_delegate
