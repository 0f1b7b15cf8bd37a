#include "sampling/candidates.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace coda {

void Candidates::assign(const float* logits_in, int32_t n_vocab) {
  ids.resize(static_cast<size_t>(n_vocab));
  std::iota(ids.begin(), ids.end(), 0);
  logits.assign(logits_in, logits_in + n_vocab);
  sorted = false;
  identity = true;
}

void Candidates::take(const std::vector<size_t>& order) {
  std::vector<int32_t> new_ids(order.size());
  std::vector<float> new_logits(order.size());
  for (size_t i = 0; i < order.size(); ++i) {
    new_ids[i] = ids[order[i]];
    new_logits[i] = logits[order[i]];
  }
  ids.swap(new_ids);
  logits.swap(new_logits);
  sorted = true;
  identity = false;
}

void Candidates::sort() {
  if (sorted) return;
  std::vector<size_t> order(ids.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && ids[a] < ids[b]); });
  take(order);
}

void Candidates::keep_top(size_t n) {
  if (sorted || n >= ids.size()) {
    sort();
    truncate(n);
    return;
  }
  std::vector<size_t> order(ids.size());
  std::iota(order.begin(), order.end(), size_t{0});
  auto before = [&](size_t a, size_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && ids[a] < ids[b]);
  };
  std::nth_element(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(n), order.end(), before);
  order.resize(n);
  std::sort(order.begin(), order.end(), before);
  take(order);
}

void Candidates::truncate(size_t n) {
  if (n < ids.size()) {
    identity = false;
    ids.resize(n);
    logits.resize(n);
  }
}

float* Candidates::logit_of(int32_t id) {
  if (id < 0) return nullptr;
  if (identity) return static_cast<size_t>(id) < logits.size() ? &logits[static_cast<size_t>(id)] : nullptr;
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] == id) return &logits[i];
  return nullptr;
}

std::vector<float> Candidates::probs() const {
  std::vector<float> p(ids.size(), 0.0f);
  if (p.empty()) return p;
  const float max = *std::max_element(logits.begin(), logits.end());
  if (std::isinf(max) && max < 0) {
    std::fill(p.begin(), p.end(), 1.0f / static_cast<float>(p.size()));
    return p;
  }
  double sum = 0;
  for (size_t i = 0; i < p.size(); ++i) sum += p[i] = std::exp(logits[i] - max);
  for (float& x : p) x = static_cast<float>(x / sum);
  return p;
}

}  // namespace coda
