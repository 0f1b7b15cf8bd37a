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
// every bit of the projections. Q8_0 (llama.cpp's block of 32 int8 values and one half-float
// scale, 34 bytes per 32) halves the F16 bytes again, and its keys meet queries quantized the same
// way in int8 dot products, four times the multiply-adds per instruction of float (kernels.h).
// BF16 (values only) keeps 8 significant bits where F16 keeps 11, for the same bytes; on CPUs with
// AVX512_BF16 the attention weights, rounded to bf16 too, meet it in vdpbf16ps, twice the
// multiply-adds per instruction of float.
enum class KvType : uint8_t { F16, F32, Q8_0, BF16 };
const char* kv_type_name(KvType t);
// "f16", "f32", "q8_0" or "bf16" (llama.cpp's --cache-type-k/-v names); nullopt for anything else.
std::optional<KvType> parse_kv_type(std::string_view name);
// Bytes of one position's head_dim values of one head (hd a multiple of 32 for Q8_0).
inline int64_t kv_row_bytes(KvType t, int64_t hd) {
  switch (t) {
    case KvType::F16:
    case KvType::BF16:
      return 2 * hd;
    case KvType::F32:
      return 4 * hd;
    case KvType::Q8_0:
      return hd + hd / 32 * 2;
  }
  return 4 * hd;
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
