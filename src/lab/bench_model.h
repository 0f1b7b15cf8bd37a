// Model throughput benchmark: prefill and decode tokens/s, and decode against the memory-bandwidth
// roofline (decode must read every weight once per token, so bandwidth / bytes per token bounds it).
#pragma once

#include <cstdint>
#include <vector>

#include "core/thread_pool.h"
#include "model/model.h"

namespace coda {

struct BenchModelOptions {
  int64_t n_prompt = 128;
  int64_t n_gen = 32;
  int reps = 3;
  uint64_t seed = 1;
  // Tokens of context already in the cache when prefill and decode are timed (llama-bench -d):
  // prefilled once, untimed; every repetition then starts from that context.
  int64_t depth = 0;
  // One untimed prefill and decode step before the timed repetitions (llama-bench's warm-up), so
  // that even -r 1 measures a warm run rather than page faults and cold caches.
  bool warmup = true;
  // Batched decode (llama-batched-bench's -npl): for each count B, B sequences each prefilled with
  // a 16-token prompt (untimed), then n_gen steps that decode one token of every sequence in one
  // forward pass. Measures the engine alone, without a server's sampling and HTTP.
  std::vector<int> streams;
};

struct StreamsResult {
  int streams = 0;
  double aggregate_tps = 0;  // tokens of all sequences per second, best of reps
};

struct BenchModelResult {
  double prefill_tps = 0;  // best of reps
  double decode_tps = 0;   // best of reps, averaged over n_gen steps
  double decode_ms = 0;
  int64_t bytes_per_token = 0;      // weights read by one decode step
  double bandwidth_gbs = 0;         // streaming the model's own weights, same thread count (best)
  double buffer_bandwidth_gbs = 0;  // streaming a fresh 512 MiB buffer, for comparison
  double roofline_tps = 0;          // bandwidth_gbs / bytes_per_token
  // Each repetition's decode rate over the roofline of the higher of the bandwidths measured just
  // before and just after it (shared machines change bandwidth from one second to the next), and
  // the median of those.
  std::vector<double> rep_fractions;
  double roofline_fraction = 0;
  std::vector<StreamsResult> batched;
};

// Streams the given memory ranges with every thread (each takes an equal share of the bytes) and
// returns GB/s, best of reps.
struct MemRange {
  const uint8_t* data;
  int64_t bytes;
};
double measure_read_bandwidth(ThreadPool& pool, const std::vector<MemRange>& ranges, int reps = 5);

// Streams a buffer much larger than the caches with every thread and returns GB/s (best of reps:
// on a shared machine the bandwidth others leave varies from run to run, the best is the ceiling).
double measure_read_bandwidth(ThreadPool& pool, int64_t bytes = int64_t{512} << 20, int reps = 12);

Expected<BenchModelResult> bench_model(const Model& model, ThreadPool& pool, const BenchModelOptions& opt);

}  // namespace coda
