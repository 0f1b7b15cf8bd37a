// `coda embed`: embeddings of texts in-process, as llama.cpp's llama-embedding prints them: the
// same vectors /v1/embeddings answers (the final hidden states after the output norm, pooled and
// L2-normalised), one line of numbers per text or OpenAI's JSON, and with several texts their
// cosine similarities on stderr.
#include <cstdio>
#include <fstream>

#include "cli/cache_flags.h"
#include "cli/commands.h"
#include "engine/generator.h"
#include "server/embeddings_api.h"

namespace coda::cli {

namespace {

struct EmbedFlags {
  std::string model;
  std::vector<std::string> prompts;
  std::string file;
  std::string pooling;
  int threads = 0;
  int64_t ctx = 0;
  KvType ctk = KvType::F16, ctv = KvType::F16;
  bool json = false;
};

int embed(const EmbedFlags& f) {
  std::vector<std::string> texts = f.prompts;
  if (!f.file.empty()) {  // one text per line, as llama-embedding splits its prompt
    std::ifstream in(f.file);
    if (!in) return fail(f.file + ": cannot open");
    for (std::string line; std::getline(in, line);)
      if (!line.empty()) texts.push_back(line);
  }
  if (texts.empty()) return fail("nothing to embed: give -p TEXT (several times for several texts) or -f FILE");
  GeneratorOptions opts;
  opts.threads = f.threads;
  opts.n_ctx = f.ctx;
  opts.kv_type_k = f.ctk;
  opts.kv_type_v = f.ctv;
  const std::string path = f.model.empty() ? default_model_path() : f.model;
  auto loaded = load_generator(path, opts);
  if (!loaded) return fail(loaded.message());
  Pooling pooling = default_pooling(*loaded->model);
  if (!f.pooling.empty()) {
    auto p = parse_pooling(f.pooling);
    if (!p) return fail("--pooling: " + p.message());
    pooling = *p;
  }
  std::vector<std::vector<float>> vecs;
  int64_t tokens = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    GenerationRequest r;
    r.prompt = texts[i];
    r.pooling = pooling;
    auto res = loaded->generator->generate(r);
    if (!res) return fail((texts.size() > 1 ? "text " + std::to_string(i + 1) + ": " : "") + res.message());
    tokens += res->prompt_tokens;
    vecs.push_back(std::move(res->embedding));
  }
  if (f.json) {
    std::string out = embedding_head();
    for (size_t i = 0; i < vecs.size(); ++i) out += embedding_entry(i, vecs[i], false);
    out += embedding_tail(path, tokens);
    std::printf("%s\n", out.c_str());
  } else {
    for (const auto& v : vecs) {
      for (size_t k = 0; k < v.size(); ++k) std::printf(k ? " %.9g" : "%.9g", static_cast<double>(v[k]));
      std::printf("\n");
    }
  }
  std::fprintf(stderr, "coda: %zu text%s, %lld tokens, %zu dimensions, %s pooling\n", vecs.size(),
               vecs.size() == 1 ? "" : "s", static_cast<long long>(tokens), vecs[0].size(), pooling_name(pooling));
  if (vecs.size() > 1) {  // unit vectors: the cosine is the dot product
    std::fprintf(stderr, "cosine similarity:\n");
    for (const auto& a : vecs) {
      for (const auto& b : vecs) {
        double dot = 0;
        for (size_t k = 0; k < a.size(); ++k) dot += static_cast<double>(a[k]) * b[k];
        std::fprintf(stderr, " %6.3f", dot);
      }
      std::fprintf(stderr, "\n");
    }
  }
  return 0;
}

}  // namespace

void add_embed(CLI::App& app, std::vector<Command>& out) {
  auto f = std::make_shared<EmbedFlags>();
  CLI::App* sub = app.add_subcommand("embed", "Embeddings of texts: the vectors /v1/embeddings answers");
  sub->add_option("-m,--model", f->model, "GGUF file (default: the bundled model)");
  sub->add_option("-p,--prompt", f->prompts, "A text to embed (repeat for several)");
  sub->add_option("-f,--file", f->file, "A file of texts, one per line");
  sub->add_option("--pooling", f->pooling, "mean, cls or last (default: the GGUF's pooling_type, else mean)");
  sub->add_flag("--json", f->json, "OpenAI's JSON shape ({\"object\": \"list\", \"data\": [...]}) on stdout");
  sub->add_option("-t,--threads", f->threads, kThreadsHelp)->check(CLI::Range(1, 256));
  sub->add_option("-c,--ctx-size", f->ctx, "Context size (default: the model's)")->check(CLI::Range(0, 1 << 24));
  add_cache_type_flags(sub, f->ctk, f->ctv);
  out.push_back({sub, [f] { return embed(*f); }});
}

}  // namespace coda::cli
