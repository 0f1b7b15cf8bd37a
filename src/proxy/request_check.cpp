#include "proxy/request_check.h"

#include <cmath>
#include <string>

namespace coda::proxy {

namespace {

ApiError field_error(const std::string& param, const std::string& message) {
  ApiError e;
  e.param = param;
  e.message = message;
  return e;
}

std::string shown_value(const nlohmann::ordered_json& v) {
  std::string s = v.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
  return s.size() > 40 ? s.substr(0, 40) + "..." : s;
}

const nlohmann::ordered_json* present(const nlohmann::ordered_json& body, const char* key) {
  auto it = body.find(key);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}

// A number within [lo, hi] (`open_lo`: lo itself excluded).
std::optional<ApiError> number_in(const nlohmann::ordered_json& body, const char* key, double lo, double hi,
                                  bool open_lo = false) {
  const auto* v = present(body, key);
  if (!v) return std::nullopt;
  if (!v->is_number()) return field_error(key, std::string(key) + ": expected a number, got " + shown_value(*v));
  const double x = v->get<double>();
  if (!std::isfinite(x) || x < lo || x > hi || (open_lo && x == lo)) {
    auto num = [](double d) {
      std::string s = std::to_string(d);
      s.erase(s.find_last_not_of('0') + 1);
      if (!s.empty() && s.back() == '.') s.pop_back();
      return s;
    };
    return field_error(key, std::string(key) + ": " + shown_value(*v) + " is out of range; allowed " + (open_lo ? "(" : "[") +
                        num(lo) + ", " + num(hi) + "]");
  }
  return std::nullopt;
}

std::optional<ApiError> integer_in(const nlohmann::ordered_json& body, const char* key, int64_t lo, int64_t hi) {
  const auto* v = present(body, key);
  if (!v) return std::nullopt;
  if (!v->is_number_integer()) return field_error(key, std::string(key) + ": expected an integer, got " + shown_value(*v));
  const bool too_big = v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX);
  const int64_t x = too_big ? INT64_MAX : v->get<int64_t>();
  if (x < lo || x > hi)
    return field_error(key, std::string(key) + ": " + shown_value(*v) + " is out of range; allowed " + std::to_string(lo) + ".." +
                        std::to_string(hi));
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> check_forwarded_fields(const nlohmann::ordered_json& body, bool chat) {
  constexpr int64_t kMaxTokens = int64_t{1} << 30;  // beyond any context; the upstream judges its own
  for (const char* k : {"max_tokens", "max_completion_tokens"})
    if (auto e = integer_in(body, k, 1, kMaxTokens)) return e;
  if (auto e = number_in(body, "temperature", 0, 2)) return e;
  if (auto e = number_in(body, "top_p", 0, 1, true)) return e;
  if (auto e = integer_in(body, "top_k", -1, INT32_MAX)) return e;
  if (auto e = number_in(body, "min_p", 0, 1)) return e;
  if (auto e = number_in(body, "presence_penalty", -2, 2)) return e;
  if (auto e = number_in(body, "frequency_penalty", -2, 2)) return e;
  if (auto e = number_in(body, "repetition_penalty", 0, 1e6, true)) return e;
  if (const auto* v = present(body, "seed"); v && !v->is_number_integer())
    return field_error("seed", "seed: expected an integer, got " + shown_value(*v));
  if (const auto* v = present(body, "stop")) {
    bool ok = v->is_string() || v->is_array();
    if (v->is_array())
      for (const auto& x : *v) ok = ok && x.is_string();
    if (!ok) return field_error("stop", "stop: expected a string or an array of strings");
  }
  if (chat) {
    if (const auto* v = present(body, "logprobs"); v && !v->is_boolean())
      return field_error("logprobs", "logprobs: expected true or false on chat completions, got " + shown_value(*v));
    if (auto e = integer_in(body, "top_logprobs", 0, 20)) return e;
  } else if (auto e = integer_in(body, "logprobs", 0, 20)) {
    return e;
  }
  return std::nullopt;
}

}  // namespace coda::proxy
