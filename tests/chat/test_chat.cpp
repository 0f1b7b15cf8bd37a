// Chat templates: the interpreter's limits and errors, message validation and the built-ins.
// Renderings of real templates are compared with Jinja2 in test_templates.py.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "chat/chat_template.h"
#include "chat/jinja.h"

namespace coda {
namespace {

using nlohmann::ordered_json;

std::string render(const std::string& src, const jinja::Object& vars = {}, const jinja::RenderLimits& limits = {}) {
  auto t = jinja::Template::parse(src);
  if (!t) return "PARSE: " + t.message();
  auto r = t->render(vars, limits);
  return r ? *r : "RENDER: " + r.message();
}

TEST(Jinja, SyntaxErrorsNameTheLine) {
  EXPECT_EQ(render("a\nb\n{% if x %}"), "PARSE: template syntax error at line 3: missing '{% endif %}'");
  EXPECT_EQ(render("{{ 1 +"), "PARSE: template syntax error at line 1: unterminated '{{'");
  EXPECT_EQ(render("x\n{% frobnicate %}"), "PARSE: template syntax error at line 2: unknown tag 'frobnicate'");
  EXPECT_EQ(render("{{ 'abc }}"), "PARSE: template syntax error at line 1: unterminated string literal");
  EXPECT_EQ(render("{# never closed"), "PARSE: template syntax error at line 1: unterminated comment");
  EXPECT_EQ(render("{{ 99999999999999999999999 }}"),
            "PARSE: template syntax error at line 1: number '99999999999999999999999' is out of range");
}

TEST(Jinja, RuntimeErrorsNameTheLine) {
  EXPECT_EQ(render("\n{{ 1 + 'a' }}"),
            "RENDER: template error at line 2: unsupported operand types for +: 'int' and 'str'");
  EXPECT_EQ(render("{{ nope.attr }}"), "RENDER: template error at line 1: 'nope' is undefined");
  EXPECT_EQ(render("{{ x | nofilter }}"), "RENDER: template error at line 1: no filter named 'nofilter'");
  // raise_exception's text is the whole error, as the template's author wrote it.
  EXPECT_EQ(render("{{ raise_exception('Roles must alternate') }}"), "RENDER: Roles must alternate");
}

TEST(Jinja, HostileTemplatesFailCleanly) {
  EXPECT_NE(render("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}").find("macro recursion deeper than"),
            std::string::npos);
  EXPECT_NE(render("{% for i in range(100000000) %}{% endfor %}").find("range() larger than"), std::string::npos);
  EXPECT_NE(render("{{ 'x' * 1000000000000 }}").find("too large"), std::string::npos);
  EXPECT_NE(render("{% for i in range(100) %}{{ 'x' * 1000000 }}{% endfor %}").find("output exceeds"),
            std::string::npos);
  EXPECT_NE(render("{{ 1 // 0 }}").find("division by zero"), std::string::npos);
  EXPECT_NE(render("{{ " + std::string(100000, '(') + "1" + std::string(100000, ')') + " }}").find("nesting deeper"),
            std::string::npos);
  std::string deep_ifs;
  for (int i = 0; i < 5000; ++i) deep_ifs += "{% if true %}";
  EXPECT_NE(render(deep_ifs).find("nesting deeper"), std::string::npos);
  EXPECT_NE(render("{{ " + std::string(100000, '-') + "1 }}").find("nesting deeper"), std::string::npos);
  EXPECT_NE(
      render("{% set ns = namespace(a=1) %}{% set ns.me = [1, {'x': ns}] %}{{ ns | tojson }}").find("inside itself"),
      std::string::npos);
  EXPECT_NE(render("{{ [1][::0] }}").find("step cannot be zero"), std::string::npos);
  EXPECT_NE(render(std::string(1, '\0') + "{{ }}").find("expected an expression"), std::string::npos);
}

bool over_budget(const std::string& result) {
  return result.find("did more work than any chat template needs") != std::string::npos;
}

// Templates that would hold a server thread for hours or take all its memory (one comes with any
// GGUF file) end with an error once the render's budget is spent. Small limits keep the test
// fast; each case reaches a different place that spends (statements, container elements visited
// by printing, comparing and searching, values copied and made).
TEST(Jinja, TemplatesThatNeverEndStopAtTheirBudget) {
  const jinja::RenderLimits small{1 << 20, 32 << 20};
  const char* cases[] = {
      // 10^12 iterations of a nested loop
      "{% for i in range(1000000) %}{% for j in range(1000000) %}{% endfor %}{% endfor %}",
      // a string doubled 40 times, and a list
      "{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
      "{% set ns = namespace(l=[1]) %}{% for i in range(40) %}{% set ns.l = ns.l + ns.l %}{% endfor %}",
      // a list that holds itself twice at 60 levels: 2^60 elements to print, compare or search
      "{% set ns = namespace(l=[1]) %}{% for i in range(60) %}{% set x = [ns.l, ns.l] %}{% set ns.l = x %}"
      "{% endfor %}{{ ns.l }}",
      "{% set ns = namespace(l=[1]) %}{% for i in range(60) %}{% set x = [ns.l, ns.l] %}{% set ns.l = x %}"
      "{% endfor %}{{ ns.l | tojson }}",
      "{% set ns = namespace(l=[1]) %}{% for i in range(60) %}{% set x = [ns.l, ns.l] %}{% set ns.l = x %}"
      "{% endfor %}{{ ns.l == ns.l }}",
      "{% set ns = namespace(l=[1]) %}{% for i in range(60) %}{% set ns.l = [ns.l, ns.l] %}{% endfor %}",
      // many copies of one large value, and large values made by filters
      "{% set s = 'x' * 20000000 %}{{ ([s] * 1000) | length }}",
      "{{ ('ab' * 10000000) | replace('', 'xxxxxxxxxxxxxxxx') | length }}",
      "{{ ('\n\n' * 10000000) | replace('\n\n', '\na') | indent(1024) | length }}",
      "{{ ('x ' * 10000000).split() | length }}",
      "{% set ns = namespace(l=[]) %}{% for i in range(100) %}{% set ns.l = ns.l + [range(1000000)] %}{% endfor %}",
      // quadratic searches
      "{% set l = range(1000000) | list %}{{ (l + l) | unique | length }}",
      "{% set l = range(1000000) | list %}{% for i in l %}{% if i in l %}{% endif %}{% endfor %}",
      "{% set l = range(1000000) | list %}{{ l | sort | length }}{{ l | sort | length }}",
      // 2^40 macro calls within the recursion limit
      "{% macro f(n) %}{% if n < 40 %}{{ f(n + 1) }}{{ f(n + 1) }}{% endif %}{% endmacro %}{{ f(0) }}",
  };
  for (const char* src : cases)
    EXPECT_TRUE(over_budget(render(src, {}, small))) << src << "\n" << render(src, {}, small);
  // The defaults stop them too; the error names the line.
  const std::string doubled = render(cases[1]);
  EXPECT_TRUE(over_budget(doubled)) << doubled;
  EXPECT_EQ(doubled.rfind("RENDER: template error at line 1: ", 0), 0u) << doubled;
  EXPECT_TRUE(over_budget(render(cases[3])));
  // The budget is per render: a template that spent it renders again, and others are untouched.
  EXPECT_EQ(render("{{ 'ok' }}", {}, small), "ok");
}

// The defaults leave real templates far from the limits: each renders a 4,096-message
// conversation with 128 tools.
TEST(Jinja, RealTemplatesRenderLongConversationsWithinTheBudget) {
  ordered_json messages = ordered_json::array();
  for (int i = 0; i < 4096; ++i) {
    std::string content;
    for (int w = 0; w < 60; ++w) content += "word" + std::to_string(i) + " ";
    messages.push_back({{"role", i % 2 ? "assistant" : "user"}, {"content", content}});
  }
  ordered_json tools = ordered_json::array();
  for (int i = 0; i < 128; ++i) {
    ordered_json props = ordered_json::object();
    for (int p = 0; p < 30; ++p) props["p" + std::to_string(p)] = {{"type", "string"}, {"description", "a field"}};
    tools.push_back({{"type", "function"},
                     {"function",
                      {{"name", "f" + std::to_string(i)},
                       {"description", "a tool"},
                       {"parameters", {{"type", "object"}, {"properties", props}}}}}});
  }
  jinja::Object vars;
  vars.set("messages", jinja::Value::from_json(messages));
  vars.set("tools", jinja::Value::from_json(tools));
  vars.set("add_generation_prompt", jinja::Value(true));
  vars.set("bos_token", jinja::Value("<s>"));
  vars.set("eos_token", jinja::Value("</s>"));
  // A tenth of the default limits.
  const jinja::RenderLimits tenth{jinja::RenderLimits{}.steps / 10, jinja::RenderLimits{}.bytes / 10};
  for (const char* name :
       {"HuggingFaceTB-SmolLM3-3B", "NousResearch-Hermes-3-Llama-3.1-8B-tool_use", "Qwen-Qwen2.5-7B-Instruct",
        "Qwen-Qwen3-0.6B", "deepseek-ai-DeepSeek-R1-Distill-Llama-8B", "google-gemma-2-2b-it",
        "ibm-granite-granite-3.3-2B-Instruct", "meta-llama-Llama-3.1-8B-Instruct",
        "mistralai-Mistral-Nemo-Instruct-2407", "microsoft-Phi-3.5-mini-instruct"}) {
    std::ifstream in(std::string(CODA_TEST_DATA) + "/templates/" + name + ".jinja");
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string out = render(ss.str(), vars, tenth);
    EXPECT_EQ(out.rfind("RENDER", 0), std::string::npos) << name << ": " << out.substr(0, 300);
    EXPECT_NE(out.find("word4095"), std::string::npos) << name;
  }
}

TEST(Jinja, FuzzedSourcesNeverCrash) {
  // Mutations of a real template: every result is either text or an error.
  const std::string base =
      "{%- for m in messages %}{% if m.role == 'user' %}{{ '<u>' + m.content | trim }}{% elif m.role %}"
      "{{ m.content[1:] ~ loop.index }}{% endif %}{% endfor %}{{ x | tojson(indent=2) }}";
  jinja::Object vars;
  vars.set("messages", jinja::Value::from_json(ordered_json::parse(R"([{"role":"user","content":" hi "},
      {"role":"assistant","content":"yo"}])")));
  uint64_t s = 42;
  auto rnd = [&] {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<size_t>(s >> 33);
  };
  const std::string alphabet = "{}%#-+|.[]()'\"=<>!~*/ ,:abcdeiflnorstux0123456789\n";
  int rendered = 0;
  for (int i = 0; i < 3000; ++i) {
    std::string src = base;
    for (int k = 0; k < 3; ++k) {
      const size_t at = rnd() % src.size();
      switch (rnd() % 3) {
        case 0:
          src[at] = alphabet[rnd() % alphabet.size()];
          break;
        case 1:
          src.erase(at, 1 + rnd() % 4);
          break;
        default:
          src.insert(at, 1, alphabet[rnd() % alphabet.size()]);
      }
      if (src.empty()) src = "x";
    }
    auto t = jinja::Template::parse(src);
    if (t && t->render(vars)) ++rendered;
  }
  EXPECT_GT(rendered, 0);
}

TEST(ChatMessages, SchemaErrorsSayWhatToFix) {
  auto err = [](const char* json) {
    auto r = normalize_messages(ordered_json::parse(json));
    return r ? std::string("ok") : r.message();
  };
  EXPECT_EQ(err("[]"), "messages: the conversation is empty; give at least one message");
  EXPECT_EQ(err("{}"), "messages: expected an array of message objects");
  EXPECT_EQ(err("[1]"), "messages[0]: expected an object with 'role' and 'content'");
  EXPECT_EQ(err(R"([{"content":"x"}])"), "messages[0].role: missing or not a string");
  EXPECT_EQ(err(R"([{"role":"wizard","content":"x"}])"),
            "messages[0].role: 'wizard' is not a supported role; use system, user, assistant or tool");
  EXPECT_EQ(err(R"([{"role":"user"}])"),
            "messages[0].content: missing (only an assistant message with tool_calls may omit it)");
  EXPECT_EQ(err(R"([{"role":"user","content":5}])"),
            "messages[0].content: expected a string, an array of text parts or null");
  EXPECT_EQ(err(R"([{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}])"),
            "messages[0].content[0].type: 'image_url' is not supported by a text-only model; send text parts");
  EXPECT_EQ(err(R"([{"role":"user","content":null}])"),
            "messages[0].content: null is only allowed for an assistant message with tool_calls");
  auto ok = normalize_messages(
      ordered_json::parse(R"([{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}])"));
  ASSERT_TRUE(ok);
  EXPECT_EQ((*ok)[0]["content"], "a\nb");
}

TEST(ChatTemplate, DeeplyNestedToolsAreRefused) {
  auto t = ChatTemplate::builtin("chatml");
  ASSERT_TRUE(t);
  ChatOptions o;
  o.tools = ordered_json::parse(std::string(1000, '[') + std::string(1000, ']'));
  auto r = t->apply(ordered_json::parse(R"([{"role":"user","content":"x"}])"), o);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.message(), "messages: JSON nested deeper than 64 levels");
}

TEST(ChatTemplate, BuiltinsFollowTheFamilyFormats) {
  const auto msgs = ordered_json::parse(R"([{"role":"system","content":"S"},{"role":"user","content":"Hi"},
      {"role":"assistant","content":"Yo"},{"role":"user","content":"Q"}])");
  ChatOptions o;
  o.bos_token = "<s>";
  o.eos_token = "</s>";
  auto llama3 = ChatTemplate::builtin("llama3");
  ASSERT_TRUE(llama3);
  EXPECT_EQ(*llama3->apply(msgs, o),
            "<s><|start_header_id|>system<|end_header_id|>\n\nS<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n"
            "Hi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nYo<|eot_id|><|start_header_id|>user"
            "<|end_header_id|>\n\nQ<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
  auto chatml = ChatTemplate::builtin("chatml");
  ASSERT_TRUE(chatml);
  EXPECT_EQ(*chatml->apply(msgs, o),
            "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nYo<|im_end|>\n"
            "<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\n");
  auto mistral = ChatTemplate::builtin("mistral");
  ASSERT_TRUE(mistral);
  EXPECT_EQ(*mistral->apply(msgs, o), "<s>[INST] S\n\nHi [/INST]Yo</s>[INST] Q [/INST]");
  auto bad = mistral->apply(ordered_json::parse(R"([{"role":"assistant","content":"x"}])"), o);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.message(), "Conversation roles must alternate user/assistant/user/assistant/...");
  EXPECT_FALSE(ChatTemplate::builtin("vicuna"));
}

}  // namespace
}  // namespace coda
