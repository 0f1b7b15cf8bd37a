// Small SVG charts for the lab's HTML reports: self-contained markup (no scripts, no external
// assets), so a report opens anywhere, prints, and renders in a headless browser without network.
#pragma once

#include <string>
#include <vector>

namespace coda::lab::svg {

std::string escape(const std::string& s);  // for HTML text and attributes

struct Point {
  double x = 0, y = 0;
  std::string color = "#1f77b4";
  std::string label;   // a tooltip
  bool boxed = false;  // drawn with a square around it (e.g. the baseline trial)
};

struct Axes {
  std::string title, x_label, y_label;
  int width = 640, height = 300;
  bool x_from_zero = true, y_from_zero = true;
};

// Points, with optional horizontal reference lines (value, label).
std::string scatter(const Axes& a, const std::vector<Point>& points,
                    const std::vector<std::pair<double, std::string>>& hlines = {});
// A histogram of `values` in `bins` equal bins, with an optional vertical marker.
std::string histogram(const Axes& a, const std::vector<double>& values, int bins, double marker = -1,
                      const std::string& marker_label = "");
// Stacked bars: one bar per category, one segment per series (name, colour, values per category).
struct Series {
  std::string name, color;
  std::vector<double> values;
};
std::string stacked_bars(const Axes& a, const std::vector<std::string>& categories, const std::vector<Series>& series);

// Step curves (a survival curve drops at each event and stays flat between): each curve starts at
// its first point and holds every value until the next point's x; optional vertical markers
// (x, label).
struct Curve {
  std::string name, color;
  std::vector<std::pair<double, double>> points;  // (x, y), x increasing
};
std::string step_curves(const Axes& a, const std::vector<Curve>& curves,
                        const std::vector<std::pair<double, std::string>>& vlines = {});

// A page: title, a style sheet for tables, and the body.
std::string page(const std::string& title, const std::string& body);

}  // namespace coda::lab::svg
