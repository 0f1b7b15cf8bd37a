// `coda chat`: an interactive conversation through the model's chat template. Reads one user
// message per line from stdin (a terminal or a pipe); /reset starts over, /exit or end of input ends.
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/cache_flags.h"
#include "cli/commands.h"
#include "cli/llama_compat.h"
#include "cli/perpetual_flags.h"
#include "cli/sampling_flags.h"
#include "engine/generator.h"
#include "guard/guard.h"

namespace coda::cli {

namespace {

struct ChatFlags {
  std::string model;
  std::string system;
  std::string chat_template;
  int threads = 0;
  int64_t ctx = 0;
  KvType ctk = KvType::F16, ctv = KvType::F16;
  int n_predict = -1;
  bool show_prompt = false;
  std::string guard = "observe";
  GuardConfig guard_config;  // perpetual mode's settings (the policy comes from --guard)
  GenerationRequest request;
};

int chat(ChatFlags& f) {
  const std::string path = f.model.empty() ? default_model_path() : f.model;
  GeneratorOptions opts;
  opts.threads = f.threads;
  opts.n_ctx = f.ctx;
  opts.chat_template = f.chat_template;
  opts.kv_type_k = f.ctk;
  opts.kv_type_v = f.ctv;
  auto loaded = load_generator(path, opts);
  if (!loaded) return fail(loaded.message());
  Generator& gen = *loaded->generator;
  if (f.n_predict > 0) f.request.max_tokens = f.n_predict;

  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  auto reset = [&] {
    messages = nlohmann::ordered_json::array();
    if (!f.system.empty()) messages.push_back({{"role", "system"}, {"content", f.system}});
  };
  reset();
  const bool tty = isatty(fileno(stdin));
  std::fprintf(stderr, "coda chat: %s, template %s. /reset starts over, /exit (or end of input) ends.\n", path.c_str(),
               gen.chat_template()->name().c_str());
  std::string line;
  while (true) {
    if (tty) {
      std::fputs("> ", stdout);
      std::fflush(stdout);
    }
    if (!std::getline(std::cin, line)) break;
    if (line == "/exit" || line == "/quit") break;
    if (line == "/reset") {
      reset();
      std::fputs("(conversation cleared)\n", stdout);
      continue;
    }
    if (line.empty()) continue;
    messages.push_back({{"role", "user"}, {"content", line}});
    GenerationRequest r = f.request;
    r.messages = messages;
    if (f.show_prompt) {
      auto p = gen.prepare(r);
      if (p) std::fprintf(stderr, "[prompt: %zu tokens]\n%s\n", p->tokens.size(), p->text.c_str());
    }
    GuardConfig cfg = f.guard_config;
    if (Status s = set_guard_policy(f.guard, cfg); !s.ok()) return fail("--guard: " + s.message());
    auto res = generate_guarded(gen, r, cfg, [](const StreamChunk& c) {
      std::fputs(c.text.c_str(), stdout);
      std::fflush(stdout);
      return true;
    });
    std::fputs("\n", stdout);
    if (!res) {
      messages.erase(messages.end() - 1);  // the turn failed: forget it, keep the conversation
      std::fprintf(stderr, "coda: error: %s\n", res.message().c_str());
      continue;
    }
    messages.push_back({{"role", "assistant"}, {"content", res->result.text}});
    for (const auto& e : res->report.events)
      std::fprintf(stderr, "[guard: %s at token %lld -> %s]\n", e.type.c_str(), static_cast<long long>(e.detected_at),
                   e.action.c_str());
    if (res->result.finish_reason != "stop")
      std::fprintf(stderr, "[finish: %s after %d tokens]\n", res->result.finish_reason.c_str(),
                   res->result.completion_tokens);
  }
  return 0;
}

}  // namespace

void add_chat(CLI::App& app, std::vector<Command>& out) {
  auto f = std::make_shared<ChatFlags>();
  f->request.sampling.temperature = 0.8f;
  CLI::App* sub = app.add_subcommand("chat", "Chat with a model through its chat template (one message per line)");
  sub->add_option("-m,--model", f->model, "GGUF model file (default: the bundled model)");
  sub->add_option("--system", f->system, "System message");
  sub->add_option("--chat-template", f->chat_template,
                  "Built-in template (llama3, chatml, mistral) or Jinja source instead of the model's");
  sub->add_option("-n,--n-predict", f->n_predict, "Most tokens per reply (-1: the default cap of 4096)")
      ->capture_default_str();
  sub->add_option("-t,--threads", f->threads, kThreadsHelp)->check(CLI::Range(1, 256));
  sub->add_option("-c,--ctx-size", f->ctx, "Context size (default and 0, as in llama.cpp: the model's trained context)")
      ->check(CLI::Range(0, 1 << 24));
  add_cache_type_flags(sub, f->ctk, f->ctv);
  add_llama_device_flags(sub);
  sub->add_flag("--show-prompt", f->show_prompt, "Print each rendered prompt to stderr");
  add_perpetual_flags(sub, &f->guard_config);
  sub->add_option("--guard", f->guard,
                  "Degeneration guard: observe, stop or repair, optionally for some detectors (stop:loop,flooding)")
      ->capture_default_str();
  add_sampling_flags(sub, f->request);
  out.push_back({sub, [f] { return chat(*f); }});
}

}  // namespace coda::cli
