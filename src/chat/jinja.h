// A Jinja subset interpreter for chat templates: what Hugging Face's `apply_chat_template` renders
// (Jinja2 with trim_blocks, lstrip_blocks and loop controls, `raise_exception`, `strftime_now`,
// a non-escaping `tojson`), written for templates found in real GGUF files.
//
// Supported: text, {{ }}, {% if/elif/else %}, {% for %} with loop.* (index, index0, revindex,
// revindex0, first, last, length, previtem, nextitem, cycle), `else` and an `if` filter,
// {% break/continue %}, {% set %} (names, namespace attributes, block set), {% macro %}, comments,
// whitespace control; literals, lists, dicts, tuples; arithmetic, comparison, `in`, `~`,
// `and/or/not`, conditional expressions, slices; the filters, tests and str/dict methods in
// jinja_builtins.cpp. Not supported (a clear error): inheritance, includes, call blocks,
// recursive loops, autoescape.
#pragma once

#include <memory>
#include <string>

#include "chat/jinja_value.h"
#include "core/status.h"

namespace coda::jinja {

struct Node;

// The work one render may do (RenderBudget in jinja_value.h). A conversation larger than the
// server takes (4,096 messages, 10 MB, 128 tools) renders with each real template of
// tests/data/templates in at most 0.54 M steps and 74 MB of values, 30 and 7 times below the
// defaults; a hostile template reaches them within about a second and 0.7 GB.
// Part of the error of a render that spent its limits, so that callers can tell a broken template
// from a conversation that a sound template refused.
inline constexpr const char* kOverBudget = "did more work than any chat template needs";

struct RenderLimits {
  int64_t steps = int64_t{16} << 20;
  int64_t bytes = int64_t{512} << 20;
};

class Template {
 public:
  // Parses the source; a syntax error names the line.
  static Expected<Template> parse(const std::string& source);
  // Renders with the given variables. Errors: the template's raise_exception message, a
  // type/undefined error naming the line, or the limits spent.
  Expected<std::string> render(const Object& variables, const RenderLimits& limits = {}) const;

 private:
  std::shared_ptr<const std::string> source_;
  std::shared_ptr<const std::vector<std::unique_ptr<Node>>> body_;
};

}  // namespace coda::jinja
