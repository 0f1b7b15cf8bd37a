// Inspection subcommands: `info` (metadata and tensors), `tokenize`, and two tools the reference
// tests use: `logits` (logits at chosen positions of a token sequence) and `dump-tensor`.
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/cache_flags.h"
#include "cli/commands.h"
#include "kernels/kernels.h"
#include "model/model.h"
#include "tokenizer/hf_import.h"
#include "tokenizer/utf8.h"
#include "tokenizer/vocab.h"

namespace coda::cli {

namespace {

std::string value_string(const GgufValue& v) {
  switch (v.type) {
    case GgufType::STRING:
      return "\"" + std::string(v.str.substr(0, 60)) + (v.str.size() > 60 ? "...\"" : "\"");
    case GgufType::ARRAY:
      return std::string("[") + gguf_type_name(v.elem) + " x " + std::to_string(v.count) + "]";
    case GgufType::F32:
    case GgufType::F64:
      return std::to_string(v.f);
    case GgufType::BOOL:
      return v.b ? "true" : "false";
    case GgufType::I8:
    case GgufType::I16:
    case GgufType::I32:
    case GgufType::I64:
      return std::to_string(v.i);
    default:
      return std::to_string(v.u);
  }
}

// "0-31,2048,2050-2060" -> positions
bool parse_positions(const std::string& spec, std::vector<int64_t>* out) {
  std::stringstream ss(spec);
  std::string part;
  while (std::getline(ss, part, ',')) {
    try {
      const size_t dash = part.find('-');
      if (dash == std::string::npos) {
        out->push_back(std::stoll(part));
      } else {
        const int64_t a = std::stoll(part.substr(0, dash)), b = std::stoll(part.substr(dash + 1));
        if (b < a || b - a > (1 << 24)) return false;
        for (int64_t p = a; p <= b; ++p) out->push_back(p);
      }
    } catch (const std::exception&) {
      return false;
    }
  }
  return !out->empty();
}

}  // namespace

void add_inspect(CLI::App& app, std::vector<Command>& out) {
  {
    auto model = std::make_shared<std::string>();
    CLI::App* sub = app.add_subcommand("info", "Print a GGUF file's metadata and tensors");
    sub->add_option("-m,--model", *model, "GGUF file (default: the bundled model)");
    out.push_back({sub, [model] {
                     const std::string path = model->empty() ? default_model_path() : *model;
                     auto f = GgufFile::open(path);
                     if (!f) return fail(f.message());
                     std::printf("%s: GGUF v%u, %zu keys, %zu tensors, alignment %u\n", path.c_str(), f->version(),
                                 f->keys().size(), f->tensors().size(), f->alignment());
                     for (const auto& k : f->keys())
                       std::printf("  %-45s %s\n", k.c_str(), value_string(*f->find(k)).c_str());
                     for (const auto& t : f->tensors())
                       std::printf("  %-32s %-6s %s\n", t.name.c_str(), dtype_name(t.type), t.shape_string().c_str());
                     return 0;
                   }});
  }
  {
    struct Flags {
      std::string model, text, jsonl;
      bool no_bos = false, ids = false, special = false;
    };
    auto f = std::make_shared<Flags>();
    CLI::App* sub = app.add_subcommand("tokenize", "Print the tokens of a text");
    sub->add_option("-m,--model", f->model, "GGUF file (default: the bundled model)");
    sub->add_option("text", f->text, "Text to tokenize");
    sub->add_flag("--no-bos", f->no_bos, "Do not add the BOS token");
    sub->add_flag("--ids", f->ids, "Print only a JSON array of the ids");
    sub->add_flag("--special", f->special, "Recognise special-token text (\"<|eot_id|>\") as special tokens");
    sub->add_option("--jsonl", f->jsonl,
                    "Batch mode: a file of JSON strings, one per line; prints one JSON object per line with "
                    "\"ids\" and the decoded \"text\"");
    out.push_back({sub, [f] {
                     const std::string path = f->model.empty() ? default_model_path() : f->model;
                     auto g = GgufFile::open(path);
                     if (!g) return fail(g.message());
                     auto v = Vocab::from_gguf(*g);
                     if (!v) return fail(v.message());
                     const bool bos = !f->no_bos && v->add_bos();
                     if (!f->jsonl.empty()) {
                       std::ifstream in(f->jsonl);
                       if (!in) return fail("cannot open '" + f->jsonl + "'");
                       std::string line;
                       for (int64_t n = 1; std::getline(in, line); ++n) {
                         nlohmann::json text;
                         try {
                           text = nlohmann::json::parse(line);
                         } catch (const std::exception& e) {
                           return fail(f->jsonl + ":" + std::to_string(n) + ": not a JSON string: " + e.what());
                         }
                         if (!text.is_string()) return fail(f->jsonl + ":" + std::to_string(n) + ": not a JSON string");
                         auto ids = v->encode(text.get<std::string>(), bos, f->special);
                         if (!ids) return fail(ids.message());
                         nlohmann::json o;
                         o["ids"] = *ids;
                         o["text"] = v->decode(*ids);
                         std::printf("%s\n", o.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
                       }
                       return 0;
                     }
                     auto ids = v->encode(f->text, bos, f->special);
                     if (!ids) return fail(ids.message());
                     if (f->ids) {
                       std::string s = "[";
                       for (size_t i = 0; i < ids->size(); ++i) s += (i ? ", " : "") + std::to_string((*ids)[i]);
                       std::printf("%s]\n", s.c_str());
                     } else {
                       // Like llama-tokenize: each id with the text it stands for (special tokens by name).
                       for (int32_t id : *ids) {
                         const TokenType t = v->type(id);
                         const std::string text =
                             (t == TokenType::Control || t == TokenType::Unknown) ? v->piece(id) : v->token_bytes(id);
                         std::string shown;
                         utf8_sanitize(text, true, &shown);
                         std::printf("%6d -> '%s'\n", id, shown.c_str());
                       }
                     }
                     return 0;
                   }});
  }
  {
    struct Flags {
      std::string model, tokens_file, positions, out;
      int batch = 256, threads = 0;
      int64_t decode_from = -1;
      KvType ctk = KvType::F16, ctv = KvType::F16;
    };
    auto f = std::make_shared<Flags>();
    CLI::App* sub = app.add_subcommand("logits", "Write float32 logits at chosen positions of a token sequence");
    sub->add_option("-m,--model", f->model, "GGUF file")->required();
    sub->add_option("--tokens", f->tokens_file, "File of whitespace-separated token ids")->required();
    sub->add_option("--positions", f->positions, "Positions, e.g. 0-31,2048-2079")->required();
    sub->add_option("-o,--output", f->out, "Output file: one row of n_vocab float32 per position")->required();
    sub->add_option("-b,--batch", f->batch, "Prefill batch size")->capture_default_str()->check(CLI::Range(1, 4096));
    sub->add_option("--decode-from", f->decode_from, "Feed tokens from this position one at a time (decode path)");
    sub->add_option("-t,--threads", f->threads, "Threads")->check(CLI::Range(1, 256));
    add_cache_type_flags(sub, f->ctk, f->ctv);
    out.push_back({sub, [f] {
                     LoadOptions lo;
                     lo.kv_type_k = f->ctk;
                     lo.kv_type_v = f->ctv;
                     auto model = Model::load(f->model, lo);
                     if (!model) return fail(model.message());
                     const Model& m = **model;
                     std::ifstream in(f->tokens_file);
                     if (!in) return fail("cannot open '" + f->tokens_file + "'");
                     std::vector<int32_t> toks;
                     for (int64_t t; in >> t;) toks.push_back(static_cast<int32_t>(t));
                     std::vector<int64_t> pos;
                     if (!parse_positions(f->positions, &pos))
                       return fail("invalid --positions '" + f->positions + "'");
                     const int64_t n = static_cast<int64_t>(toks.size());
                     for (int64_t p : pos)
                       if (p < 0 || p >= n) return fail("position " + std::to_string(p) + " is outside the sequence");
                     const int64_t V = m.config().n_vocab;
                     ThreadPool pool(f->threads > 0 ? f->threads : default_threads());
                     auto kv_or = KvCache::create(m.config(), n);
                     if (!kv_or) return fail(kv_or.message());
                     KvCache& kv = *kv_or;
                     ForwardBuffers buf;
                     std::vector<float> all;
                     std::vector<float> result(pos.size() * static_cast<size_t>(V));
                     const int64_t decode_from = f->decode_from < 0 ? n : f->decode_from;
                     for (int64_t i = 0; i < n;) {
                       const int64_t len = i >= decode_from ? 1 : std::min<int64_t>(f->batch, decode_from - i);
                       all.resize(static_cast<size_t>(len * V));
                       if (auto s = m.forward(toks.data() + i, len, kv, pool, buf, all.data(), true); !s.ok())
                         return fail(s.message());
                       for (size_t k = 0; k < pos.size(); ++k)
                         if (pos[k] >= i && pos[k] < i + len)
                           std::copy_n(all.data() + (pos[k] - i) * V, V, result.data() + k * static_cast<size_t>(V));
                       i += len;
                     }
                     std::ofstream o(f->out, std::ios::binary);
                     o.write(reinterpret_cast<const char*>(result.data()),
                             static_cast<std::streamsize>(result.size() * 4));
                     if (!o) return fail("cannot write '" + f->out + "'");
                     // What the reference must reproduce: BF16 weights in the AVX512_BF16 GEMM meet
                     // activations rounded to bfloat16 (tests/reference/test_reference.py).
                     std::printf(
                         "kernels %s, %d matrices repacked, %d F16 matrices multiplied as BF16, bf16 activations for "
                         "packed BF16: %s\n",
                         kernels().name, m.repack_stats().matrices, m.repack_stats().f16_as_bf16,
                         kernels().gemm_bf16_rounds_activations ? "yes" : "no");
                     return 0;
                   }});
  }
  {
    struct Flags {
      std::string json, out;
    };
    auto f = std::make_shared<Flags>();
    CLI::App* sub = app.add_subcommand(
        "import-tokenizer",
        "Write a vocabulary-only GGUF from an HF tokenizer.json (+ tokenizer_config.json beside it)");
    sub->add_option("tokenizer_json", f->json, "Path to tokenizer.json")->required();
    sub->add_option("-o,--output", f->out, "Output GGUF path")->required();
    out.push_back({sub, [f] {
                     auto spec = import_hf_tokenizer(f->json);
                     if (!spec) return fail(spec.message());
                     GgufWriter w;
                     w.set_string("general.name", "coda-vocab");
                     spec->write(w);
                     if (auto s = w.write(f->out); !s.ok()) return fail(s.message());
                     std::printf("wrote %s: %s tokenizer, %zu tokens, %zu merges\n", f->out.c_str(),
                                 spec->model.c_str(), spec->tokens.size(), spec->merges.size());
                     return 0;
                   }});
  }
  {
    struct Flags {
      std::string model, name, out;
    };
    auto f = std::make_shared<Flags>();
    CLI::App* sub = app.add_subcommand("dump-tensor", "Write a tensor dequantized to float32");
    sub->add_option("-m,--model", f->model, "GGUF file")->required();
    sub->add_option("--name", f->name, "Tensor name")->required();
    sub->add_option("-o,--output", f->out, "Output file")->required();
    out.push_back({sub, [f] {
                     auto g = GgufFile::open(f->model);
                     if (!g) return fail(g.message());
                     const GgufTensor* t = g->find_tensor(f->name);
                     if (t == nullptr) return fail("no tensor named '" + f->name + "'");
                     if (!dtype_supported(t->type))
                       return fail(std::string("type ") + dtype_name(t->type) +
                                   " is not supported; supported: " + supported_dtypes_list());
                     std::vector<float> x(static_cast<size_t>(t->n_elements()));
                     ref::dequantize_row(t->type, t->data, x.data(), t->n_elements());
                     std::ofstream o(f->out, std::ios::binary);
                     o.write(reinterpret_cast<const char*>(x.data()), static_cast<std::streamsize>(x.size() * 4));
                     if (!o) return fail("cannot write '" + f->out + "'");
                     return 0;
                   }});
  }
}

}  // namespace coda::cli
