#include "sampling/params.h"

#include <cmath>
#include <sstream>

namespace coda {

namespace {

std::string num(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

Status range(const char* name, double v, double lo, double hi, bool lo_open = false) {
  const bool ok = std::isfinite(v) && (lo_open ? v > lo : v >= lo) && v <= hi;
  if (ok) return Status::Ok();
  return Error(std::string(name) + ": " + num(v) + " is out of range; allowed " + (lo_open ? "(" : "[") + num(lo) +
               ", " + num(hi) + "]");
}

}  // namespace

Status SamplingParams::validate(int32_t n_vocab) const {
  CODA_RETURN_IF_ERROR(range("temperature", temperature, 0, 2));
  if (top_k < -1)
    return Error("top_k: " + std::to_string(top_k) + " is out of range; allowed -1 (off), 0 (off) or >= 1");
  CODA_RETURN_IF_ERROR(range("top_p", top_p, 0, 1, true));
  CODA_RETURN_IF_ERROR(range("min_p", min_p, 0, 1));
  CODA_RETURN_IF_ERROR(range("typical_p", typical_p, 0, 1, true));
  CODA_RETURN_IF_ERROR(range("repetition_penalty", repetition_penalty, 0, 2, true));
  if (repetition_window < 0)
    return Error("repetition window: " + std::to_string(repetition_window) + " is out of range; allowed >= 0 (0: all)");
  CODA_RETURN_IF_ERROR(range("frequency_penalty", frequency_penalty, -2, 2));
  CODA_RETURN_IF_ERROR(range("presence_penalty", presence_penalty, -2, 2));
  CODA_RETURN_IF_ERROR(range("top_n_sigma", top_n_sigma, -1, 100));
  CODA_RETURN_IF_ERROR(range("dynatemp_range", dynatemp_range, 0, 5));
  CODA_RETURN_IF_ERROR(range("dynatemp_exponent", dynatemp_exponent, 0, 10, true));
  CODA_RETURN_IF_ERROR(range("dry_multiplier", dry_multiplier, 0, 10));
  CODA_RETURN_IF_ERROR(range("dry_base", dry_base, 1, 10, true));
  CODA_RETURN_IF_ERROR(range("dry_allowed_length", dry_allowed_length, 1, 1000));
  if (dry_window < 0)
    return Error("dry_penalty_last_n: " + std::to_string(dry_window) + " is out of range; allowed >= 0 (0: all)");
  for (const auto& b : dry_sequence_breakers)
    if (b.empty()) return Error("dry_sequence_breakers: \"\" is not allowed; each breaker must be non-empty");
  CODA_RETURN_IF_ERROR(range("xtc_probability", xtc_probability, 0, 1));
  CODA_RETURN_IF_ERROR(range("xtc_threshold", xtc_threshold, 0, 1));
  if (grammar && min_tokens > 0)
    return Error("min_tokens: cannot be combined with structured output (the format decides where the output ends)");
  if (grammar && ignore_eos)
    return Error("ignore_eos: cannot be combined with structured output (the output must end when the format does)");
  if (no_repeat_ngram_size < 0)
    return Error("no_repeat_ngram_size: " + std::to_string(no_repeat_ngram_size) + " is out of range; allowed >= 0");
  if (min_tokens < 0) return Error("min_tokens: " + std::to_string(min_tokens) + " is out of range; allowed >= 0");
  for (const auto& w : bad_words)
    if (w.empty()) return Error("bad_words: \"\" is not allowed; each word must be non-empty");
  for (int32_t id : allowed_token_ids)
    if (id < 0 || id >= n_vocab)
      return Error("allowed_token_ids: token id " + std::to_string(id) + " is out of range; allowed 0.." +
                   std::to_string(n_vocab - 1));
  if (grammar && !allowed_token_ids.empty())
    return Error(
        "allowed_token_ids: cannot be combined with structured output (the format already decides which tokens may "
        "follow)");
  for (const auto& [id, bias] : logit_bias) {
    if (id < 0 || id >= n_vocab)
      return Error("logit_bias: token id " + std::to_string(id) + " is out of range; allowed 0.." +
                   std::to_string(n_vocab - 1));
    CODA_RETURN_IF_ERROR(range("logit_bias value", bias, -100, 100));
  }
  return Status::Ok();
}

}  // namespace coda
