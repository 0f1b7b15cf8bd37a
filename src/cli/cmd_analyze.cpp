// `coda analyze`: block-wise EOS / information / entropy analysis of generations (or of traces
// written by `coda run --trace`), as CSV, JSON and an HTML report with SVG charts.
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "cli/commands.h"
#include "engine/generator.h"
#include "guard/guard.h"
#include "lab/analyze.h"

namespace coda::cli {

namespace {

struct AnalyzeFlags {
  std::string model;
  std::vector<std::string> prompts;
  std::string prompts_file;
  std::vector<std::string> traces;
  int n_predict = 1024;
  int block = 32;
  int top = 5;
  float temperature = 0.0f;
  uint64_t seed = 1;
  bool ignore_eos = false;
  std::string align = "start";
  int threads = 0;
  std::string out;
};

bool write_file(const std::string& path, const std::string& text) {
  std::ofstream o(path, std::ios::binary);
  o << text;
  return static_cast<bool>(o);
}

int analyze(AnalyzeFlags& f) {
  if (f.block < 1) return fail("--block: " + std::to_string(f.block) + " is out of range; allowed >= 1");
  if (!f.prompts_file.empty()) {
    std::ifstream in(f.prompts_file);
    if (!in) return fail(f.prompts_file + ": cannot open");
    std::string line;
    while (std::getline(in, line))
      if (!line.empty()) f.prompts.push_back(line);
  }
  if (f.prompts.empty() == f.traces.empty())
    return fail("give prompts to generate from (-p, --prompts FILE) or traces to read (--trace), not both");
  std::vector<std::vector<TraceStep>> traces;
  for (const auto& path : f.traces) {
    auto t = read_trace(path);
    if (!t) return fail(t.message());
    traces.push_back(std::move(*t));
  }
  if (!f.prompts.empty()) {
    GeneratorOptions opts;
    opts.threads = f.threads;
    auto loaded = load_generator(f.model.empty() ? default_model_path() : f.model, opts);
    if (!loaded) return fail(loaded.message());
    GuardConfig cfg;
    cfg.trace = true;
    cfg.runaway_tokens = 0;
    for (size_t i = 0; i < f.prompts.size(); ++i) {
      GenerationRequest r;
      r.prompt = f.prompts[i];
      r.max_tokens = f.n_predict;
      r.sampling.temperature = f.temperature;
      r.sampling.seed = f.seed + i;
      r.sampling.ignore_eos = f.ignore_eos;
      r.logprobs = std::clamp(f.top, 0, 20);
      auto res = generate_guarded(*loaded->generator, r, cfg);
      if (!res) return fail("prompt " + std::to_string(i + 1) + ": " + res.message());
      if (f.align == "eos" && res->result.finish_reason != "stop") {
        // Aligned on the EOS, a generation cut at -n has no EOS to align: left out, and said.
        std::fprintf(stderr, "coda analyze: %zu/%zu: %d tokens, %s: no EOS, left out of the EOS-aligned blocks\n", i + 1,
                     f.prompts.size(), res->result.completion_tokens, res->result.finish_reason.c_str());
        continue;
      }
      std::vector<TraceStep> steps = trace_from_json(res->trace);
      for (size_t k = 0; k < steps.size() && k < res->result.logprobs.size(); ++k)
        for (const auto& [id, lp] : res->result.logprobs[k].top)
          steps[k].top.emplace_back(loaded->vocab->piece(id), lp);
      traces.push_back(std::move(steps));
      std::fprintf(stderr, "coda analyze: %zu/%zu: %d tokens, %s\n", i + 1, f.prompts.size(),
                   res->result.completion_tokens, res->result.finish_reason.c_str());
    }
  }
  if (traces.empty()) return fail("no generation ended by EOS within -n " + std::to_string(f.n_predict) +
                                   " tokens, so there is nothing to align on: raise -n or use --align start");
  const Analysis a = analyze_traces(traces, f.block, f.top, f.align == "eos");
  std::error_code ec;
  std::filesystem::create_directories(f.out, ec);
  if (ec) return fail(f.out + ": " + ec.message());
  if (!write_file(f.out + "/blocks.csv", a.to_csv()) || !write_file(f.out + "/analysis.json", a.to_json().dump(2)) ||
      !write_file(f.out + "/report.html", a.to_html("coda analyze")))
    return fail(f.out + ": cannot write the results");
  std::printf(
      "%zu generations, %zu blocks of %d tokens, %zu steps with EOS in the top %d -> %s/{blocks.csv,"
      "analysis.json,report.html}\n",
      a.sequences, a.blocks.size(), a.block_size, a.eos_contexts.size(), f.top, f.out.c_str());
  return 0;
}

}  // namespace

void add_analyze(CLI::App& app, std::vector<Command>& out) {
  auto f = std::make_shared<AnalyzeFlags>();
  CLI::App* sub = app.add_subcommand("analyze", "Block-wise EOS, information and entropy analysis of generations");
  sub->add_option("-m,--model", f->model, "GGUF model file (default: the bundled model)");
  sub->add_option("-p,--prompt", f->prompts, "A prompt to generate from (repeatable)");
  sub->add_option("--prompts", f->prompts_file, "A file with one prompt per line");
  sub->add_option("--trace", f->traces, "A trace from `coda run --trace` to analyze instead (repeatable)");
  sub->add_option("-n,--n-predict", f->n_predict, "Tokens per generation")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  sub->add_option("--block", f->block, "Block size in tokens")->capture_default_str();
  sub->add_option("--top", f->top, "Top alternatives recorded per step; EOS within them is reported")
      ->capture_default_str();
  sub->add_option("--temp", f->temperature, "Temperature")->capture_default_str();
  sub->add_option("-s,--seed", f->seed, "Seed of the first generation (then +1 each)")->capture_default_str();
  sub->add_flag("--ignore-eos", f->ignore_eos, "Generate past EOS (perpetual generation)");
  sub->add_option("--align", f->align,
                  "Count blocks from each generation's start, or back from its EOS (the perpetual-text study's figure; "
                  "generations without an EOS are left out, and a trace is aligned on its last step)")
      ->capture_default_str()
      ->check(CLI::IsMember({"start", "eos"}));
  sub->add_option("-t,--threads", f->threads, kThreadsHelp)->check(CLI::Range(1, 256));
  sub->add_option("-o,--out", f->out, "Output folder")->required();
  out.push_back({sub, [f] { return analyze(*f); }});
}

}  // namespace coda::cli
