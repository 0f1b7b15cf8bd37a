// The forward pass and KV cache on synthetic models: batched == incremental, rollback reproduces,
// and bad models or inputs give errors that name what is wrong.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <random>

#include "gguf/gguf_writer.h"
#include "model/model.h"
#include "model/quantize_model.h"
#include "model/synth.h"

namespace coda {
namespace {

std::string temp_path(const std::string& name) {
  // Per process: ctest runs test cases in parallel processes.
  return (std::filesystem::temp_directory_path() / ("coda_test_" + std::to_string(::getpid()) + "_" + name)).string();
}

std::unique_ptr<Model> synth_model(const std::string& shape, DType t, ThreadPool& pool, const LoadOptions& lo = {}) {
  SynthOptions o;
  o.shape = shape;
  o.type = t;
  o.n_layers = 2;
  o.out = temp_path(shape + "-" + dtype_name(t) + ".gguf");
  auto r = write_synthetic_model(o, pool);
  EXPECT_TRUE(r.ok()) << r.message();
  auto m = Model::load(o.out, lo);
  std::filesystem::remove(o.out);  // the mapping keeps the data
  EXPECT_TRUE(m.ok()) << m.message();
  return std::move(m).value();
}

std::vector<int32_t> random_tokens(int n, int vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab));
  return t;
}

class ForwardPerShape : public ::testing::TestWithParam<std::pair<const char*, DType>> {};

TEST_P(ForwardPerShape, BatchedEqualsIncrementalAndRollbackReproduces) {
  ThreadPool pool(2);
  auto m = synth_model(GetParam().first, GetParam().second, pool);
  ASSERT_NE(m, nullptr);
  const int64_t V = m->config().n_vocab;
  const int n = 40;
  const auto toks = random_tokens(n, static_cast<int>(V), 5);
  ForwardBuffers buf;

  KvCache batch_kv = std::move(*KvCache::create(m->config(), n));
  std::vector<float> all(static_cast<size_t>(n * V));
  ASSERT_TRUE(m->forward(toks.data(), n, batch_kv, pool, buf, all.data(), true).ok());

  KvCache kv = std::move(*KvCache::create(m->config(), n));
  std::vector<float> step(static_cast<size_t>(V));
  std::vector<std::vector<float>> steps;
  for (int i = 0; i < n; ++i) {
    ASSERT_TRUE(m->forward(&toks[static_cast<size_t>(i)], 1, kv, pool, buf, step.data(), false).ok());
    steps.push_back(step);
    double num = 0, den = 0;
    for (int64_t v = 0; v < V; ++v) {
      const double d = step[static_cast<size_t>(v)] - all[static_cast<size_t>(i * V + v)];
      num += d * d;
      den += step[static_cast<size_t>(v)] * step[static_cast<size_t>(v)];
    }
    ASSERT_LE(std::sqrt(num / den), 1e-4) << "position " << i;
  }
  // Roll back to 25 tokens and replay: the same computation must give identical logits.
  ASSERT_TRUE(kv.truncate(25).ok());
  EXPECT_EQ(kv.size(), 25);
  for (int i = 25; i < n; ++i) {
    ASSERT_TRUE(m->forward(&toks[static_cast<size_t>(i)], 1, kv, pool, buf, step.data(), false).ok());
    ASSERT_EQ(step, steps[static_cast<size_t>(i)]) << "position " << i;
  }
  EXPECT_FALSE(kv.truncate(n + 1).ok());
}

INSTANTIATE_TEST_SUITE_P(Shapes, ForwardPerShape,
                         ::testing::Values(std::make_pair("tiny", DType::Q4_K), std::make_pair("tiny", DType::Q4_0),
                                           std::make_pair("tiny-llama3", DType::Q8_0),
                                           std::make_pair("tiny-qwen2", DType::F16)));

// Weights repacked for the GEMM kernels give the logits of the file's own layout: every matrix, and
// the tied output with the embedding lookups through it. On the bundled (trained) model quantized to
// each packed type. The two layouts sum in different orders, so their activations differ in the
// last bits, and once in a while an 8-bit activation quant rounds the other way (a step of 1/127 of
// its block's maximum); from there the cache carries a difference of ~1e-3. Positions before the
// first such flip agree to ~1e-7. A misplaced row, scale or nibble changes logits by O(1), so the
// bound of 1e-2 still separates a right layout from a wrong one; the kernels themselves are held to
// the scalar reference in test_repack.cpp.
TEST(Forward, RepackedWeightsGiveTheSameLogits) {
  ThreadPool pool(2);
  for (DType type : {DType::Q8_0, DType::Q4_0, DType::Q4_K}) {
    const std::string path = temp_path(std::string("bundled-") + dtype_name(type) + ".gguf");
    ASSERT_TRUE(quantize_model_file(CODA_MODEL_PATH, path, type, pool).ok());
    // An F32 KV cache: the half-float rounding of the default cache would move the flip points
    // this bound is sized for, and the cache is not what this test is about.
    // Every type with a GEMM, including those the table keeps unpacked by default.
    auto packed_m =
        Model::load(path, LoadOptions{.repack_all = true, .kv_type_k = KvType::F32, .kv_type_v = KvType::F32});
    auto plain_m = Model::load(path, LoadOptions{.repack = false, .kv_type_k = KvType::F32, .kv_type_v = KvType::F32});
    std::filesystem::remove(path);
    ASSERT_TRUE(packed_m.ok() && plain_m.ok());
    const Model& packed = **packed_m;
    const Model& plain = **plain_m;
    EXPECT_EQ(plain.repack_stats().matrices, 0);
    if (packed.repack_stats().matrices == 0) {
      GTEST_LOG_(INFO) << "this CPU's kernels do not repack " << dtype_name(type);
      continue;
    }
    const int64_t n_matrices = 7 * packed.config().n_layers + 1;
    EXPECT_EQ(packed.repack_stats().matrices, n_matrices);
    EXPECT_GT(packed.repack_stats().bytes, 0);
    const int64_t V = packed.config().n_vocab;
    const int n = 37;  // 4 tiles of 8 tokens and a remainder of 5
    const auto toks = random_tokens(n, static_cast<int>(V), 8);
    std::vector<float> a(static_cast<size_t>(n * V)), b(a.size());
    ForwardBuffers buf;
    KvCache kv_a = std::move(*KvCache::create(packed.config(), n));
    KvCache kv_b = std::move(*KvCache::create(plain.config(), n));
    ASSERT_TRUE(packed.forward(toks.data(), n, kv_a, pool, buf, a.data(), true).ok());
    ASSERT_TRUE(plain.forward(toks.data(), n, kv_b, pool, buf, b.data(), true).ok());
    for (int i = 0; i < n; ++i) {
      double num = 0, den = 0;
      for (int64_t v = 0; v < V; ++v) {
        const double d = a[i * V + v] - b[i * V + v];
        num += d * d;
        den += static_cast<double>(b[i * V + v]) * b[i * V + v];
      }
      ASSERT_LE(std::sqrt(num / den), i == 0 ? 1e-5 : 1e-2) << dtype_name(type) << " position " << i;
    }
  }
}

TEST(Forward, ContextOverflowAndBadTokensAreErrors) {
  ThreadPool pool(1);
  auto m = synth_model("tiny", DType::F32, pool);
  ASSERT_NE(m, nullptr);
  KvCache kv = std::move(*KvCache::create(m->config(), 4));
  ForwardBuffers buf;
  std::vector<float> logits(static_cast<size_t>(m->config().n_vocab));
  const int32_t toks[5] = {1, 2, 3, 4, 5};
  auto s = m->forward(toks, 5, kv, pool, buf, logits.data(), false);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message(), "context overflow: 0 tokens in the context + 5 new exceed the context size of 4 tokens");
  EXPECT_EQ(kv.size(), 0);
  const int32_t bad[2] = {1, 999999};
  s = m->forward(bad, 2, kv, pool, buf, logits.data(), false);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("token id 999999 at index 1 is out of range"), std::string::npos) << s.message();
}

// A minimal llama model built by hand so tests can break one thing at a time.
struct HandModel {
  GgufWriter w;
  std::map<std::string, uint32_t> ints{{"llama.context_length", 64},      {"llama.embedding_length", 32},
                                       {"llama.block_count", 1},          {"llama.feed_forward_length", 64},
                                       {"llama.attention.head_count", 4}, {"llama.attention.head_count_kv", 2}};
  DType q_type = DType::F32;
  bool skip_ffn_up = false;
  int64_t dim = 32;
  int64_t q_rows = 32;

  Expected<std::unique_ptr<Model>> build(const std::string& name) {
    w.set_string("general.architecture", "llama");
    if (ints.count("llama.embedding_length")) ints["llama.embedding_length"] = static_cast<uint32_t>(dim);
    for (const auto& [k, v] : ints) w.set_u32(k, v);
    auto add = [&](const std::string& n, DType t, std::vector<int64_t> ne) {
      EXPECT_TRUE(w.add_tensor(n, t, ne, nullptr).ok());
    };
    const int64_t kvd = dim / 2;  // 2 of 4 heads
    add("token_embd.weight", DType::F32, {dim, 16});
    add("output_norm.weight", DType::F32, {dim});
    add("blk.0.attn_norm.weight", DType::F32, {dim});
    add("blk.0.ffn_norm.weight", DType::F32, {dim});
    add("blk.0.attn_q.weight", q_type, {dim, q_rows});
    add("blk.0.attn_k.weight", DType::F32, {dim, kvd});
    add("blk.0.attn_v.weight", DType::F32, {dim, kvd});
    add("blk.0.attn_output.weight", DType::F32, {dim, dim});
    add("blk.0.ffn_gate.weight", DType::F32, {dim, 64});
    if (!skip_ffn_up) add("blk.0.ffn_up.weight", DType::F32, {dim, 64});
    add("blk.0.ffn_down.weight", DType::F32, {64, dim});
    const std::string path = temp_path(name + ".gguf");
    EXPECT_TRUE(w.write(path).ok());
    auto m = Model::load(path);
    std::filesystem::remove(path);
    return m;
  }
};

TEST(ModelLoad, ValidHandModelLoads) {
  HandModel h;
  auto m = h.build("hand_ok");
  ASSERT_TRUE(m.ok()) << m.message();
  EXPECT_EQ((*m)->config().head_dim, 8);
  EXPECT_TRUE((*m)->weights().tied_output);
}

TEST(ModelLoad, MissingKeyIsNamed) {
  HandModel h;
  h.ints.erase("llama.embedding_length");
  auto m = h.build("hand_missing_key");
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.message().find("required key 'llama.embedding_length' is missing"), std::string::npos) << m.message();
}

TEST(ModelLoad, InconsistentHeadsAreNamed) {
  HandModel h;
  h.ints["llama.attention.head_count_kv"] = 3;
  auto m = h.build("hand_heads");
  ASSERT_FALSE(m.ok());
  EXPECT_NE(
      m.message().find("'llama.attention.head_count' (4) is not a multiple of 'llama.attention.head_count_kv' (3)"),
      std::string::npos)
      << m.message();
}

TEST(ModelLoad, WrongShapeIsNamed) {
  HandModel h;
  h.q_rows = 24;
  auto m = h.build("hand_shape");
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.message().find("tensor 'blk.0.attn_q.weight' has shape [32, 24]; the model metadata requires [32, 32]"),
            std::string::npos)
      << m.message();
}

TEST(ModelLoad, MissingTensorIsNamed) {
  HandModel h;
  h.skip_ffn_up = true;
  auto m = h.build("hand_missing_tensor");
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.message().find("model is missing tensor 'blk.0.ffn_up.weight'"), std::string::npos) << m.message();
}

TEST(ModelLoad, UnsupportedTypeListsSupported) {
  HandModel h;
  h.dim = 256;  // IQ2_XS rows must be multiples of 256
  h.q_rows = 256;
  h.q_type = DType::IQ2_XS;
  auto m = h.build("hand_iq2");
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.message().find("tensor 'blk.0.attn_q.weight': type 17 (IQ2_XS) is not supported; supported: F32 F16 "
                             "BF16 Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 Q4_K Q5_K Q6_K Q3_K Q2_K IQ4_NL IQ4_XS"),
            std::string::npos)
      << m.message();
}

TEST(ModelLoad, UnknownArchitectureIsNamed) {
  GgufWriter w;
  w.set_string("general.architecture", "gemma3");
  const std::string path = temp_path("gemma.gguf");
  ASSERT_TRUE(w.write(path).ok());
  auto m = Model::load(path);
  std::filesystem::remove(path);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.message().find("'gemma3' is not supported; supported: llama, mistral, qwen2"), std::string::npos);
}

TEST(Synth, Llama3RopeFactorsFollowTheDefinition) {
  // With orig_ctx 8192, low 1, high 4: wavelengths < 2048 keep factor 1, > 8192 get the full factor.
  const auto f = llama3_rope_factors(64, 500000.0f, 32.0f, 1.0f, 4.0f, 8192);
  EXPECT_FLOAT_EQ(f.front(), 1.0f);  // highest frequency
  EXPECT_FLOAT_EQ(f.back(), 32.0f);  // lowest frequency
  for (size_t i = 1; i < f.size(); ++i) EXPECT_GE(f[i], f[i - 1]);
}

}  // namespace
}  // namespace coda

namespace coda {
namespace {

TEST(ForwardBatch, EqualsOneCallPerSequence) {
  auto m = Model::load(CODA_MODEL_PATH);
  ASSERT_TRUE(m);
  const Model& model = **m;
  const int64_t V = model.config().n_vocab;
  ThreadPool pool(2);
  ForwardBuffers buf;
  // Three sequences with different histories: two decode one token, one prefills a chunk.
  const std::vector<std::vector<int32_t>> prompts = {{1, 50, 60, 70}, {1, 300, 301}, {1, 9, 10, 11, 12, 13, 14}};
  const std::vector<std::vector<int32_t>> next = {{80}, {302}, {15, 16, 17, 18}};
  std::vector<KvCache> solo, batched;
  std::vector<std::vector<float>> want(3, std::vector<float>(static_cast<size_t>(V)));
  std::vector<std::vector<float>> got(3, std::vector<float>(static_cast<size_t>(V)));
  std::vector<float> scratch(static_cast<size_t>(V));
  for (size_t s = 0; s < 3; ++s) {
    solo.push_back(std::move(*KvCache::create(model.config(), 64)));
    batched.push_back(std::move(*KvCache::create(model.config(), 64)));
    ASSERT_TRUE(model
                    .forward(prompts[s].data(), static_cast<int64_t>(prompts[s].size()), solo[s], pool, buf,
                             scratch.data(), false)
                    .ok());
    ASSERT_TRUE(model
                    .forward(prompts[s].data(), static_cast<int64_t>(prompts[s].size()), batched[s], pool, buf,
                             scratch.data(), false)
                    .ok());
    ASSERT_TRUE(
        model.forward(next[s].data(), static_cast<int64_t>(next[s].size()), solo[s], pool, buf, want[s].data(), false)
            .ok());
  }
  std::vector<BatchSeq> seqs;
  for (size_t s = 0; s < 3; ++s)
    seqs.push_back({next[s].data(), static_cast<int64_t>(next[s].size()), &batched[s], got[s].data()});
  ASSERT_TRUE(model.forward_batch(seqs, pool, buf).ok());
  for (size_t s = 0; s < 3; ++s) {
    EXPECT_EQ(batched[s].size(), solo[s].size());
    double err = 0, norm = 0;
    for (int64_t i = 0; i < V; ++i) {
      err += std::pow(got[s][static_cast<size_t>(i)] - want[s][static_cast<size_t>(i)], 2);
      norm += std::pow(want[s][static_cast<size_t>(i)], 2);
    }
    EXPECT_LT(std::sqrt(err / norm), 1e-5) << "sequence " << s;
  }
  // Bad batches are refused and change nothing.
  const int32_t bad = static_cast<int32_t>(V);
  EXPECT_FALSE(model.forward_batch({{&bad, 1, &batched[0], nullptr}}, pool, buf).ok());
  EXPECT_FALSE(
      model
          .forward_batch({{next[0].data(), 1, &batched[0], nullptr}, {next[1].data(), 1, &batched[0], nullptr}}, pool,
                         buf)
          .ok());
  EXPECT_EQ(batched[0].size(), solo[0].size());
}

// The KV cache's element type: F16 (the default) halves its bytes, its logits stay within the
// precision of half floats of the F32 cache's, and caches of different types never mix.
TEST(KvCacheTypes, HalfFloatCacheHalvesTheBytesAndKeepsTheLogits) {
  ThreadPool pool(2);
  LoadOptions f32;
  f32.kv_type_k = f32.kv_type_v = KvType::F32;
  auto m16 = synth_model("tiny", DType::F32, pool);
  auto m32 = synth_model("tiny", DType::F32, pool, f32);
  ASSERT_NE(m16, nullptr);
  ASSERT_NE(m32, nullptr);
  EXPECT_EQ(m16->config().kv_type_k, KvType::F16);
  EXPECT_EQ(m32->config().kv_type_v, KvType::F32);
  const int n = 48;
  KvCache kv16 = std::move(*KvCache::create(m16->config(), n));
  KvCache kv32 = std::move(*KvCache::create(m32->config(), n));
  EXPECT_EQ(2 * kv16.bytes(), kv32.bytes());
  EXPECT_DOUBLE_EQ(2 * KvCache::bytes_needed(m16->config(), n), KvCache::bytes_needed(m32->config(), n));
  // Per token: layers x key/value heads x head_dim x 2 bytes x (K and V), not a 16-position block.
  const ModelConfig& c16 = m16->config();
  EXPECT_DOUBLE_EQ(KvCache::bytes_per_token(c16), static_cast<double>(c16.n_layers * c16.kv_dim() * 2 * 2));
  EXPECT_DOUBLE_EQ(KvCache::bytes_per_token(c16) * 48, KvCache::bytes_needed(c16, 48));
  const int64_t V = m16->config().n_vocab;
  const auto toks = random_tokens(n, static_cast<int>(V), 9);
  ForwardBuffers buf;
  std::vector<float> a(static_cast<size_t>(n * V)), b(a.size());
  ASSERT_TRUE(m16->forward(toks.data(), n, kv16, pool, buf, a.data(), true).ok());
  ASSERT_TRUE(m32->forward(toks.data(), n, kv32, pool, buf, b.data(), true).ok());
  double num = 0, den = 0, diff_max = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
    diff_max = std::max(diff_max, static_cast<double>(std::fabs(a[i] - b[i])));
  }
  // Float weights, so only the cache differs. Half floats keep 11 significant bits: a relative
  // rounding of at most 2^-11 = 4.9e-4 per element, and the logits move by less than that (1.5e-4
  // measured). The NumPy reference that rounds K and V the same way agrees with the F16 cache to
  // 3e-6 (tests/reference), so the difference is the rounding, not a kernel error.
  EXPECT_LT(std::sqrt(num / den), 4.9e-4);
  EXPECT_GT(diff_max, 0.0) << "the F16 cache was not used";
  KvCache other = std::move(*KvCache::create(m32->config(), n));
  const Status s = other.copy_prefix(kv16, 4);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("different types"), std::string::npos) << s.message();
}

// The Q8_0 cache: 34 bytes per 32 values (the F16 cache's 64), logits within 8-bit rounding of the
// F32 cache's, a prefill equal to token-by-token decode, and a prefix copy that reproduces a cold
// run bit for bit (each query's quantization and each score are independent of the block sizes).
void check_quantized_cache(KvType kt, KvType vt, int prefix) {
  ThreadPool pool(2);
  LoadOptions f32, q8;
  f32.kv_type_k = f32.kv_type_v = KvType::F32;
  q8.kv_type_k = kt;
  q8.kv_type_v = vt;
  auto m8 = synth_model("tiny-llama3", DType::F32, pool, q8);
  auto m32 = synth_model("tiny-llama3", DType::F32, pool, f32);
  auto m16 = synth_model("tiny-llama3", DType::F32, pool);
  ASSERT_NE(m8, nullptr);
  ASSERT_NE(m32, nullptr);
  ASSERT_NE(m16, nullptr);
  const int n = 48;
  KvCache kv8 = std::move(*KvCache::create(m8->config(), n));
  KvCache kv32 = std::move(*KvCache::create(m32->config(), n));
  KvCache kv16 = std::move(*KvCache::create(m16->config(), n));
  const int64_t hd = m8->config().head_dim;
  EXPECT_EQ(kv8.bytes() * 4 * hd, kv16.bytes() * (kv_row_bytes(kt, hd) + kv_row_bytes(vt, hd)));
  const int64_t V = m8->config().n_vocab;
  const auto toks = random_tokens(n, static_cast<int>(V), 19);
  ForwardBuffers buf;
  std::vector<float> a(static_cast<size_t>(n * V)), b(a.size());
  ASSERT_TRUE(m8->forward(toks.data(), n, kv8, pool, buf, a.data(), true).ok());
  ASSERT_TRUE(m32->forward(toks.data(), n, kv32, pool, buf, b.data(), true).ok());
  auto rel = [&](const float* x, const float* y, int64_t len) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < len; ++i) {
      num += (x[i] - y[i]) * (x[i] - y[i]);
      den += y[i] * y[i];
    }
    return std::sqrt(num / den);
  };
  // 8-bit values with one scale per 32 round by up to 1/254 of the block's largest magnitude;
  // keys, values and queries all round (4.3e-3 measured on this model). The NumPy reference that
  // rounds them the same way agrees far closer (tests/reference), so this is the rounding.
  const double err = rel(a.data(), b.data(), n * V);
  EXPECT_LT(err, 1e-2);
  EXPECT_GT(err, 1e-5) << "the Q8_0 cache was not used";
  // Token by token, then a prefix copied into a fresh cache and continued.
  KvCache step_kv = std::move(*KvCache::create(m8->config(), n));
  std::vector<float> step(static_cast<size_t>(V));
  std::vector<std::vector<float>> steps;
  for (int i = 0; i < n; ++i) {
    ASSERT_TRUE(m8->forward(&toks[static_cast<size_t>(i)], 1, step_kv, pool, buf, step.data(), false).ok());
    steps.push_back(step);
    ASSERT_LE(rel(step.data(), a.data() + i * V, V), 1e-4) << "position " << i;
  }
  // Copied on one thread and split over a pool of 3 (as the server's prefix cache copies): the same rows.
  ThreadPool copiers(3);
  for (ThreadPool* copy_pool : {static_cast<ThreadPool*>(nullptr), &copiers}) {
    KvCache reuse = std::move(*KvCache::create(m8->config(), n));
    ASSERT_TRUE(reuse.copy_prefix(step_kv, prefix, copy_pool).ok());
    for (int i = prefix; i < n; ++i) {
      ASSERT_TRUE(m8->forward(&toks[static_cast<size_t>(i)], 1, reuse, pool, buf, step.data(), false).ok());
      ASSERT_EQ(step, steps[static_cast<size_t>(i)]) << "position " << i << (copy_pool ? ", pooled copy" : "");
    }
  }
}

TEST(KvCacheTypes, Q8CacheKeepsTheLogitsAndReproducesPrefixes) {
  check_quantized_cache(KvType::Q8_0, KvType::Q8_0, 20);
}

// BF16 values (the weights rounded to bfloat16 as well) behind Q8_0 keys; an odd prefix copies the
// unpaired last position's pair whole.
TEST(KvCacheTypes, Bf16ValuesKeepTheLogitsAndReproducePrefixes) {
  check_quantized_cache(KvType::Q8_0, KvType::BF16, 21);
}

// Keys cannot be bfloat16: a clear error, not a silent fallback.
TEST(KvCacheTypes, Bf16KeysAreRefused) {
  ThreadPool pool(1);
  SynthOptions o;
  o.shape = "tiny";
  o.type = DType::F32;
  o.n_layers = 1;
  o.out = temp_path("bf16-keys.gguf");
  ASSERT_TRUE(write_synthetic_model(o, pool).ok());
  LoadOptions lo;
  lo.kv_type_k = KvType::BF16;
  auto m = Model::load(o.out, lo);
  std::filesystem::remove(o.out);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.message().find("values only"), std::string::npos) << m.message();
}

}  // namespace
}  // namespace coda
