// Structured output: the formats a generation can be held to (OpenAI `response_format`, vLLM
// `guided_json` / `guided_choice`, llama.cpp `json_schema`), compiled into a small graph of nodes,
// and the byte-level matcher that follows a text through that graph.
//
// The matcher is a nondeterministic pushdown automaton: its state is a set of alternatives, each a
// stack of frames (an object being written, then a string inside it, ...). `anyOf`, a list of
// types, enum values that share a prefix (1 and 12) and the end of a number (known only at the
// byte after it) each keep more than one alternative alive until the text tells them apart. A
// byte that no alternative accepts leaves the state dead. The structured-output processor
// (structured_output.h) feeds every candidate token's bytes through a copy of the state and masks
// those that kill it.
//
// Generations must end well inside a format too. A gap of whitespace is one space, or one line
// break and at most kMaxIndent spaces or tabs (as llama.cpp's JSON grammars allow, with 20): a
// model that floods spaces or newlines between tokens, the known failure of JSON modes, cannot.
// Numbers hold at most 16 integer and 16 fraction digits; values nest at most kMaxDepth deep; once
// the value is whole, the end of generation is the only token left.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace coda {

struct GrammarNode {
  enum class Kind : uint8_t { kAlt, kObject, kArray, kString, kNumber, kInteger, kLiterals };
  struct Property {
    std::string key;  // as it appears between the quotes (JSON-escaped)
    uint32_t node = 0;
  };
  Kind kind = Kind::kAlt;
  std::vector<uint32_t> alts;           // kAlt: any of these
  std::vector<Property> props;          // kObject: known keys (at most 64), in any order, each once
  uint64_t required = 0;                // kObject: bit i set when props[i] must appear
  int64_t additional = -1;              // kObject: the node other keys' values follow; -1: no other keys
  uint32_t items = 0;                   // kArray: the node every item follows
  int64_t min_items = 0, max_items = -1;  // kArray; -1: no limit
  int64_t min_len = 0, max_len = -1;      // kString, in characters; -1: no limit
  int8_t sign = -1;  // kInteger: 1 positive (no sign, no lone 0), 0 non-negative (no sign), -1 any
  std::vector<std::string> literals;      // kLiterals: exact texts (1 to 64)
};

class OutputGrammar {
 public:
  // A JSON Schema (draft 2020-12 / OpenAI structured outputs). Supported: type (one or a list),
  // properties, required, additionalProperties (absent means none, as OpenAI's strict mode and
  // vLLM's defaults have it), items, minItems, maxItems, minLength, maxLength, enum, const, anyOf,
  // oneOf (as anyOf), allOf of one schema, nullable, $ref into #/$defs or #/definitions (recursion
  // allowed), and on integers minimum / maximum / exclusiveMinimum / exclusiveMaximum where the
  // range is at most 1,024 integers or a lower bound of 0 or 1 (Pydantic's ge=0, gt=0, ge=1). Annotations (title, description, default, format, ...) are ignored. Keywords that
  // would restrict the output further but are not enforced (pattern, minimum, ...) are an error
  // that names them, rather than an output that silently breaks them.
  static Expected<std::shared_ptr<const OutputGrammar>> json_schema(const nlohmann::ordered_json& schema);
  // Any JSON object (OpenAI's `{"type": "json_object"}`).
  static std::shared_ptr<const OutputGrammar> json_object();
  // Exactly one of these texts, nothing around them (vLLM's `guided_choice`).
  static Expected<std::shared_ptr<const OutputGrammar>> choice(const std::vector<std::string>& texts);

  const std::vector<GrammarNode>& nodes() const { return nodes_; }
  uint32_t root() const { return root_; }
  bool json() const { return json_; }  // whitespace may surround the value and its parts
  const std::string& kind() const { return kind_; }

 private:
  friend class SchemaCompiler;
  std::vector<GrammarNode> nodes_;
  uint32_t root_ = 0;
  bool json_ = true;
  std::string kind_;
};

// Limits that keep a constrained generation finite in every dimension but the content itself.
constexpr int kMaxIndent = 24;  // spaces or tabs after a line break in one gap of JSON
constexpr int kMaxDepth = 64;       // nested objects and arrays
constexpr int kMaxAlternatives = 16;  // beyond, the latest alternatives are dropped (never an invalid text)

struct MatchFrame {
  uint32_t node = 0;
  uint32_t count = 0;  // items, characters, literal or key position, digits
  uint64_t bits = 0;   // object: keys seen; literal and key: candidates still matching
  uint16_t aux = 0;    // string: escape and UTF-8 state; object: the key whose value comes next
  uint8_t mode = 0;
  uint8_t ws = 0;  // the current gap of whitespace: bit 7 a line break, bits 0-6 spaces or tabs
  bool operator==(const MatchFrame&) const = default;
};

class GrammarMatcher {
 public:
  GrammarMatcher() = default;
  explicit GrammarMatcher(const OutputGrammar& g);

  // Feeds bytes; false (and dead()) when no alternative accepts them.
  bool feed(std::string_view bytes);
  // `to` becomes this state after one more byte (no allocation once `to` has grown).
  void feed_into(uint8_t b, GrammarMatcher& to) const;
  bool dead() const { return ends_.empty(); }
  // The text so far is a whole value: the output may end here.
  bool accepting() const;
  // Every alternative has ended: nothing but the end of the output may follow (JSON allows
  // trailing whitespace, but a finished value gains nothing from it).
  bool finished() const;
  // Every alternative is inside a string with no length limit and no escape or UTF-8 sequence
  // open: any text without quotes, backslashes or control bytes keeps the state alive.
  bool in_free_string() const;

 private:
  const OutputGrammar* g_ = nullptr;
  std::vector<MatchFrame> frames_;  // the alternatives' stacks back to back
  std::vector<uint32_t> ends_;      // alternative i is frames_[ends_[i-1] .. ends_[i])
};

}  // namespace coda
