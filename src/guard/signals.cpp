#include "guard/signals.h"

#include <algorithm>
#include <cmath>
#include <functional>

#include "kernels/kernels.h"

namespace coda {

StepSignals step_signals(const float* logits, int32_t n, int32_t chosen, const std::vector<int32_t>& eos_ids) {
  StepSignals s;
  if (n <= 0) return s;
  const KernelTable& k = kernels();
  const float max = k.max_f32(logits, n);
  if (!std::isfinite(max)) return s;
  const SoftmaxMoments m = k.softmax_moments(logits, n, max);
  const double log_z = std::log(m.z);
  const double mean_d = m.s1 / m.z;
  s.entropy = static_cast<float>(std::max(0.0, log_z - mean_d));
  s.varentropy = static_cast<float>(std::max(0.0, m.s2 / m.z - mean_d * mean_d));
  if (chosen >= 0 && chosen < n) s.surprisal = static_cast<float>(log_z - (static_cast<double>(logits[chosen]) - max));
  for (int32_t e : eos_ids) {
    if (e < 0 || e >= n) continue;
    s.eos_prob += static_cast<float>(std::exp(static_cast<double>(logits[e]) - max) / m.z);
    const auto rank = static_cast<int32_t>(k.count_above(logits, n, logits[e]));
    s.eos_rank = s.eos_rank < 0 ? rank : std::min(s.eos_rank, rank);
  }
  s.top1_prob = static_cast<float>(1.0 / m.z);
  int32_t top = 0;
  while (top + 1 < n && logits[top] != max) ++top;
  float second = -INFINITY;
  if (top > 0) second = k.max_f32(logits, top);
  if (top + 1 < n) second = std::max(second, k.max_f32(logits + top + 1, n - top - 1));
  const double p2 = std::isfinite(second) ? std::exp(static_cast<double>(second) - max) / m.z : 0.0;
  s.top1_margin = static_cast<float>(1.0 / m.z - p2);
  return s;
}

StepSignals top_k_signals(double chosen_logprob, const std::vector<double>& top_logprobs,
                          std::optional<double> eos_logprob) {
  StepSignals s;
  s.surprisal = static_cast<float>(std::max(0.0, -chosen_logprob));
  std::vector<double> p;
  p.reserve(top_logprobs.size() + 1);
  for (double lp : top_logprobs)
    if (std::isfinite(lp)) p.push_back(std::exp(std::min(0.0, lp)));
  if (p.empty()) p.push_back(std::exp(std::min(0.0, chosen_logprob)));  // only the chosen token is known
  std::sort(p.begin(), p.end(), std::greater<>());
  double seen = 0, h = 0, s2 = 0;
  for (double q : p) {
    if (q <= 0) continue;
    seen += q;
    h -= q * std::log(q);
    s2 += q * std::log(q) * std::log(q);
  }
  const double unseen = std::max(0.0, 1.0 - seen);
  const double p_min = p.back();
  if (unseen > 0 && p_min > 0) {
    const double l = -std::log(p_min);
    h += unseen * l;
    s2 += unseen * l * l;
  }
  s.entropy = static_cast<float>(std::max(0.0, h));
  s.varentropy = static_cast<float>(std::max(0.0, s2 - h * h));
  s.top1_prob = static_cast<float>(p[0]);
  s.top1_margin = static_cast<float>(p[0] - (p.size() > 1 ? p[1] : std::min(p[0], unseen)));
  if (eos_logprob) {
    const double pe = std::exp(std::min(0.0, *eos_logprob));
    s.eos_prob = static_cast<float>(pe);
    s.eos_rank = static_cast<int32_t>(std::count_if(p.begin(), p.end(), [&](double q) { return q > pe; }));
  } else {
    s.eos_prob = static_cast<float>(unseen > 0 ? std::min(unseen, p_min) : 0.0);
  }
  return s;
}

}  // namespace coda
