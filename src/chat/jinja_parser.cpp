// Lexer and recursive-descent parser for the Jinja subset chat templates use. The expression
// grammar follows Jinja2's precedence: conditional < or < and < not < comparison < + - < ~ <
// * / // % < ** < unary - + < postfix (. [] ()) with filters and tests bound to the unary operand.
#include <cctype>
#include <cstring>

#include "chat/jinja_ast.h"

namespace coda::jinja {

int line_of(const std::string& source, size_t pos) {
  int line = 1;
  for (size_t i = 0; i < pos && i < source.size(); ++i) line += source[i] == '\n';
  return line;
}

namespace {

struct Token {
  enum class Type { Text, VarBegin, VarEnd, BlockBegin, BlockEnd, Name, String, Int, Float, Op, Eof };
  Type type;
  std::string text;
  size_t pos;
  int64_t int_value = 0;
  double float_value = 0;
};

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

class Lexer {
 public:
  explicit Lexer(const std::string& src) : src_(src) {}

  std::vector<Token> run() {
    size_t pos = 0;
    const size_t n = src_.size();
    while (pos < n) {
      size_t start = pos;
      size_t open = std::string::npos;
      for (size_t i = pos; i + 1 < n; ++i) {
        if (src_[i] == '{' && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) {
          open = i;
          break;
        }
      }
      if (open == std::string::npos) {
        emit_text(start, n, false, false);
        break;
      }
      const char kind = src_[open + 1];
      const char modifier = open + 2 < n ? src_[open + 2] : '\0';
      const bool strip_before = modifier == '-';
      const bool lstrip = kind != '{' && modifier != '+' && !strip_before;
      emit_text(start, open, strip_before, lstrip);
      pos = open + 2 + (modifier == '-' || modifier == '+' ? 1 : 0);
      if (kind == '#') {
        const size_t close = src_.find("#}", pos);
        if (close == std::string::npos) throw error(open, "unterminated comment");
        pos = close + 2;
        after_tag(pos, close > 0 && src_[close - 1] == '-', close > 0 && src_[close - 1] == '+', true);
        continue;
      }
      toks_.push_back({kind == '{' ? Token::Type::VarBegin : Token::Type::BlockBegin, "", open});
      pos = lex_expression(pos, kind == '{' ? '}' : '%');
    }
    toks_.push_back({Token::Type::Eof, "", n});
    return std::move(toks_);
  }

 private:
  TemplateError error(size_t pos, const std::string& what) const {
    return TemplateError("template syntax error at line " + std::to_string(line_of(src_, pos)) + ": " + what);
  }

  void emit_text(size_t begin, size_t end, bool strip_all, bool lstrip) {
    std::string text = src_.substr(begin, end - begin);
    if (strip_all) {
      size_t k = text.size();
      while (k > 0 && is_space(text[k - 1])) --k;
      text.resize(k);
    } else if (lstrip) {
      // lstrip_blocks: spaces and tabs between the start of the line and a block tag go.
      const size_t nl = text.rfind('\n');
      const size_t line_start = nl == std::string::npos ? 0 : nl + 1;
      const bool at_line_start = nl != std::string::npos || begin == 0 || src_[begin - 1] == '\n';
      if (at_line_start && text.find_first_not_of(" \t", line_start) == std::string::npos) text.resize(line_start);
    }
    if (!text.empty()) toks_.push_back({Token::Type::Text, std::move(text), begin});
  }

  // After a block tag or comment: "-" eats all following whitespace; trim_blocks eats one newline.
  void after_tag(size_t& pos, bool strip_after, bool keep, bool block) {
    if (strip_after) {
      while (pos < src_.size() && is_space(src_[pos])) ++pos;
    } else if (block && !keep) {
      if (src_.compare(pos, 2, "\r\n") == 0) {
        pos += 2;
      } else if (pos < src_.size() && src_[pos] == '\n') {
        ++pos;
      }
    }
  }

  size_t lex_expression(size_t pos, char closer) {
    const size_t n = src_.size();
    const size_t tag_start = pos;
    while (true) {
      while (pos < n && is_space(src_[pos])) ++pos;
      if (pos >= n) throw error(tag_start, closer == '}' ? "unterminated '{{'" : "unterminated '{%'");
      // Closing delimiter, possibly with a whitespace-control modifier.
      for (int mod = 0; mod < 2; ++mod) {
        const size_t at = pos + static_cast<size_t>(mod);
        if (mod == 1 && src_[pos] != '-' && src_[pos] != '+') continue;
        if (at + 1 < n && src_[at] == closer && src_[at + 1] == '}') {
          toks_.push_back({closer == '}' ? Token::Type::VarEnd : Token::Type::BlockEnd, "", pos});
          size_t after = at + 2;
          after_tag(after, mod == 1 && src_[pos] == '-', mod == 1 && src_[pos] == '+', closer == '%');
          return after;
        }
      }
      const char c = src_[pos];
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t e = pos;
        while (e < n && (std::isalnum(static_cast<unsigned char>(src_[e])) || src_[e] == '_')) ++e;
        toks_.push_back({Token::Type::Name, src_.substr(pos, e - pos), pos});
        pos = e;
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        pos = lex_number(pos);
      } else if (c == '"' || c == '\'') {
        pos = lex_string(pos);
      } else {
        static const char* const ops[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~", "<",
                                          ">",  "=",  "(",  ")",  "[",  "]",  "{", "}", ",", ".", ":", "|"};
        bool found = false;
        for (const char* op : ops) {
          const size_t len = std::strlen(op);
          if (src_.compare(pos, len, op) == 0) {
            toks_.push_back({Token::Type::Op, op, pos});
            pos += len;
            found = true;
            break;
          }
        }
        if (!found) throw error(pos, std::string("unexpected character '") + c + "'");
      }
    }
  }

  size_t lex_number(size_t pos) {
    size_t e = pos;
    const size_t n = src_.size();
    while (e < n && (std::isdigit(static_cast<unsigned char>(src_[e])) || src_[e] == '_')) ++e;
    bool is_float = false;
    if (e + 1 < n && src_[e] == '.' && std::isdigit(static_cast<unsigned char>(src_[e + 1]))) {
      is_float = true;
      ++e;
      while (e < n && std::isdigit(static_cast<unsigned char>(src_[e]))) ++e;
    }
    if (e < n && (src_[e] == 'e' || src_[e] == 'E')) {
      size_t k = e + 1;
      if (k < n && (src_[k] == '+' || src_[k] == '-')) ++k;
      if (k < n && std::isdigit(static_cast<unsigned char>(src_[k]))) {
        is_float = true;
        e = k;
        while (e < n && std::isdigit(static_cast<unsigned char>(src_[e]))) ++e;
      }
    }
    std::string text;
    for (size_t i = pos; i < e; ++i)
      if (src_[i] != '_') text += src_[i];
    Token t{is_float ? Token::Type::Float : Token::Type::Int, text, pos};
    try {
      if (is_float) {
        t.float_value = std::stod(text);
      } else {
        t.int_value = std::stoll(text);
      }
    } catch (const std::exception&) {
      throw error(pos, "number '" + text + "' is out of range");
    }
    toks_.push_back(t);
    return e;
  }

  size_t lex_string(size_t pos) {
    const char quote = src_[pos];
    std::string out;
    size_t i = pos + 1;
    const size_t n = src_.size();
    while (i < n && src_[i] != quote) {
      char c = src_[i];
      if (c == '\\' && i + 1 < n) {
        const char e = src_[++i];
        switch (e) {
          case 'n':
            out += '\n';
            break;
          case 't':
            out += '\t';
            break;
          case 'r':
            out += '\r';
            break;
          case '\\':
            out += '\\';
            break;
          case '\'':
            out += '\'';
            break;
          case '"':
            out += '"';
            break;
          case '\n':
            break;  // line continuation
          default:  // Python keeps unknown escapes as written
            out += '\\';
            out += e;
        }
        ++i;
        continue;
      }
      out += c;
      ++i;
    }
    if (i >= n) throw error(pos, "unterminated string literal");
    toks_.push_back({Token::Type::String, std::move(out), pos});
    return i + 1;
  }

  const std::string& src_;
  std::vector<Token> toks_;
};

class Parser {
 public:
  Parser(const std::string& src, std::vector<Token> toks) : src_(src), toks_(std::move(toks)) {}

  Body parse_all() {
    std::string end_tag;
    Body body = parse_body({}, end_tag);
    return body;
  }

 private:
  using T = Token::Type;

  TemplateError error(size_t pos, const std::string& what) const {
    return TemplateError("template syntax error at line " + std::to_string(line_of(src_, pos)) + ": " + what);
  }
  const Token& peek(size_t k = 0) const { return toks_[std::min(i_ + k, toks_.size() - 1)]; }
  const Token& next() { return toks_[std::min(i_++, toks_.size() - 1)]; }
  bool is_op(const char* op, size_t k = 0) const { return peek(k).type == T::Op && peek(k).text == op; }
  bool is_name(const char* name, size_t k = 0) const { return peek(k).type == T::Name && peek(k).text == name; }
  void expect_op(const char* op) {
    if (!is_op(op)) throw error(peek().pos, std::string("expected '") + op + "'" + got());
    ++i_;
  }
  std::string got() const {
    const Token& t = peek();
    switch (t.type) {
      case T::Eof:
        return ", got the end of the template";
      case T::BlockEnd:
        return ", got '%}'";
      case T::VarEnd:
        return ", got '}}'";
      default:
        return ", got '" + t.text + "'";
    }
  }
  std::string expect_name() {
    if (peek().type != T::Name) throw error(peek().pos, "expected a name" + got());
    return next().text;
  }
  void expect_block_end() {
    if (peek().type != T::BlockEnd) throw error(peek().pos, "expected '%}'" + got());
    ++i_;
  }

  // Parses nodes until a block tag whose name is in `ends`; leaves that name in `end_tag` and the
  // parser just after the tag's name.
  Body parse_body(const std::vector<std::string>& ends, std::string& end_tag) {
    Body body;
    while (true) {
      const Token& t = peek();
      if (t.type == T::Eof) {
        if (!ends.empty()) throw error(t.pos, "missing '{% " + ends.back() + " %}'");
        return body;
      }
      if (t.type == T::Text) {
        auto n = std::make_unique<Node>();
        n->kind = Node::Kind::Text;
        n->pos = t.pos;
        n->text = t.text;
        body.push_back(std::move(n));
        ++i_;
      } else if (t.type == T::VarBegin) {
        ++i_;
        auto n = std::make_unique<Node>();
        n->kind = Node::Kind::Output;
        n->pos = t.pos;
        n->expr = parse_tuple_or_expr();
        if (peek().type != T::VarEnd) throw error(peek().pos, "expected '}}'" + got());
        ++i_;
        body.push_back(std::move(n));
      } else if (t.type == T::BlockBegin) {
        ++i_;
        const size_t pos = peek().pos;
        const std::string name = expect_name();
        for (const auto& e : ends) {
          if (name == e) {
            end_tag = name;
            return body;
          }
        }
        body.push_back(parse_statement(name, pos));
      } else {
        throw error(t.pos, "unexpected token" + got());
      }
    }
  }

  NodePtr parse_statement(const std::string& name, size_t pos) {
    DepthGuard guard(*this);
    auto n = std::make_unique<Node>();
    n->pos = pos;
    std::string end;
    if (name == "if") {
      n->kind = Node::Kind::If;
      ExprPtr cond = parse_expr();
      expect_block_end();
      while (true) {
        Body b = parse_body({"elif", "else", "endif"}, end);
        n->branches.emplace_back(std::move(cond), std::move(b));
        if (end == "endif") break;
        if (end == "elif") {
          cond = parse_expr();
          expect_block_end();
        } else {
          expect_block_end();
          Body eb = parse_body({"endif"}, end);
          n->branches.emplace_back(nullptr, std::move(eb));
          break;
        }
      }
      expect_block_end();
    } else if (name == "for") {
      n->kind = Node::Kind::For;
      n->targets.push_back(expect_name());
      while (is_op(",")) {
        ++i_;
        n->targets.push_back(expect_name());
      }
      if (!is_name("in")) throw error(peek().pos, "expected 'in'" + got());
      ++i_;
      n->expr = parse_or();  // no conditional here: a trailing `if` filters the loop
      if (is_name("if")) {
        ++i_;
        n->filter = parse_expr();
      }
      if (is_name("recursive")) throw error(peek().pos, "recursive loops are not supported");
      expect_block_end();
      n->body = parse_body({"else", "endfor"}, end);
      if (end == "else") {
        expect_block_end();
        n->else_body = parse_body({"endfor"}, end);
      }
      expect_block_end();
    } else if (name == "set") {
      std::string target = expect_name();
      if (is_op(".")) {
        ++i_;
        n->attr = expect_name();
      }
      n->targets.push_back(target);
      if (peek().type == T::BlockEnd && n->attr.empty()) {
        n->kind = Node::Kind::SetBlock;
        ++i_;
        n->body = parse_body({"endset"}, end);
        expect_block_end();
      } else {
        n->kind = Node::Kind::Set;
        expect_op("=");
        n->expr = parse_tuple_or_expr();
        expect_block_end();
      }
    } else if (name == "macro") {
      n->kind = Node::Kind::Macro;
      n->targets.push_back(expect_name());
      expect_op("(");
      while (!is_op(")")) {
        std::string param = expect_name();
        ExprPtr def;
        if (is_op("=")) {
          ++i_;
          def = parse_expr();
        }
        n->params.emplace_back(std::move(param), std::move(def));
        if (!is_op(",")) break;
        ++i_;
      }
      expect_op(")");
      expect_block_end();
      n->body = parse_body({"endmacro"}, end);
      expect_block_end();
    } else if (name == "break" || name == "continue") {
      n->kind = name == "break" ? Node::Kind::Break : Node::Kind::Continue;
      expect_block_end();
    } else {
      throw error(pos, "unknown tag '" + name + "'");
    }
    return n;
  }

  ExprPtr make(Expr::Kind k, size_t pos) {
    auto e = std::make_unique<Expr>();
    e->kind = k;
    e->pos = pos;
    return e;
  }

  // `a, b` without brackets is a tuple (in {{ }} and set values).
  ExprPtr parse_tuple_or_expr() {
    const size_t pos = peek().pos;
    ExprPtr first = parse_expr();
    if (!is_op(",")) return first;
    auto t = make(Expr::Kind::Tuple, pos);
    t->items.push_back(std::move(first));
    while (is_op(",")) {
      ++i_;
      if (peek().type == T::BlockEnd || peek().type == T::VarEnd) break;
      t->items.push_back(parse_expr());
    }
    return t;
  }

  // Nesting limit: a hostile template of 100,000 '(' must be an error, not a stack overflow.
  struct DepthGuard {
    Parser& p;
    explicit DepthGuard(Parser& parser) : p(parser) {
      if (++p.depth_ > kMaxNesting) throw p.error(p.peek().pos, "nesting deeper than " + std::to_string(kMaxNesting));
    }
    ~DepthGuard() { --p.depth_; }
  };
  static constexpr int kMaxNesting = 128;

  ExprPtr parse_expr() {
    DepthGuard guard(*this);
    const size_t pos = peek().pos;
    ExprPtr e = parse_or();
    while (is_name("if")) {
      ++i_;
      auto c = make(Expr::Kind::Cond, pos);
      c->a = std::move(e);
      c->b = parse_or();
      if (is_name("else")) {
        ++i_;
        c->c = parse_or();
      }
      e = std::move(c);
    }
    return e;
  }

  ExprPtr binary(const std::string& op, ExprPtr a, ExprPtr b, size_t pos) {
    auto e = make(Expr::Kind::Binary, pos);
    e->name = op;
    e->a = std::move(a);
    e->b = std::move(b);
    return e;
  }

  ExprPtr parse_or() {
    ExprPtr e = parse_and();
    while (is_name("or")) {
      const size_t pos = next().pos;
      e = binary("or", std::move(e), parse_and(), pos);
    }
    return e;
  }
  ExprPtr parse_and() {
    ExprPtr e = parse_not();
    while (is_name("and")) {
      const size_t pos = next().pos;
      e = binary("and", std::move(e), parse_not(), pos);
    }
    return e;
  }
  ExprPtr parse_not() {
    if (is_name("not")) {
      auto e = make(Expr::Kind::Unary, next().pos);
      e->name = "not";
      e->a = parse_not();
      return e;
    }
    return parse_compare();
  }
  ExprPtr parse_compare() {
    ExprPtr e = parse_math1();
    while (true) {
      const size_t pos = peek().pos;
      std::string op;
      if (peek().type == T::Op && (peek().text == "==" || peek().text == "!=" || peek().text == "<" ||
                                   peek().text == ">" || peek().text == "<=" || peek().text == ">=")) {
        op = next().text;
      } else if (is_name("in")) {
        ++i_;
        op = "in";
      } else if (is_name("not") && is_name("in", 1)) {
        i_ += 2;
        op = "not in";
      } else {
        return e;
      }
      e = binary(op, std::move(e), parse_math1(), pos);
    }
  }
  ExprPtr parse_math1() {
    ExprPtr e = parse_concat();
    while (is_op("+") || is_op("-")) {
      const Token& t = next();
      e = binary(t.text, std::move(e), parse_concat(), t.pos);
    }
    return e;
  }
  ExprPtr parse_concat() {
    ExprPtr e = parse_math2();
    while (is_op("~")) {
      const size_t pos = next().pos;
      e = binary("~", std::move(e), parse_math2(), pos);
    }
    return e;
  }
  ExprPtr parse_math2() {
    ExprPtr e = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Token& t = next();
      e = binary(t.text, std::move(e), parse_pow(), t.pos);
    }
    return e;
  }
  ExprPtr parse_pow() {
    ExprPtr e = parse_unary(true);
    while (is_op("**")) {
      const size_t pos = next().pos;
      e = binary("**", std::move(e), parse_unary(true), pos);
    }
    return e;
  }
  ExprPtr parse_unary(bool with_filter) {
    DepthGuard guard(*this);
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      const Token& t = next();
      e = make(Expr::Kind::Unary, t.pos);
      e->name = t.text;
      e->a = parse_unary(false);
    } else {
      e = parse_primary();
    }
    e = parse_postfix(std::move(e));
    if (with_filter) e = parse_filters(std::move(e));
    return e;
  }

  ExprPtr parse_primary() {
    const Token& t = next();
    switch (t.type) {
      case T::Name: {
        if (t.text == "true" || t.text == "True") return literal(Value(true), t.pos);
        if (t.text == "false" || t.text == "False") return literal(Value(false), t.pos);
        if (t.text == "none" || t.text == "None") return literal(Value::none(), t.pos);
        auto e = make(Expr::Kind::Name, t.pos);
        e->name = t.text;
        return e;
      }
      case T::String: {
        std::string s = t.text;
        while (peek().type == T::String) s += next().text;  // adjacent literals concatenate
        return literal(Value(std::move(s)), t.pos);
      }
      case T::Int:
        return literal(Value(t.int_value), t.pos);
      case T::Float:
        return literal(Value(t.float_value), t.pos);
      case T::Op:
        if (t.text == "(") {
          if (is_op(")")) {
            ++i_;
            return make(Expr::Kind::Tuple, t.pos);
          }
          ExprPtr e = parse_expr();
          if (is_op(",")) {
            auto tup = make(Expr::Kind::Tuple, t.pos);
            tup->items.push_back(std::move(e));
            while (is_op(",")) {
              ++i_;
              if (is_op(")")) break;
              tup->items.push_back(parse_expr());
            }
            e = std::move(tup);
          }
          expect_op(")");
          return e;
        }
        if (t.text == "[") {
          auto e = make(Expr::Kind::List, t.pos);
          while (!is_op("]")) {
            e->items.push_back(parse_expr());
            if (!is_op(",")) break;
            ++i_;
          }
          expect_op("]");
          return e;
        }
        if (t.text == "{") {
          auto e = make(Expr::Kind::Dict, t.pos);
          while (!is_op("}")) {
            e->items.push_back(parse_expr());
            expect_op(":");
            e->items.push_back(parse_expr());
            if (!is_op(",")) break;
            ++i_;
          }
          expect_op("}");
          return e;
        }
        break;
      default:
        break;
    }
    --i_;
    throw error(t.pos, "expected an expression" + got());
  }

  ExprPtr literal(Value v, size_t pos) {
    auto e = make(Expr::Kind::Literal, pos);
    e->value = std::move(v);
    return e;
  }

  ExprPtr parse_postfix(ExprPtr e) {
    while (true) {
      if (is_op(".")) {
        const size_t pos = next().pos;
        auto a = make(Expr::Kind::Attr, pos);
        a->a = std::move(e);
        if (peek().type == T::Int) {  // x.0 is x[0] in Jinja
          a->kind = Expr::Kind::Index;
          a->b = literal(Value(next().int_value), pos);
        } else {
          a->name = expect_name();
        }
        e = std::move(a);
      } else if (is_op("[")) {
        e = parse_subscript(std::move(e));
      } else if (is_op("(")) {
        e = parse_call(std::move(e), Expr::Kind::Call);
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr target) {
    const size_t pos = next().pos;  // '['
    ExprPtr parts[3];
    int colons = 0;
    while (!is_op("]")) {
      if (is_op(":")) {
        if (++colons > 2) throw error(peek().pos, "too many ':' in a slice");
        ++i_;
        continue;
      }
      if (parts[colons]) throw error(peek().pos, "expected ':' or ']'" + got());
      parts[colons] = parse_expr();
    }
    expect_op("]");
    if (colons == 0) {
      if (!parts[0]) throw error(pos, "empty subscript");
      auto e = make(Expr::Kind::Index, pos);
      e->a = std::move(target);
      e->b = std::move(parts[0]);
      return e;
    }
    auto e = make(Expr::Kind::Slice, pos);
    e->a = std::move(target);
    for (auto& p : parts) e->items.push_back(std::move(p));
    return e;
  }

  ExprPtr parse_call(ExprPtr target, Expr::Kind kind) {
    auto e = make(kind, peek().pos);
    e->a = std::move(target);
    expect_op("(");
    while (!is_op(")")) {
      if (peek().type == T::Name && is_op("=", 1)) {
        std::string key = next().text;
        ++i_;
        e->kwargs.emplace_back(std::move(key), parse_expr());
      } else {
        e->items.push_back(parse_expr());
      }
      if (!is_op(",")) break;
      ++i_;
    }
    expect_op(")");
    return e;
  }

  ExprPtr parse_filters(ExprPtr e) {
    while (true) {
      if (is_op("|")) {
        const size_t pos = next().pos;
        std::string name = expect_name();
        while (is_op(".")) {  // dotted filter names are not used by templates; keep it an error
          throw error(peek().pos, "unexpected '.' after filter '" + name + "'");
        }
        ExprPtr f;
        if (is_op("(")) {
          f = parse_call(std::move(e), Expr::Kind::Filter);
        } else {
          f = make(Expr::Kind::Filter, pos);
          f->a = std::move(e);
        }
        f->name = std::move(name);
        f->pos = pos;
        e = std::move(f);
      } else if (is_name("is")) {
        const size_t pos = next().pos;
        bool negated = false;
        if (is_name("not")) {
          ++i_;
          negated = true;
        }
        std::string name = expect_name();
        ExprPtr t;
        if (is_op("(")) {
          t = parse_call(std::move(e), Expr::Kind::Test);
        } else {
          t = make(Expr::Kind::Test, pos);
          t->a = std::move(e);
          // One bare argument: `is equalto 'x'`, `is divisibleby 3`.
          const Token& nt = peek();
          const bool arg_follows = nt.type == T::String || nt.type == T::Int || nt.type == T::Float ||
                                   (nt.type == T::Name && nt.text != "and" && nt.text != "or" && nt.text != "else" &&
                                    nt.text != "if" && nt.text != "in" && nt.text != "not" && nt.text != "is");
          if (arg_follows) t->items.push_back(parse_unary(false));
        }
        t->name = std::move(name);
        t->negated = negated;
        t->pos = pos;
        e = std::move(t);
      } else if (is_op("(")) {
        e = parse_call(std::move(e), Expr::Kind::Call);
      } else {
        return e;
      }
    }
  }

  const std::string& src_;
  std::vector<Token> toks_;
  size_t i_ = 0;
  int depth_ = 0;
};

}  // namespace

Body parse_template(const std::string& source) {
  Lexer lexer(source);
  Parser parser(source, lexer.run());
  return parser.parse_all();
}

}  // namespace coda::jinja
