#include "engine/prompt.h"

#include "tokenizer/vocab.h"

namespace coda {

namespace {

// Whether any message's text (a string content or the text of its parts) holds a special-token
// string. Reads in place: most conversations have none and then need no defused copy.
bool mentions_specials(const nlohmann::ordered_json& messages, const Vocab& vocab) {
  auto has = [&](const nlohmann::ordered_json& text) {
    if (!text.is_string()) return false;
    const auto& s = text.get_ref<const std::string&>();
    for (int32_t id : vocab.special_ids()) {
      const std::string& piece = vocab.piece(id);
      if (!piece.empty() && s.find(piece) != std::string::npos) return true;
    }
    return false;
  };
  if (!messages.is_array()) return false;
  for (const auto& m : messages) {
    if (!m.is_object()) continue;
    const auto c = m.find("content");
    if (c == m.end()) continue;
    if (has(*c)) return true;
    if (c->is_array())
      for (const auto& part : *c)
        if (part.is_object() && part.contains("text") && has(part["text"])) return true;
  }
  return false;
}

// Replaces every special-token string in (normalized) message contents by filler bytes of the
// same length.
void defuse_specials(nlohmann::ordered_json& messages, const Vocab& vocab) {
  for (auto& m : messages) {
    if (!m.is_object() || !m.contains("content") || !m["content"].is_string()) continue;
    auto& content = m["content"].get_ref<std::string&>();
    for (int32_t id : vocab.special_ids()) {
      const std::string& piece = vocab.piece(id);
      if (piece.empty()) continue;
      for (size_t at = content.find(piece); at != std::string::npos; at = content.find(piece, at + piece.size()))
        content.replace(at, piece.size(), std::string(piece.size(), '\x1a'));
    }
  }
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
    auto text = chat_template->apply(*r.messages, opts);  // validates the messages too
    if (!text) return text.error();
    // Special-token strings inside user text must encode as text: render again with them replaced
    // by filler of the same length, and the bytes that differ are the ones to encode as text.
    std::vector<std::pair<size_t, size_t>> text_only;
    if (mentions_specials(*r.messages, vocab)) {
      auto defused = normalize_messages(*r.messages);
      if (!defused) return defused.error();
      defuse_specials(*defused, vocab);
      auto second = chat_template->apply(*defused, opts);
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
