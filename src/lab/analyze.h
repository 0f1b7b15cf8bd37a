// Block-wise analysis of generations, after the "perpetual text" study of EOS behaviour: per block
// of k generated tokens, the mean EOS probability, information content (surprisal of the chosen
// token), entropy and varentropy over all generations that reached the block; and the top
// alternatives at every step where EOS was among them. Input is the guard's per-token trace
// (with top alternatives when logprobs were requested); output CSV, JSON and an HTML report with
// SVG charts.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/status.h"

namespace coda {

struct TraceStep {
  int64_t i = 0;
  int32_t token = -1;
  double entropy = 0, varentropy = 0, surprisal = 0, eos_prob = 0;
  int32_t eos_rank = -1;
  std::vector<std::pair<std::string, double>> top;  // piece, logprob (optional)
};

struct BlockStats {
  // Tokens [block * k, (block + 1) * k); aligned on the end, counted back from it: block -1 holds
  // the last k tokens of each sequence (its EOS last), -2 the k before them, ...
  int64_t block = 0;
  int64_t steps = 0;
  int64_t sequences = 0;
  double eos_prob = 0, surprisal = 0, entropy = 0, varentropy = 0;
};

struct EosContext {
  size_t sequence = 0;
  int64_t i = 0;
  double eos_prob = 0;
  int32_t eos_rank = -1;
  std::vector<std::pair<std::string, double>> top;
};

struct Analysis {
  int block_size = 32;
  bool aligned_on_end = false;
  std::vector<BlockStats> blocks;
  std::vector<EosContext> eos_contexts;
  size_t sequences = 0;
  nlohmann::ordered_json to_json() const;
  std::string to_csv() const;
  std::string to_html(const std::string& title) const;
};

// One trace per sequence; steps in generation order. A "rollback_to" line in a trace drops the
// steps after it, as the generation did.
// With `align_on_end`, blocks are counted back from each sequence's last step (the perpetual-text
// study's figure, aligned on the EOS), and listed from the earliest to the last.
Analysis analyze_traces(const std::vector<std::vector<TraceStep>>& traces, int block_size, int eos_top_rank = 5,
                        bool align_on_end = false);

// Reads a trace written by `coda run --trace` (JSON Lines).
Expected<std::vector<TraceStep>> read_trace(const std::string& path);
std::vector<TraceStep> trace_from_json(const std::vector<nlohmann::ordered_json>& lines);

}  // namespace coda
