#include "backends/qualcomm/runner/llama/llama_args.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "backends/qualcomm/runner/llama/text_tokenizer.h"

namespace qnn_delegate {
namespace llama {

namespace {

bool parse_int(const std::string& s, long lo, long hi, int& out) {
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(s.c_str(), &end, 10);
  if (s.empty() || *end != '\0' || errno != 0 || v < lo || v > hi) return false;
  out = static_cast<int>(v);
  return true;
}

bool parse_float(const std::string& s, float lo, float hi, float& out) {
  char* end = nullptr;
  errno = 0;
  const float v = std::strtof(s.c_str(), &end);
  if (s.empty() || *end != '\0' || errno != 0 || !std::isfinite(v) || v < lo || v > hi) return false;
  out = v;
  return true;
}

bool parse_u64(const std::string& s, uint64_t& out) {
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(s.c_str(), &end, 10);
  if (s.empty() || s[0] == '-' || *end != '\0' || errno != 0) return false;
  out = v;
  return true;
}

bool known_template(const std::string& v) {
  return v == "auto" || v == "none" || v == "llama3" || v == "qwen2_5" || v == "qwen3" || v == "smollm2_135m";
}

// Applies one flag; false (with a message naming the flag and the valid values) when it is bad.
bool apply_flag(const std::string& key, const std::string& value, Args& a) {
  bool ok = true;
  const char* valid = "";
  if (key == "--model_path") {
    a.model_path = value;
  } else if (key == "--tokenizer_path") {
    a.tokenizer_path = value;
  } else if (key == "--prompt") {
    a.prompts.push_back(value);
  } else if (key == "--system_prompt") {
    a.system_prompt = value;
  } else if (key == "--tokenized_prompt") {
    a.tokenized_prompt = value;
  } else if (key == "--output_path") {
    a.output_path = value;
  } else if (key == "--performance_output_path") {
    a.performance_output_path = value;
  } else if (key == "--dump_logits_path") {
    a.dump_logits_path = value;
  } else if (key == "--output_tokens_path") {
    a.output_tokens_path = value;
  } else if (key == "--decoder_model_version") {
    a.decoder_model_version = value;
    ok = known_template(value);
    valid = "auto, none, llama3, qwen2_5, qwen3, smollm2_135m";
  } else if (key == "--seq_len") {
    ok = parse_int(value, 1, 1 << 24, a.seq_len);
    valid = "an integer >= 1";
  } else if (key == "--temperature") {
    ok = parse_float(value, 0.0f, 1e6f, a.temperature);
    valid = "a number >= 0 (0: greedy)";
  } else if (key == "--top_p") {
    ok = parse_float(value, 0.0f, 1.0f, a.top_p) && a.top_p > 0.0f;
    valid = "a number in (0, 1]";
  } else if (key == "--seed") {
    ok = parse_u64(value, a.seed);
    a.seed_given = ok;
    valid = "an unsigned integer";
  } else if (key == "--eval_mode") {
    ok = true;
    if (value == "0" || value == "kv") {
      a.eval_mode = EvalMode::kKv;
    } else if (value == "1" || value == "hybrid") {
      a.eval_mode = EvalMode::kHybrid;
    } else {
      ok = false;
    }
    valid = "kv (0: decode only) or hybrid (1: prefill chunks, then decode)";
  } else if (key == "--num_iters") {
    ok = parse_int(value, 1, 1000000, a.num_iters);
    valid = "an integer >= 1";
  } else if (key == "--engine") {
    a.engine = value == "auto" ? 0 : value == "qnn" ? 1 : value == "host" ? 2 : -1;
    ok = a.engine >= 0;
    valid = "auto, qnn or host";
  } else if (key == "--log_level") {
    ok = parse_int(value, 0, 5, a.log_level);
    valid = "0..5";
  } else {
    std::fprintf(stderr, "error: unknown flag %s\n", key.c_str());
    return false;
  }
  if (!ok) std::fprintf(stderr, "error: %s '%s' is invalid: valid values are %s\n", key.c_str(), value.c_str(), valid);
  return ok;
}

}  // namespace

void print_usage() {
  std::fprintf(
      stderr,
      "usage: qnn_llama_runner --model_path model.pte [--tokenizer_path tokenizer.json] --prompt TEXT [options]\n"
      "  --model_path <file.pte>        program from backends.qualcomm.llm.export_static_llm (required)\n"
      "  --tokenizer_path <file>        Hugging Face tokenizer.json (needed for --prompt)\n"
      "  --prompt <text>                a user turn; repeat the flag for a multi-turn conversation\n"
      "  --system_prompt <text>         system turn before the first user turn\n"
      "  --tokenized_prompt <file>      prompt token ids as raw little-endian uint64 (instead of --prompt)\n"
      "  --decoder_model_version <v>    chat template: auto (from the tokenizer's special tokens), none,\n"
      "                                 llama3, qwen2_5, qwen3, smollm2_135m (default auto)\n"
      "  --seq_len <n>                  prompt + generated tokens, capped at the context length (default 128)\n"
      "  --temperature <t>              0 = greedy (default 0)\n"
      "  --top_p <p>                    nucleus sampling, (0, 1] (default 1)\n"
      "  --seed <n>                     seed of the sampler (default: from the clock)\n"
      "  --eval_mode kv|hybrid          kv: decode calls only; hybrid: prefill chunks then decode (default)\n"
      "  --num_iters <n>                generations (each from an empty cache; default 1)\n"
      "  --engine auto|qnn|host         engine of the delegates (runtime option qnn_runtime_engine)\n"
      "  --log_level <n>                runtime option qnn_runtime_log_level, 0..5\n"
      "  --output_path <file>           the text of the conversation (prompts and answers)\n"
      "  --output_tokens_path <file>    per turn: a line 'prompt: ids' and a line 'generated: ids'\n"
      "  --performance_output_path <f>  name,value lines: prefill / decode tok/s, time to first token, RSS\n"
      "  --dump_logits_path <file>      float32 logits [vocab] of every sampled position, appended raw\n"
      "  --tokenize_only                print each turn's prompt ids (chat template applied) and exit;\n"
      "                                 no --model_path needed\n"
      "  --help\n"
      "tokenizer: %s\n",
      TextTokenizer::build_status());
}

int parse_args(int argc, char** argv, Args& a) {
  for (int i = 1; i < argc; ++i) {
    const std::string key = argv[i];
    if (key == "--help" || key == "-h") return 2;
    if (key == "--tokenize_only") {  // a switch: no value
      a.tokenize_only = true;
      continue;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "error: %s needs a value\n", key.c_str());
      return 1;
    }
    if (!apply_flag(key, argv[++i], a)) return 1;
  }
  if (a.model_path.empty() && !a.tokenize_only) {
    std::fprintf(stderr, "error: --model_path is required\n");
    return 1;
  }
  if (a.prompts.empty() && a.tokenized_prompt.empty()) {
    std::fprintf(stderr, "error: give --prompt (with --tokenizer_path) or --tokenized_prompt\n");
    return 1;
  }
  if (!a.prompts.empty() && !a.tokenized_prompt.empty()) {
    std::fprintf(stderr, "error: --prompt and --tokenized_prompt exclude each other\n");
    return 1;
  }
  if (!a.prompts.empty() && a.tokenizer_path.empty()) {
    std::fprintf(stderr, "error: --prompt needs --tokenizer_path (a tokenizer.json)\n");
    return 1;
  }
  return 0;
}

}  // namespace llama
}  // namespace qnn_delegate
