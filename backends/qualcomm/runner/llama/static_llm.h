// A .pte from backends.qualcomm.llm.export_static_llm, loaded for generation: its metadata, the
// `prefill` (AR-N tokens) and `decode` (1 token) methods, and the KV cache the runner owns. The
// same steps as generate.py (see docs/llm.md for the inputs and outputs of a call):
//   - one K buffer [kv_heads, head_dim, C - 1] and one V buffer [kv_heads, C - 1, head_dim] per
//     layer (float32, or uint8 codes when the program's 8-bit cache is uint8 I/O; slot s holds
//     position s), allocated once;
//   - a call of N tokens at positions start.. gets tokens, positions, the additive mask and the
//     first C - N slots of every buffer (decode: the buffers themselves; prefill: a copy into
//     input buffers allocated once), and writes its N new entries back at their positions;
//   - prefill runs the prompt in chunks of N (the last one padded, its padded rows masked), and
//     decode calls for prompt tokens no chunk can hold (a chunk starts at or before C - N).
// Everything is allocated by load(); a call allocates nothing.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <executorch/extension/data_loader/file_data_loader.h>
#include <executorch/runtime/core/error.h>
#include <executorch/runtime/executor/method.h>
#include <executorch/runtime/executor/program.h>

namespace qnn_delegate {
namespace llama {

struct LlmShape {
  int64_t context_len = 0, ar_len = 0, n_layers = 0, n_kv_heads = 0, head_dim = 0, vocab_size = 0;
};

// Memory of one loaded method, destroyed in reverse order (the method first).
struct MethodMemory;

class StaticLlm {
 public:
  StaticLlm();
  ~StaticLlm();
  StaticLlm(const StaticLlm&) = delete;
  StaticLlm& operator=(const StaticLlm&) = delete;

  // Loads the program, reads its metadata, loads `decode` (and `prefill` when use_prefill and
  // the program has it), checks every input / output against the metadata and allocates the
  // cache. Errors are printed (naming the file, method and input) and returned.
  executorch::runtime::Error load(const std::string& path, bool use_prefill);

  const LlmShape& shape() const { return shape_; }
  const std::vector<int64_t>& eos_ids() const { return eos_ids_; }
  int64_t bos_id() const { return bos_id_; }
  bool has_prefill() const { return prefill_ != nullptr; }

  // Empties the cache (a new conversation).
  void reset();
  // Runs `tokens` (positions start..) through prefill chunks and decode calls; `logits` points to
  // the last token's logits [vocab] (valid until the next call).
  executorch::runtime::Error prefill(const uint64_t* tokens, int64_t n, int64_t start, const float*& logits);
  // One decode call: token at position `pos`.
  executorch::runtime::Error decode(uint64_t token, int64_t pos, const float*& logits);

 private:
  executorch::runtime::Error load_metadata();
  executorch::runtime::Error load_method(const char* name, int64_t n_tokens, std::unique_ptr<MethodMemory>& out);
  executorch::runtime::Error check_io(MethodMemory& m);
  executorch::runtime::Error call(MethodMemory& m, const uint64_t* tokens, int64_t n_valid, int64_t start,
                                  const float*& logits);
  void write_new_entries(MethodMemory& m, int64_t start, int64_t n_valid);

  std::string path_;
  std::optional<executorch::extension::FileDataLoader> loader_;
  std::optional<executorch::runtime::Program> program_;
  LlmShape shape_;
  std::vector<int64_t> eos_ids_;
  int64_t bos_id_ = -1;
  // per layer, cache_dtype_ elements (float32, or uint8 codes)
  std::vector<std::vector<uint8_t>> k_cache_, v_cache_;
  executorch::aten::ScalarType cache_dtype_ = executorch::aten::ScalarType::Float;
  size_t cache_esize_ = 0;  // set by the first method's cache inputs
  std::unique_ptr<MethodMemory> prefill_, decode_;
};

}  // namespace llama
}  // namespace qnn_delegate
