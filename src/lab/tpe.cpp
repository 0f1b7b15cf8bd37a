#include "lab/tpe.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>

#include "lab/stats.h"

namespace coda::lab {

namespace {

constexpr double kEps = 1e-12;

// Bounds of a parameter in the estimator's space: log for log scales, widened by half a step on a
// grid so the end points get their share.
struct Bounds {
  double low, high, q;  // q: grid step in that space, 0 when continuous
};

Bounds bounds_of(const ParamSpec& p) {
  if (p.log) {
    if (p.integer) return {std::log(p.low - 0.5), std::log(p.high + 0.5), 0};
    return {std::log(p.low), std::log(p.high), 0};
  }
  const double q = p.integer ? std::max(1.0, p.step) : p.step;
  if (q > 0) return {p.low - 0.5 * q, p.high + 0.5 * q, q};
  return {p.low, p.high, 0};
}

double to_internal(const ParamSpec& p, double v) {
  return p.log ? std::log(v) : v;
}

double from_internal(const ParamSpec& p, double x) {
  return p.snap(p.log ? std::exp(x) : x);
}

double log_ndtr_diff(double a, double b) {  // log(Phi(b) - Phi(a)), a < b
  const double pa = 0.5 * std::erfc(-a / std::sqrt(2.0)), pb = 0.5 * std::erfc(-b / std::sqrt(2.0));
  double d = pb - pa;
  if (d <= 0) {  // both far in the same tail: use the other tail's complement
    d = 0.5 * std::erfc(a / std::sqrt(2.0)) - 0.5 * std::erfc(b / std::sqrt(2.0));
  }
  return std::log(std::max(d, 1e-300));
}

// A truncated Gaussian mixture over [low, high].
struct Parzen {
  std::vector<double> mus, sigmas, weights;
  Bounds b;
  bool unit_scale = false;  // score each kernel without its 1/sigma (Optuna 3.1.0's density)

  // log density of component i at x (a probability mass on a grid).
  double component_log_pdf(size_t i, double x) const {
    const double m = mus[i], s = sigmas[i];
    const double log_accept = log_ndtr_diff((b.low - m) / s, (b.high - m) / s);
    if (b.q > 0) {
      const double lo = std::max(x - b.q / 2, b.low), hi = std::min(x + b.q / 2, b.high);
      return log_ndtr_diff((lo - m) / s, (hi - m) / s) - log_accept;
    }
    const double z = (x - m) / s;
    return -0.5 * z * z - (unit_scale ? 0.0 : std::log(s)) - 0.5 * std::log(2 * M_PI) - log_accept;
  }

  double log_pdf(double x) const {
    double best = -std::numeric_limits<double>::infinity();
    std::vector<double> terms(mus.size());
    for (size_t i = 0; i < mus.size(); ++i) {
      terms[i] = component_log_pdf(i, x) + std::log(weights[i]);
      best = std::max(best, terms[i]);
    }
    double sum = 0;
    for (double t : terms) sum += std::exp(t - best);
    return best + std::log(sum);
  }

  double sample(std::mt19937_64& rng) const {
    std::discrete_distribution<size_t> pick(weights.begin(), weights.end());
    return sample_component(pick(rng), rng);
  }

  double sample_component(size_t i, std::mt19937_64& rng) const {
    std::normal_distribution<double> n(mus[i], sigmas[i]);
    // The mean lies inside [low, high], so at least about half of the draws land inside.
    for (int tries = 0; tries < 1000; ++tries) {
      const double x = n(rng);
      if (x >= b.low && x <= b.high) return x;
    }
    return std::clamp(mus[i], b.low, b.high);
  }
};

// `scott` > 0: the multivariate bandwidth (that fraction of the range for every observation).
Parzen make_parzen(const std::vector<double>& obs, std::vector<double> w, const Bounds& b, const TpeOptions& opts,
                   double scott = 0) {
  const double prior_weight = opts.prior_weight;
  const bool consider_endpoints = opts.consider_endpoints;
  Parzen p;
  p.b = b;
  p.unit_scale = !opts.exact_density;
  const double range = b.high - b.low;
  p.mus = obs;
  p.mus.push_back(0.5 * (b.low + b.high));  // the prior
  const size_t n = p.mus.size();
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t c) { return p.mus[a] < p.mus[c]; });
  std::vector<double> sorted(n + 2);
  sorted[0] = b.low;
  for (size_t k = 0; k < n; ++k) sorted[k + 1] = p.mus[order[k]];
  sorted[n + 1] = b.high;
  std::vector<double> sorted_sigma(n);
  for (size_t k = 0; k < n; ++k) sorted_sigma[k] = std::max(sorted[k + 1] - sorted[k], sorted[k + 2] - sorted[k + 1]);
  if (!consider_endpoints && sorted.size() >= 4) {  // the ends of the range are not neighbours
    sorted_sigma[0] = sorted[2] - sorted[1];
    sorted_sigma[n - 1] = sorted[n] - sorted[n - 1];
  }
  p.sigmas.assign(n, 0);
  for (size_t k = 0; k < n; ++k) p.sigmas[order[k]] = scott > 0 ? scott * range : sorted_sigma[k];
  const double min_sigma = range / std::min(100.0, 1.0 + static_cast<double>(n));
  for (double& s : p.sigmas) s = std::clamp(s, min_sigma, range);
  p.sigmas[n - 1] = range;  // the prior's
  w.resize(obs.size());
  w.push_back(prior_weight);
  const double total = std::accumulate(w.begin(), w.end(), 0.0);
  for (double& x : w) x /= total;
  p.weights = std::move(w);
  return p;
}

std::vector<double> default_weights(size_t x) {  // Optuna's: recent trials 1, older ones ramp down
  if (x < 25) return std::vector<double>(x, 1.0);
  std::vector<double> w;
  const size_t ramp = x - 25;
  for (size_t i = 0; i < ramp; ++i)
    w.push_back(ramp == 1 ? 1.0 / static_cast<double>(x)
                          : 1.0 / static_cast<double>(x) + (1.0 - 1.0 / static_cast<double>(x)) *
                                                               static_cast<double>(i) / static_cast<double>(ramp - 1));
  w.resize(x, 1.0);
  return w;
}

std::vector<double> reference_point(const std::vector<std::vector<double>>& pts) {
  std::vector<double> worst(pts[0].size(), -std::numeric_limits<double>::infinity());
  for (const auto& p : pts)
    for (size_t k = 0; k < p.size(); ++k) worst[k] = std::max(worst[k], p[k]);
  for (double& w : worst) {
    w = std::max(1.1 * w, 0.9 * w);
    if (w == 0) w = kEps;
  }
  return worst;
}

// Local polynomial regression of y at each trial's parameters (unit cube), Gaussian weights of
// bandwidth h; a tiny ridge keeps the coefficients finite where the neighbours are few or
// collinear. Degree 1 fits a line around each trial: better than a weighted mean where good trials
// sit at an end of a range (min_p = 0), but at the bottom of a valley (temperature's optimum is
// inside its range) a line is pulled up by both walls, and only a narrow window keeps that bias
// small, so each estimate rests on few trials. Degree 2 adds each parameter's square (no cross
// terms, loess's usual degree): a valley is then part of the model, and the window can be wide
// enough to pool most of the study. It needs trials to spare, so it applies from 3d + 1 trials
// (its 2d + 1 coefficients and one more per parameter); a study with fewer fits lines.
//
// The fit is centred on each query point in `at` (the trials themselves when smoothing, a
// candidate when the surrogate predicts); its intercept is the estimate, NaN where the equations
// are singular.
std::vector<double> local_polynomial_at(const std::vector<std::vector<double>>& xs, const std::vector<double>& y,
                                        const std::vector<std::vector<double>>& at, double h, int degree) {
  const size_t n = xs.size(), d = xs.empty() ? 0 : xs[0].size();
  const bool quadratic = degree >= 2 && n >= 3 * d + 1;
  const size_t m = quadratic ? 2 * d + 1 : d + 1;
  std::vector<double> out(at.size());
  for (size_t i = 0; i < at.size(); ++i) {
    std::vector<double> a(m * m, 0.0), rhs(m, 0.0);
    for (size_t j = 0; j < n; ++j) {
      double r2 = 0;
      for (size_t k = 0; k < d; ++k) r2 += (xs[j][k] - at[i][k]) * (xs[j][k] - at[i][k]);
      const double w = std::exp(-0.5 * r2 / (h * h));
      std::vector<double> z(m, 1.0);
      for (size_t k = 0; k < d; ++k) {
        z[k + 1] = xs[j][k] - at[i][k];
        if (quadratic) z[d + k + 1] = z[k + 1] * z[k + 1];
      }
      for (size_t r = 0; r < m; ++r) {
        rhs[r] += w * z[r] * y[j];
        for (size_t c = 0; c < m; ++c) a[r * m + c] += w * z[r] * z[c];
      }
    }
    for (size_t r = 1; r < m; ++r) a[r * m + r] += 1e-6 * a[0];
    // Gaussian elimination with partial pivoting on the (m x m) normal equations.
    for (size_t c = 0; c < m; ++c) {
      size_t piv = c;
      for (size_t r = c + 1; r < m; ++r)
        if (std::abs(a[r * m + c]) > std::abs(a[piv * m + c])) piv = r;
      for (size_t k = 0; k < m; ++k) std::swap(a[c * m + k], a[piv * m + k]);
      std::swap(rhs[c], rhs[piv]);
      for (size_t r = c + 1; r < m; ++r) {
        const double f = a[r * m + c] / a[c * m + c];
        for (size_t k = c; k < m; ++k) a[r * m + k] -= f * a[c * m + k];
        rhs[r] -= f * rhs[c];
      }
    }
    std::vector<double> beta(m);
    for (size_t r = m; r-- > 0;) {
      double s = rhs[r];
      for (size_t k = r + 1; k < m; ++k) s -= a[r * m + k] * beta[k];
      beta[r] = s / a[r * m + r];
    }
    out[i] = std::isfinite(beta[0]) ? beta[0] : std::nan("");
  }
  return out;
}

// Smoothing: the fit at each trial, the trial's own value where the fit fails.
std::vector<double> local_polynomial(const std::vector<std::vector<double>>& xs, const std::vector<double>& y, double h,
                                     int degree) {
  std::vector<double> out = local_polynomial_at(xs, y, xs, h, degree);
  for (size_t i = 0; i < out.size(); ++i)
    if (!std::isfinite(out[i])) out[i] = y[i];
  return out;
}

}  // namespace

MotpeSampler::MotpeSampler(SearchSpace space, TpeOptions opts, uint64_t seed)
    : space_(std::move(space)), opts_(opts), seed_(seed) {}

size_t MotpeSampler::gamma(size_t n, double share) {
  const auto k = static_cast<size_t>(std::ceil(share * static_cast<double>(n)));
  return std::clamp<size_t>(k, std::min<size_t>(n, 1), 25);
}

std::vector<size_t> MotpeSampler::split_below(const std::vector<std::vector<double>>& values, size_t n_below) {
  const std::vector<int> rank = nondomination_ranks(values);
  std::vector<size_t> below;
  int r = 0;
  while (true) {
    std::vector<size_t> this_rank;
    for (size_t i = 0; i < values.size(); ++i)
      if (rank[i] == r) this_rank.push_back(i);
    if (this_rank.empty()) break;
    if (below.size() + this_rank.size() <= n_below) {
      below.insert(below.end(), this_rank.begin(), this_rank.end());
      ++r;
      continue;
    }
    // Greedy hypervolume subset selection within the overflowing rank.
    std::vector<std::vector<double>> pts;
    for (size_t i : this_rank) pts.push_back(values[i]);
    const auto ref = reference_point(pts);
    std::vector<std::vector<double>> chosen;
    std::vector<bool> taken(pts.size(), false);
    double hv_chosen = 0;
    while (below.size() < n_below) {
      double best = -1;
      size_t best_k = 0;
      for (size_t k = 0; k < pts.size(); ++k) {
        if (taken[k]) continue;
        auto with = chosen;
        with.push_back(pts[k]);
        const double gain = hypervolume(with, ref) - hv_chosen;
        if (gain > best) best = gain, best_k = k;
      }
      taken[best_k] = true;
      chosen.push_back(pts[best_k]);
      hv_chosen = hypervolume(chosen, ref);
      below.push_back(this_rank[best_k]);
    }
    break;
  }
  return below;
}

std::vector<double> MotpeSampler::below_weights(const std::vector<std::vector<double>>& pts) {
  if (pts.empty()) return {};
  if (pts.size() == 1) return {1.0};
  const auto ref = reference_point(pts);
  const double hv = hypervolume(pts, ref);
  std::vector<double> c(pts.size());
  for (size_t i = 0; i < pts.size(); ++i) {
    auto rest = pts;
    rest.erase(rest.begin() + static_cast<std::ptrdiff_t>(i));
    c[i] = hv - hypervolume(rest, ref) + kEps;
  }
  const double top = *std::max_element(c.begin(), c.end());
  for (double& x : c) x = std::clamp(x / top, 0.0, 1.0);
  return c;
}

std::vector<std::vector<double>> MotpeSampler::split_values(const std::vector<CompletedTrial>& trials) const {
  std::vector<std::vector<double>> values;
  for (const auto& t : trials) values.push_back(t.values);
  if (trials.empty()) return values;
  if (opts_.denoise_bandwidth > 0) {
    std::vector<std::vector<double>> xs;
    for (const auto& t : trials) xs.push_back(unit_point(t.params));
    for (size_t k = 0; k < values[0].size(); ++k) {
      if (!std::all_of(trials.begin(), trials.end(),
                       [k](const CompletedTrial& t) { return k < t.noisy.size() && t.noisy[k]; }))
        continue;
      std::vector<double> y;
      for (const auto& v : values) y.push_back(v[k]);
      if (!std::all_of(y.begin(), y.end(), [](double v) { return std::isfinite(v); })) continue;
      const std::vector<double> s = local_polynomial(xs, y, opts_.denoise_bandwidth, opts_.denoise_degree);
      for (size_t i = 0; i < trials.size(); ++i) values[i][k] = s[i];
    }
  }
  return values;
}

std::vector<double> MotpeSampler::unit_point(const std::map<std::string, double>& params) const {
  std::vector<double> x;
  for (const auto& p : space_) {
    const Bounds b = bounds_of(p);
    x.push_back((to_internal(p, params.at(p.name)) - b.low) / (b.high - b.low));
  }
  return x;
}

std::vector<std::vector<double>> MotpeSampler::predict(const std::vector<CompletedTrial>& trials,
                                                       const std::vector<std::map<std::string, double>>& points) const {
  std::vector<std::vector<double>> out(points.size());
  if (trials.empty()) return out;
  std::vector<std::vector<double>> xs, at;
  for (const auto& t : trials) xs.push_back(unit_point(t.params));
  for (const auto& p : points) at.push_back(unit_point(p));
  for (size_t k = 0; k < trials[0].values.size(); ++k) {
    std::vector<double> col(points.size());
    if (k < exact_.size() && exact_[k]) {
      for (size_t c = 0; c < points.size(); ++c) col[c] = exact_[k](points[c]);
    } else {
      std::vector<double> y;
      for (const auto& t : trials) y.push_back(t.values[k]);
      col = local_polynomial_at(xs, y, at, opts_.surrogate_bandwidth, 2);
    }
    for (size_t c = 0; c < points.size(); ++c) out[c].push_back(col[c]);
  }
  return out;
}

int MotpeSampler::largest_gain(const std::vector<std::vector<double>>& front,
                               const std::vector<std::vector<double>>& predicted) {
  if (front.empty()) return -1;
  const auto ref = reference_point(front);
  const double hv = hypervolume(front, ref);
  int best = -1;
  double best_gain = 1e-12 * std::max(hv, 1e-300);  // a gain must be more than rounding
  for (size_t c = 0; c < predicted.size(); ++c) {
    if (predicted[c].size() != ref.size() ||
        !std::all_of(predicted[c].begin(), predicted[c].end(), [](double v) { return std::isfinite(v); }))
      continue;
    auto with = front;
    with.push_back(predicted[c]);
    const double gain = hypervolume(with, ref) - hv;
    if (gain > best_gain) best_gain = gain, best = static_cast<int>(c);
  }
  return best;
}

std::map<std::string, double> MotpeSampler::propose(const std::vector<CompletedTrial>& trials, uint64_t number) const {
  std::mt19937_64 rng(seed_ * 0x9E3779B97F4A7C15ULL + number * 0xBF58476D1CE4E5B9ULL + 1);
  std::map<std::string, double> out;
  const size_t n = trials.size();
  const size_t n_startup = static_cast<size_t>(std::max(1, opts_.n_startup_trials));
  if (n < n_startup) {
    // A Latin hypercube over the startup trials' numbers: each parameter's range is cut into
    // n_startup strata and trial `number` takes stratum perm[number] of a permutation drawn from
    // the seed alone, so the startup trials cover every stratum of every parameter once (random
    // draws leave gaps, and with a 24-trial budget a gap near the front is a trial lost). A study
    // that resumes draws the same permutations. Trial numbers past the design draw at random. In
    // `coda tune` trial 0 is the baseline, so the stratum perm[0] is left to it.
    const bool lhs = opts_.latin_hypercube_startup && number < n_startup;
    size_t index = 0;
    for (const auto& p : space_) {
      const Bounds b = bounds_of(p);
      // Random search draws on the parameter's own range (a grid's end points included).
      const double lo = p.log ? b.low : p.low, hi = p.log ? b.high : p.high;
      const double top = p.integer || p.step > 0 ? hi + (b.q > 0 ? b.q : 0) * 0.999999 : hi;
      std::uniform_real_distribution<double> u(0.0, 1.0);
      double unit = u(rng);
      if (lhs) {
        std::vector<size_t> perm(n_startup);
        std::iota(perm.begin(), perm.end(), size_t{0});
        std::mt19937_64 prng(seed_ * 0xD1B54A32D192ED03ULL + index * 0x94D049BB133111EBULL + 7);
        std::shuffle(perm.begin(), perm.end(), prng);
        unit = (static_cast<double>(perm[number]) + unit) / static_cast<double>(n_startup);
      }
      double x = std::min(lo + unit * (top - lo), top);
      if ((p.integer || p.step > 0) && !p.log) {
        const double q = p.integer ? std::max(1.0, p.step) : p.step;
        x = p.low + std::floor((x - p.low) / q) * q;
      }
      out[p.name] = from_internal(p, x);
      ++index;
    }
    return out;
  }
  const std::vector<std::vector<double>> values = split_values(trials);
  std::vector<size_t> below = split_below(values, gamma(n, opts_.gamma));
  std::vector<bool> is_below(n, false);
  for (size_t i : below) is_below[i] = true;
  std::vector<size_t> above;
  for (size_t i = 0; i < n; ++i)
    if (!is_below[i]) above.push_back(i);
  std::vector<std::vector<double>> below_vals;
  for (size_t i : below) below_vals.push_back(values[i]);
  const std::vector<double> wb = below_weights(below_vals);
  const std::vector<double> wa =
      opts_.flat_above_weights ? std::vector<double>(above.size(), 1.0) : default_weights(above.size());
  if (opts_.multivariate) return propose_joint(trials, below, above, wb, wa, rng);
  // Candidate c is the c-th draw of every parameter's l(x); TPE's pick is each parameter's best
  // draw on its own.
  const size_t n_cand = static_cast<size_t>(std::max(1, opts_.n_ei_candidates));
  std::vector<std::map<std::string, double>> candidates(n_cand);
  for (const auto& p : space_) {
    const Bounds b = bounds_of(p);
    std::vector<double> ob, oa;
    for (size_t i : below) ob.push_back(to_internal(p, trials[i].params.at(p.name)));
    for (size_t i : above) oa.push_back(to_internal(p, trials[i].params.at(p.name)));
    const Parzen l = make_parzen(ob, wb, b, opts_);
    const Parzen g = make_parzen(oa, wa, b, opts_);
    double best_x = 0, best_score = -std::numeric_limits<double>::infinity();
    for (size_t k = 0; k < n_cand; ++k) {
      double x = l.sample(rng);
      // Candidates are scored where they will be evaluated: on the grid.
      if (b.q > 0) x = std::clamp(p.low + std::round((x - p.low) / b.q) * b.q, p.low, p.high);
      const double score = l.log_pdf(x) - g.log_pdf(x);
      if (score > best_score) best_score = score, best_x = x;
      candidates[k][p.name] = from_internal(p, x);
    }
    out[p.name] = from_internal(p, best_x);
  }
  if (opts_.surrogate_bandwidth > 0) {
    const int pick = largest_gain(values, predict(trials, candidates));
    if (pick >= 0) return candidates[static_cast<size_t>(pick)];
  }
  return out;
}

std::map<std::string, double> MotpeSampler::propose_joint(const std::vector<CompletedTrial>& trials,
                                                          const std::vector<size_t>& below,
                                                          const std::vector<size_t>& above,
                                                          const std::vector<double>& wb, const std::vector<double>& wa,
                                                          std::mt19937_64& rng) const {
  const double d = static_cast<double>(space_.size());
  auto scott = [d](size_t n) { return 0.2 * std::pow(static_cast<double>(std::max<size_t>(n, 1)), -1.0 / (d + 4)); };
  std::vector<Parzen> l, g;
  for (const auto& p : space_) {
    const Bounds b = bounds_of(p);
    std::vector<double> ob, oa;
    for (size_t i : below) ob.push_back(to_internal(p, trials[i].params.at(p.name)));
    for (size_t i : above) oa.push_back(to_internal(p, trials[i].params.at(p.name)));
    l.push_back(make_parzen(ob, wb, b, opts_, scott(ob.size())));
    g.push_back(make_parzen(oa, wa, b, opts_, scott(oa.size())));
  }
  // The joint density: a mixture over trials of products over parameters.
  auto joint_log_pdf = [&](const std::vector<Parzen>& est, const std::vector<double>& x) {
    const auto& w = est[0].weights;
    std::vector<double> terms(w.size());
    double best = -std::numeric_limits<double>::infinity();
    for (size_t i = 0; i < w.size(); ++i) {
      double t = std::log(w[i]);
      for (size_t k = 0; k < est.size(); ++k) t += est[k].component_log_pdf(i, x[k]);
      terms[i] = t;
      best = std::max(best, t);
    }
    double sum = 0;
    for (double t : terms) sum += std::exp(t - best);
    return best + std::log(sum);
  };
  std::discrete_distribution<size_t> pick(l[0].weights.begin(), l[0].weights.end());
  std::vector<double> best_x;
  double best_score = -std::numeric_limits<double>::infinity();
  for (int c = 0; c < opts_.n_ei_candidates; ++c) {
    const size_t i = pick(rng);
    std::vector<double> x;
    for (size_t k = 0; k < space_.size(); ++k) {
      double v = l[k].sample_component(i, rng);
      const Bounds& b = l[k].b;
      if (b.q > 0)
        v = std::clamp(space_[k].low + std::round((v - space_[k].low) / b.q) * b.q, space_[k].low, space_[k].high);
      x.push_back(v);
    }
    const double score = joint_log_pdf(l, x) - joint_log_pdf(g, x);
    if (score > best_score) best_score = score, best_x = x;
  }
  std::map<std::string, double> out;
  for (size_t k = 0; k < space_.size(); ++k) out[space_[k].name] = from_internal(space_[k], best_x[k]);
  return out;
}

}  // namespace coda::lab
