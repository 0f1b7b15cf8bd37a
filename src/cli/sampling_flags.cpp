#include "cli/sampling_flags.h"

#include <charconv>
#include <cstdlib>

namespace coda::cli {

namespace {

// A float parameter as the number the user typed: `--repeat-penalty 1.07` is held as the float
// nearest 1.07, which widened to double reads 1.0700000524520874 on the wire. The shortest text
// that gives the same float back ("1.07"), read as a double, is what the user meant.
nlohmann::json as_typed(float v) {
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  if (r.ec != std::errc()) return static_cast<double>(v);
  *r.ptr = '\0';
  return std::strtod(buf, nullptr);
}

nlohmann::json as_typed(const auto& v) {
  return v;
}

}  // namespace

void add_sampling_flags(CLI::App* sub, GenerationRequest& r) {
  SamplingParams& sp = r.sampling;
  sub->add_option("--temp", sp.temperature, "Temperature [0, 2]; 0 is greedy")->capture_default_str();
  sub->add_option("--top-k", sp.top_k, "Keep the k most probable tokens (-1/0: off)")->capture_default_str();
  sub->add_option("--top-p", sp.top_p, "Nucleus sampling mass (0, 1]")->capture_default_str();
  sub->add_option("--min-p", sp.min_p, "Drop tokens below min_p x the top probability [0, 1]")->capture_default_str();
  sub->add_option("--typical", sp.typical_p, "Locally typical sampling mass (0, 1]")->capture_default_str();
  sub->add_option("--top-nsigma", sp.top_n_sigma, "Keep logits within n standard deviations of the max (<= 0: off)")
      ->capture_default_str();
  sub->add_option("--dynatemp-range", sp.dynatemp_range, "Dynamic temperature: T +/- range by entropy (0: off)")
      ->capture_default_str();
  sub->add_option("--dynatemp-exp", sp.dynatemp_exponent, "Dynamic temperature exponent")->capture_default_str();
  sub->add_option("--repeat-penalty", sp.repetition_penalty, "Repetition penalty (0, 2]; 1 is off")
      ->capture_default_str();
  sub->add_option("--repeat-last-n", sp.repetition_window, "Tokens the repetition penalty looks back over (0: all)")
      ->capture_default_str();
  sub->add_option("--frequency-penalty", sp.frequency_penalty, "OpenAI frequency penalty [-2, 2]")
      ->capture_default_str();
  sub->add_option("--presence-penalty", sp.presence_penalty, "OpenAI presence penalty [-2, 2]")->capture_default_str();
  sub->add_option("--dry-multiplier", sp.dry_multiplier, "DRY penalty multiplier (0: off)")->capture_default_str();
  sub->add_option("--dry-base", sp.dry_base, "DRY penalty base")->capture_default_str();
  sub->add_option("--dry-allowed-length", sp.dry_allowed_length, "DRY: repeats up to this length are free")
      ->capture_default_str();
  sub->add_option("--dry-penalty-last-n", sp.dry_window, "DRY: tokens to look back over (0: all)")
      ->capture_default_str();
  sub->add_option("--dry-sequence-breaker", sp.dry_sequence_breakers,
                  "DRY sequence breaker (repeatable; replaces the defaults \\n : \" *)")
      ->each([&sp, first = std::make_shared<bool>(true)](const std::string& s) {
        if (*first) sp.dry_sequence_breakers.clear();
        *first = false;
        sp.dry_sequence_breakers.push_back(s);
      });
  sub->add_option("--xtc-probability", sp.xtc_probability, "XTC: chance of removing the top choices [0, 1]")
      ->capture_default_str();
  sub->add_option("--xtc-threshold", sp.xtc_threshold, "XTC: probability a choice needs to count as top [0, 1]")
      ->capture_default_str();
  sub->add_option("--no-repeat-ngram-size", sp.no_repeat_ngram_size, "Ban repeating any n-gram of this size (0: off)")
      ->capture_default_str();
  sub->add_option("--min-tokens", sp.min_tokens, "Generate at least this many tokens before EOS or a stop id")
      ->capture_default_str();
  sub->add_option("--bad-word", sp.bad_words, "A word the output must not contain (repeatable)");
  sub->add_flag("--ignore-eos", sp.ignore_eos, "Never end at end-of-sequence tokens (they are masked)");
  sub->add_option("--stop", r.stop, "Stop string (repeatable); it is not printed");
  sub->add_option("--stop-token-id", r.stop_token_ids, "Stop at this token id (repeatable)");
  sub->add_option("-s,--seed", sp.seed, "Random seed for sampling")->capture_default_str();
}

nlohmann::json sampling_fields(const CLI::App* app, const GenerationRequest& r) {
  const SamplingParams& sp = r.sampling;
  nlohmann::json j = nlohmann::json::object();
  auto given = [&](const char* flag) { return app->count(flag) > 0; };
  auto put = [&](const char* flag, const char* field, const auto& v) {
    if (given(flag)) j[field] = as_typed(v);
  };
  put("--temp", "temperature", sp.temperature);
  put("--top-k", "top_k", sp.top_k);
  put("--top-p", "top_p", sp.top_p);
  put("--min-p", "min_p", sp.min_p);
  put("--typical", "typical_p", sp.typical_p);
  put("--top-nsigma", "top_n_sigma", sp.top_n_sigma);
  put("--dynatemp-range", "dynatemp_range", sp.dynatemp_range);
  put("--dynatemp-exp", "dynatemp_exponent", sp.dynatemp_exponent);
  put("--repeat-penalty", "repetition_penalty", sp.repetition_penalty);
  put("--repeat-last-n", "repeat_last_n", sp.repetition_window);
  put("--frequency-penalty", "frequency_penalty", sp.frequency_penalty);
  put("--presence-penalty", "presence_penalty", sp.presence_penalty);
  put("--dry-multiplier", "dry_multiplier", sp.dry_multiplier);
  put("--dry-base", "dry_base", sp.dry_base);
  put("--dry-allowed-length", "dry_allowed_length", sp.dry_allowed_length);
  put("--dry-penalty-last-n", "dry_penalty_last_n", sp.dry_window);
  put("--dry-sequence-breaker", "dry_sequence_breakers", sp.dry_sequence_breakers);
  put("--xtc-probability", "xtc_probability", sp.xtc_probability);
  put("--xtc-threshold", "xtc_threshold", sp.xtc_threshold);
  put("--no-repeat-ngram-size", "no_repeat_ngram_size", sp.no_repeat_ngram_size);
  put("--min-tokens", "min_tokens", sp.min_tokens);
  put("--bad-word", "bad_words", sp.bad_words);
  put("--ignore-eos", "ignore_eos", sp.ignore_eos);
  put("--stop", "stop", r.stop);
  put("--stop-token-id", "stop_token_ids", r.stop_token_ids);
  put("--seed", "seed", sp.seed);
  return j;
}

}  // namespace coda::cli
