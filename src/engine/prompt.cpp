#include "engine/prompt.h"

#include "tokenizer/vocab.h"

namespace coda {

namespace {

// Replaces every special-token string in message contents by filler bytes of the same length;
// returns false if there was none.
bool defuse_specials(nlohmann::ordered_json& messages, const Vocab& vocab) {
  bool changed = false;
  for (auto& m : messages) {
    if (!m.is_object() || !m.contains("content") || !m["content"].is_string()) continue;
    std::string content = m["content"].get<std::string>();
    for (int32_t id : vocab.special_ids()) {
      const std::string& piece = vocab.piece(id);
      if (piece.empty()) continue;
      for (size_t at = content.find(piece); at != std::string::npos; at = content.find(piece, at + piece.size())) {
        content.replace(at, piece.size(), std::string(piece.size(), '\x1a'));
        changed = true;
      }
    }
    m["content"] = content;
  }
  return changed;
}

}  // namespace

std::vector<int32_t> end_of_turn_ids(const Vocab& vocab) {
  std::vector<int32_t> ids;
  for (const char* piece : {"<|eot_id|>", "<|eom_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|end_of_text|>",
                            "<｜end▁of▁sentence｜>"}) {
    const int32_t id = vocab.find(piece);
    if (id >= 0) ids.push_back(id);
  }
  return ids;
}

Expected<Prompt> prepare_prompt(const GenerationRequest& r, const Vocab& vocab, const ChatTemplate* chat_template) {
  Prompt p;
  if (r.messages) {
    if (!chat_template) return Error("this generator has no chat template; send a prompt instead of messages");
    ChatOptions opts = r.chat;
    if (vocab.bos() >= 0) opts.bos_token = vocab.piece(vocab.bos());
    if (vocab.eos() >= 0) opts.eos_token = vocab.piece(vocab.eos());
    auto messages = normalize_messages(*r.messages);
    if (!messages) return messages.error();
    auto text = chat_template->apply(*messages, opts);
    if (!text) return text.error();
    std::vector<std::pair<size_t, size_t>> text_only;
    nlohmann::ordered_json defused = *messages;
    if (defuse_specials(defused, vocab)) {
      auto second = chat_template->apply(defused, opts);
      if (!second || second->size() != text->size())
        return Error(
            "messages: a special-token string in the content (e.g. \"<|im_end|>\") changes how the chat template "
            "renders the conversation; remove it from the message");
      for (size_t i = 0; i < text->size(); ++i) {
        if ((*text)[i] == (*second)[i]) continue;
        if (!text_only.empty() && text_only.back().second == i) {
          text_only.back().second = i + 1;
        } else {
          text_only.emplace_back(i, i + 1);
        }
      }
    }
    // Templates write bos_token themselves; add one only if the rendering did not.
    const bool has_bos = vocab.bos() >= 0 && !opts.bos_token.empty() && text->rfind(opts.bos_token, 0) == 0;
    auto tokens = vocab.encode(*text, vocab.add_bos() && !has_bos, true, text_only);
    if (!tokens) return tokens.error();
    p.tokens = std::move(*tokens);
    p.text = std::move(*text);
    p.chat = true;
  } else if (!r.prompt_tokens.empty()) {
    for (size_t i = 0; i < r.prompt_tokens.size(); ++i) {
      const int32_t id = r.prompt_tokens[i];
      if (id < 0 || id >= vocab.size())
        return Error("prompt[" + std::to_string(i) + "]: token id " + std::to_string(id) +
                     " is out of range; allowed 0.." + std::to_string(vocab.size() - 1));
    }
    p.tokens = r.prompt_tokens;
  } else {
    if (r.prompt.empty()) return Error("prompt: the prompt is empty; give some text (or messages for a chat)");
    auto tokens = vocab.encode(r.prompt, vocab.add_bos());
    if (!tokens) return tokens.error();
    p.tokens = std::move(*tokens);
    p.text = r.prompt;
  }
  if (p.tokens.empty()) return Error("prompt: it encodes to no tokens");
  return p;
}

}  // namespace coda
