#include "backends/qualcomm/runner/llama/chat_template.h"

#include "backends/qualcomm/runner/llama/text_tokenizer.h"

namespace qnn_delegate {
namespace llama {

ChatTemplate pick_chat_template(const std::string& version, const TextTokenizer* tokenizer) {
  if (version == "none") return ChatTemplate::kNone;
  if (version == "llama3") return ChatTemplate::kLlama3;
  if (version == "qwen2_5" || version == "qwen3" || version == "smollm2_135m") return ChatTemplate::kChatMl;
  if (tokenizer == nullptr) return ChatTemplate::kNone;
  if (tokenizer->has_piece("<|im_start|>")) return ChatTemplate::kChatMl;
  if (tokenizer->has_piece("<|start_header_id|>")) return ChatTemplate::kLlama3;
  return ChatTemplate::kNone;
}

const char* chat_template_name(ChatTemplate t) {
  switch (t) {
    case ChatTemplate::kChatMl:
      return "chatml";
    case ChatTemplate::kLlama3:
      return "llama3";
    default:
      return "none";
  }
}

std::string format_turn(ChatTemplate t, const std::string& system_prompt, const std::string& prompt, int turn) {
  std::string s;
  switch (t) {
    case ChatTemplate::kChatMl:
      if (turn > 0) s += "\n";  // after the previous answer's <|im_end|>
      if (turn == 0 && !system_prompt.empty()) s += "<|im_start|>system\n" + system_prompt + "<|im_end|>\n";
      s += "<|im_start|>user\n" + prompt + "<|im_end|>\n<|im_start|>assistant\n";
      return s;
    case ChatTemplate::kLlama3:
      if (turn == 0) s += "<|begin_of_text|>";
      if (turn == 0 && !system_prompt.empty()) {
        s += "<|start_header_id|>system<|end_header_id|>\n\n" + system_prompt + "<|eot_id|>";
      }
      s += "<|start_header_id|>user<|end_header_id|>\n\n" + prompt +
           "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n";
      return s;
    default:
      if (turn == 0 && !system_prompt.empty()) s += system_prompt + "\n";
      return s + prompt;
  }
}

}  // namespace llama
}  // namespace qnn_delegate
