// Command line of qnn_llama_runner (upstream's flag names where they apply), parsed by hand.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace qnn_delegate {
namespace llama {

enum class EvalMode { kKv = 0, kHybrid = 1 };

struct Args {
  std::string model_path, tokenizer_path, system_prompt, tokenized_prompt;
  std::vector<std::string> prompts;  // --prompt, repeatable: one user turn each
  std::string output_path, performance_output_path, dump_logits_path, output_tokens_path;
  std::string decoder_model_version = "auto";  // chat template: auto / none / llama3 / qwen2_5 / qwen3 / smollm2_135m
  int seq_len = 128;                           // prompt + generated tokens, at most the context length
  float temperature = 0.0f;                    // 0: greedy
  float top_p = 1.0f;
  uint64_t seed = 0;
  bool seed_given = false;
  EvalMode eval_mode = EvalMode::kHybrid;
  int num_iters = 1;
  int engine = -1;             // runtime option qnn_runtime_engine: -1 not given; 0 auto, 1 qnn, 2 host
  int log_level = -1;          // runtime option qnn_runtime_log_level: -1 not given
  bool tokenize_only = false;  // print the prompt's ids and exit (no model)
};

void print_usage();
// 0 on success, 1 on a bad command line (message on stderr naming the flag), 2 for --help.
int parse_args(int argc, char** argv, Args& a);

}  // namespace llama
}  // namespace qnn_delegate
