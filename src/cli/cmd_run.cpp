// `coda run`: continue a prompt with a model, streamed to stdout (or one JSON result with --json).
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli/cache_flags.h"
#include "cli/commands.h"
#include "cli/llama_compat.h"
#include "cli/perpetual_flags.h"
#include "cli/sampling_flags.h"
#include "core/json_parse.h"
#include "engine/generator.h"
#include "guard/guard.h"
#include "sampling/output_grammar.h"

namespace coda::cli {

namespace {

struct RunFlags {
  std::string model;
  int n_predict = 128;
  int threads = 0;
  int64_t ctx = 0;
  KvType ctk = KvType::F16, ctv = KvType::F16;
  bool json = false;
  GenerationRequest request;
  std::string guard = "observe";  // off, observe, stop, repair
  std::string report_file, trace_file;
  GuardConfig guard_config;
  std::string json_schema, json_schema_file;  // structured output (llama.cpp's -j / -jf)
  bool json_object = false;
  std::string prompt_file;  // llama.cpp's -f
  bool prompt_given = false;
  bool no_display_prompt = false;  // llama.cpp's --no-display-prompt: stdout holds the continuation only
};

// -f FILE: the prompt is the file's bytes, as llama.cpp reads it (a trailing newline included).
Status read_prompt_file(RunFlags& f) {
  if (f.prompt_file.empty()) return Status::Ok();
  if (f.prompt_given) return Error("give the prompt with -p or -f, not both");
  std::ifstream in(f.prompt_file, std::ios::binary);
  if (!in) return Error("-f: cannot read '" + f.prompt_file + "'");
  f.request.prompt.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  if (f.request.prompt.empty()) return Error("-f: '" + f.prompt_file + "' is empty");
  return Status::Ok();
}

// The structured-output flags into the request: at most one of them.
Status set_output_format(RunFlags& f) {
  const int given = !f.json_schema.empty() + !f.json_schema_file.empty() + f.json_object;
  if (given > 1) return Error("give one of --json-schema, --json-schema-file and --json-object");
  if (f.json_object) f.request.sampling.grammar = OutputGrammar::json_object();
  std::string text = f.json_schema, from = "--json-schema";
  if (!f.json_schema_file.empty()) {
    std::ifstream in(f.json_schema_file, std::ios::binary);
    if (!in) return Error("--json-schema-file: cannot read '" + f.json_schema_file + "'");
    text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    from = "--json-schema-file";
  }
  if (text.empty()) return Status::Ok();
  const auto schema = parse_ordered_json(text);
  if (schema.is_discarded()) return Error(from + ": not valid JSON");
  auto g = OutputGrammar::json_schema(schema);
  if (!g) return Error(from + ": " + g.message());
  f.request.sampling.grammar = std::move(*g);
  return Status::Ok();
}

nlohmann::ordered_json result_json(const GenerationResult& r, const Vocab& vocab) {
  nlohmann::ordered_json j;
  j["text"] = r.text;
  j["tokens"] = r.tokens;
  j["finish_reason"] = r.finish_reason;
  if (!r.stop_reason.empty()) j["stop_reason"] = r.stop_reason;
  j["usage"] = {{"prompt_tokens", r.prompt_tokens},
                {"completion_tokens", r.completion_tokens},
                {"total_tokens", r.prompt_tokens + r.completion_tokens}};
  const auto& t = r.timings;
  j["timings"] = {{"prefill_ms", t.prefill_ms},     {"ttft_ms", t.ttft_ms},
                  {"decode_ms", t.decode_ms},       {"sample_ms", t.sample_ms},
                  {"observer_ms", t.observer_ms},   {"ms_per_token", t.ms_per_token},
                  {"tokens_per_s", t.tokens_per_s}, {"prompt_tokens_per_s", t.prompt_tokens_per_s}};
  if (!r.logprobs.empty()) {
    auto& lps = j["logprobs"] = nlohmann::ordered_json::array();
    for (const auto& lp : r.logprobs) {
      nlohmann::ordered_json e{{"token", lp.token}, {"logprob", lp.logprob}};
      auto& top = e["top_logprobs"] = nlohmann::ordered_json::array();
      for (const auto& [id, l] : lp.top) top.push_back({{"token", id}, {"piece", vocab.piece(id)}, {"logprob", l}});
      lps.push_back(std::move(e));
    }
  }
  return j;
}

int run(RunFlags& f) {
  if (Status st = set_output_format(f); !st.ok()) return fail(st.message());  // before loading a model
  if (Status st = read_prompt_file(f); !st.ok()) return fail(st.message());
  GeneratorOptions opts;
  opts.threads = f.threads;
  opts.n_ctx = f.ctx;
  opts.kv_type_k = f.ctk;
  opts.kv_type_v = f.ctv;
  auto loaded = load_generator(f.model.empty() ? default_model_path() : f.model, opts);
  if (!loaded) return fail(loaded.message());
  Generator& gen = *loaded->generator;
  const Vocab& vocab = *loaded->vocab;
  if (f.n_predict >= 0) f.request.max_tokens = f.n_predict;  // -1: the default cap

  if (!f.json && !f.no_display_prompt) {
    std::fputs(f.request.prompt.c_str(), stdout);
    std::fflush(stdout);
  }
  auto on_chunk = [&](const StreamChunk& c) {
    if (!f.json) {
      std::fputs(c.text.c_str(), stdout);
      std::fflush(stdout);
    }
    return true;
  };
  // The guard runs when asked for, or when its report or trace is.
  if (f.guard == "off" && (!f.report_file.empty() || !f.trace_file.empty()))
    return fail("--report and --trace come from the guard; drop --guard off");
  // Perpetual mode steps back through the guard; under --guard off it only observes.
  const bool perpetual_only = f.guard == "off" && f.guard_config.perpetual_min_tokens > 0;
  if (perpetual_only) f.guard = "observe";
  const bool guarded = f.guard != "off";
  std::optional<GuardedResult> guarded_res;
  Expected<GenerationResult> res = Error("");
  if (guarded) {
    if (Status s = set_guard_policy(f.guard, f.guard_config); !s.ok()) return fail("--guard: " + s.message());
    f.guard_config.trace = !f.trace_file.empty();
    auto g = generate_guarded(gen, f.request, f.guard_config, on_chunk);
    if (g) {
      res = g->result;
      guarded_res = std::move(*g);
    } else {
      res = g.error();
    }
  } else {
    res = gen.generate(f.request, on_chunk);
  }
  if (!res) {
    if (!f.json) std::fputs("\n", stdout);
    return fail(res.message());
  }
  nlohmann::ordered_json out = result_json(*res, vocab);
  if (guarded_res) {
    out["repairs"] = res->repairs;
    out["tokens_sampled"] = res->tokens_sampled;
    out["coda"] = guarded_res->report.to_json();
  }
  if (f.json) {
    std::printf("%s\n", out.dump(2).c_str());
  } else {
    std::fputs("\n", stdout);
  }
  std::fflush(stdout);  // the text ends its line before stderr's lines, also when both go to one pipe
  if (!f.report_file.empty()) {
    std::ofstream rep(f.report_file);
    rep << out.dump(2) << "\n";
    if (!rep) return fail(f.report_file + ": cannot write the report");
  }
  if (!f.trace_file.empty() && guarded_res) {
    std::ofstream tr(f.trace_file);
    for (const auto& line : guarded_res->trace) tr << line.dump() << "\n";
    if (!tr) return fail(f.trace_file + ": cannot write the trace");
  }
  if (guarded_res)
    for (const auto& e : guarded_res->report.events)
      std::fprintf(stderr, "coda: guard: %s at token %lld (onset %lld, confidence %.2f) -> %s\n", e.type.c_str(),
                   static_cast<long long>(e.detected_at), static_cast<long long>(e.onset), e.confidence,
                   e.action.c_str());
  const auto& t = res->timings;
  std::fprintf(
      stderr,
      "coda: prompt %d tokens in %.2f ms (%.2f tokens/s) | generation %d tokens, %.2f ms/token (%.2f tokens/s), "
      "sampling %.3f ms/token | finish: %s\n",
      res->prompt_tokens, t.prefill_ms, t.prompt_tokens_per_s, res->completion_tokens, t.ms_per_token, t.tokens_per_s,
      res->completion_tokens > 0 ? t.sample_ms / res->completion_tokens : 0.0, res->finish_reason.c_str());
  return 0;
}

}  // namespace

void add_run(CLI::App& app, std::vector<Command>& out) {
  auto f = std::make_shared<RunFlags>();
  f->request.prompt = "In the beginning God";
  f->request.sampling.temperature = 0.0f;  // greedy unless asked
  CLI::App* sub = app.add_subcommand("run", "Continue a prompt with a model (greedy unless --temp is given)");
  sub->add_option("-m,--model", f->model, "GGUF model file (default: the bundled model)");
  sub->add_option("-p,--prompt", f->request.prompt, "Prompt text")
      ->capture_default_str()
      ->each([f](const std::string&) { f->prompt_given = true; });
  sub->add_option("-f,--file", f->prompt_file, "Read the prompt from a file");
  sub->add_flag("--no-display-prompt", f->no_display_prompt,
                "Print only the continuation, not the prompt before it (llama-cli's flag, for scripts)");
  sub->add_flag("--no-conversation")
      ->description(
          "Accepted for llama-cli command lines (-no-cnv); coda run always continues the prompt as it is "
          "(coda chat is the conversation)");
  sub->add_option("-n,--n-predict", f->n_predict,
                  "Tokens to generate (-1: the default cap of 4096, within the context)")
      ->capture_default_str()
      ->check(CLI::Range(-1, 1 << 24));
  sub->add_option("-t,--threads", f->threads, kThreadsHelp)->check(CLI::Range(1, 256));
  sub->add_option("-c,--ctx-size", f->ctx, "Context size (default and 0, as in llama.cpp: the model's trained context)")
      ->check(CLI::Range(0, 1 << 24));
  add_cache_type_flags(sub, f->ctk, f->ctv);
  add_llama_device_flags(sub);
  sub->add_option("--logprobs", f->request.logprobs, "With --json: log-probabilities and this many top alternatives");
  sub->add_flag("--json", f->json, "Print one JSON result (text, tokens, finish_reason, usage, timings)");
  add_sampling_flags(sub, f->request);
  sub->add_option("-j,--json-schema", f->json_schema,
                  "Hold the output to this JSON Schema (inline JSON; docs/sampling.md lists what is enforced)");
  sub->add_option("--json-schema-file", f->json_schema_file, "Hold the output to the JSON Schema in this file");
  sub->add_flag("--json-object", f->json_object, "Hold the output to a JSON object (OpenAI's json_object mode)");
  sub->add_option("--guard", f->guard,
                  "Degeneration guard: observe, stop, repair or off, optionally for some detectors "
                  "(stop:loop,flooding; docs/guard.md)")
      ->capture_default_str();
  sub->add_option("--report", f->report_file, "Write the result with the guard's quality report (JSON)");
  sub->add_option("--trace", f->trace_file, "Write the guard's per-token signals (JSON Lines)");
  sub->add_option("--guard-max-repairs", f->guard_config.max_repairs, "Repairs before the guard stops")
      ->capture_default_str();
  sub->add_option("--guard-runaway", f->guard_config.runaway_tokens, "Runaway length in tokens (0: off)")
      ->capture_default_str();
  add_perpetual_flags(sub, &f->guard_config);
  out.push_back({sub, [f] { return run(*f); }});
}

}  // namespace coda::cli
