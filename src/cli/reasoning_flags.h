// A reasoning model's thinking, as `coda serve` and `coda proxy` take it: what a loop there does
// (--reasoning-loop), the budget of reasoning tokens (--reasoning-budget, llama.cpp's flag), the
// grace after it, the budgets that reasoning_effort names, and (serve) the field the thinking goes
// out in. docs/reasoning.md.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

#include "core/status.h"
#include "guard/thinking.h"

namespace coda::cli {

struct ReasoningFlags {
  std::string loop = "answer";
  int64_t budget = -1;
  int64_t grace = 32;
  std::string effort_budgets = "1024,4096,-1";
  std::string field = "reasoning";
};

// `field`: also --reasoning-field (the server writes the thinking; the proxy passes the upstream's on).
void add_reasoning_flags(CLI::App* sub, ReasoningFlags* f, bool field);
// Into the guard's thinking settings and the reasoning_effort budgets (low, medium, high).
Status apply_reasoning_flags(const ReasoningFlags& f, ThinkingConfig& thinking, int64_t effort_budgets[3]);

}  // namespace coda::cli
