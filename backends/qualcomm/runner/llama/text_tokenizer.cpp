#include "backends/qualcomm/runner/llama/text_tokenizer.h"

#include <cstdio>
#include <filesystem>

#if QNN_LLAMA_WITH_TOKENIZER
#include <pytorch/tokenizers/hf_tokenizer.h>
#endif

namespace qnn_delegate {
namespace llama {

using executorch::runtime::Error;

#if QNN_LLAMA_WITH_TOKENIZER

struct TextTokenizer::Impl {
  tokenizers::HFTokenizer hf;
};

const char* TextTokenizer::build_status() {
  return "pytorch_tokenizers HFTokenizer (tokenizer.json), linked from the executorch wheel's pytorch_tokenizers";
}

Error TextTokenizer::load(const std::string& path, std::unique_ptr<TextTokenizer>& out) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    std::fprintf(stderr, "error: --tokenizer_path '%s' is not a file (NotFound)\n", path.c_str());
    return Error::NotFound;
  }
  auto impl = std::make_unique<Impl>();
  const tokenizers::Error e = impl->hf.load(path);
  if (e != tokenizers::Error::Ok) {
    std::fprintf(stderr,
                 "error: --tokenizer_path '%s' is not a Hugging Face tokenizer.json that pytorch_tokenizers can "
                 "load (tokenizers error %d) (InvalidArgument)\n",
                 path.c_str(), static_cast<int>(e));
    return Error::InvalidArgument;
  }
  out.reset(new TextTokenizer(std::move(impl)));
  return Error::Ok;
}

Error TextTokenizer::encode(const std::string& text, std::vector<uint64_t>& ids) const {
  auto r = impl_->hf.encode(text, /*bos=*/0, /*eos=*/0);
  if (!r.ok()) {
    std::fprintf(stderr, "error: the tokenizer cannot encode the prompt (tokenizers error %d)\n",
                 static_cast<int>(r.error()));
    return Error::InvalidArgument;
  }
  ids = std::move(r.get());
  return Error::Ok;
}

std::string TextTokenizer::decode(uint64_t prev, uint64_t token) const {
  auto r = impl_->hf.decode(prev, token);
  return r.ok() ? r.get() : std::string();
}

bool TextTokenizer::has_piece(const std::string& piece) const { return impl_->hf.piece_to_id(piece).ok(); }

#else  // built without pytorch_tokenizers

struct TextTokenizer::Impl {};

const char* TextTokenizer::build_status() {
  return "not built in (" QNN_LLAMA_TOKENIZER_MISSING "): use --tokenized_prompt; tokens are printed as ids";
}

Error TextTokenizer::load(const std::string& path, std::unique_ptr<TextTokenizer>&) {
  std::fprintf(stderr, "error: --tokenizer_path '%s': this qnn_llama_runner has no tokenizer: %s (NotSupported)\n",
               path.c_str(), build_status());
  return Error::NotSupported;
}

Error TextTokenizer::encode(const std::string&, std::vector<uint64_t>&) const { return Error::NotSupported; }
std::string TextTokenizer::decode(uint64_t, uint64_t) const { return std::string(); }
bool TextTokenizer::has_piece(const std::string&) const { return false; }

#endif

TextTokenizer::TextTokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TextTokenizer::~TextTokenizer() = default;

}  // namespace llama
}  // namespace qnn_delegate
