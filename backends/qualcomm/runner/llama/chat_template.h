// Chat templates: the text of one user turn (and the system turn before the first one) in the
// format the model was trained on, as upstream's qnn_llama_runner writes them.
#pragma once

#include <string>

namespace qnn_delegate {
namespace llama {

class TextTokenizer;

enum class ChatTemplate { kNone, kChatMl, kLlama3 };

// `version`: a --decoder_model_version value; "auto" picks ChatML when the tokenizer has
// <|im_start|>, Llama 3's when it has <|start_header_id|>, else none (the prompt as it is).
ChatTemplate pick_chat_template(const std::string& version, const TextTokenizer* tokenizer);
const char* chat_template_name(ChatTemplate t);

// The text of user turn `turn` (0-based); the system prompt goes before turn 0 when not empty.
// A later turn starts with what closes the previous answer (the answer's EOS token is fed first).
std::string format_turn(ChatTemplate t, const std::string& system_prompt, const std::string& prompt, int turn);

}  // namespace llama
}  // namespace qnn_delegate
