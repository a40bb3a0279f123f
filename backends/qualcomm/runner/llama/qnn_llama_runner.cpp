// qnn_llama_runner: text generation with a static-KV-cache .pte of
// backends.qualcomm.llm.export_static_llm (docs/llm.md#the-c-runner). The loop is generate.py's:
// tokenize (chat template applied), prefill in chunks, then sample / decode one token per call
// until an EOS token or --seq_len, streaming the text; then prefill and decode tok/s, time to
// first token and peak RSS. Flags: llama_args.h; program, cache and calls: static_llm.h.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <executorch/runtime/backend/interface.h>
#include <executorch/runtime/backend/options.h>
#include <executorch/runtime/platform/runtime.h>

#include "backends/qualcomm/runner/llama/chat_template.h"
#include "backends/qualcomm/runner/llama/llama_args.h"
#include "backends/qualcomm/runner/llama/sampler.h"
#include "backends/qualcomm/runner/llama/static_llm.h"
#include "backends/qualcomm/runner/llama/text_tokenizer.h"
#include "backends/qualcomm/runner/runner_util.h"
#include "backends/qualcomm/runtime/RuntimeOptions.h"

using executorch::runtime::BackendOption;
using executorch::runtime::Error;
using namespace qnn_delegate::llama;
using qnn_delegate::runner::error_name;
namespace rt_options = qnn_delegate::runtime;

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

struct Stats {
  int64_t prompt_tokens = 0, generated_tokens = 0, decode_calls = 0;
  double prefill_s = 0, decode_s = 0, ttft_s = -1;
  std::string stop_reason;
  double prefill_tok_s() const { return prefill_s > 0 ? prompt_tokens / prefill_s : 0.0; }
  double decode_tok_s() const { return decode_s > 0 ? decode_calls / decode_s : 0.0; }
};

struct Turn {
  std::string text;  // formatted (empty for --tokenized_prompt)
  std::vector<uint64_t> prompt, generated;
};

// VmHWM of /proc/self/status (getrusage's ru_maxrss would include the parent's peak before exec).
double peak_rss_mb() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::strtod(line.c_str() + 6, nullptr) / 1024.0;  // kB
  }
  return 0.0;
}

bool forward_backend_options(const Args& a) {
  std::vector<BackendOption> opts;
  auto add = [&](const char* key, int value) {
    if (value < 0) return;
    BackendOption o;
    std::snprintf(o.key, sizeof(o.key), "%s", key);
    o.value = value;
    opts.push_back(o);
  };
  add(rt_options::kEngineKey, a.engine);
  add(rt_options::kLogLevelKey, a.log_level);
  if (opts.empty()) return true;
  const Error e = executorch::runtime::set_option("QnnDelegate", {opts.data(), opts.size()});
  if (e != Error::Ok) {
    std::fprintf(stderr, "error: set_option on backend QnnDelegate failed (%s)\n", error_name(e).c_str());
    return false;
  }
  return true;
}

// --tokenized_prompt: raw little-endian uint64 ids.
bool read_tokenized_prompt(const std::string& path, std::vector<uint64_t>& ids) {
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  if (!f) {
    std::fprintf(stderr, "error: --tokenized_prompt '%s' cannot be opened (NotFound)\n", path.c_str());
    return false;
  }
  const std::streamsize size = f.tellg();
  if (size <= 0 || size % 8 != 0) {
    std::fprintf(stderr, "error: --tokenized_prompt '%s' has %lld bytes: not a non-empty list of uint64 ids\n",
                 path.c_str(), static_cast<long long>(size));
    return false;
  }
  ids.resize(size / 8);
  f.seekg(0);
  return static_cast<bool>(f.read(reinterpret_cast<char*>(ids.data()), size));
}

bool make_turns(const Args& a, const TextTokenizer* tokenizer, ChatTemplate tmpl, int64_t vocab,
                std::vector<Turn>& turns) {
  if (!a.tokenized_prompt.empty()) {
    turns.resize(1);
    if (!read_tokenized_prompt(a.tokenized_prompt, turns[0].prompt)) return false;
  } else {
    turns.resize(a.prompts.size());
    for (size_t i = 0; i < a.prompts.size(); ++i) {
      turns[i].text = format_turn(tmpl, a.system_prompt, a.prompts[i], static_cast<int>(i));
      if (tokenizer->encode(turns[i].text, turns[i].prompt) != Error::Ok) return false;
    }
  }
  for (const Turn& t : turns) {
    if (t.prompt.empty()) {
      std::fprintf(stderr, "error: a prompt gives no tokens\n");
      return false;
    }
    for (uint64_t id : t.prompt) {
      if (id >= static_cast<uint64_t>(vocab)) {
        std::fprintf(stderr, "error: prompt token id %llu is outside the model's vocabulary of %lld\n",
                     static_cast<unsigned long long>(id), static_cast<long long>(vocab));
        return false;
      }
    }
  }
  return true;
}

class Output {
 public:
  explicit Output(const TextTokenizer* tokenizer) : tokenizer_(tokenizer) {}
  // Streams `token` (text, or its id without a tokenizer) to stdout and the conversation text.
  void token(uint64_t prev, uint64_t token, std::string& text) {
    if (tokenizer_ != nullptr) {
      const std::string piece = tokenizer_->decode(prev, token);
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      text += piece;
    } else {
      std::printf("%llu ", static_cast<unsigned long long>(token));
    }
    std::fflush(stdout);
  }

 private:
  const TextTokenizer* tokenizer_;
};

bool is_eos(const std::vector<int64_t>& eos_ids, int64_t token) {
  for (int64_t e : eos_ids) {
    if (e == token) return true;
  }
  return false;
}

// One conversation from an empty cache: every turn prefilled after the previous answer (whose
// last token, sampled but not yet fed, goes first), then decoded until EOS or seq_len.
Error run_conversation(StaticLlm& llm, Sampler& sampler, int64_t seq_len, std::vector<Turn>& turns, Output& out,
                       std::FILE* logits_file, std::string& text, Stats& stats) {
  llm.reset();
  const int64_t vocab = llm.shape().vocab_size;
  int64_t pos = 0;
  bool pending = false;  // the last sampled token has not been fed
  uint64_t last = 0;
  std::vector<uint64_t> feed;
  feed.reserve(seq_len + 1);
  for (Turn& turn : turns) {
    turn.generated.clear();
    turn.generated.reserve(seq_len);
    feed.clear();
    if (pending) feed.push_back(last);
    feed.insert(feed.end(), turn.prompt.begin(), turn.prompt.end());
    if (pos + static_cast<int64_t>(feed.size()) >= seq_len) {
      std::fprintf(stderr, "\nwarning: the prompt (%zu tokens at position %lld) leaves no room in --seq_len %lld\n",
                   feed.size(), static_cast<long long>(pos), static_cast<long long>(seq_len));
      stats.stop_reason = "seq_len";
      break;
    }
    text += turn.text;
    const auto t0 = Clock::now();
    const float* logits = nullptr;
    Error e = llm.prefill(feed.data(), static_cast<int64_t>(feed.size()), pos, logits);
    if (e != Error::Ok) return e;
    stats.prefill_s += seconds_since(t0);
    stats.prompt_tokens += static_cast<int64_t>(feed.size());
    pos += static_cast<int64_t>(feed.size());
    const auto decode_start = Clock::now();
    uint64_t prev = feed.back();
    while (true) {
      const int64_t token = sampler.sample(logits);
      if (stats.ttft_s < 0) stats.ttft_s = seconds_since(t0);
      if (logits_file != nullptr) std::fwrite(logits, sizeof(float), vocab, logits_file);
      turn.generated.push_back(static_cast<uint64_t>(token));
      ++stats.generated_tokens;
      if (is_eos(llm.eos_ids(), token)) {  // not printed
        stats.stop_reason = "eos";
        break;
      }
      out.token(prev, static_cast<uint64_t>(token), text);
      prev = static_cast<uint64_t>(token);
      if (pos + 1 >= seq_len) {
        stats.stop_reason = "seq_len";
        break;
      }
      e = llm.decode(static_cast<uint64_t>(token), pos, logits);
      if (e != Error::Ok) return e;
      ++stats.decode_calls;
      ++pos;
    }
    stats.decode_s += seconds_since(decode_start);
    pending = true;
    last = turn.generated.back();
    std::printf("\n");
    if (stats.stop_reason == "seq_len") break;
  }
  return Error::Ok;
}

bool write_tokens(const std::string& path, const std::vector<Turn>& turns) {
  std::ofstream f(path);
  for (const Turn& t : turns) {
    f << "prompt:";
    for (uint64_t id : t.prompt) f << ' ' << id;
    f << "\ngenerated:";
    for (uint64_t id : t.generated) f << ' ' << id;
    f << '\n';
  }
  if (!f) std::fprintf(stderr, "error: --output_tokens_path '%s' cannot be written\n", path.c_str());
  return static_cast<bool>(f);
}

bool write_text(const std::string& path, const std::string& text, const char* flag) {
  std::ofstream f(path, std::ios::binary);
  f << text;
  if (!f) std::fprintf(stderr, "error: %s '%s' cannot be written\n", flag, path.c_str());
  return static_cast<bool>(f);
}

std::string performance_text(const Stats& s, double load_s) {
  char buf[512];
  std::snprintf(buf, sizeof(buf),
                "load_s,%.4f\nprompt_tokens,%lld\nprefill_tok_s,%.3f\ntime_to_first_token_ms,%.3f\n"
                "generated_tokens,%lld\ndecode_tok_s,%.3f\npeak_rss_mb,%.1f\nstop,%s\n",
                load_s, static_cast<long long>(s.prompt_tokens), s.prefill_tok_s(), s.ttft_s * 1000.0,
                static_cast<long long>(s.generated_tokens), s.decode_tok_s(), peak_rss_mb(), s.stop_reason.c_str());
  return buf;
}

// --tokenize_only: the ids of every turn, one line each, on stdout (and --output_tokens_path).
int tokenize_only(const Args& a, const TextTokenizer* tokenizer) {
  std::vector<Turn> turns;
  const ChatTemplate tmpl = pick_chat_template(a.decoder_model_version, tokenizer);
  if (!make_turns(a, tokenizer, tmpl, INT64_MAX, turns)) return 1;
  for (const Turn& t : turns) {
    for (size_t i = 0; i < t.prompt.size(); ++i) std::printf(i ? " %llu" : "%llu", (unsigned long long)t.prompt[i]);
    std::printf("\n");
  }
  return a.output_tokens_path.empty() || write_tokens(a.output_tokens_path, turns) ? 0 : 1;
}

int run(const Args& a) {
  qnn_delegate::runner::install_log_filter(a.log_level >= static_cast<int>(rt_options::LogLevel::kLogLevelVerbose));
  executorch::runtime::runtime_init();
  if (!forward_backend_options(a)) return 1;
  std::unique_ptr<TextTokenizer> tokenizer;
  if (!a.tokenizer_path.empty() && TextTokenizer::load(a.tokenizer_path, tokenizer) != Error::Ok) return 1;
  if (a.tokenize_only) return tokenize_only(a, tokenizer.get());
  const auto load_start = Clock::now();
  StaticLlm llm;
  if (llm.load(a.model_path, a.eval_mode == EvalMode::kHybrid) != Error::Ok) return 1;
  const double load_s = seconds_since(load_start);
  const LlmShape& shape = llm.shape();
  const ChatTemplate tmpl = pick_chat_template(a.decoder_model_version, tokenizer.get());
  std::vector<Turn> turns;
  if (!make_turns(a, tokenizer.get(), tmpl, shape.vocab_size, turns)) return 1;
  int64_t seq_len = a.seq_len;
  if (seq_len > shape.context_len) {
    std::fprintf(stderr, "note: --seq_len %d is capped at the context length %lld\n", a.seq_len,
                 static_cast<long long>(shape.context_len));
    seq_len = shape.context_len;
  }
  std::fprintf(stderr, "%s: context %lld, %s, %lld layers, vocab %lld; chat template %s; loaded in %.2f s\n",
               a.model_path.c_str(), static_cast<long long>(shape.context_len),
               llm.has_prefill() ? ("prefill AR-" + std::to_string(shape.ar_len) + " + decode").c_str()
                                 : "decode only (kv mode)",
               static_cast<long long>(shape.n_layers), static_cast<long long>(shape.vocab_size),
               chat_template_name(tmpl), load_s);
  std::FILE* logits_file = nullptr;
  if (!a.dump_logits_path.empty() && (logits_file = std::fopen(a.dump_logits_path.c_str(), "wb")) == nullptr) {
    std::fprintf(stderr, "error: --dump_logits_path '%s' cannot be written\n", a.dump_logits_path.c_str());
    return 1;
  }
  const uint64_t seed = a.seed_given ? a.seed : std::random_device{}();
  Output out(tokenizer.get());
  std::string text;
  text.reserve(static_cast<size_t>(seq_len) * 16);  // grows only for long pieces
  Stats stats;
  for (int iter = 0; iter < a.num_iters; ++iter) {
    Sampler sampler(shape.vocab_size, a.temperature, a.top_p, seed);
    text.clear();
    stats = Stats();
    const Error e = run_conversation(llm, sampler, seq_len, turns, out, iter == 0 ? logits_file : nullptr, text, stats);
    if (e != Error::Ok) {
      if (logits_file != nullptr) std::fclose(logits_file);
      return 1;
    }
    std::printf(
        "iteration %d: prompt %lld tokens, prefill %.1f tok/s, time to first token %.1f ms; %lld generated, decode "
        "%.1f tok/s; stop: %s; peak RSS %.0f MB\n",
        iter + 1, static_cast<long long>(stats.prompt_tokens), stats.prefill_tok_s(), stats.ttft_s * 1000.0,
        static_cast<long long>(stats.generated_tokens), stats.decode_tok_s(), stats.stop_reason.c_str(), peak_rss_mb());
    std::fflush(stdout);
  }
  if (logits_file != nullptr) std::fclose(logits_file);
  bool ok = true;
  if (!a.output_path.empty()) ok &= write_text(a.output_path, text, "--output_path");
  if (!a.output_tokens_path.empty()) ok &= write_tokens(a.output_tokens_path, turns);
  if (!a.performance_output_path.empty()) {
    ok &= write_text(a.performance_output_path, performance_text(stats, load_s), "--performance_output_path");
  }
  return ok ? 0 : 1;
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
    std::fprintf(stderr, "(qnn_llama_runner --help lists the flags)\n");
    return 1;
  }
  return run(args);
}
