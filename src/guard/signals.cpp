#include "guard/signals.h"

#include <algorithm>
#include <cmath>

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

}  // namespace coda
