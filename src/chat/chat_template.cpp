#include "chat/chat_template.h"

#include "gguf/gguf.h"
#include "tokenizer/vocab.h"

namespace coda {

namespace {

// Built-in templates, used only when a model carries none. They follow the formats the model
// families were trained on (Llama 3 headers, ChatML, Mistral [INST]).
const char* const kLlama3 =
    "{{- bos_token }}"
    "{%- for message in messages %}"
    "{{- '<|start_header_id|>' + message.role + '<|end_header_id|>\\n\\n' + (message.content or '') | trim + "
    "'<|eot_id|>' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}";

const char* const kChatml =
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message.role + '\\n' + (message.content or '') + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}";

// Mistral v0.x: no system role, so a system message is prepended to the first user turn.
const char* const kMistral =
    "{%- if messages[0].role == 'system' %}"
    "{%- set system = messages[0].content + '\\n\\n' %}{%- set loop_messages = messages[1:] %}"
    "{%- else %}{%- set system = '' %}{%- set loop_messages = messages %}{%- endif %}"
    "{{- bos_token }}"
    "{%- for message in loop_messages %}"
    "{%- if (message.role == 'user') != (loop.index0 % 2 == 0) %}"
    "{{- raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
    "{%- endif %}"
    "{%- if message.role == 'user' %}"
    "{{- '[INST] ' + (system if loop.first else '') + message.content + ' [/INST]' }}"
    "{%- elif message.role == 'assistant' %}{{- message.content + eos_token }}"
    "{%- else %}{{- raise_exception('Only system, user and assistant roles are supported') }}"
    "{%- endif %}"
    "{%- endfor %}";

const char* const kRoles[] = {"system", "user", "assistant", "tool", "ipython", "developer"};

// What a message needs beyond a copy of itself: its content replaced by the joined text of its
// parts, or by null where an assistant message with tool_calls has none.
struct ContentFix {
  bool replace = false;
  nlohmann::ordered_json content;
};

Expected<bool> check_messages_array(const nlohmann::ordered_json& messages) {
  if (!messages.is_array()) return Error("messages: expected an array of message objects");
  if (messages.empty()) return Error("messages: the conversation is empty; give at least one message");
  return true;
}

// The schema check of message `i` (see normalize_messages).
Expected<ContentFix> check_message(const nlohmann::ordered_json& m, size_t i) {
  const std::string where = "messages[" + std::to_string(i) + "]";
  if (!m.is_object()) return Error(where + ": expected an object with 'role' and 'content'");
  if (!m.contains("role") || !m["role"].is_string()) return Error(where + ".role: missing or not a string");
  const std::string& role = m["role"].get_ref<const std::string&>();
  bool known = false;
  for (const char* r : kRoles) known = known || role == r;
  if (!known)
    return Error(where + ".role: '" + role + "' is not a supported role; use system, user, assistant or tool");
  ContentFix fix;
  if (!m.contains("content")) {
    if (role != "assistant" || !m.contains("tool_calls"))
      return Error(where + ".content: missing (only an assistant message with tool_calls may omit it)");
    fix.replace = true;  // null
  } else if (m["content"].is_array()) {
    std::string text;
    for (size_t k = 0; k < m["content"].size(); ++k) {
      const auto& part = m["content"][k];
      const std::string pwhere = where + ".content[" + std::to_string(k) + "]";
      if (!part.is_object() || !part.contains("type") || !part["type"].is_string())
        return Error(pwhere + ": expected {\"type\": \"text\", \"text\": ...}");
      if (part["type"] != "text")
        return Error(pwhere + ".type: '" + part["type"].get<std::string>() +
                     "' is not supported by a text-only model; send text parts");
      if (!part.contains("text") || !part["text"].is_string()) return Error(pwhere + ".text: missing or not a string");
      if (k) text += "\n";
      text += part["text"].get_ref<const std::string&>();
    }
    fix.replace = true;
    fix.content = std::move(text);
  } else if (!m["content"].is_string() && !m["content"].is_null()) {
    return Error(where + ".content: expected a string, an array of text parts or null");
  } else if (m["content"].is_null() && !(role == "assistant" && m.contains("tool_calls"))) {
    return Error(where + ".content: null is only allowed for an assistant message with tool_calls");
  }
  return fix;
}

// The checks of normalize_messages, converting straight into the template's values: a long
// conversation is then held as the request's JSON and these values, without a normalized copy.
Expected<jinja::Value> message_values(const nlohmann::ordered_json& messages) {
  if (auto ok = check_messages_array(messages); !ok) return ok.error();
  jinja::Array out;
  out.reserve(messages.size());
  for (size_t i = 0; i < messages.size(); ++i) {
    auto fix = check_message(messages[i], i);
    if (!fix) return fix.error();
    jinja::Value v = jinja::Value::from_json(messages[i], 1);
    if (fix->replace) v.object_mut().set("content", jinja::Value::from_json(fix->content, 1));
    out.push_back(std::move(v));
  }
  return jinja::Value(std::move(out));
}

}  // namespace

Expected<nlohmann::ordered_json> normalize_messages(const nlohmann::ordered_json& messages) {
  if (auto ok = check_messages_array(messages); !ok) return ok.error();
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (size_t i = 0; i < messages.size(); ++i) {
    auto fix = check_message(messages[i], i);
    if (!fix) return fix.error();
    nlohmann::ordered_json copy = messages[i];
    if (fix->replace) copy["content"] = std::move(fix->content);
    out.push_back(std::move(copy));
  }
  return out;
}

Expected<ChatTemplate> ChatTemplate::from_source(const std::string& source, std::string name) {
  auto t = jinja::Template::parse(source);
  if (!t) return Error("chat template '" + name + "': " + t.message());
  ChatTemplate c;
  c.name_ = std::move(name);
  c.source_ = source;
  c.tmpl_ = std::move(*t);
  return c;
}

Expected<ChatTemplate> ChatTemplate::builtin(const std::string& name) {
  if (name == "llama3") return from_source(kLlama3, name);
  if (name == "chatml") return from_source(kChatml, name);
  if (name == "mistral") return from_source(kMistral, name);
  return Error("unknown built-in chat template '" + name + "'; built-ins are llama3, chatml and mistral");
}

Expected<ChatTemplate> ChatTemplate::for_model(const GgufFile& gguf, const Vocab& vocab) {
  if (gguf.find("tokenizer.chat_template")) {
    auto src = gguf.get_string("tokenizer.chat_template");
    if (!src) return src.error();
    return from_source(*src, "gguf");
  }
  if (vocab.find("<|start_header_id|>") >= 0) return builtin("llama3");
  if (vocab.find("<|im_start|>") >= 0) return builtin("chatml");
  if (vocab.find("[INST]") >= 0 || vocab.model() == "llama") return builtin("mistral");
  return builtin("chatml");
}

Expected<std::string> ChatTemplate::apply(const nlohmann::ordered_json& messages, const ChatOptions& opts) const {
  // Extra variables (chat_template_kwargs) may not replace the ones the request itself sets: a
  // `messages` given there would skip the checks on messages, and the defusing of special-token
  // strings in their text, and reach the template as written.
  if (opts.extra.is_object())
    for (const char* reserved : {"messages", "tools", "add_generation_prompt", "bos_token", "eos_token"})
      if (opts.extra.contains(reserved))
        return Error(std::string("chat_template_kwargs: '") + reserved +
                     "' is set by the request itself (its messages, tools and add_generation_prompt fields, or "
                     "the model's tokens); remove it from chat_template_kwargs");
  if (opts.continue_final_message) {
    auto norm = normalize_messages(messages);
    if (!norm) return norm.error();
    const auto& last = norm->back();
    if (last.value("role", "") != "assistant")
      return Error("messages: continue_final_message needs the last message to be the assistant's");
    const std::string content =
        last.contains("content") && last["content"].is_string() ? last["content"].get<std::string>() : std::string();
    ChatOptions o = opts;
    o.continue_final_message = false;
    if (content.empty()) {  // nothing to continue: the turn starts fresh
      nlohmann::ordered_json before = *norm;
      before.erase(before.size() - 1);
      o.add_generation_prompt = true;
      if (before.empty()) return Error("messages: continue_final_message needs a message before the assistant's");
      return apply(before, o);
    }
    o.add_generation_prompt = false;
    auto full = apply(*norm, o);
    if (!full) return full;
    const size_t at = full->rfind(content);
    if (at == std::string::npos)
      return Error(
          "messages: the chat template does not write the final message's content as given, so it "
          "cannot be continued");
    return full->substr(0, at + content.size());
  }
  jinja::Object vars;
  try {
    auto values = message_values(messages);
    if (!values) return values.error();
    vars.set("messages", std::move(*values));
    vars.set("add_generation_prompt", jinja::Value(opts.add_generation_prompt));
    vars.set("bos_token", jinja::Value(opts.bos_token));
    vars.set("eos_token", jinja::Value(opts.eos_token));
    if (!opts.tools.is_null()) vars.set("tools", jinja::Value::from_json(opts.tools));
    if (opts.extra.is_object())
      for (const auto& [k, v] : opts.extra.items()) vars.set(k, jinja::Value::from_json(v));
  } catch (const jinja::TemplateError& e) {
    return Error(std::string("messages: ") + e.what());
  }
  return tmpl_.render(vars);
}

}  // namespace coda
