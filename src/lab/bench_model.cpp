#include "lab/bench_model.h"

#include <algorithm>
#include <random>
#include <vector>

#include "core/timer.h"

namespace coda {

double measure_read_bandwidth(ThreadPool& pool, int64_t bytes, int reps) {
  const int64_t n = bytes / static_cast<int64_t>(sizeof(float));
  std::vector<float> buf(static_cast<size_t>(n));
  pool.parallel_for(n, [&](int64_t b, int64_t e) { std::fill(buf.begin() + b, buf.begin() + e, 1.0f); });
  const KernelTable& k = kernels();
  double best = 0;
  std::vector<float> sink(static_cast<size_t>(pool.size()));
  for (int r = 0; r < reps; ++r) {
    Timer t;
    pool.run([&](int i, int nt) {
      const int64_t b = n * i / nt, e = n * (i + 1) / nt;
      // dot(x, x) reads each cache line once from memory; the second operand hits the cache.
      sink[static_cast<size_t>(i)] += k.dot_f32(buf.data() + b, buf.data() + b, e - b);
    });
    best = std::max(best, static_cast<double>(bytes) / (t.ms() * 1e6));
  }
  return best;
}

Expected<BenchModelResult> bench_model(const Model& model, ThreadPool& pool, const BenchModelOptions& opt) {
  const ModelConfig& c = model.config();
  if (opt.n_prompt < 1 || opt.n_gen < 1 || opt.reps < 1) return Error("bench: -p, -n and --reps must be >= 1");
  const int64_t ctx = opt.n_prompt + opt.n_gen;
  KvCache kv(c, ctx);
  ForwardBuffers buf;
  std::vector<float> logits(static_cast<size_t>(c.n_vocab));
  std::mt19937_64 rng(opt.seed);
  std::vector<int32_t> prompt(static_cast<size_t>(opt.n_prompt));
  for (auto& t : prompt) t = static_cast<int32_t>(rng() % static_cast<uint64_t>(c.n_vocab));

  BenchModelResult r;
  for (int rep = 0; rep < opt.reps; ++rep) {
    kv.clear();
    Timer t;
    CODA_RETURN_IF_ERROR(model.forward(prompt.data(), opt.n_prompt, kv, pool, buf, logits.data(), false));
    r.prefill_tps = std::max(r.prefill_tps, static_cast<double>(opt.n_prompt) / (t.ms() / 1000));
    Timer d;
    for (int64_t i = 0; i < opt.n_gen; ++i) {
      const auto next = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
      CODA_RETURN_IF_ERROR(model.forward(&next, 1, kv, pool, buf, logits.data(), false));
    }
    r.decode_tps = std::max(r.decode_tps, static_cast<double>(opt.n_gen) / (d.ms() / 1000));
  }
  r.decode_ms = 1000.0 / r.decode_tps;
  r.bytes_per_token = model.decode_weight_bytes();
  // Measured after the model runs, while the machine is in the same state.
  r.bandwidth_gbs = measure_read_bandwidth(pool);
  r.roofline_tps = r.bandwidth_gbs * 1e9 / static_cast<double>(r.bytes_per_token);
  return r;
}

}  // namespace coda
