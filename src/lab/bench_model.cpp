#include "lab/bench_model.h"

#include <algorithm>
#include <random>
#include <vector>

#include "core/timer.h"

namespace coda {

double measure_read_bandwidth(ThreadPool& pool, const std::vector<MemRange>& ranges, int reps) {
  int64_t total = 0;
  for (const MemRange& r : ranges) total += r.bytes;
  if (total == 0) return 0;
  const KernelTable& k = kernels();
  std::vector<uint64_t> sink(static_cast<size_t>(pool.size()));
  double best = 0;
  for (int rep = 0; rep < reps; ++rep) {
    Timer t;
    pool.run([&](int tid, int nt) {
      // Thread tid streams bytes [lo, hi) of the concatenation of the ranges.
      const int64_t lo = total * tid / nt, hi = total * (tid + 1) / nt;
      int64_t base = 0;
      for (const MemRange& r : ranges) {
        const int64_t b = std::max(lo, base), e = std::min(hi, base + r.bytes);
        if (b < e) sink[static_cast<size_t>(tid)] ^= k.stream_read(r.data + (b - base), e - b);
        base += r.bytes;
      }
    });
    best = std::max(best, static_cast<double>(total) / (t.ms() * 1e6));
  }
  return best;
}

double measure_read_bandwidth(ThreadPool& pool, int64_t bytes, int reps) {
  std::vector<uint8_t> buf(static_cast<size_t>(bytes));
  pool.parallel_for(bytes, [&](int64_t b, int64_t e) { std::fill(buf.begin() + b, buf.begin() + e, uint8_t{1}); });
  return measure_read_bandwidth(pool, {{buf.data(), bytes}}, reps);
}

namespace {

Expected<StreamsResult> bench_streams(const Model& model, ThreadPool& pool, const BenchModelOptions& opt, int b,
                                      std::mt19937_64& rng) {
  constexpr int64_t kPrompt = 16;
  if (b < 1 || b > 256) return Error("bench: --streams takes counts from 1 to 256");
  const ModelConfig& c = model.config();
  std::vector<KvCache> kvs;
  for (int s = 0; s < b; ++s) {
    CODA_ASSIGN_OR_RETURN(KvCache kv, KvCache::create(c, kPrompt + opt.n_gen + 1));
    kvs.push_back(std::move(kv));
  }
  ForwardBuffers buf;
  std::vector<float> logits(static_cast<size_t>(b) * static_cast<size_t>(c.n_vocab));
  std::vector<int32_t> prompt(kPrompt), next(static_cast<size_t>(b), 0);
  StreamsResult sr;
  sr.streams = b;
  for (int rep = 0; rep < opt.reps; ++rep) {
    for (int s = 0; s < b; ++s) {
      for (auto& t : prompt) t = static_cast<int32_t>(rng() % static_cast<uint64_t>(c.n_vocab));
      CODA_RETURN_IF_ERROR(kvs[static_cast<size_t>(s)].truncate(0));
      CODA_RETURN_IF_ERROR(model.forward(prompt.data(), kPrompt, kvs[static_cast<size_t>(s)], pool, buf,
                                         logits.data() + static_cast<int64_t>(s) * c.n_vocab, false));
    }
    std::vector<BatchSeq> seqs(static_cast<size_t>(b));
    Timer d;
    for (int64_t i = 0; i < opt.n_gen; ++i) {
      for (int s = 0; s < b; ++s) {
        const float* l = logits.data() + static_cast<int64_t>(s) * c.n_vocab;
        next[static_cast<size_t>(s)] = static_cast<int32_t>(std::max_element(l, l + c.n_vocab) - l);
        seqs[static_cast<size_t>(s)] = {&next[static_cast<size_t>(s)], 1, &kvs[static_cast<size_t>(s)],
                                        logits.data() + static_cast<int64_t>(s) * c.n_vocab};
      }
      CODA_RETURN_IF_ERROR(model.forward_batch(seqs, pool, buf));
    }
    sr.aggregate_tps = std::max(sr.aggregate_tps, static_cast<double>(opt.n_gen * b) / (d.ms() / 1000));
  }
  return sr;
}

}  // namespace

Expected<BenchModelResult> bench_model(const Model& model, ThreadPool& pool, const BenchModelOptions& opt) {
  const ModelConfig& c = model.config();
  if (opt.n_prompt < 1 || opt.n_gen < 1 || opt.reps < 1) return Error("bench: -p, -n and --reps must be >= 1");
  if (opt.depth < 0) return Error("bench: --depth must be >= 0");
  const int64_t ctx = opt.depth + opt.n_prompt + opt.n_gen;
  CODA_ASSIGN_OR_RETURN(KvCache kv, KvCache::create(c, ctx));
  ForwardBuffers buf;
  std::vector<float> logits(static_cast<size_t>(c.n_vocab));
  std::mt19937_64 rng(opt.seed);
  std::vector<int32_t> prompt(static_cast<size_t>(opt.n_prompt));
  for (auto& t : prompt) t = static_cast<int32_t>(rng() % static_cast<uint64_t>(c.n_vocab));
  std::vector<int32_t> context(static_cast<size_t>(opt.depth));
  for (auto& t : context) t = static_cast<int32_t>(rng() % static_cast<uint64_t>(c.n_vocab));
  // The context is prefilled in chunks, as a server would, so that its scratch stays small.
  for (int64_t i = 0; i < opt.depth; i += 512)
    CODA_RETURN_IF_ERROR(
        model.forward(context.data() + i, std::min<int64_t>(512, opt.depth - i), kv, pool, buf, logits.data(), false));
  if (opt.warmup) {
    CODA_RETURN_IF_ERROR(model.forward(prompt.data(), opt.n_prompt, kv, pool, buf, logits.data(), false));
    const int32_t next = 0;
    CODA_RETURN_IF_ERROR(model.forward(&next, 1, kv, pool, buf, logits.data(), false));
  }

  // The roofline uses the bandwidth of streaming exactly the weights a decode step reads, from the
  // same mapping: on a shared VM a fresh buffer's bandwidth varies with where its pages land.
  std::vector<MemRange> ranges;
  const ModelWeights& w = model.weights();
  auto bytes = [](const WeightView& m) { return m.packed ? packed_bytes(m) : m.rows * m.row_bytes; };
  ranges.push_back({w.output.data, bytes(w.output)});
  for (const LayerWeights& L : w.layers)
    for (const WeightView* m : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down})
      ranges.push_back({m->data, bytes(*m)});
  BenchModelResult r;
  r.bytes_per_token = model.decode_weight_bytes();
  for (int rep = 0; rep < opt.reps; ++rep) {
    CODA_RETURN_IF_ERROR(kv.truncate(opt.depth));
    Timer t;
    CODA_RETURN_IF_ERROR(model.forward(prompt.data(), opt.n_prompt, kv, pool, buf, logits.data(), false));
    r.prefill_tps = std::max(r.prefill_tps, static_cast<double>(opt.n_prompt) / (t.ms() / 1000));
    const double bw_before = measure_read_bandwidth(pool, ranges, 2);
    Timer d;
    for (int64_t i = 0; i < opt.n_gen; ++i) {
      const auto next = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
      CODA_RETURN_IF_ERROR(model.forward(&next, 1, kv, pool, buf, logits.data(), false));
    }
    const double tps = static_cast<double>(opt.n_gen) / (d.ms() / 1000);
    // Conservative: the higher of the bandwidths measured just before and just after the decode.
    const double bw = std::max(bw_before, measure_read_bandwidth(pool, ranges, 2));
    r.rep_fractions.push_back(tps / (bw * 1e9 / static_cast<double>(r.bytes_per_token)));
    r.decode_tps = std::max(r.decode_tps, tps);
    r.bandwidth_gbs = std::max(r.bandwidth_gbs, bw);
  }
  r.decode_ms = 1000.0 / r.decode_tps;
  r.roofline_tps = r.bandwidth_gbs * 1e9 / static_cast<double>(r.bytes_per_token);
  std::vector<double> sorted = r.rep_fractions;
  std::sort(sorted.begin(), sorted.end());
  r.roofline_fraction = sorted[sorted.size() / 2];
  r.buffer_bandwidth_gbs = measure_read_bandwidth(pool);
  for (int b : opt.streams) {
    CODA_ASSIGN_OR_RETURN(StreamsResult sr, bench_streams(model, pool, opt, b, rng));
    r.batched.push_back(sr);
  }
  return r;
}

}  // namespace coda
