// `coda serve`: the OpenAI-compatible server on a model (loopback by default).
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "chat/jinja.h"
#include "chat/reasoning.h"
#include "chat/tool_calls.h"
#include "cli/cache_flags.h"
#include "cli/commands.h"
#include "cli/http_flags.h"
#include "cli/llama_compat.h"
#include "cli/reasoning_flags.h"
#include "engine/generator.h"
#include "kernels/kernels.h"
#include "server/embeddings_api.h"
#include "server/server.h"
#include "server/shutdown.h"

namespace coda::cli {

namespace {

struct ServeFlags {
  std::string model;
  int threads = 0;
  int64_t ctx = 0;
  KvType ctk = KvType::F16, ctv = KvType::F16;
  int default_max_tokens = 4096;
  double kv_budget_gib = 0;
  bool no_prefix_cache = false;
  int64_t prefix_cache_tokens = -1;          // -1: a quarter of the KV budget
  // Exact loops, floods, symbol garbage and script mixing stop: false positives measured below 1% on
  // every legitimate kind (docs/guard-eval); the rest is observed (docs/guard.md).
  std::string guard = "stop:loop,flooding,garbage,script_mixing";
  std::string chat_template;                 // "": the model's; a built-in name, a file or Jinja source
  std::string tool_parser = "auto";          // the chat template's tool-call format
  std::string reasoning_parser = "auto";     // the chat template's <think> block
  ReasoningFlags reasoning;
  bool enable_auto_tool_choice = false;  // vLLM's flag; coda parses whenever the format is known
  std::string pooling;                   // "": the GGUF's {arch}.pooling_type, else mean
  ApiKeyFlags api_keys;
  ServerOptions server;
};

int serve(ServeFlags& f) {
  const std::string path = f.model.empty() ? default_model_path() : f.model;
  GeneratorOptions opts;
  opts.threads = f.threads;
  opts.n_ctx = f.ctx;
  opts.default_max_tokens = f.default_max_tokens;
  opts.kv_type_k = f.ctk;
  opts.kv_type_v = f.ctv;
  if (Status s = set_guard_policy(f.guard, f.server.defaults.guard); !s.ok()) return fail("--guard: " + s.message());
  if (Status s = apply_reasoning_flags(f.reasoning, f.server.defaults.guard.thinking, f.server.defaults.effort_budgets);
      !s.ok())
    return fail(s.message());
  f.server.defaults.reasoning_field = f.reasoning.field;
  auto keys = resolve_api_keys(f.api_keys);
  if (!keys) return fail(keys.message());
  f.server.api_keys = std::move(*keys);
  const auto named_parser = tool_call_format_named(f.tool_parser);
  if (f.tool_parser != "auto" && !named_parser)
    return fail(
        "--tool-call-parser: '" + f.tool_parser +
        "' is not a format coda reads; use auto (the chat template's), hermes, llama3_json, mistral, granite or "
        "none");
  if (!f.chat_template.empty()) {
    // vLLM's --chat-template takes a file or the template itself; llama.cpp's a built-in name.
    std::ifstream file(f.chat_template);
    if (file && f.chat_template.find('{') == std::string::npos) {
      std::stringstream ss;
      ss << file.rdbuf();
      opts.chat_template = ss.str();
      if (opts.chat_template.empty()) return fail("--chat-template: " + f.chat_template + " is empty");
    } else {
      opts.chat_template = f.chat_template;
    }
  }
  if (f.reasoning_parser != "auto" && f.reasoning_parser != "deepseek_r1" && f.reasoning_parser != "qwen3" &&
      f.reasoning_parser != "none")
    return fail("--reasoning-parser: '" + f.reasoning_parser +
                "' is not one coda knows; use auto (the chat template's <think> block), deepseek_r1, qwen3 or none");
  f.server.model_path = path;
  auto loaded = load_generator(path, opts);
  if (!loaded) return fail(loaded.message());
  if (!f.pooling.empty()) {
    auto p = parse_pooling(f.pooling);
    if (!p) return fail("--pooling: " + p.message());
    f.server.pooling = *p;
  } else {
    f.server.pooling = default_pooling(*loaded->model);
  }
  const ChatTemplate* tmpl = loaded->generator->chat_template();
  f.server.defaults.tool_parser =
      named_parser ? *named_parser : (tmpl ? tool_call_format_of_template(tmpl->source()) : ToolCallFormat::None);
  f.server.defaults.reasoning = f.reasoning_parser == "auto" ? (tmpl != nullptr && template_thinks(tmpl->source()))
                                                             : f.reasoning_parser != "none";
  if (tmpl != nullptr) {
    // A template that cannot render one short turn within its limits loops or is hostile (it came
    // with the GGUF file): every chat request would fail, so say so now. A probe that the
    // template refuses for other reasons (it wants a system turn first) is no verdict.
    ChatOptions probe;
    auto p = tmpl->apply(nlohmann::ordered_json::array({{{"role", "user"}, {"content", "Hi"}}}), probe);
    if (!p && p.message().find(jinja::kOverBudget) != std::string::npos)
      return fail("the chat template fails on a one-message conversation: " + p.message() +
                  ". Start with --chat-template FILE, or a built-in name (llama3, chatml, mistral).");
    // Does the generation prompt open the block itself (DeepSeek-R1's ends with "<think>\n")?
    if (p && f.server.defaults.reasoning) {
      std::string_view t = *p;
      while (!t.empty() && (t.back() == '\n' || t.back() == ' ')) t.remove_suffix(1);
      f.server.defaults.reasoning_opened = t.size() >= 7 && t.substr(t.size() - 7) == "<think>";
    }
  }
  // The KV budget: the context must fit at least one sequence.
  const ModelConfig& cfg = loaded->model->config();
  const int64_t n_ctx = loaded->generator->n_ctx();
  const double per_token = KvCache::bytes_per_token(cfg);
  const double physical = static_cast<double>(::sysconf(_SC_PHYS_PAGES)) * static_cast<double>(::sysconf(_SC_PAGESIZE));
  const double budget = f.kv_budget_gib > 0 ? f.kv_budget_gib * (1 << 30) : physical / 2;
  const auto capacity = static_cast<int64_t>(budget / per_token);
  if (capacity < n_ctx)
    return fail("a context of " + std::to_string(n_ctx) + " tokens needs " +
                std::to_string(per_token * static_cast<double>(n_ctx) / (1 << 30)).substr(0, 6) +
                " GiB of KV cache, more than the budget of " + std::to_string(budget / (1 << 30)).substr(0, 6) +
                " GiB; the largest context that fits is " + std::to_string(capacity) + " tokens: start with -c " +
                std::to_string(capacity) + " or raise --kv-budget");
  if (f.server.defaults.model_id.empty()) f.server.defaults.model_id = "coda";
  tune_allocator_for_server();
  f.server.kv_budget_tokens = capacity;
  f.server.prefix_cache_tokens =
      f.no_prefix_cache ? 0 : (f.prefix_cache_tokens >= 0 ? std::min(f.prefix_cache_tokens, capacity) : capacity / 4);
  coda::Server server(*loaded->generator, f.server);
  auto port = server.bind();
  if (!port) return fail(port.message());
  std::fprintf(stderr,
               "coda serve: %s, context %lld tokens; KV cache budget %.2f GiB = %lld tokens, maximum concurrency at "
               "full context %.2fx; batches of up to %zu sequences; guard %s\n",
               path.c_str(), static_cast<long long>(n_ctx), budget / (1 << 30), static_cast<long long>(capacity),
               static_cast<double>(capacity) / static_cast<double>(n_ctx), f.server.max_batch, f.guard.c_str());
  std::fprintf(stderr, "coda serve: KV cache %.1f KiB per token of context (keys %s, values %s); prefix cache %s\n",
               per_token / 1024, kv_type_name(cfg.kv_type_k), kv_type_name(cfg.kv_type_v),
               f.server.prefix_cache_tokens > 0 ? ("up to " + std::to_string(f.server.prefix_cache_tokens) +
                                                   " tokens (evicted first when requests need the room)")
                                                      .c_str()
                                                : "off");
  std::fprintf(stderr, "coda serve: tool calls with tool_choice auto: %s\n",
               f.server.defaults.tool_parser == ToolCallFormat::None
                   ? "returned as text (no known format in the chat template; see --tool-call-parser)"
                   : (std::string(tool_call_format_name(f.server.defaults.tool_parser)) +
                      (named_parser ? " (--tool-call-parser)" : " format, from the chat template"))
                         .c_str());
  if (f.server.defaults.reasoning)
    std::fprintf(stderr, "coda serve: the <think> block goes out as %s%s; a loop in it %s%s\n",
                 f.server.defaults.reasoning_field.c_str(),
                 f.server.defaults.reasoning_opened ? " (the chat template opens it: replies start inside)" : "",
                 f.reasoning.loop == "answer" ? "is closed and the model answers" : "is left to the guard policy",
                 f.reasoning.budget >= 0 ? (", budget " + std::to_string(f.reasoning.budget) + " tokens").c_str() : "");
  // The thread count, and why: the one knob that decides speed most on a shared host.
  std::fprintf(stderr,
               "coda serve: %d compute threads (%s); `coda bench-model --threads-sweep` shows the curve on this "
               "machine\n",
               loaded->generator->pool().size(),
               f.threads > 0 ? "-t" : (loaded->generator->thread_choice().reason + "; -t to change").c_str());
  if (const RepackStats& rs = loaded->model->repack_stats(); rs.matrices > 0)
    std::fprintf(stderr, "coda serve: %d weight matrices (%.1f MiB) repacked for the %s GEMM kernels in %.2f s\n",
                 rs.matrices, static_cast<double>(rs.bytes) / (1 << 20), kernels().name, rs.seconds);
  if (const RepackStats& rs = loaded->model->repack_stats(); rs.f16_as_bf16 > 0)
    std::fprintf(stderr,
                 "coda serve: %d F16 matrices hold bfloat16 values and multiply as BF16 (CODA_BF16_GEMM=float keeps "
                 "the float tile)\n",
                 rs.f16_as_bf16);
  print_access("coda serve", f.server.host, f.server.api_keys.size());
  std::printf("coda serve: listening on %s://%s:%d\n", f.server.tls.enabled() ? "https" : "http", f.server.host.c_str(),
              *port);
  std::fflush(stdout);
  {
    ShutdownWatch watch(
        "coda serve", f.server.shutdown_timeout_s, [&server](double t) { return server.drain(t); },
        "the requests left were answered 503 (retry)");
    server.serve();
  }
  return 0;
}

}  // namespace

void add_serve(CLI::App& app, std::vector<Command>& out) {
  auto f = std::make_shared<ServeFlags>();
  CLI::App* sub = app.add_subcommand("serve", "OpenAI-compatible server (loopback by default)");
  auto* model_flag = sub->add_option("-m,--model", f->model, "GGUF model file (default: the bundled model)");
  // `vllm serve MODEL` names the model as its first argument; coda serve takes that form too.
  sub->add_option("model", f->model, "The GGUF model file as an argument, as `vllm serve MODEL` takes it")
      ->excludes(model_flag);
  sub->add_option("--host", f->server.host, "Address to listen on")->capture_default_str();
  sub->add_option("--port", f->server.port, "Port (0: any free port, printed on stdout)")->capture_default_str();
  add_api_key_flags(sub, f->api_keys);
  sub->add_option("--ssl-certfile,--ssl-cert-file", f->server.tls.cert,
                  "Serve https with this PEM certificate (chain); with --ssl-keyfile")
      ->check(CLI::ExistingFile);
  sub->add_option("--ssl-keyfile,--ssl-key-file", f->server.tls.key, "The PEM private key of --ssl-certfile")
      ->check(CLI::ExistingFile);
  sub->add_option("-a,--served-model-name,--alias", f->server.defaults.model_id,
                  "The model id clients use (-a, --alias are llama-server's names)")
      ->capture_default_str();
  sub->add_option("--max-queue", f->server.max_queue, "Waiting requests before 429")->capture_default_str();
  sub->add_option("--max-num-seqs,--parallel", f->server.max_batch,
                  "Sequences generated together (continuous batching; --parallel is llama-server's name)")
      ->capture_default_str()
      ->check(CLI::Range(1, 256));
  sub->add_option("--max-body", f->server.max_body_bytes, "Largest request body in bytes (413 beyond)")
      ->capture_default_str();
  sub->add_option("--read-timeout,--timeout", f->server.read_timeout_s,
                  "Seconds a client may take to send its request (408 for a body cut short)")
      ->capture_default_str()
      ->check(CLI::Range(1, 3600));
  sub->add_option("--max-connections", f->server.http_threads,
                  "Connections served at once: the HTTP worker threads (default: --max-queue + --max-num-seqs + 8)")
      ->check(CLI::Range(2, 4096));
  add_request_limit_flags(sub, f->server.limits);
  sub->add_option("-t,--threads", f->threads, kThreadsHelp)->check(CLI::Range(1, 256));
  sub->add_option(
         "-c,--ctx-size,--max-model-len", f->ctx,
         "Context size (default and 0, as in llama.cpp: the model's trained context; --max-model-len is vLLM's name)")
      ->check(CLI::Range(0, 1 << 24));
  add_cache_type_flags(sub, f->ctk, f->ctv);
  add_llama_device_flags(sub);
  sub->add_option("--default-max-tokens", f->default_max_tokens, "max_tokens for requests that omit it")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 24));
  // llama-server's -n: -1 (its default, "until the end") keeps coda's bounded default, since a
  // generation that never ends is what coda exists to prevent.
  sub->add_option_function<int64_t>(
         "-n,--n-predict,--predict",
         [f](int64_t n) {
           if (n == 0) throw CLI::ValidationError("--n-predict", "0 tokens: give a count, or -1 for coda's default");
           if (n > 0) f->default_max_tokens = static_cast<int>(n);
         },
         "llama-server's name for --default-max-tokens; -1 keeps coda's default")
      ->type_name("N")
      ->check(CLI::Range(int64_t{-1}, int64_t{1} << 24));
  sub->add_flag("--no-prefix-cache,--no-enable-prefix-caching", f->no_prefix_cache,
                "Do not reuse the KV cache of earlier requests that share a prompt prefix");
  sub->add_flag("--enable-prefix-caching")
      ->description("Accepted for vLLM command lines; the prefix cache is on by default");
  sub->add_flag("--metrics")->description("Accepted for llama-server command lines; GET /metrics is always served");
  sub->add_flag("--cont-batching")
      ->description("Accepted for llama-server command lines; batching is always continuous (--max-num-seqs)");
  sub->add_flag("--jinja")->description(
      "Accepted for llama-server command lines; coda always renders the chat template as Jinja");
  sub->add_option("--pooling", f->pooling,
                  "How /v1/embeddings pools the final hidden states: mean, cls or last (default: the GGUF's "
                  "pooling_type, else mean)");
  sub->add_option_function<double>(
         "--responses-store",
         [f](double mb) { f->server.responses_store_bytes = static_cast<size_t>(mb * 1024 * 1024); },
         "Memory in MiB for the conversations /v1/responses keeps for previous_response_id, least recently used "
         "dropped first (default 64; 0: keep none and refuse previous_response_id)")
      ->check(CLI::Range(0.0, 1048576.0));
  sub->add_flag("--embedding,--embeddings")
      ->description("Accepted for llama-server command lines; /v1/embeddings is always served");
  sub->add_option("--prefix-cache-tokens", f->prefix_cache_tokens,
                  "Positions the prefix cache may hold, within the KV budget (default: a quarter of it)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
  sub->add_option("--kv-budget", f->kv_budget_gib, "KV cache budget in GiB (default: half the memory)");
  sub->add_option("--guard", f->guard,
                  "Default guard policy: observe, stop or repair, optionally for some detectors (stop:loop,flooding; "
                  "docs/guard.md)")
      ->capture_default_str();
  sub->add_option("--chat-template", f->chat_template,
                  "Chat template instead of the model's: a built-in name (llama3, chatml, mistral), a Jinja file or "
                  "Jinja source");
  sub->add_option("--tool-call-parser", f->tool_parser,
                  "How the model writes tool calls, answered as OpenAI tool_calls when a request sends tools with "
                  "tool_choice auto: auto (the chat template's format), hermes, llama3_json, mistral, granite or none "
                  "(plain text)")
      ->capture_default_str();
  sub->add_option("--reasoning-parser", f->reasoning_parser,
                  "Send a reasoning model's <think> block apart (in --reasoning-field) from the content: auto (when "
                  "the chat template knows </think>), deepseek_r1, qwen3 or none")
      ->capture_default_str();
  add_reasoning_flags(sub, &f->reasoning, true);
  sub->add_flag("--enable-auto-tool-choice", f->enable_auto_tool_choice,
                "Accepted for vLLM command lines; tool calls are read whenever --tool-call-parser knows the format");
  sub->add_flag_callback(
      "--no-slots", [f] { f->server.slots_api = false; },
      "Do not serve GET /slots (llama-server's per-slot monitoring; behind --api-key, never the prompt's text)");
  sub->add_flag("--slots")->description("Accepted for llama-server command lines; GET /slots is served by default");
  sub->add_option("--shutdown-timeout", f->server.shutdown_timeout_s,
                  "On SIGTERM or SIGINT: seconds the requests in flight get to finish before they are answered 503 "
                  "(new ones get 503 at once; a second signal exits at once)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 86400.0));
  sub->add_flag("--metrics-auth", f->server.metrics_auth,
                "Put GET /metrics behind --api-key too (open by default, as vLLM's)");
  sub->add_flag("--enable-admin-api", f->server.admin_api,
                "Serve POST /admin/pause and /admin/resume (hold the scheduler between steps; behind --api-key)");
  out.push_back({sub, [f] { return serve(*f); }});
}

}  // namespace coda::cli
