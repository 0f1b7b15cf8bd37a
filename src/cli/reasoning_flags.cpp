#include "cli/reasoning_flags.h"

#include "core/strings.h"

namespace coda::cli {

void add_reasoning_flags(CLI::App* sub, ReasoningFlags* f, bool field) {
  sub->add_option("--reasoning-loop", f->loop,
                  "A loop in a reasoning model's thinking: answer (drop it, close the thinking, let the model answer) "
                  "or stop (the guard policy acts as on any text). Requests override it with coda.reasoning_loop")
      ->capture_default_str();
  sub->add_option("--reasoning-budget", f->budget,
                  "Reasoning tokens before the thinking is closed and the model answers (-1: unlimited); requests "
                  "send thinking_token_budget, thinking_budget_tokens or reasoning_effort")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{-1}, int64_t{1} << 30));
  sub->add_option("--reasoning-grace", f->grace,
                  "Tokens past the budget within which the thinking closes at a sentence's end (then at once)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 20));
  sub->add_option("--reasoning-effort-budgets", f->effort_budgets,
                  "Thinking budgets for reasoning_effort low, medium and high (-1: unlimited)")
      ->capture_default_str();
  if (field)
    sub->add_option("--reasoning-field", f->field,
                    "The field the thinking goes out in: reasoning (vLLM's current name) or reasoning_content "
                    "(llama.cpp's, and vLLM's before)")
        ->capture_default_str();
}

Status apply_reasoning_flags(const ReasoningFlags& f, ThinkingConfig& thinking, int64_t effort_budgets[3]) {
  if (f.loop != "answer" && f.loop != "stop") return Error("--reasoning-loop: '" + f.loop + "' is not answer or stop");
  if (f.field != "reasoning" && f.field != "reasoning_content")
    return Error("--reasoning-field: '" + f.field + "' is not reasoning or reasoning_content");
  thinking.answer_on_loop = f.loop == "answer";
  thinking.budget = f.budget;
  thinking.grace = f.grace;
  int64_t b[3];
  size_t from = 0;
  for (int k = 0; k < 3; ++k) {
    const size_t comma = k < 2 ? f.effort_budgets.find(',', from) : f.effort_budgets.size();
    double v = 0;
    if (comma == std::string::npos || !parse_number(f.effort_budgets.substr(from, comma - from), v) || v < -1 ||
        v != static_cast<double>(static_cast<int64_t>(v)))
      return Error("--reasoning-effort-budgets: expected three token counts LOW,MEDIUM,HIGH (-1: unlimited), got '" +
                   f.effort_budgets + "'");
    b[k] = static_cast<int64_t>(v);
    from = comma + 1;
  }
  if (f.effort_budgets.find(',', from) != std::string::npos)
    return Error("--reasoning-effort-budgets: expected three token counts, got '" + f.effort_budgets + "'");
  for (int k = 0; k < 3; ++k) effort_budgets[k] = b[k];
  return Status();
}

}  // namespace coda::cli
