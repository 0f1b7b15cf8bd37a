// `coda synth`: write a random-weight model of a real architecture and shape.
#include <cstdio>

#include "cli/commands.h"
#include "model/synth.h"

namespace coda::cli {

void add_synth(CLI::App& app, std::vector<Command>& out) {
  struct Flags {
    SynthOptions opt;
    std::string type = "Q8_0";
    int threads = 0;
  };
  auto f = std::make_shared<Flags>();
  std::string shapes;
  for (const auto& s : synth_shapes()) shapes += (shapes.empty() ? "" : ", ") + s.name;
  CLI::App* sub = app.add_subcommand("synth", "Write a random-weight GGUF model (tests, benchmarks)");
  sub->add_option("--shape", f->opt.shape, "Shape: " + shapes)->capture_default_str();
  sub->add_option("--type", f->type, "Weight type: " + supported_dtypes_list())->capture_default_str();
  sub->add_option("--vocab-from", f->opt.vocab_from,
                  "Take the vocabulary from a GGUF file or an HF tokenizer.json (default: placeholder vocabulary)");
  sub->add_option("--seed", f->opt.seed, "Random seed")->capture_default_str();
  sub->add_option("--layers", f->opt.n_layers, "Override the number of layers")->check(CLI::Range(1, 1024));
  sub->add_option("--ctx", f->opt.n_ctx, "Override the context length in the metadata")->check(CLI::Range(1, 1 << 24));
  sub->add_option("-t,--threads", f->threads, "Threads")->check(CLI::Range(1, 256));
  sub->add_option("-o,--output", f->opt.out, "Output GGUF path")->required();
  out.push_back({sub, [f] {
                   if (!dtype_from_name(f->type, &f->opt.type))
                     return fail("unknown weight type '" + f->type + "'; supported: " + supported_dtypes_list());
                   ThreadPool pool(f->threads > 0 ? f->threads : default_threads());
                   auto r = write_synthetic_model(f->opt, pool);
                   if (!r) return fail(r.message());
                   std::printf("%s\n", r->c_str());
                   return 0;
                 }});
}

}  // namespace coda::cli
