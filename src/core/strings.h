// Small string helpers shared by the command line and the lab.
#pragma once

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <string_view>
#include <vector>

namespace coda {

// Splits on `sep`, keeping empty fields ("a,,b" -> {"a", "", "b"}; "" -> {""}).
inline std::vector<std::string> split(std::string_view s, char sep) {
  std::vector<std::string> out;
  size_t a = 0;
  while (true) {
    const size_t b = s.find(sep, a);
    out.emplace_back(s.substr(a, b == std::string_view::npos ? std::string_view::npos : b - a));
    if (b == std::string_view::npos) return out;
    a = b + 1;
  }
}

// A comma-separated list without its empty items ("a,,b," -> {"a", "b"}).
inline std::vector<std::string> split_list(std::string_view s) {
  std::vector<std::string> out;
  for (auto& x : split(s, ','))
    if (!x.empty()) out.push_back(std::move(x));
  return out;
}

// The whole of `s` as a finite number (strtod's syntax); false for "", "1x", "nan" or "inf".
inline bool parse_number(const std::string& s, double& out) {
  if (s.empty()) return false;
  char* end = nullptr;
  out = std::strtod(s.c_str(), &end);
  return *end == 0 && std::isfinite(out);
}

// 32 random hex digits (128 bits from a per-thread generator seeded by the OS): request ids and
// tool-call ids, unique without coordination between threads or server restarts.
inline std::string random_hex_id() {
  static thread_local std::mt19937_64 rng{(static_cast<uint64_t>(std::random_device{}()) << 32) ^
                                          std::random_device{}()};
  char hex[33];
  std::snprintf(hex, sizeof hex, "%016llx%016llx", static_cast<unsigned long long>(rng()),
                static_cast<unsigned long long>(rng()));
  return hex;
}

}  // namespace coda
