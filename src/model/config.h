// Architecture hyper-parameters read from GGUF metadata.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "gguf/gguf.h"

namespace coda {

enum class Arch { Llama, Qwen2 };

// How the KV cache stores keys and values. F16 (llama.cpp's default) halves the bytes that
// attention streams per token of context, which is what decode at depth is bound by; F32 keeps
// every bit of the projections.
enum class KvType : uint8_t { F16, F32 };
const char* kv_type_name(KvType t);
// "f16" or "f32" (llama.cpp's --cache-type-k/-v names); nullopt for anything else.
std::optional<KvType> parse_kv_type(std::string_view name);
inline int64_t kv_type_bytes(KvType t) {
  return t == KvType::F16 ? 2 : 4;
}

struct ModelConfig {
  Arch arch = Arch::Llama;
  std::string arch_name;  // the GGUF `general.architecture` string
  int64_t n_vocab = 0;
  int64_t n_ctx_train = 0;
  int64_t dim = 0;
  int64_t n_layers = 0;
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t ffn_dim = 0;
  int64_t n_rot = 0;  // rotary dimensions per head (<= head_dim)
  float norm_eps = 1e-5f;
  float rope_base = 10000.0f;
  float rope_linear_scale = 1.0f;  // positions are divided by this ("linear" RoPE scaling)
  bool rope_neox = false;          // pairs (i, i + n_rot/2) instead of (2i, 2i + 1)
  bool qkv_bias = false;
  // Not from the file: chosen at load (LoadOptions), and used by every KV cache made for the model.
  KvType kv_type_k = KvType::F16;
  KvType kv_type_v = KvType::F16;

  int64_t q_dim() const { return n_heads * head_dim; }
  int64_t kv_dim() const { return n_kv_heads * head_dim; }
};

// Reads and checks the configuration; errors name the offending key.
Expected<ModelConfig> read_model_config(const GgufFile& f);

}  // namespace coda
