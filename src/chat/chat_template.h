// Chat templates: turn OpenAI-style messages into the prompt text a model was trained on.
//
// The template is the model's own `tokenizer.chat_template` rendered by the Jinja interpreter with
// Hugging Face's variables (messages, add_generation_prompt, bos_token, eos_token, tools, plus any
// extra keyword the caller passes, e.g. enable_thinking). Models without one get a built-in
// (llama3, chatml, mistral) chosen from their vocabulary. Messages are checked against the schema
// first; errors from the template's own raise_exception come back as they are written.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "chat/jinja.h"
#include "core/status.h"

namespace coda {

class GgufFile;
class Vocab;

struct ChatOptions {
  bool add_generation_prompt = true;
  // vLLM's continue_final_message: the last message (the assistant's) is left open so the model
  // continues it; the rendering is cut right after its content.
  bool continue_final_message = false;
  std::string bos_token;
  std::string eos_token;
  nlohmann::ordered_json tools;                                     // null: no tools variable
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();  // more template variables
};

class ChatTemplate {
 public:
  static Expected<ChatTemplate> from_source(const std::string& source, std::string name = "custom");
  // "llama3", "chatml" or "mistral".
  static Expected<ChatTemplate> builtin(const std::string& name);
  // The GGUF's tokenizer.chat_template, else the built-in its vocabulary suggests.
  static Expected<ChatTemplate> for_model(const GgufFile& gguf, const Vocab& vocab);

  // Renders the messages. Message content may be a string, null, or an array of text parts
  // ({"type": "text", "text": ...}, joined with newlines).
  Expected<std::string> apply(const nlohmann::ordered_json& messages, const ChatOptions& opts) const;

  const std::string& name() const { return name_; }
  const std::string& source() const { return source_; }

 private:
  std::string name_;
  std::string source_;
  jinja::Template tmpl_;
};

// The schema check apply() runs: a non-empty array of objects with a known role and content of
// an allowed type. Returns the messages with text-part arrays flattened to strings.
Expected<nlohmann::ordered_json> normalize_messages(const nlohmann::ordered_json& messages);

}  // namespace coda
