#include "lab/analyze.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "core/json_parse.h"
#include "lab/svg.h"

namespace coda {

std::vector<TraceStep> trace_from_json(const std::vector<nlohmann::ordered_json>& lines) {
  std::vector<TraceStep> out;
  for (const auto& j : lines) {
    if (j.contains("rollback_to")) {
      const int64_t keep = j["rollback_to"].get<int64_t>();
      while (!out.empty() && out.back().i >= keep) out.pop_back();
      continue;
    }
    TraceStep s;
    s.i = j.value("i", int64_t{0});
    s.token = j.value("token", -1);
    s.entropy = j.value("entropy", 0.0);
    s.varentropy = j.value("varentropy", 0.0);
    s.surprisal = j.value("surprisal", 0.0);
    s.eos_prob = j.value("eos_prob", 0.0);
    s.eos_rank = j.value("eos_rank", -1);
    if (j.contains("top") && j["top"].is_array())
      for (const auto& t : j["top"]) s.top.emplace_back(t.value("piece", ""), t.value("logprob", 0.0));
    out.push_back(std::move(s));
  }
  return out;
}

Expected<std::vector<TraceStep>> read_trace(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Error(path + ": cannot open");
  std::vector<nlohmann::ordered_json> lines;
  std::string line;
  size_t n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (line.empty()) continue;
    auto j = parse_ordered_json(line);
    if (j.is_discarded() || !j.is_object()) return Error(path + ":" + std::to_string(n) + ": not a JSON object");
    lines.push_back(std::move(j));
  }
  return trace_from_json(lines);
}

Analysis analyze_traces(const std::vector<std::vector<TraceStep>>& traces, int block_size, int eos_top_rank,
                        bool align_on_end) {
  Analysis a;
  a.block_size = std::max(1, block_size);
  a.aligned_on_end = align_on_end;
  a.sequences = traces.size();
  for (size_t s = 0; s < traces.size(); ++s) {
    const auto& t = traces[s];
    const auto n = static_cast<int64_t>(t.size());
    size_t last = SIZE_MAX;  // the block this sequence was last counted in
    for (size_t k = 0; k < t.size(); ++k) {
      const int64_t from_end = n - 1 - static_cast<int64_t>(k);
      const auto b = static_cast<size_t>((align_on_end ? from_end : static_cast<int64_t>(k)) / a.block_size);
      if (a.blocks.size() <= b) a.blocks.resize(b + 1);
      BlockStats& bs = a.blocks[b];
      bs.block = align_on_end ? -static_cast<int64_t>(b) - 1 : static_cast<int64_t>(b);
      ++bs.steps;
      if (b != last) ++bs.sequences;
      last = b;
      bs.eos_prob += t[k].eos_prob;
      bs.surprisal += t[k].surprisal;
      bs.entropy += t[k].entropy;
      bs.varentropy += t[k].varentropy;
      if (t[k].eos_rank >= 0 && t[k].eos_rank < eos_top_rank) {
        EosContext c;
        c.sequence = s;
        c.i = t[k].i;
        c.eos_prob = t[k].eos_prob;
        c.eos_rank = t[k].eos_rank;
        c.top = t[k].top;
        a.eos_contexts.push_back(std::move(c));
      }
    }
  }
  if (align_on_end) std::reverse(a.blocks.begin(), a.blocks.end());  // earliest first, -1 last
  for (auto& b : a.blocks) {
    if (b.steps == 0) continue;
    const double n = static_cast<double>(b.steps);
    b.eos_prob /= n;
    b.surprisal /= n;
    b.entropy /= n;
    b.varentropy /= n;
  }
  return a;
}

nlohmann::ordered_json Analysis::to_json() const {
  nlohmann::ordered_json j;
  j["block_size"] = block_size;
  j["aligned_on"] = aligned_on_end ? "end" : "start";
  j["sequences"] = sequences;
  auto& bl = j["blocks"] = nlohmann::ordered_json::array();
  for (const auto& b : blocks)
    bl.push_back({{"block", b.block},
                  {"first_token", b.block * block_size},
                  {"sequences", b.sequences},
                  {"steps", b.steps},
                  {"eos_prob", b.eos_prob},
                  {"information_content", b.surprisal},
                  {"entropy", b.entropy},
                  {"varentropy", b.varentropy}});
  auto& ec = j["eos_contexts"] = nlohmann::ordered_json::array();
  for (const auto& c : eos_contexts) {
    nlohmann::ordered_json e{{"sequence", c.sequence}, {"i", c.i}, {"eos_prob", c.eos_prob}, {"eos_rank", c.eos_rank}};
    auto& top = e["top"] = nlohmann::ordered_json::array();
    for (const auto& [piece, lp] : c.top) top.push_back({{"piece", piece}, {"logprob", lp}});
    ec.push_back(std::move(e));
  }
  return j;
}

std::string Analysis::to_csv() const {
  std::ostringstream o;
  o << "block,first_token,sequences,steps,eos_prob,information_content,entropy,varentropy\n";
  for (const auto& b : blocks)
    o << b.block << ',' << b.block * block_size << ',' << b.sequences << ',' << b.steps << ',' << b.eos_prob << ','
      << b.surprisal << ',' << b.entropy << ',' << b.varentropy << '\n';
  return o.str();
}

namespace {

// A line chart of one series against the block index; log10 scale for probabilities.
std::string svg_chart(const std::string& title, const std::vector<double>& ys, bool log_scale, int block_size,
                      bool aligned_on_end) {
  const int w = 640, h = 220, l = 60, r = 10, t = 24, b = 30;
  std::vector<double> v;
  for (double y : ys) v.push_back(log_scale ? std::log10(std::max(y, 1e-12)) : y);
  double lo = v.empty() ? 0 : *std::min_element(v.begin(), v.end());
  double hi = v.empty() ? 1 : *std::max_element(v.begin(), v.end());
  if (hi - lo < 1e-9) {
    hi += 0.5;
    lo -= 0.5;
  }
  char buf[256];
  std::ostringstream o;
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << w << "\" height=\"" << h << "\">";
  o << "<text x=\"" << l << "\" y=\"16\" font-size=\"13\" font-family=\"sans-serif\">" << lab::svg::escape(title)
    << (log_scale ? " (log10)" : "") << "</text>";
  o << "<rect x=\"" << l << "\" y=\"" << t << "\" width=\"" << (w - l - r) << "\" height=\"" << (h - t - b)
    << "\" fill=\"none\" stroke=\"#999\"/>";
  for (int k = 0; k <= 2; ++k) {
    const double val = lo + (hi - lo) * k / 2;
    const double y = t + (h - t - b) * (1 - k / 2.0);
    std::snprintf(
        buf, sizeof buf,
        "<text x=\"%d\" y=\"%.1f\" font-size=\"10\" text-anchor=\"end\" font-family=\"sans-serif\">%.3g</text>", l - 4,
        y + 3, val);
    o << buf;
  }
  if (aligned_on_end)
    std::snprintf(buf, sizeof buf,
                  "<text x=\"%d\" y=\"%d\" font-size=\"10\" font-family=\"sans-serif\">%d tokens before the end</text>"
                  "<text x=\"%d\" y=\"%d\" font-size=\"10\" text-anchor=\"end\" font-family=\"sans-serif\">end (EOS)</text>",
                  l, h - 8, static_cast<int>(std::max<size_t>(1, v.size())) * block_size, w - r, h - 8);
  else
    std::snprintf(
        buf, sizeof buf,
        "<text x=\"%d\" y=\"%d\" font-size=\"10\" text-anchor=\"end\" font-family=\"sans-serif\">token %d</text>", w - r,
        h - 8, static_cast<int>(std::max<size_t>(1, v.size())) * block_size);
  o << buf << "<polyline fill=\"none\" stroke=\"#2563eb\" stroke-width=\"1.5\" points=\"";
  for (size_t i = 0; i < v.size(); ++i) {
    const double x = l + (w - l - r) * (v.size() > 1 ? static_cast<double>(i) / (v.size() - 1) : 0.5);
    const double y = t + (h - t - b) * (1 - (v[i] - lo) / (hi - lo));
    std::snprintf(buf, sizeof buf, "%.1f,%.1f ", x, y);
    o << buf;
  }
  o << "\"/></svg>";
  return o.str();
}

}  // namespace

std::string Analysis::to_html(const std::string& title) const {
  std::vector<double> eos, ic, ent, var;
  for (const auto& b : blocks) {
    eos.push_back(b.eos_prob);
    ic.push_back(b.surprisal);
    ent.push_back(b.entropy);
    var.push_back(b.varentropy);
  }
  std::ostringstream o;
  o << "<!doctype html><html><head><meta charset=\"utf-8\"><title>" << lab::svg::escape(title)
    << "</title></head><body style=\"font-family:sans-serif\"><h1>" << lab::svg::escape(title) << "</h1><p>" << sequences
    << " generations, blocks of " << block_size << " tokens"
    << (aligned_on_end ? ", counted back from each generation's end (its EOS)" : "") << ".</p>";
  o << svg_chart("EOS probability", eos, true, block_size, aligned_on_end) << "<br>";
  o << svg_chart("information content (nats)", ic, false, block_size, aligned_on_end) << "<br>";
  o << svg_chart("entropy (nats)", ent, false, block_size, aligned_on_end) << "<br>";
  o << svg_chart("varentropy", var, false, block_size, aligned_on_end);
  o << "<h2>Steps where EOS was among the top alternatives</h2><table border=\"1\" cellpadding=\"3\">"
       "<tr><th>sequence</th><th>token</th><th>EOS prob</th><th>EOS rank</th><th>top alternatives</th></tr>";
  size_t shown = 0;
  for (const auto& c : eos_contexts) {
    if (++shown > 200) break;
    o << "<tr><td>" << c.sequence << "</td><td>" << c.i << "</td><td>" << c.eos_prob << "</td><td>" << c.eos_rank
      << "</td><td>";
    for (const auto& [piece, lp] : c.top) o << "<code>" << lab::svg::escape(piece) << "</code> " << std::exp(lp) << "; ";
    o << "</td></tr>";
  }
  o << "</table></body></html>\n";
  return o.str();
}

}  // namespace coda
