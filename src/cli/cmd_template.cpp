// `coda template`: render a chat template for a conversation and print the prompt, byte for byte.
#include <cstdio>
#include <fstream>
#include <sstream>

#include "chat/chat_template.h"
#include "cli/commands.h"
#include "core/json_parse.h"
#include "gguf/gguf.h"
#include "tokenizer/vocab.h"

namespace coda::cli {

namespace {

struct TemplateFlags {
  std::string model;
  std::string template_file;
  std::string builtin;
  std::string messages_file;
  std::string tools_file;
  std::vector<std::string> vars;
  bool add_generation_prompt = false;
  std::string bos_token, eos_token;
  bool bos_given = false, eos_given = false;
};

Expected<std::string> read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Error(path + ": cannot open");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

Expected<nlohmann::ordered_json> read_json(const std::string& path) {
  auto text = read_text(path);
  if (!text) return text.error();
  auto j = parse_ordered_json(*text);
  if (j.is_discarded()) return Error(path + ": not valid JSON");
  return j;
}

int run_template(const TemplateFlags& f) {
  const int sources = !f.model.empty() + !f.template_file.empty() + !f.builtin.empty();
  if (sources != 1) return fail("give exactly one of -m MODEL, --template FILE.jinja or --builtin NAME");
  ChatOptions opts;
  opts.add_generation_prompt = f.add_generation_prompt;
  Expected<ChatTemplate> tmpl = Error("");
  if (!f.model.empty()) {
    auto gguf = GgufFile::open(f.model);
    if (!gguf) return fail(gguf.message());
    auto vocab = Vocab::from_gguf(*gguf);
    if (!vocab) return fail(f.model + ": " + vocab.message());
    tmpl = ChatTemplate::for_model(*gguf, *vocab);
    if (vocab->bos() >= 0) opts.bos_token = vocab->piece(vocab->bos());
    if (vocab->eos() >= 0) opts.eos_token = vocab->piece(vocab->eos());
  } else if (!f.template_file.empty()) {
    auto src = read_text(f.template_file);
    if (!src) return fail(src.message());
    tmpl = ChatTemplate::from_source(*src, f.template_file);
  } else {
    tmpl = ChatTemplate::builtin(f.builtin);
  }
  if (!tmpl) return fail(tmpl.message());
  if (f.bos_given) opts.bos_token = f.bos_token;
  if (f.eos_given) opts.eos_token = f.eos_token;

  auto doc = read_json(f.messages_file);
  if (!doc) return fail(doc.message());
  // Either a bare message array or a request-shaped object {"messages": [...], "tools": [...], ...}.
  nlohmann::ordered_json messages = *doc;
  if (doc->is_object()) {
    if (!doc->contains("messages"))
      return fail(f.messages_file + ": expected an array of messages or {\"messages\": [...]}");
    messages = (*doc)["messages"];
    if (doc->contains("tools")) opts.tools = (*doc)["tools"];
    if (doc->contains("chat_template_kwargs") && (*doc)["chat_template_kwargs"].is_object())
      opts.extra = (*doc)["chat_template_kwargs"];
  }
  if (!f.tools_file.empty()) {
    auto tools = read_json(f.tools_file);
    if (!tools) return fail(tools.message());
    opts.tools = *tools;
  }
  for (const auto& kv : f.vars) {
    const size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0)
      return fail("--var " + kv + ": expected NAME=JSON, e.g. enable_thinking=false");
    auto value = parse_ordered_json(kv.substr(eq + 1));
    if (value.is_discarded()) value = kv.substr(eq + 1);  // a bare word is a string
    opts.extra[kv.substr(0, eq)] = value;
  }
  auto prompt = tmpl->apply(messages, opts);
  if (!prompt) return fail(prompt.message());
  std::fwrite(prompt->data(), 1, prompt->size(), stdout);
  std::fflush(stdout);
  return 0;
}

}  // namespace

void add_template(CLI::App& app, std::vector<Command>& out) {
  auto f = std::make_shared<TemplateFlags>();
  CLI::App* sub = app.add_subcommand("template", "Render a chat template for a conversation (prints the prompt only)");
  sub->add_option("-m,--model", f->model,
                  "GGUF model: its tokenizer.chat_template (or the built-in its vocabulary suggests)");
  sub->add_option("--template", f->template_file, "A Jinja chat template file");
  sub->add_option("--builtin", f->builtin, "A built-in template: llama3, chatml or mistral");
  sub->add_option("--messages", f->messages_file,
                  "JSON file: an array of messages or {\"messages\": [...], \"tools\": [...]}")
      ->required();
  sub->add_option("--tools", f->tools_file, "JSON file with the tools array");
  sub->add_option("--var", f->vars, "Extra template variable NAME=JSON (repeatable), e.g. enable_thinking=false");
  sub->add_flag("--add-generation-prompt", f->add_generation_prompt, "End with the assistant turn's header");
  sub->add_option("--bos-token", f->bos_token, "bos_token (default: the model's, or empty)")
      ->each([f](const std::string&) { f->bos_given = true; });
  sub->add_option("--eos-token", f->eos_token, "eos_token (default: the model's, or empty)")
      ->each([f](const std::string&) { f->eos_given = true; });
  out.push_back({sub, [f] { return run_template(*f); }});
}

}  // namespace coda::cli
