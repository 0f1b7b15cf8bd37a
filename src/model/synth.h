// Random-weight GGUF models of real architectures and shapes, for tests and benchmarks.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "core/thread_pool.h"

namespace coda {

struct SynthShape {
  std::string name;
  std::string arch;  // "llama" or "qwen2"
  int64_t dim, n_layers, n_heads, n_kv_heads, ffn_dim, n_ctx, n_vocab;
  float rope_base;
  bool tied_output;
  // Llama 3 RoPE frequency scaling (written as the rope_freqs tensor); 0 = none.
  float llama3_factor = 0, llama3_low = 1, llama3_high = 4;
  int64_t llama3_orig_ctx = 8192;
};

// tiny, tiny-llama3, tiny-qwen2, llama-3.2-1b, llama-3.1-8b, qwen2.5-0.5b, mistral-7b.
const std::vector<SynthShape>& synth_shapes();

struct SynthOptions {
  std::string shape = "tiny";
  DType type = DType::Q8_0;
  std::string vocab_from;  // GGUF or HF tokenizer.json; empty: a placeholder vocabulary of the shape's size
  uint64_t seed = 1;
  int64_t n_layers = 0;  // overrides when > 0
  int64_t n_ctx = 0;
  std::string out;
};

// Writes the model; returns a one-line summary (shape, size, types used).
Expected<std::string> write_synthetic_model(const SynthOptions& opt, ThreadPool& pool);

// Llama 3 RoPE frequency factors (the divisor of each rotary pair's frequency).
std::vector<float> llama3_rope_factors(int64_t n_rot, float base, float factor, float low, float high,
                                       int64_t orig_ctx);

}  // namespace coda
