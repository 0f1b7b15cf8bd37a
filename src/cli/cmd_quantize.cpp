// `coda quantize`: a model's weight matrices in another type (model/quantize_model.h says how).
#include <cstdio>

#include "cli/commands.h"
#include "model/quantize_model.h"

namespace coda::cli {

void add_quantize(CLI::App& app, std::vector<Command>& out) {
  struct Flags {
    std::string in, out, type;
    int threads = 0;
  };
  auto f = std::make_shared<Flags>();
  CLI::App* sub = app.add_subcommand(
      "quantize", "Write a model with its weight matrices in another type (Q8_0, Q4_0, F16, ...; plain rounding)");
  sub->add_option("input", f->in, "GGUF model file")->required();
  sub->add_option("output", f->out, "The new GGUF file")->required();
  sub->add_option("type", f->type, "Target type: " + supported_dtypes_list())->required();
  sub->add_option("-t,--threads", f->threads, "Threads (default: all cores)")->check(CLI::Range(1, 256));
  out.push_back({sub, [f] {
                   DType t;
                   if (!dtype_from_name(f->type, &t))
                     return fail("unknown type '" + f->type + "'; supported: " + supported_dtypes_list());
                   ThreadPool pool(f->threads > 0 ? f->threads : default_threads());
                   auto r = quantize_model_file(f->in, f->out, t, pool);
                   if (!r) return fail(r.message());
                   std::printf("%s: %lld matrices to %s, %lld tensors copied; %.2f MB -> %.2f MB\n", f->out.c_str(),
                               static_cast<long long>(r->converted), dtype_name(t), static_cast<long long>(r->copied),
                               static_cast<double>(r->bytes_in) / 1e6, static_cast<double>(r->bytes_out) / 1e6);
                   return 0;
                 }});
}

}  // namespace coda::cli
