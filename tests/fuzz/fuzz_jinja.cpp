// libFuzzer over the chat-template interpreter: a template comes with every GGUF file, so its
// parser and evaluator take hostile input. Each input is a template source, rendered against a
// small conversation with tools. Any outcome is fine except a crash, a sanitizer report, or a
// render that runs away: the limits here are a sixteenth of the defaults so that a looping input
// ends quickly under the sanitizers.
#include <cstddef>
#include <cstdint>
#include <string>

#include "chat/jinja.h"

namespace {

const coda::jinja::Object& variables() {
  static const coda::jinja::Object vars = [] {
    coda::jinja::Object v;
    v.set("messages", coda::jinja::Value::from_json(nlohmann::ordered_json::parse(R"([
      {"role": "system", "content": "Be brief."},
      {"role": "user", "content": "What's the weather in Paris?"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
        "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
      {"role": "tool", "tool_call_id": "c1", "content": "18 C"},
      {"role": "assistant", "content": "<think>ok</think>18 C and sunny."},
      {"role": "user", "content": [{"type": "text", "text": "Thanks!"}]}])")));
    v.set("tools", coda::jinja::Value::from_json(nlohmann::ordered_json::parse(R"([{"type": "function",
      "function": {"name": "get_weather", "description": "Weather by city",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])")));
    v.set("add_generation_prompt", coda::jinja::Value(true));
    v.set("bos_token", coda::jinja::Value("<s>"));
    v.set("eos_token", coda::jinja::Value("</s>"));
    return v;
  }();
  return vars;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string source(reinterpret_cast<const char*>(data), size);
  auto t = coda::jinja::Template::parse(source);
  if (!t) return 0;
  const coda::jinja::RenderLimits small{coda::jinja::RenderLimits{}.steps / 16, coda::jinja::RenderLimits{}.bytes / 16};
  (void)t->render(variables(), small);
  return 0;
}
