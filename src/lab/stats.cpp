#include "lab/stats.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace coda::lab {

std::pair<double, double> wilson_interval(int64_t k, int64_t n, double z) {
  if (n <= 0) return {0.0, 1.0};
  const double nn = static_cast<double>(n);
  const double p = static_cast<double>(k) / nn;
  const double z2 = z * z;
  const double denom = 1 + z2 / nn;
  const double centre = (p + z2 / (2 * nn)) / denom;
  const double half = z * std::sqrt(p * (1 - p) / nn + z2 / (4 * nn * nn)) / denom;
  // At k = 0 and k = n the bounds are exactly 0 and 1; rounding must not push them past.
  return {k == 0 ? 0.0 : std::max(0.0, centre - half), k == n ? 1.0 : std::min(1.0, centre + half)};
}

double percentile(std::vector<double> xs, double q) {
  if (xs.empty()) return std::numeric_limits<double>::quiet_NaN();
  std::sort(xs.begin(), xs.end());
  const double pos = std::clamp(q, 0.0, 1.0) * static_cast<double>(xs.size() - 1);
  const auto lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, xs.size() - 1);
  return xs[lo] + (xs[hi] - xs[lo]) * (pos - static_cast<double>(lo));
}

double kolmogorov_survival(double lambda) {
  if (lambda <= 0) return 1.0;
  if (lambda < 0.3) return 1.0;  // the series converges slowly here; the tail is 1 to 6 digits
  double sum = 0;
  for (int j = 1; j <= 100; ++j) {
    const double term = std::exp(-2.0 * j * j * lambda * lambda);
    sum += (j % 2 == 1 ? 2.0 : -2.0) * term;
    if (term < 1e-16) break;
  }
  return std::clamp(sum, 0.0, 1.0);
}

KsResult ks_exponential(std::vector<double> xs, double rate) {
  KsResult r;
  if (xs.empty() || !(rate > 0)) return r;
  std::sort(xs.begin(), xs.end());
  const double n = static_cast<double>(xs.size());
  for (size_t i = 0; i < xs.size(); ++i) {
    const double cdf = xs[i] <= 0 ? 0.0 : 1.0 - std::exp(-rate * xs[i]);
    r.d = std::max({r.d, static_cast<double>(i + 1) / n - cdf, cdf - static_cast<double>(i) / n});
  }
  const double sq = std::sqrt(n);
  r.p_value = kolmogorov_survival((sq + 0.12 + 0.11 / sq) * r.d);
  return r;
}

bool dominates(const std::vector<double>& a, const std::vector<double>& b) {
  bool better = false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] > b[i]) return false;
    if (a[i] < b[i]) better = true;
  }
  return better;
}

std::vector<int> nondomination_ranks(const std::vector<std::vector<double>>& points) {
  const size_t n = points.size();
  std::vector<int> rank(n, -1);
  std::vector<int> dominated_by(n, 0);
  std::vector<std::vector<size_t>> dominates_list(n);
  for (size_t i = 0; i < n; ++i)
    for (size_t j = 0; j < n; ++j)
      if (i != j && dominates(points[i], points[j])) {
        dominates_list[i].push_back(j);
        ++dominated_by[j];
      }
  std::vector<size_t> front;
  for (size_t i = 0; i < n; ++i)
    if (dominated_by[i] == 0) front.push_back(i);
  for (int r = 0; !front.empty(); ++r) {
    std::vector<size_t> next;
    for (size_t i : front) {
      rank[i] = r;
      for (size_t j : dominates_list[i])
        if (--dominated_by[j] == 0) next.push_back(j);
    }
    front = std::move(next);
  }
  return rank;
}

namespace {

// Hypervolume of points that all lie strictly inside the reference box, in `dims` objectives.
double hv_inside(std::vector<std::vector<double>> pts, const std::vector<double>& ref, size_t dims) {
  if (pts.empty()) return 0;
  if (dims == 1) {
    double best = ref[0];
    for (const auto& p : pts) best = std::min(best, p[0]);
    return ref[0] - best;
  }
  // Slice along the last objective: between consecutive values, the volume is the (dims-1)
  // hypervolume of the points at or below the slice, times its thickness.
  const size_t d = dims - 1;
  std::sort(pts.begin(), pts.end(), [d](const auto& a, const auto& b) { return a[d] < b[d]; });
  double volume = 0;
  std::vector<std::vector<double>> below;
  for (size_t i = 0; i < pts.size(); ++i) {
    below.push_back(pts[i]);
    const double top = i + 1 < pts.size() ? pts[i + 1][d] : ref[d];
    if (top <= pts[i][d]) continue;
    volume += hv_inside(below, ref, d) * (top - pts[i][d]);
  }
  return volume;
}

}  // namespace

double hypervolume(std::vector<std::vector<double>> points, const std::vector<double>& reference) {
  std::vector<std::vector<double>> inside;
  for (auto& p : points) {
    bool ok = p.size() == reference.size();
    for (size_t i = 0; ok && i < p.size(); ++i) ok = p[i] < reference[i];
    if (ok) inside.push_back(std::move(p));
  }
  return hv_inside(std::move(inside), reference, reference.size());
}

}  // namespace coda::lab
