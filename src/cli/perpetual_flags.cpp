#include "cli/perpetual_flags.h"

namespace coda::cli {

void add_perpetual_flags(CLI::App* sub, GuardConfig* c) {
  sub->add_option("--perpetual-min-tokens", c->perpetual_min_tokens,
                  "Step back from an EOS sampled before this many tokens and resample (0: off)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 30));
  sub->add_option("--perpetual-backstep", c->eos_backstep, "Perpetual: tokens stepped back from an early EOS")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 20));
  sub->add_option("--perpetual-start-factor", c->perpetual.factor,
                  "Perpetual: the temperature after a backstep, as a factor of max(T, 0.7)")
      ->capture_default_str()
      ->check(CLI::Range(1.0f, 10.0f));
  sub->add_option("--perpetual-decay", c->perpetual.decay,
                  "Perpetual: how much the factor falls per token, back to 1 (the blog's seed: 0.1)")
      ->capture_default_str()
      ->check(CLI::Range(0.001f, 10.0f));
}

}  // namespace coda::cli
