// The syntax tree of a parsed template, and the parser that builds it from source text.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "chat/jinja_value.h"

namespace coda::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    Literal,  // value
    Name,     // name
    List,     // items
    Tuple,    // items
    Dict,     // items as key, value pairs
    Attr,     // a.name
    Index,    // a[b]
    Slice,    // a[items[0]:items[1]:items[2]] (null parts are omitted bounds)
    Call,     // a(items, kwargs)
    Filter,   // a | name(items, kwargs)
    Test,     // a is [not] name(items)
    Unary,    // name ("-", "+", "not") applied to a
    Binary,   // a name b
    Cond,     // a if b else c
  };
  Kind kind;
  size_t pos = 0;  // source offset, for error messages
  Value value;
  std::string name;
  ExprPtr a, b, c;
  std::vector<ExprPtr> items;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  bool negated = false;
};

struct Node;
using NodePtr = std::unique_ptr<Node>;
using Body = std::vector<NodePtr>;

struct Node {
  enum class Kind { Text, Output, If, For, Set, SetBlock, Macro, Break, Continue };
  Kind kind;
  size_t pos = 0;
  std::string text;                                     // Text
  ExprPtr expr;                                         // Output, Set value, For iterable
  std::vector<std::pair<ExprPtr, Body>> branches;       // If: condition (null for else) and body
  std::vector<std::string> targets;                     // For loop variables, Set/SetBlock/Macro name
  std::string attr;                                     // Set ns.attr: the attribute
  ExprPtr filter;                                       // For ... if filter
  Body body, else_body;                                 // For, SetBlock, Macro
  std::vector<std::pair<std::string, ExprPtr>> params;  // Macro parameters and defaults
};

// Parses a template with Hugging Face's environment (trim_blocks, lstrip_blocks, loop controls).
// Throws TemplateError with the line number on a syntax error.
Body parse_template(const std::string& source);

// 1-based line of a source offset.
int line_of(const std::string& source, size_t pos);

}  // namespace coda::jinja
