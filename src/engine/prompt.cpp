#include "engine/prompt.h"

#include "tokenizer/vocab.h"

namespace coda {

namespace {

// Request JSON that reaches the chat template is at most this deep (the request limits allow 32,
// the template's values 64); deeper parts are left as they are, and the render refuses them.
constexpr int kMaxWalkDepth = 64;

// Whether `s` holds a special-token string of the vocabulary.
bool has_special(const std::string& s, const Vocab& vocab) {
  for (int32_t id : vocab.special_ids()) {
    const std::string& piece = vocab.piece(id);
    if (!piece.empty() && s.find(piece) != std::string::npos) return true;
  }
  return false;
}

// The filler is '~': printable, so that tojson writes it as one byte (a control byte became
// "\u001a" there, and the second rendering no longer lined up with the first), and in no special
// token.
void defuse_string(std::string& s, const Vocab& vocab) {
  for (int32_t id : vocab.special_ids()) {
    const std::string& piece = vocab.piece(id);
    if (piece.empty()) continue;
    for (size_t at = s.find(piece); at != std::string::npos; at = s.find(piece, at + piece.size()))
      s.replace(at, piece.size(), std::string(piece.size(), '~'));
  }
}

// Whether any string or object key in `j` (message text, a tool call's arguments, a tool's
// description or property names, a chat_template_kwargs value: whatever the template may write)
// holds a special-token string. Reads in place: most requests have none and then need no defused
// copy.
bool mentions_specials(const nlohmann::ordered_json& j, const Vocab& vocab, int depth = 0) {
  if (j.is_string()) return has_special(j.get_ref<const std::string&>(), vocab);
  if (depth >= kMaxWalkDepth || !j.is_structured()) return false;
  if (j.is_object()) {  // keys too: a schema's property names reach the prompt through tojson
    for (const auto& [k, v] : j.items())
      if (has_special(k, vocab) || mentions_specials(v, vocab, depth + 1)) return true;
    return false;
  }
  for (const auto& v : j)
    if (mentions_specials(v, vocab, depth + 1)) return true;
  return false;
}

// Replaces every special-token string in every string and key of `j` by filler bytes of the same
// length.
void defuse_specials(nlohmann::ordered_json& j, const Vocab& vocab, int depth = 0) {
  if (j.is_string()) return defuse_string(j.get_ref<std::string&>(), vocab);
  if (depth >= kMaxWalkDepth || !j.is_structured()) return;
  if (j.is_object()) {  // rebuilt in order, with the keys defused as well
    nlohmann::ordered_json out = nlohmann::ordered_json::object();
    for (auto& [k, v] : j.items()) {
      std::string key = k;
      defuse_string(key, vocab);
      defuse_specials(v, vocab, depth + 1);
      out[key] = std::move(v);
    }
    j = std::move(out);
    return;
  }
  for (auto& v : j) defuse_specials(v, vocab, depth + 1);
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
    // Special-token strings inside the request's text must encode as text: render again with them
    // replaced by filler of the same length, and the bytes that differ are the ones to encode as
    // text. That is every string the template may write: messages (content, tool calls), tools
    // and chat_template_kwargs.
    std::vector<std::pair<size_t, size_t>> text_only;
    if (mentions_specials(*r.messages, vocab) || mentions_specials(opts.tools, vocab) ||
        mentions_specials(opts.extra, vocab)) {
      auto defused = normalize_messages(*r.messages);
      if (!defused) return defused.error();
      defuse_specials(*defused, vocab);
      ChatOptions defused_opts = opts;
      defuse_specials(defused_opts.tools, vocab);
      defuse_specials(defused_opts.extra, vocab);
      auto second = chat_template->apply(*defused, defused_opts);
      if (!second || second->size() != text->size())
        return Error(
            "messages: a special-token string in the request's text (e.g. \"<|im_end|>\") changes how the chat "
            "template renders the conversation; remove it");
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
