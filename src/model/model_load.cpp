// Binding GGUF tensors to the model's weights, with shape and type checks that name the tensor.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "kernels/kernels.h"
#include "model/model.h"

namespace coda {

namespace {

std::string shape_str(const std::vector<int64_t>& ne) {
  std::string s = "[";
  for (size_t i = 0; i < ne.size(); ++i) s += (i ? ", " : "") + std::to_string(ne[i]);
  return s + "]";
}

Status check_shape(const GgufTensor& t, const std::vector<int64_t>& ne) {
  bool ok = t.n_dims == static_cast<int>(ne.size());
  for (size_t i = 0; ok && i < ne.size(); ++i) ok = t.ne[i] == ne[i];
  if (!ok)
    return Error("tensor '" + t.name + "' has shape " + t.shape_string() + "; the model metadata requires " +
                 shape_str(ne));
  return Status::Ok();
}

Status check_type(const GgufTensor& t) {
  if (!dtype_supported(t.type))
    return Error("tensor '" + t.name + "': type " + std::to_string(static_cast<uint32_t>(t.type)) + " (" +
                 dtype_name(t.type) + ") is not supported; supported: " + supported_dtypes_list());
  return Status::Ok();
}

Expected<const GgufTensor*> find(const GgufFile& f, const std::string& name) {
  const GgufTensor* t = f.find_tensor(name);
  if (t == nullptr) return Error("model is missing tensor '" + name + "'");
  return t;
}

// A matrix stored as ne = [cols, rows].
Expected<WeightView> matrix(const GgufFile& f, const std::string& name, int64_t cols, int64_t rows) {
  CODA_ASSIGN_OR_RETURN(const GgufTensor* t, find(f, name));
  CODA_RETURN_IF_ERROR(check_shape(*t, {cols, rows}));
  CODA_RETURN_IF_ERROR(check_type(*t));
  WeightView w;
  w.type = t->type;
  w.data = t->data;
  w.rows = rows;
  w.cols = cols;
  w.row_bytes = dtype_row_bytes(t->type, cols);
  return w;
}

// A vector (norm weight, bias) converted to float.
Expected<std::vector<float>> vec(const GgufFile& f, const std::string& name, int64_t n) {
  CODA_ASSIGN_OR_RETURN(const GgufTensor* t, find(f, name));
  CODA_RETURN_IF_ERROR(check_shape(*t, {n}));
  CODA_RETURN_IF_ERROR(check_type(*t));
  std::vector<float> out(static_cast<size_t>(n));
  ref::dequantize_row(t->type, t->data, out.data(), n);
  return out;
}

}  // namespace

bool LoadOptions::default_repack() {
  const char* env = std::getenv("CODA_REPACK");
  return env == nullptr || std::strcmp(env, "0") != 0;
}

bool LoadOptions::default_repack_all() {
  const char* env = std::getenv("CODA_REPACK");
  return env != nullptr && std::strcmp(env, "all") == 0;
}

void Model::FreeDeleter::operator()(uint8_t* p) const {
  std::free(p);
}

// Drops the pages of a mapped file range the process no longer reads, so that the repacked copy
// does not add to resident memory. A private read-only file mapping reloads them from the file if
// they are ever touched again; only whole pages strictly inside the range are dropped.
static void release_mapped(const uint8_t* p, int64_t n) {
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t lo = (reinterpret_cast<uintptr_t>(p) + page - 1) / page * page;
  const uintptr_t hi = (reinterpret_cast<uintptr_t>(p) + static_cast<uintptr_t>(n)) / page * page;
  if (hi > lo) ::madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_DONTNEED);
}

void Model::repack_weights(bool all_types) {
  const KernelTable& k = kernels();
  const auto wanted = [&](const WeightView& w) {
    return packable(k, w) && (all_types || k.repack_by_default[static_cast<int>(w.type)]);
  };
  const auto start = std::chrono::steady_clock::now();
  // A tied output is the embedding table: packed once, and lookups unpack their row.
  std::vector<WeightView*> todo;
  for (LayerWeights& L : w_.layers)
    for (WeightView* m : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down}) todo.push_back(m);
  todo.push_back(w_.tied_output ? &w_.token_embd : &w_.output);
  struct Job {
    WeightView* w;
    uint8_t* dst;
  };
  std::vector<Job> jobs;
  // One arena for every repacked matrix, in 2 MiB pages where the kernel grants them (transparent
  // huge pages in `madvise` mode, Debian's default). Decode streams the whole arena once per token:
  // with 4 KiB pages the hardware prefetchers stop at every page boundary and each page costs a TLB
  // miss. Matrices start on 64-byte boundaries inside it.
  constexpr int64_t kHugePage = int64_t{2} << 20;
  int64_t total = 0;
  for (WeightView* w : todo)
    if (wanted(*w)) total += (packed_bytes(*w) + 63) / 64 * 64;
  // Nothing packable on this CPU (no GEMM table), or no memory for the copy: every view keeps the
  // mapped layout (a tied output is still the embedding), and the unpacked kernels run.
  if (total == 0) return;
  total = (total + kHugePage - 1) / kHugePage * kHugePage;
  auto* arena = static_cast<uint8_t*>(std::aligned_alloc(kHugePage, static_cast<size_t>(total)));
  if (arena == nullptr) return;
#ifdef MADV_HUGEPAGE
  ::madvise(arena, static_cast<size_t>(total), MADV_HUGEPAGE);  // advice only: 4 KiB pages if refused
#endif
  packed_.reset(arena);
  int64_t used = 0;
  for (WeightView* w : todo) {
    if (!wanted(*w)) continue;
    const int64_t bytes = packed_bytes(*w);
    jobs.push_back({w, arena + used});
    used += (bytes + 63) / 64 * 64;
    repack_.matrices++;
    repack_.bytes += bytes;
  }
  // Repacking reads the whole file once; the cores share the matrices.
  std::atomic<size_t> next{0};
  std::atomic<int> as_bf16_count{0};
  auto worker = [&] {
    for (size_t i = next++; i < jobs.size(); i = next++) {
      const WeightView src = *jobs[i].w;
      *jobs[i].w = repack_weight_for(k, src, jobs[i].dst);
      if (jobs[i].w->type != src.type) ++as_bf16_count;  // an F16 matrix holding bfloat16 values
      if (file_.file_backed()) release_mapped(src.data, src.rows * src.row_bytes);
    }
  };
  const unsigned n_threads = std::max(1u, std::min(8u, std::thread::hardware_concurrency()));
  std::vector<std::thread> threads;
  for (unsigned i = 1; i < n_threads; ++i) threads.emplace_back(worker);
  worker();
  for (std::thread& t : threads) t.join();
  if (w_.tied_output) w_.output = w_.token_embd;
  repack_.f16_as_bf16 = as_bf16_count;
  repack_.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

Expected<std::unique_ptr<Model>> Model::load(const std::string& path, const LoadOptions& opts) {
  auto f = GgufFile::open(path);
  if (!f) return f.error();
  auto m = from_gguf(std::move(f).value(), opts);
  if (!m) return Error(path + ": " + m.message());
  return m;
}

Expected<std::unique_ptr<Model>> Model::from_gguf(GgufFile file, const LoadOptions& opts) {
  auto model = std::unique_ptr<Model>(new Model());
  model->file_ = std::move(file);
  const GgufFile& f = model->file_;
  CODA_ASSIGN_OR_RETURN(model->config_, read_model_config(f));
  ModelConfig& c = model->config_;
  c.kv_type_k = opts.kv_type_k;
  c.kv_type_v = opts.kv_type_v;
  if (c.kv_type_k == KvType::BF16)
    return Error("a bf16 KV cache is available for values only (--cache-type-v bf16); keys take f16, f32 or q8_0");
  if ((c.kv_type_k == KvType::Q8_0 || c.kv_type_v == KvType::Q8_0) && c.head_dim % 32 != 0)
    return Error("a q8_0 KV cache needs a head size that is a multiple of 32; this model's is " +
                 std::to_string(c.head_dim) + " (use --cache-type-k/-v f16)");

  CODA_ASSIGN_OR_RETURN(const GgufTensor* embd, find(f, "token_embd.weight"));
  if (embd->n_dims != 2 || embd->ne[0] != c.dim)
    return Error("tensor 'token_embd.weight' has shape " + embd->shape_string() + "; expected [" +
                 std::to_string(c.dim) + ", n_vocab]");
  c.n_vocab = embd->ne[1];
  if (f.find(c.arch_name + ".vocab_size") != nullptr) {
    auto vs = f.get_int(c.arch_name + ".vocab_size");
    if (!vs || *vs != c.n_vocab)
      return Error("model metadata: '" + c.arch_name + ".vocab_size' does not match token_embd.weight (" +
                   std::to_string(c.n_vocab) + " rows)");
  }
  ModelWeights& w = model->w_;
  CODA_ASSIGN_OR_RETURN(w.token_embd, matrix(f, "token_embd.weight", c.dim, c.n_vocab));
  CODA_ASSIGN_OR_RETURN(w.output_norm, vec(f, "output_norm.weight", c.dim));
  if (f.find_tensor("output.weight") != nullptr) {
    CODA_ASSIGN_OR_RETURN(w.output, matrix(f, "output.weight", c.dim, c.n_vocab));
  } else {
    w.output = w.token_embd;
    w.tied_output = true;
  }
  w.layers.resize(static_cast<size_t>(c.n_layers));
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    LayerWeights& L = w.layers[static_cast<size_t>(l)];
    CODA_ASSIGN_OR_RETURN(L.attn_norm, vec(f, p + "attn_norm.weight", c.dim));
    CODA_ASSIGN_OR_RETURN(L.ffn_norm, vec(f, p + "ffn_norm.weight", c.dim));
    CODA_ASSIGN_OR_RETURN(L.wq, matrix(f, p + "attn_q.weight", c.dim, c.q_dim()));
    CODA_ASSIGN_OR_RETURN(L.wk, matrix(f, p + "attn_k.weight", c.dim, c.kv_dim()));
    CODA_ASSIGN_OR_RETURN(L.wv, matrix(f, p + "attn_v.weight", c.dim, c.kv_dim()));
    CODA_ASSIGN_OR_RETURN(L.wo, matrix(f, p + "attn_output.weight", c.q_dim(), c.dim));
    CODA_ASSIGN_OR_RETURN(L.w_gate, matrix(f, p + "ffn_gate.weight", c.dim, c.ffn_dim));
    CODA_ASSIGN_OR_RETURN(L.w_up, matrix(f, p + "ffn_up.weight", c.dim, c.ffn_dim));
    CODA_ASSIGN_OR_RETURN(L.w_down, matrix(f, p + "ffn_down.weight", c.ffn_dim, c.dim));
    if (c.qkv_bias) {
      CODA_ASSIGN_OR_RETURN(L.bq, vec(f, p + "attn_q.bias", c.q_dim()));
      CODA_ASSIGN_OR_RETURN(L.bk, vec(f, p + "attn_k.bias", c.kv_dim()));
      CODA_ASSIGN_OR_RETURN(L.bv, vec(f, p + "attn_v.bias", c.kv_dim()));
    }
  }

  // RoPE: angle per position of rotary pair i is base^(-2i/n_rot), divided by the Llama 3
  // frequency factor of that pair when the file carries `rope_freqs.weight`, and by the linear
  // scaling factor.
  const int64_t half = c.n_rot / 2;
  std::vector<float> factors(static_cast<size_t>(half), 1.0f);
  if (f.find_tensor("rope_freqs.weight") != nullptr) {
    CODA_ASSIGN_OR_RETURN(factors, vec(f, "rope_freqs.weight", half));
    for (float x : factors)
      if (!(x > 0) || !std::isfinite(x)) return Error("tensor 'rope_freqs.weight' holds a non-positive factor");
  }
  model->inv_freq_.resize(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i)
    model->inv_freq_[static_cast<size_t>(i)] = static_cast<float>(
        std::pow(static_cast<double>(c.rope_base), -2.0 * static_cast<double>(i) / static_cast<double>(c.n_rot)) /
        factors[static_cast<size_t>(i)] / c.rope_linear_scale);
  if (opts.repack) model->repack_weights(opts.repack_all);
  return model;
}

int64_t Model::decode_weight_bytes() const {
  auto matrix_bytes = [](const WeightView& w) { return w.packed ? packed_bytes(w) : w.rows * w.row_bytes; };
  int64_t bytes = w_.token_embd.row_bytes + matrix_bytes(w_.output);
  for (const LayerWeights& L : w_.layers)
    for (const WeightView* m : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down}) bytes += matrix_bytes(*m);
  return bytes;
}

}  // namespace coda
