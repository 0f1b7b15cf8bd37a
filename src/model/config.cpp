#include "model/config.h"

namespace coda {

namespace {

Expected<int64_t> required_int(const GgufFile& f, const std::string& key, int64_t min_value) {
  if (f.find(key) == nullptr) return Error("model metadata: required key '" + key + "' is missing");
  auto v = f.get_int(key);
  if (!v) return Error("model metadata: " + v.message());
  if (*v < min_value)
    return Error("model metadata: key '" + key + "' is " + std::to_string(*v) +
                 "; it must be >= " + std::to_string(min_value));
  return *v;
}

Expected<int64_t> optional_int(const GgufFile& f, const std::string& key, int64_t fallback, int64_t min_value) {
  if (f.find(key) == nullptr) return fallback;
  return required_int(f, key, min_value);
}

Expected<float> optional_float(const GgufFile& f, const std::string& key, float fallback) {
  if (f.find(key) == nullptr) return fallback;
  auto v = f.get_float(key);
  if (!v) return Error("model metadata: " + v.message());
  return static_cast<float>(*v);
}

}  // namespace

const char* kv_type_name(KvType t) {
  switch (t) {
    case KvType::F16:
      return "f16";
    case KvType::F32:
      return "f32";
    case KvType::Q8_0:
      return "q8_0";
    case KvType::BF16:
      return "bf16";
  }
  return "?";
}

std::optional<KvType> parse_kv_type(std::string_view name) {
  if (name == "f16") return KvType::F16;
  if (name == "f32") return KvType::F32;
  if (name == "q8_0") return KvType::Q8_0;
  if (name == "bf16") return KvType::BF16;
  return std::nullopt;
}

Expected<ModelConfig> read_model_config(const GgufFile& f) {
  ModelConfig c;
  if (f.find("general.architecture") == nullptr)
    return Error("model metadata: required key 'general.architecture' is missing");
  auto arch = f.get_string("general.architecture");
  if (!arch) return Error("model metadata: " + arch.message());
  c.arch_name = *arch;
  if (c.arch_name == "llama" || c.arch_name == "mistral") {
    c.arch = Arch::Llama;
  } else if (c.arch_name == "qwen2") {
    c.arch = Arch::Qwen2;
    c.rope_neox = true;
    c.qkv_bias = true;
  } else {
    return Error("model metadata: general.architecture '" + c.arch_name +
                 "' is not supported; supported: llama, mistral, qwen2");
  }
  const std::string p = c.arch_name + ".";
  CODA_ASSIGN_OR_RETURN(c.dim, required_int(f, p + "embedding_length", 1));
  CODA_ASSIGN_OR_RETURN(c.n_layers, required_int(f, p + "block_count", 1));
  CODA_ASSIGN_OR_RETURN(c.ffn_dim, required_int(f, p + "feed_forward_length", 1));
  CODA_ASSIGN_OR_RETURN(c.n_heads, required_int(f, p + "attention.head_count", 1));
  CODA_ASSIGN_OR_RETURN(c.n_kv_heads, optional_int(f, p + "attention.head_count_kv", c.n_heads, 1));
  CODA_ASSIGN_OR_RETURN(c.n_ctx_train, required_int(f, p + "context_length", 1));
  if (c.n_layers > 1024)
    return Error("model metadata: key '" + p + "block_count' is " + std::to_string(c.n_layers) + "; limit 1024");
  if (c.n_heads > 4096) return Error("model metadata: key '" + p + "attention.head_count' is too large (limit 4096)");
  if (c.n_heads % c.n_kv_heads != 0)
    return Error("model metadata: '" + p + "attention.head_count' (" + std::to_string(c.n_heads) +
                 ") is not a multiple of '" + p + "attention.head_count_kv' (" + std::to_string(c.n_kv_heads) + ")");
  const bool has_key_length = f.find(p + "attention.key_length") != nullptr;
  if (!has_key_length && c.dim % c.n_heads != 0)
    return Error("model metadata: '" + p + "embedding_length' (" + std::to_string(c.dim) + ") is not a multiple of '" +
                 p + "attention.head_count' (" + std::to_string(c.n_heads) + ")");
  CODA_ASSIGN_OR_RETURN(c.head_dim, optional_int(f, p + "attention.key_length", c.dim / c.n_heads, 2));
  CODA_ASSIGN_OR_RETURN(const int64_t v_len, optional_int(f, p + "attention.value_length", c.head_dim, 1));
  if (v_len != c.head_dim)
    return Error("model metadata: '" + p + "attention.value_length' (" + std::to_string(v_len) +
                 ") differs from the key length (" + std::to_string(c.head_dim) + "); not supported");
  CODA_ASSIGN_OR_RETURN(c.n_rot, optional_int(f, p + "rope.dimension_count", c.head_dim, 2));
  if (c.n_rot > c.head_dim || c.n_rot % 2 != 0)
    return Error("model metadata: '" + p + "rope.dimension_count' (" + std::to_string(c.n_rot) +
                 ") must be even and <= the head size (" + std::to_string(c.head_dim) + ")");
  CODA_ASSIGN_OR_RETURN(c.norm_eps, optional_float(f, p + "attention.layer_norm_rms_epsilon", 1e-5f));
  if (!(c.norm_eps > 0 && c.norm_eps < 1))
    return Error("model metadata: '" + p + "attention.layer_norm_rms_epsilon' must be in (0, 1)");
  CODA_ASSIGN_OR_RETURN(c.rope_base, optional_float(f, p + "rope.freq_base", 10000.0f));
  if (!(c.rope_base > 1)) return Error("model metadata: '" + p + "rope.freq_base' must be > 1");

  if (f.find(p + "rope.scaling.type") != nullptr) {
    auto type = f.get_string(p + "rope.scaling.type");
    if (!type) return Error("model metadata: " + type.message());
    if (*type == "linear") {
      CODA_ASSIGN_OR_RETURN(c.rope_linear_scale, optional_float(f, p + "rope.scaling.factor", 1.0f));
      if (!(c.rope_linear_scale >= 1))
        return Error("model metadata: '" + p + "rope.scaling.factor' must be >= 1 for linear scaling");
    } else if (*type != "none" && *type != "llama3") {
      return Error("model metadata: '" + p + "rope.scaling.type' is '" + *type +
                   "'; supported: none, linear (Llama 3 scaling comes as the rope_freqs tensor)");
    }
  }
  return c;
}

}  // namespace coda
