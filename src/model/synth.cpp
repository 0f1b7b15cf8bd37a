#include "model/synth.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "gguf/gguf.h"
#include "gguf/gguf_writer.h"
#include "kernels/kernels.h"
#include "tokenizer/hf_import.h"

namespace coda {

const std::vector<SynthShape>& synth_shapes() {
  static const std::vector<SynthShape> shapes = [] {
    std::vector<SynthShape> s;
    // Tiny shapes: rows are multiples of 256 so that every weight type applies.
    s.push_back({"tiny", "llama", 256, 2, 8, 4, 512, 4096, 4096, 10000.0f, false});
    SynthShape l3{"tiny-llama3", "llama", 256, 2, 8, 2, 512, 4096, 4096, 500000.0f, true};
    l3.llama3_factor = 8;
    l3.llama3_orig_ctx = 256;  // small, so that many rotary pairs are rescaled
    s.push_back(l3);
    s.push_back({"tiny-qwen2", "qwen2", 256, 2, 8, 2, 512, 4096, 4096, 1000000.0f, true});
    SynthShape l32{"llama-3.2-1b", "llama", 2048, 16, 32, 8, 8192, 131072, 128256, 500000.0f, true};
    l32.llama3_factor = 32;
    s.push_back(l32);
    SynthShape l31{"llama-3.1-8b", "llama", 4096, 32, 32, 8, 14336, 131072, 128256, 500000.0f, false};
    l31.llama3_factor = 8;
    s.push_back(l31);
    s.push_back({"qwen2.5-0.5b", "qwen2", 896, 24, 14, 2, 4864, 32768, 151936, 1000000.0f, true});
    s.push_back({"mistral-7b", "llama", 4096, 32, 32, 8, 14336, 32768, 32000, 1000000.0f, false});
    return s;
  }();
  return shapes;
}

std::vector<float> llama3_rope_factors(int64_t n_rot, float base, float factor, float low, float high,
                                       int64_t orig_ctx) {
  // Llama 3.1 "llama3" rope_scaling: long wavelengths are slowed by `factor`, short ones kept,
  // and the band between is interpolated smoothly.
  const double low_wavelen = static_cast<double>(orig_ctx) / low;
  const double high_wavelen = static_cast<double>(orig_ctx) / high;
  std::vector<float> out;
  for (int64_t i = 0; i < n_rot / 2; ++i) {
    const double freq = std::pow(static_cast<double>(base), -2.0 * static_cast<double>(i) / static_cast<double>(n_rot));
    const double wavelen = 2 * M_PI / freq;
    double f = 1.0;
    if (wavelen > low_wavelen) {
      f = factor;
    } else if (wavelen >= high_wavelen) {
      const double smooth = (static_cast<double>(orig_ctx) / wavelen - low) / (high - low);
      f = 1.0 / ((1 - smooth) / factor + smooth);
    }
    out.push_back(static_cast<float>(f));
  }
  return out;
}

namespace {

uint64_t splitmix(uint64_t& s) {
  uint64_t z = (s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t hash_name(const std::string& s, uint64_t seed) {
  uint64_t h = 1469598103934665603ull ^ seed;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

// Uniform values with mean `mean` and standard deviation `stddev`.
void random_row(uint64_t seed, float mean, float stddev, float* out, int64_t n) {
  uint64_t s = seed;
  const float half_width = stddev * std::sqrt(3.0f);
  for (int64_t i = 0; i < n; ++i) {
    const float u = static_cast<float>(splitmix(s) >> 40) * (1.0f / 16777216.0f);  // [0, 1)
    out[i] = mean + (2 * u - 1) * half_width;
  }
}

struct VocabData {
  std::vector<std::pair<std::string, const GgufValue*>> copied;  // from a GGUF
  GgufFile source;
  TokenizerSpec spec;  // from tokenizer.json or the placeholder
  int64_t size = 0;
};

Status vocab_from_gguf(const std::string& path, VocabData* v) {
  auto f = GgufFile::open(path);
  if (!f) return f.error();
  v->source = std::move(f).value();
  for (const std::string& key : v->source.keys())
    if (key.rfind("tokenizer.", 0) == 0) v->copied.push_back({key, v->source.find(key)});
  auto tokens = v->source.get_string_array("tokenizer.ggml.tokens");
  if (!tokens) return Error(path + ": no vocabulary: " + tokens.message());
  v->size = static_cast<int64_t>(tokens->size());
  return Status::Ok();
}

// Without a source: 3 control tokens, 256 byte tokens, then "<tok_N>" fillers. Text encodes to
// byte tokens, so `coda run` works on any synthetic model.
void placeholder_vocab(int64_t n, VocabData* v) {
  TokenizerSpec& t = v->spec;
  t.model = "llama";
  t.tokens = {"<unk>", "<s>", "</s>"};
  t.types = {2, 3, 3};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    t.tokens.emplace_back(name);
    t.types.push_back(6);
  }
  for (int64_t i = static_cast<int64_t>(t.tokens.size()); i < n; ++i) {
    t.tokens.push_back("<tok_" + std::to_string(i) + ">");
    t.types.push_back(1);
  }
  t.tokens.resize(static_cast<size_t>(n));
  t.types.resize(static_cast<size_t>(n));
  t.scores.assign(static_cast<size_t>(n), 0.0f);
  t.bos = 1;
  t.eos = 2;
  v->size = n;
}

}  // namespace

Expected<std::string> write_synthetic_model(const SynthOptions& opt, ThreadPool& pool) {
  const SynthShape* shape = nullptr;
  std::string names;
  for (const auto& s : synth_shapes()) {
    names += (names.empty() ? "" : ", ") + s.name;
    if (s.name == opt.shape) shape = &s;
  }
  if (shape == nullptr) return Error("unknown shape '" + opt.shape + "'; known shapes: " + names);
  if (!dtype_supported(opt.type))
    return Error(std::string("weight type ") + dtype_name(opt.type) +
                 " is not supported; supported: " + supported_dtypes_list());
  if (opt.out.empty()) return Error("no output path given (-o FILE)");
  SynthShape sh = *shape;
  if (opt.n_layers > 0) sh.n_layers = opt.n_layers;
  if (opt.n_ctx > 0) sh.n_ctx = opt.n_ctx;

  VocabData vocab;
  if (opt.vocab_from.empty()) {
    placeholder_vocab(sh.n_vocab, &vocab);
  } else if (opt.vocab_from.size() >= 5 && opt.vocab_from.substr(opt.vocab_from.size() - 5) == ".json") {
    CODA_ASSIGN_OR_RETURN(vocab.spec, import_hf_tokenizer(opt.vocab_from));
    vocab.size = static_cast<int64_t>(vocab.spec.tokens.size());
  } else {
    CODA_RETURN_IF_ERROR(vocab_from_gguf(opt.vocab_from, &vocab));
  }
  sh.n_vocab = vocab.size;

  GgufWriter w;
  const std::string a = sh.arch + ".";
  const int64_t head_dim = sh.dim / sh.n_heads;
  w.set_string("general.architecture", sh.arch);
  w.set_string("general.name", "coda-synth-" + sh.name + "-" + dtype_name(opt.type));
  w.set_u32(a + "context_length", static_cast<uint32_t>(sh.n_ctx));
  w.set_u32(a + "embedding_length", static_cast<uint32_t>(sh.dim));
  w.set_u32(a + "block_count", static_cast<uint32_t>(sh.n_layers));
  w.set_u32(a + "feed_forward_length", static_cast<uint32_t>(sh.ffn_dim));
  w.set_u32(a + "attention.head_count", static_cast<uint32_t>(sh.n_heads));
  w.set_u32(a + "attention.head_count_kv", static_cast<uint32_t>(sh.n_kv_heads));
  w.set_f32(a + "attention.layer_norm_rms_epsilon", 1e-5f);
  w.set_f32(a + "rope.freq_base", sh.rope_base);
  w.set_u32(a + "rope.dimension_count", static_cast<uint32_t>(head_dim));
  w.set_u32(a + "vocab_size", static_cast<uint32_t>(sh.n_vocab));
  if (!vocab.copied.empty()) {
    for (const auto& [key, value] : vocab.copied) w.copy_value(key, *value);
  } else {
    vocab.spec.write(w);
  }

  std::map<std::string, int64_t> type_counts;
  int64_t total_bytes = 0;
  // Weight matrices are uniform with std 1/sqrt(fan_in): activations keep unit scale through the
  // layers, so attention is neither flat nor saturated and numeric errors show in the logits.
  auto add = [&](const std::string& name, std::vector<int64_t> ne, bool matrix, float mean, float stddev) -> Status {
    DType t = matrix ? opt.type : DType::F32;
    const DTypeInfo* info = dtype_info(static_cast<uint32_t>(t));
    if (ne[0] % info->block_size != 0) t = ne[0] % 32 == 0 ? DType::Q8_0 : DType::F16;  // as llama.cpp falls back
    type_counts[dtype_name(t)] += 1;
    const int64_t cols = ne[0];
    const int64_t rows = ne.size() > 1 ? ne[1] : 1;
    const int64_t row_bytes = dtype_row_bytes(t, cols);
    total_bytes += rows * row_bytes;
    const uint64_t seed = hash_name(name, opt.seed);
    return w.add_tensor(name, t, ne, [=, &pool](uint8_t* dst) {
      pool.parallel_for(
          rows,
          [&](int64_t r0, int64_t r1) {
            std::vector<float> row(static_cast<size_t>(cols));
            for (int64_t r = r0; r < r1; ++r) {
              random_row(seed ^ (static_cast<uint64_t>(r) * 0x9e3779b97f4a7c15ull), mean, stddev, row.data(), cols);
              ref::quantize_row(t, row.data(), dst + r * row_bytes, cols);
            }
          },
          64);
    });
  };
  const float s_dim = 1.0f / std::sqrt(static_cast<float>(sh.dim));
  const float s_q = 1.0f / std::sqrt(static_cast<float>(sh.n_heads * head_dim));
  const float s_ffn = 1.0f / std::sqrt(static_cast<float>(sh.ffn_dim));
  CODA_RETURN_IF_ERROR(add("token_embd.weight", {sh.dim, sh.n_vocab}, true, 0, 1.0f));
  if (sh.llama3_factor > 0) {
    const auto factors = llama3_rope_factors(head_dim, sh.rope_base, sh.llama3_factor, sh.llama3_low, sh.llama3_high,
                                             sh.llama3_orig_ctx);
    CODA_RETURN_IF_ERROR(w.add_tensor("rope_freqs.weight", DType::F32, {head_dim / 2}, [factors](uint8_t* dst) {
      std::memcpy(dst, factors.data(), factors.size() * 4);
    }));
  }
  for (int64_t l = 0; l < sh.n_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    const int64_t qd = sh.n_heads * head_dim, kvd = sh.n_kv_heads * head_dim;
    CODA_RETURN_IF_ERROR(add(p + "attn_norm.weight", {sh.dim}, false, 1.0f, 0.1f));
    CODA_RETURN_IF_ERROR(add(p + "attn_q.weight", {sh.dim, qd}, true, 0, s_dim));
    CODA_RETURN_IF_ERROR(add(p + "attn_k.weight", {sh.dim, kvd}, true, 0, s_dim));
    CODA_RETURN_IF_ERROR(add(p + "attn_v.weight", {sh.dim, kvd}, true, 0, s_dim));
    if (sh.arch == "qwen2") {
      CODA_RETURN_IF_ERROR(add(p + "attn_q.bias", {qd}, false, 0, 0.5f));
      CODA_RETURN_IF_ERROR(add(p + "attn_k.bias", {kvd}, false, 0, 0.5f));
      CODA_RETURN_IF_ERROR(add(p + "attn_v.bias", {kvd}, false, 0, 0.5f));
    }
    CODA_RETURN_IF_ERROR(add(p + "attn_output.weight", {qd, sh.dim}, true, 0, s_q));
    CODA_RETURN_IF_ERROR(add(p + "ffn_norm.weight", {sh.dim}, false, 1.0f, 0.1f));
    CODA_RETURN_IF_ERROR(add(p + "ffn_gate.weight", {sh.dim, sh.ffn_dim}, true, 0, s_dim));
    CODA_RETURN_IF_ERROR(add(p + "ffn_up.weight", {sh.dim, sh.ffn_dim}, true, 0, s_dim));
    CODA_RETURN_IF_ERROR(add(p + "ffn_down.weight", {sh.ffn_dim, sh.dim}, true, 0, s_ffn));
  }
  CODA_RETURN_IF_ERROR(add("output_norm.weight", {sh.dim}, false, 1.0f, 0.1f));
  if (!sh.tied_output) CODA_RETURN_IF_ERROR(add("output.weight", {sh.dim, sh.n_vocab}, true, 0, s_dim));
  CODA_RETURN_IF_ERROR(w.write(opt.out));

  std::ostringstream msg;
  msg << "wrote " << opt.out << ": " << sh.name << " (" << sh.arch << ", " << sh.n_layers << " layers, dim " << sh.dim
      << ", vocab " << sh.n_vocab << "), " << static_cast<double>(total_bytes) / (1 << 20) << " MiB of tensors; types:";
  for (const auto& [name, count] : type_counts) msg << " " << name << " x" << count;
  return msg.str();
}

}  // namespace coda
