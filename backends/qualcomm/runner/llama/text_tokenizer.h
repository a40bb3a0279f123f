// The runner's tokenizer: a Hugging Face tokenizer.json read by pytorch_tokenizers' HFTokenizer
// (the C++ library the executorch wheel installs), or nothing when the runner was built without it
// (then only --tokenized_prompt works and tokens are printed as ids).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <executorch/runtime/core/error.h>

namespace qnn_delegate {
namespace llama {

class TextTokenizer {
 public:
  ~TextTokenizer();
  // "pytorch_tokenizers HFTokenizer (...)" or why the build left it out.
  static const char* build_status();
  // Loads `path` (a tokenizer.json); NotFound / NotSupported / InvalidArgument with a message.
  static executorch::runtime::Error load(const std::string& path, std::unique_ptr<TextTokenizer>& out);

  // No BOS / EOS added: a chat template writes the special tokens it needs as text.
  executorch::runtime::Error encode(const std::string& text, std::vector<uint64_t>& ids) const;
  // The text of `token` after `prev` (byte-level pieces: may be part of a UTF-8 character).
  std::string decode(uint64_t prev, uint64_t token) const;
  // True when `piece` is one token of the vocabulary (used to recognise a chat template).
  bool has_piece(const std::string& piece) const;

 private:
  struct Impl;
  explicit TextTokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace llama
}  // namespace qnn_delegate
