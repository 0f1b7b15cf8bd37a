#include "lab/stats.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

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

std::vector<SurvivalStep> kaplan_meier(const std::vector<SurvivalObservation>& obs) {
  std::vector<SurvivalObservation> o = obs;
  // By time; at equal times events first, so a run censored then is still at risk for them.
  std::sort(o.begin(), o.end(), [](const SurvivalObservation& a, const SurvivalObservation& b) {
    return a.time != b.time ? a.time < b.time : a.event > b.event;
  });
  std::vector<SurvivalStep> curve;
  double s = 1;
  auto at_risk = static_cast<int64_t>(o.size());
  for (size_t i = 0; i < o.size();) {
    const double t = o[i].time;
    int64_t d = 0, gone = 0;
    for (; i < o.size() && o[i].time == t; ++i, ++gone) d += o[i].event;
    if (d > 0) {
      s *= 1.0 - static_cast<double>(d) / static_cast<double>(at_risk);
      curve.push_back({t, s, at_risk, d});
    }
    at_risk -= gone;
  }
  return curve;
}

double survival_quantile(const std::vector<SurvivalStep>& curve, double q) {
  for (const auto& st : curve)
    if (st.survival <= 1.0 - q + 1e-12) return st.time;
  return std::numeric_limits<double>::quiet_NaN();
}

std::vector<double> bootstrap_survival_quantiles(const std::vector<SurvivalObservation>& obs, double q, int resamples,
                                                 uint64_t seed) {
  std::vector<double> out;
  if (obs.empty()) return out;
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<size_t> pick(0, obs.size() - 1);
  std::vector<SurvivalObservation> r(obs.size());
  out.reserve(static_cast<size_t>(std::max(0, resamples)));
  for (int b = 0; b < resamples; ++b) {
    for (auto& x : r) x = obs[pick(rng)];
    const double v = survival_quantile(kaplan_meier(r), q);
    out.push_back(std::isnan(v) ? std::numeric_limits<double>::infinity() : v);
  }
  return out;
}

std::pair<double, double> bootstrap_interval(std::vector<double> quantiles, double level) {
  if (quantiles.empty()) return {std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::quiet_NaN()};
  std::sort(quantiles.begin(), quantiles.end());
  // Order statistics, not interpolation: an end can be +infinity, and interpolating towards it
  // would make it infinite too early.
  const double a = (1.0 - level) / 2;
  const auto n = static_cast<double>(quantiles.size());
  const auto lo = static_cast<size_t>(std::clamp(std::floor(a * n), 0.0, n - 1));
  const auto hi = static_cast<size_t>(std::clamp(std::ceil((1.0 - a) * n) - 1, 0.0, n - 1));
  return {quantiles[lo], quantiles[hi]};
}

}  // namespace coda::lab
