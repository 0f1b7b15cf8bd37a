#include "lab/svg.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

namespace coda::lab::svg {

namespace {

constexpr int kLeft = 60, kRight = 20, kTop = 28, kBottom = 40;

std::string fmt(double v) {
  char b[32];
  if (v != 0 && (std::fabs(v) >= 1e5 || std::fabs(v) < 1e-3))
    std::snprintf(b, sizeof b, "%.2g", v);
  else
    std::snprintf(b, sizeof b, "%.4g", v);
  return b;
}

struct Frame {
  const Axes& a;
  double x0, x1, y0, y1;
  double px(double x) const { return kLeft + (x - x0) / (x1 - x0) * (a.width - kLeft - kRight); }
  double py(double y) const { return a.height - kBottom - (y - y0) / (y1 - y0) * (a.height - kTop - kBottom); }
};

// Pads a range so points on its edges are drawn inside the frame, not on the axes.
void widen(double& lo, double& hi) {
  if (!(hi > lo)) hi = lo + (lo == 0 ? 1 : std::fabs(lo) * 0.1);
  const double pad = (hi - lo) * 0.05;
  hi += pad;
  lo -= pad;
}

// The data's range on both axes, from zero where the axes say so; frame() pads it (and gives an
// empty chart a unit range).
struct Extent {
  double x0, x1 = -INFINITY, y0, y1 = -INFINITY;
  explicit Extent(const Axes& a) : x0(a.x_from_zero ? 0 : INFINITY), y0(a.y_from_zero ? 0 : INFINITY) {}
  void x(double v) { x0 = std::min(x0, v), x1 = std::max(x1, v); }
  void y(double v) { y0 = std::min(y0, v), y1 = std::max(y1, v); }
  Frame frame(const Axes& a) {
    if (!std::isfinite(x0)) x0 = 0, x1 = 1;
    if (!std::isfinite(y0)) y0 = 0, y1 = 1;
    widen(x0, x1);
    widen(y0, y1);
    return Frame{a, x0, x1, y0, y1};
  }
};

std::string open(const Frame& f) {
  const Axes& a = f.a;
  std::ostringstream o;
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << a.width << "\" height=\"" << a.height
    << "\" font-family=\"sans-serif\" font-size=\"11\">";
  o << "<text x=\"" << kLeft << "\" y=\"16\" font-size=\"13\" font-weight=\"bold\">" << escape(a.title) << "</text>";
  const double bx = kLeft, by = a.height - kBottom, ex = a.width - kRight;
  o << "<line x1=\"" << bx << "\" y1=\"" << by << "\" x2=\"" << ex << "\" y2=\"" << by << "\" stroke=\"#444\"/>";
  o << "<line x1=\"" << bx << "\" y1=\"" << kTop << "\" x2=\"" << bx << "\" y2=\"" << by << "\" stroke=\"#444\"/>";
  for (int i = 0; i <= 4; ++i) {
    const double xv = f.x0 + (f.x1 - f.x0) * i / 4, yv = f.y0 + (f.y1 - f.y0) * i / 4;
    o << "<text x=\"" << f.px(xv) << "\" y=\"" << by + 14 << "\" text-anchor=\"middle\">" << fmt(xv) << "</text>";
    o << "<text x=\"" << bx - 4 << "\" y=\"" << f.py(yv) + 4 << "\" text-anchor=\"end\">" << fmt(yv) << "</text>";
    o << "<line x1=\"" << bx << "\" y1=\"" << f.py(yv) << "\" x2=\"" << ex << "\" y2=\"" << f.py(yv)
      << "\" stroke=\"#eee\"/>";
  }
  o << "<text x=\"" << (bx + ex) / 2 << "\" y=\"" << a.height - 6 << "\" text-anchor=\"middle\">" << escape(a.x_label)
    << "</text>";
  o << "<text transform=\"translate(12," << (kTop + by) / 2 << ") rotate(-90)\" text-anchor=\"middle\">"
    << escape(a.y_label) << "</text>";
  return o.str();
}

}  // namespace

std::string escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '<':
        o += "&lt;";
        break;
      case '>':
        o += "&gt;";
        break;
      case '&':
        o += "&amp;";
        break;
      case '"':
        o += "&quot;";
        break;
      default:
        o += c;
    }
  }
  return o;
}

std::string scatter(const Axes& a, const std::vector<Point>& points,
                    const std::vector<std::pair<double, std::string>>& hlines) {
  Extent e(a);
  for (const auto& p : points) e.x(p.x), e.y(p.y);
  for (const auto& h : hlines) e.y(h.first);
  const Frame f = e.frame(a);
  std::ostringstream o;
  o << open(f);
  for (const auto& [v, label] : hlines) {
    o << "<line x1=\"" << kLeft << "\" y1=\"" << f.py(v) << "\" x2=\"" << a.width - kRight << "\" y2=\"" << f.py(v)
      << "\" stroke=\"#d62728\" stroke-dasharray=\"4 3\"/><text x=\"" << a.width - kRight << "\" y=\"" << f.py(v) - 3
      << "\" text-anchor=\"end\" fill=\"#d62728\">" << escape(label) << "</text>";
  }
  // Highlighted points (red: a Pareto front) are drawn last, on top.
  std::vector<const Point*> order;
  for (const auto& p : points)
    if (p.color != "#d62728") order.push_back(&p);
  for (const auto& p : points)
    if (p.color == "#d62728") order.push_back(&p);
  for (const Point* pp : order) {
    const Point& p = *pp;
    o << "<circle cx=\"" << f.px(p.x) << "\" cy=\"" << f.py(p.y) << "\" r=\"4\" fill=\"" << p.color
      << "\" fill-opacity=\"0.8\">";
    if (!p.label.empty()) o << "<title>" << escape(p.label) << "</title>";
    o << "</circle>";
    if (p.boxed)
      o << "<rect x=\"" << f.px(p.x) - 8 << "\" y=\"" << f.py(p.y) - 8
        << "\" width=\"16\" height=\"16\" fill=\"none\" stroke=\"#000\" stroke-width=\"1.5\"/>";
  }
  o << "</svg>";
  return o.str();
}

std::string histogram(const Axes& a, const std::vector<double>& values, int bins, double marker,
                      const std::string& marker_label) {
  double lo = 0, hi = 1;
  if (!values.empty()) {
    lo = a.x_from_zero ? 0 : *std::min_element(values.begin(), values.end());
    hi = std::max(*std::max_element(values.begin(), values.end()), marker);
  }
  if (!(hi > lo)) hi = lo + 1;
  bins = std::max(1, bins);
  std::vector<double> counts(static_cast<size_t>(bins), 0);
  for (double v : values) {
    auto b = static_cast<int>((v - lo) / (hi - lo) * bins);
    counts[static_cast<size_t>(std::clamp(b, 0, bins - 1))] += 1;
  }
  double top = *std::max_element(counts.begin(), counts.end());
  Frame f{a, lo, hi, 0, top > 0 ? top * 1.05 : 1};
  std::ostringstream o;
  o << open(f);
  const double w = (hi - lo) / bins;
  for (int b = 0; b < bins; ++b) {
    const double c = counts[static_cast<size_t>(b)];
    if (c <= 0) continue;
    o << "<rect x=\"" << f.px(lo + b * w) << "\" y=\"" << f.py(c) << "\" width=\""
      << std::max(1.0, f.px(lo + (b + 1) * w) - f.px(lo + b * w) - 1) << "\" height=\"" << f.py(0) - f.py(c)
      << "\" fill=\"#1f77b4\"><title>" << fmt(lo + b * w) << "-" << fmt(lo + (b + 1) * w) << ": " << c
      << "</title></rect>";
  }
  if (marker >= 0) {
    o << "<line x1=\"" << f.px(marker) << "\" y1=\"" << kTop << "\" x2=\"" << f.px(marker) << "\" y2=\"" << f.py(0)
      << "\" stroke=\"#d62728\" stroke-dasharray=\"4 3\"/><text x=\"" << f.px(marker) - 3 << "\" y=\"" << kTop + 10
      << "\" text-anchor=\"end\" fill=\"#d62728\">" << escape(marker_label) << "</text>";
  }
  o << "</svg>";
  return o.str();
}

std::string stacked_bars(const Axes& a, const std::vector<std::string>& categories, const std::vector<Series>& series) {
  double top = 0;
  for (size_t c = 0; c < categories.size(); ++c) {
    double sum = 0;
    for (const auto& s : series) sum += c < s.values.size() ? s.values[c] : 0;
    top = std::max(top, sum);
  }
  Frame f{a, 0, static_cast<double>(std::max<size_t>(1, categories.size())), 0, top > 0 ? top * 1.05 : 1};
  std::ostringstream o;
  o << open(f);  // (the numeric x ticks are meaningless here; category names sit below them)
  const double slot = (a.width - kLeft - kRight) / static_cast<double>(std::max<size_t>(1, categories.size()));
  for (size_t c = 0; c < categories.size(); ++c) {
    double base = 0;
    for (const auto& s : series) {
      const double v = c < s.values.size() ? s.values[c] : 0;
      if (v <= 0) continue;
      o << "<rect x=\"" << kLeft + slot * static_cast<double>(c) + slot * 0.15 << "\" y=\"" << f.py(base + v)
        << "\" width=\"" << slot * 0.7 << "\" height=\"" << f.py(base) - f.py(base + v) << "\" fill=\"" << s.color
        << "\"><title>" << escape(categories[c] + " " + s.name) << ": " << v << "</title></rect>";
      base += v;
    }
    o << "<text x=\"" << kLeft + slot * (static_cast<double>(c) + 0.5) << "\" y=\"" << a.height - kBottom + 26
      << "\" text-anchor=\"middle\">" << escape(categories[c]) << "</text>";
  }
  double lx = kLeft + 8;
  for (const auto& s : series) {
    o << "<rect x=\"" << lx << "\" y=\"" << kTop - 2 << "\" width=\"10\" height=\"10\" fill=\"" << s.color
      << "\"/><text x=\"" << lx + 13 << "\" y=\"" << kTop + 7 << "\">" << escape(s.name) << "</text>";
    lx += 18 + 7.0 * static_cast<double>(s.name.size());
  }
  o << "</svg>";
  return o.str();
}

std::string step_curves(const Axes& a, const std::vector<Curve>& curves,
                        const std::vector<std::pair<double, std::string>>& vlines) {
  Extent e(a);
  for (const auto& c : curves)
    for (const auto& [x, y] : c.points) e.x(x), e.y(y);
  for (const auto& v : vlines) e.x(v.first);
  const Frame f = e.frame(a);
  std::ostringstream o;
  o << open(f);
  for (const auto& [v, label] : vlines)
    o << "<line x1=\"" << f.px(v) << "\" y1=\"" << kTop << "\" x2=\"" << f.px(v) << "\" y2=\"" << a.height - kBottom
      << "\" stroke=\"#d62728\" stroke-dasharray=\"4 3\"/><text x=\"" << f.px(v) + 3 << "\" y=\"" << kTop + 10
      << "\" fill=\"#d62728\">" << escape(label) << "</text>";
  int legend = 0;
  for (const auto& c : curves) {
    if (c.points.empty()) continue;
    std::ostringstream d;
    d << "M" << f.px(c.points[0].first) << "," << f.py(c.points[0].second);
    for (size_t i = 1; i < c.points.size(); ++i)
      d << " H" << f.px(c.points[i].first) << " V" << f.py(c.points[i].second);
    o << "<path d=\"" << d.str() << "\" fill=\"none\" stroke=\"" << c.color << "\" stroke-width=\"2\"><title>"
      << escape(c.name) << "</title></path>";
    const double ly = kTop + 14 + 14 * legend++;
    o << "<line x1=\"" << a.width - kRight - 150 << "\" y1=\"" << ly - 4 << "\" x2=\"" << a.width - kRight - 134
      << "\" y2=\"" << ly - 4 << "\" stroke=\"" << c.color << "\" stroke-width=\"2\"/><text x=\""
      << a.width - kRight - 130 << "\" y=\"" << ly << "\">" << escape(c.name) << "</text>";
  }
  o << "</svg>";
  return o.str();
}

std::string page(const std::string& title, const std::string& body) {
  return "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>" + escape(title) +
         "</title><style>body{font-family:sans-serif;max-width:1000px;margin:1em auto;padding:0 1em}"
         "table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}"
         "th{background:#f4f4f4}td:first-child,th:first-child{text-align:left}.front{color:#d62728;font-weight:bold}"
         ".note{color:#555}</style></head><body><h1>" +
         escape(title) + "</h1>\n" + body + "\n</body></html>\n";
}

}  // namespace coda::lab::svg
