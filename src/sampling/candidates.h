// The next-token distribution as the sampling processors see and reshape it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace coda {

// Candidate tokens with their logits. Processors may scale logits, set them to -inf, reorder and
// drop candidates; `sorted` records that they are in descending logit order.
struct Candidates {
  std::vector<int32_t> ids;
  std::vector<float> logits;
  bool sorted = false;
  bool identity = false;  // ids[i] == i (nothing reordered or dropped yet): index by token id

  void assign(const float* logits_in, int32_t n_vocab);
  size_t size() const { return ids.size(); }
  // Sorts by descending logit (ties by id, so results never depend on the sort's stability).
  void sort();
  // Keeps the first n candidates (after sort()).
  void truncate(size_t n);
  // Keeps the n highest, sorted: a partial selection, O(V + n log n) instead of a full sort.
  void keep_top(size_t n);
  // Keeps the candidates whose logit is >= threshold, in their current order.
  void keep_at_least(float threshold);
  // Replaces the candidates by those at positions `order`, in that (descending) order.
  void take(const std::vector<size_t>& order);
  // The logit of token `id` if it is still a candidate, else null (O(1) while `identity`).
  float* logit_of(int32_t id);
  // Softmax of the current logits in candidate order; -inf gets 0. All -inf: uniform.
  std::vector<float> probs() const;
};

// What penalties look at: the prompt and the tokens generated so far.
struct TokenHistory {
  std::vector<int32_t> prompt;
  std::vector<int32_t> generated;
  size_t size() const { return prompt.size() + generated.size(); }
  int32_t at(size_t i) const { return i < prompt.size() ? prompt[i] : generated[i - prompt.size()]; }
};

}  // namespace coda
