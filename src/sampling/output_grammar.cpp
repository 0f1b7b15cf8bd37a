#include "sampling/output_grammar.h"

#include <algorithm>
#include <cstring>
#include <map>

namespace coda {

namespace {

using Kind = GrammarNode::Kind;
using Json = nlohmann::ordered_json;

// What a frame is doing. kValue waits for a value of its node; the others are inside one.
enum Mode : uint8_t {
  kValue,
  kDone,  // the root value has ended (only at the bottom of a stack)
  kLit,
  kStr,
  kKey,  // a key of the object frame below
  kObjOpen,
  kObjColon,
  kObjAfter,  // after a key's value: ',' or '}'
  kObjNext,   // after ',': the next key
  kArrOpen,
  kArrAfter,
  kNumMinus,
  kNumZero,
  kNumInt,
  kNumDot,
  kNumFrac,
  kNumE,
  kNumESign,
  kNumExp,
};

constexpr uint32_t kMaxIntDigits = 16, kMaxFracDigits = 16, kMaxExpDigits = 3;
constexpr int kMaxNodes = 4096;
constexpr size_t kMaxLiterals = 1024;

bool is_digit(uint8_t b) { return b >= '0' && b <= '9'; }
bool is_hex(uint8_t b) { return is_digit(b) || (b >= 'a' && b <= 'f') || (b >= 'A' && b <= 'F'); }

uint64_t low_bits(size_t n) { return n >= 64 ? ~uint64_t{0} : (uint64_t{1} << n) - 1; }

// One byte of a JSON string's content. `aux` holds the escape state (bits 0-2: 0 none, 1 after a
// backslash, 2-5 a \u escape with 4-1 hex digits to come) and the UTF-8 continuation bytes still
// due (bits 3-4); `chars` counts characters (an escape is one).
enum class StrByte { kReject, kContent, kClose };
StrByte string_byte(uint16_t& aux, uint32_t& chars, int64_t max_len, uint8_t b) {
  const unsigned esc = aux & 7u, cont = (aux >> 3) & 3u;
  if (cont > 0) {
    if ((b & 0xC0) != 0x80) return StrByte::kReject;
    aux = static_cast<uint16_t>((cont - 1) << 3);
    return StrByte::kContent;
  }
  if (esc == 1) {
    if (b == 'u') {
      aux = 2;
      return StrByte::kContent;
    }
    if (b != 0 && std::strchr("\"\\/bfnrt", b) != nullptr) {
      aux = 0;
      return StrByte::kContent;
    }
    return StrByte::kReject;
  }
  if (esc >= 2) {
    if (!is_hex(b)) return StrByte::kReject;
    aux = static_cast<uint16_t>(esc == 5 ? 0 : esc + 1);
    return StrByte::kContent;
  }
  if (b == '"') return StrByte::kClose;
  if (b < 0x20) return StrByte::kReject;  // control characters must be escaped
  if (max_len >= 0 && chars >= static_cast<uint64_t>(max_len)) return StrByte::kReject;
  ++chars;
  if (b == '\\') {
    aux = 1;
    return StrByte::kContent;
  }
  if (b < 0x80) return StrByte::kContent;
  const unsigned n = b >= 0xC2 && b <= 0xDF ? 1 : b >= 0xE0 && b <= 0xEF ? 2 : b >= 0xF0 && b <= 0xF4 ? 3 : 0;
  if (n == 0) return StrByte::kReject;  // a stray continuation byte or an invalid lead
  aux = static_cast<uint16_t>(n << 3);
  return StrByte::kContent;
}

// A number's next byte: true when it continues the number (mode and digit count updated).
bool number_byte(uint8_t& mode, uint32_t& count, bool integer, uint8_t b) {
  const bool dot = !integer && b == '.', exp = !integer && (b == 'e' || b == 'E');
  switch (mode) {
    case kNumMinus:
      if (b == '0') mode = kNumZero;
      else if (is_digit(b)) mode = kNumInt, count = 1;
      else return false;
      return true;
    case kNumZero:
    case kNumInt:
      if (mode == kNumInt && is_digit(b) && count < kMaxIntDigits) ++count;
      else if (dot) mode = kNumDot;
      else if (exp) mode = kNumE;
      else return false;
      return true;
    case kNumDot:
      if (!is_digit(b)) return false;
      mode = kNumFrac, count = 1;
      return true;
    case kNumFrac:
      if (is_digit(b) && count < kMaxFracDigits) ++count;
      else if (exp) mode = kNumE;
      else return false;
      return true;
    case kNumE:
      if (b == '+' || b == '-') mode = kNumESign;
      else if (is_digit(b)) mode = kNumExp, count = 1;
      else return false;
      return true;
    case kNumESign:
      if (!is_digit(b)) return false;
      mode = kNumExp, count = 1;
      return true;
    case kNumExp:
      if (!is_digit(b) || count >= kMaxExpDigits) return false;
      ++count;
      return true;
    default:
      return false;
  }
}

bool number_complete(uint8_t mode) { return mode == kNumZero || mode == kNumInt || mode == kNumFrac || mode == kNumExp; }
bool is_number_mode(uint8_t mode) { return mode >= kNumMinus && mode <= kNumExp; }

// The frame on top has ended its value: back to the frame below (already set to what follows a
// value), or to kDone at the root.
void finish_value(std::vector<MatchFrame>& st) {
  st.pop_back();
  if (st.empty()) {
    MatchFrame done;
    done.mode = kDone;
    st.push_back(done);
  } else {
    st.back().ws = 0;
  }
}

// Keywords that restrict what a schema admits but that the matcher does not enforce: refused by
// name, so an output never silently breaks the schema it was asked to follow.
constexpr const char* kUnsupported[] = {
    "pattern",       "patternProperties", "propertyNames",  "multipleOf",  "minProperties",    "maxProperties",
    "uniqueItems",   "contains",          "minContains",    "maxContains",      "not",
    "if",            "then",              "else",           "dependentRequired", "dependentSchemas",
    "dependencies",  "prefixItems",       "additionalItems", "unevaluatedProperties", "unevaluatedItems"};

constexpr const char* kSupportedList =
    "type, properties, required, additionalProperties, items, minItems, maxItems, minLength, maxLength, enum, "
    "const, anyOf, oneOf, allOf (one schema), nullable, $ref (#/$defs/...), and on integers minimum, maximum, "
    "exclusiveMinimum, exclusiveMaximum (a range of at most 1,024 integers, or a lower bound of 0 or 1)";

constexpr const char* kBounds[] = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"};
// The largest integer the matcher writes (16 digits): a bound beyond it restricts nothing.
constexpr double kMaxWritable = 9999999999999999.0;

}  // namespace

// Compiles a schema into nodes. Every error names the schema location (a JSON pointer).
class SchemaCompiler {
 public:
  explicit SchemaCompiler(const Json& root) : root_(root) {}

  Expected<uint32_t> compile(const Json& s, const std::string& path, int depth) {
    if (depth > kMaxDepth) return Error(where(path) + "the schema nests deeper than " + std::to_string(kMaxDepth) + " levels");
    if (static_cast<int>(g.nodes_.size()) > kMaxNodes)
      return Error("the schema is too large: more than " + std::to_string(kMaxNodes) + " parts");
    if (s.is_boolean()) {
      if (s.get<bool>()) return any();
      return Error(where(path) + "the schema `false` admits no value");
    }
    if (!s.is_object()) return Error(where(path) + "a schema must be an object or a boolean");
    if (auto it = s.find("$ref"); it != s.end()) return ref(*it, path, depth);
    for (const char* k : kUnsupported)
      if (s.contains(k))
        return Error(where(path) + "`" + k + "` is not supported in structured output; supported: " + kSupportedList);
    const bool nullable = s.contains("nullable") && s["nullable"].is_boolean() && s["nullable"].get<bool>();
    Expected<uint32_t> main = body(s, path, depth);
    if (!main || !nullable) return main;
    return alternatives({*main, literals({"null"})});
  }

  uint32_t any() {
    if (any_ >= 0) return static_cast<uint32_t>(any_);
    any_ = add(GrammarNode{});  // the alternatives below refer back to it
    GrammarNode obj;
    obj.kind = Kind::kObject;
    obj.additional = any_;
    GrammarNode arr;
    arr.kind = Kind::kArray;
    arr.items = static_cast<uint32_t>(any_);
    GrammarNode str;
    str.kind = Kind::kString;
    GrammarNode num;
    num.kind = Kind::kNumber;
    const std::vector<uint32_t> alts = {add(obj), add(arr), add(str), add(num), literals({"true", "false", "null"})};
    g.nodes_[static_cast<size_t>(any_)].alts = alts;
    return static_cast<uint32_t>(any_);
  }

  uint32_t literals(const std::vector<std::string>& texts) {
    std::vector<uint32_t> chunks;
    for (size_t i = 0; i < texts.size(); i += 64) {
      GrammarNode n;
      n.kind = Kind::kLiterals;
      n.literals.assign(texts.begin() + static_cast<std::ptrdiff_t>(i),
                        texts.begin() + static_cast<std::ptrdiff_t>(std::min(texts.size(), i + 64)));
      chunks.push_back(add(std::move(n)));
    }
    return chunks.size() == 1 ? chunks[0] : alternatives(chunks);
  }

  uint32_t alternatives(std::vector<uint32_t> alts) {
    GrammarNode n;
    n.alts = std::move(alts);
    return add(std::move(n));
  }

  OutputGrammar g;

 private:
  static std::string where(const std::string& path) { return "schema at '#" + path + "': "; }

  uint32_t add(GrammarNode n) {
    g.nodes_.push_back(std::move(n));
    return static_cast<uint32_t>(g.nodes_.size() - 1);
  }

  Expected<uint32_t> ref(const Json& r, const std::string& path, int depth) {
    if (!r.is_string() || r.get<std::string>().empty() || r.get<std::string>()[0] != '#')
      return Error(where(path) + "$ref: only references into this schema (#/$defs/NAME) are supported");
    const std::string target = r.get<std::string>();
    if (auto it = refs_.find(target); it != refs_.end()) return it->second;
    const Json* resolved = nullptr;
    try {
      const Json::json_pointer ptr(target.substr(1));
      if (root_.contains(ptr)) resolved = &root_.at(ptr);
    } catch (const std::exception&) {
      resolved = nullptr;
    }
    if (resolved == nullptr) return Error(where(path) + "$ref '" + target + "' points nowhere in the schema");
    const uint32_t slot = alternatives({});  // filled below; a recursive reference lands here
    refs_[target] = slot;
    auto inner = compile(*resolved, target.substr(1), depth + 1);
    if (!inner) return inner;
    g.nodes_[slot].alts = {*inner};
    return slot;
  }

  Expected<uint32_t> body(const Json& s, const std::string& path, int depth) {
    if (auto it = s.find("enum"); it != s.end()) {
      if (!it->is_array() || it->empty()) return Error(where(path) + "enum: expected a non-empty array");
      if (it->size() > kMaxLiterals)
        return Error(where(path) + "enum: more than " + std::to_string(kMaxLiterals) + " values");
      std::vector<std::string> texts;
      for (const auto& v : *it) texts.push_back(v.dump());
      return literals(texts);
    }
    if (auto it = s.find("const"); it != s.end()) return literals({it->dump()});
    for (const char* k : {"anyOf", "oneOf"}) {
      auto it = s.find(k);
      if (it == s.end()) continue;
      if (!it->is_array() || it->empty()) return Error(where(path) + k + ": expected a non-empty array of schemas");
      std::vector<uint32_t> alts;
      for (size_t i = 0; i < it->size(); ++i) {
        auto a = compile((*it)[i], path + "/" + k + "/" + std::to_string(i), depth + 1);
        if (!a) return a;
        alts.push_back(*a);
      }
      return alternatives(std::move(alts));
    }
    if (auto it = s.find("allOf"); it != s.end()) {
      if (!it->is_array() || it->size() != 1)
        return Error(where(path) + "allOf: only a list of one schema is supported (merge the schemas into one)");
      return compile((*it)[0], path + "/allOf/0", depth + 1);
    }
    std::vector<std::string> types;
    if (auto it = s.find("type"); it != s.end()) {
      if (it->is_string()) {
        types.push_back(it->get<std::string>());
      } else if (it->is_array() && !it->empty()) {
        for (const auto& t : *it) {
          if (!t.is_string()) return Error(where(path) + "type: expected a string or an array of strings");
          types.push_back(t.get<std::string>());
        }
      } else {
        return Error(where(path) + "type: expected a string or an array of strings");
      }
    } else if (s.contains("properties") || s.contains("required") || s.contains("additionalProperties")) {
      types.push_back("object");
    } else if (s.contains("items") || s.contains("minItems") || s.contains("maxItems")) {
      types.push_back("array");
    } else if (s.contains("minLength") || s.contains("maxLength")) {
      types.push_back("string");
    } else if (s.contains("minimum") || s.contains("maximum") || s.contains("exclusiveMinimum") ||
               s.contains("exclusiveMaximum")) {
      types.push_back("number");  // bounds without a type: refused below unless it says integer
    } else {
      return any();
    }
    if (s.contains("nullable") && s["nullable"] == true &&
        std::find(types.begin(), types.end(), "null") == types.end())
      types.push_back("null");
    std::vector<uint32_t> alts;
    for (const auto& t : types) {
      auto n = typed(t, s, path, depth);
      if (!n) return n;
      alts.push_back(*n);
    }
    return alts.size() == 1 ? alts[0] : alternatives(std::move(alts));
  }

  // A non-negative integer keyword, or `fallback` when absent.
  Status count(const Json& s, const char* k, const std::string& path, int64_t& out) {
    auto it = s.find(k);
    if (it == s.end()) return Status::Ok();
    if (!it->is_number_integer() || it->get<int64_t>() < 0)
      return Error(where(path) + k + ": expected a non-negative integer");
    out = it->get<int64_t>();
    return Status::Ok();
  }

  Expected<uint32_t> typed(const std::string& t, const Json& s, const std::string& path, int depth) {
    GrammarNode n;
    if (t == "string") {
      n.kind = Kind::kString;
      CODA_RETURN_IF_ERROR(count(s, "minLength", path, n.min_len));
      CODA_RETURN_IF_ERROR(count(s, "maxLength", path, n.max_len));
      if (n.max_len >= 0 && n.min_len > n.max_len) return Error(where(path) + "minLength is above maxLength");
      return add(std::move(n));
    }
    if (t == "integer") return integer(s, path);
    for (const char* k : kBounds)
      if (s.contains(k))
        return Error(where(path) + "`" + k + "` is enforced on integers only (type " + t + " here); supported: " +
                     kSupportedList);
    if (t == "number") {
      n.kind = Kind::kNumber;
      return add(std::move(n));
    }
    if (t == "boolean") return literals({"true", "false"});
    if (t == "null") return literals({"null"});
    if (t == "array") {
      n.kind = Kind::kArray;
      CODA_RETURN_IF_ERROR(count(s, "minItems", path, n.min_items));
      CODA_RETURN_IF_ERROR(count(s, "maxItems", path, n.max_items));
      if (n.max_items >= 0 && n.min_items > n.max_items) return Error(where(path) + "minItems is above maxItems");
      auto it = s.find("items");
      if (it == s.end() || *it == true) {
        n.items = any();
      } else if (*it == false) {
        if (n.min_items > 0) return Error(where(path) + "items: false admits no item, but minItems asks for some");
        n.max_items = 0;
      } else {
        auto items = compile(*it, path + "/items", depth + 1);
        if (!items) return items;
        n.items = *items;
      }
      return add(std::move(n));
    }
    if (t == "object") {
      n.kind = Kind::kObject;
      if (auto it = s.find("properties"); it != s.end()) {
        if (!it->is_object()) return Error(where(path) + "properties: expected an object");
        if (it->size() > 64) return Error(where(path) + "properties: more than 64 keys in one object");
        for (const auto& [key, sub] : it->items()) {
          const std::string quoted = Json(key).dump();
          auto v = compile(sub, path + "/properties/" + key, depth + 1);
          if (!v) return v;
          n.props.push_back({quoted.substr(1, quoted.size() - 2), *v});
        }
      }
      if (auto it = s.find("required"); it != s.end()) {
        if (!it->is_array()) return Error(where(path) + "required: expected an array of strings");
        for (const auto& r : *it) {
          if (!r.is_string()) return Error(where(path) + "required: expected an array of strings");
          const std::string quoted = Json(r.get<std::string>()).dump();
          const std::string key = quoted.substr(1, quoted.size() - 2);
          size_t i = 0;
          while (i < n.props.size() && n.props[i].key != key) ++i;
          if (i == n.props.size())
            return Error(where(path) + "required: '" + r.get<std::string>() + "' is not among the properties");
          n.required |= uint64_t{1} << i;
        }
      }
      auto it = s.find("additionalProperties");
      if (it == s.end() || *it == false) {
        n.additional = -1;
      } else if (*it == true) {
        n.additional = any();
      } else {
        auto extra = compile(*it, path + "/additionalProperties", depth + 1);
        if (!extra) return extra;
        n.additional = *extra;
      }
      return add(std::move(n));
    }
    return Error(where(path) + "type: '" + t +
                 "' is not a JSON Schema type; use string, number, integer, boolean, null, array or object");
  }

  // An integer node, its bounds as a list of literals (a small range) or as a sign rule.
  Expected<uint32_t> integer(const Json& s, const std::string& path) {
    double lo = -kMaxWritable, hi = kMaxWritable;
    for (const char* k : kBounds) {
      auto it = s.find(k);
      if (it == s.end()) continue;
      if (!it->is_number())
        return Error(where(path) + k + ": expected a number (the boolean form of draft 4 is not supported)");
      const double v = it->get<double>();
      const std::string key = k;
      if (key == "minimum") lo = std::max(lo, std::ceil(v));
      else if (key == "exclusiveMinimum") lo = std::max(lo, std::floor(v) + 1);
      else if (key == "maximum") hi = std::min(hi, std::floor(v));
      else hi = std::min(hi, std::ceil(v) - 1);
    }
    if (lo > hi) return Error(where(path) + "the bounds admit no integer");
    if (hi - lo < static_cast<double>(kMaxLiterals)) {
      std::vector<std::string> texts;
      for (double x = lo; x <= hi; ++x) texts.push_back(std::to_string(static_cast<int64_t>(x)));
      return literals(texts);
    }
    GrammarNode n;
    n.kind = Kind::kInteger;
    n.sign = lo == 1 ? 1 : lo == 0 ? 0 : -1;
    if ((lo > -kMaxWritable && lo != 0 && lo != 1) || hi < kMaxWritable)
      return Error(where(path) + "integer bounds are enforced for a range of at most " + std::to_string(kMaxLiterals) +
                   " integers or a lower bound of 0 or 1 alone; this one is neither");
    return add(std::move(n));
  }

  const Json& root_;
  int64_t any_ = -1;
  std::map<std::string, uint32_t> refs_;
};

Expected<std::shared_ptr<const OutputGrammar>> OutputGrammar::json_schema(const nlohmann::ordered_json& schema) {
  SchemaCompiler c(schema);
  auto root = c.compile(schema, "", 0);
  if (!root) return root.error();
  auto g = std::make_shared<OutputGrammar>(std::move(c.g));
  g->root_ = *root;
  g->kind_ = "json_schema";
  // A part whose value cannot even begin (a $ref that only refers to itself) would leave the
  // output a dead end with nothing but the end of generation: refused here instead. A node can
  // begin unless it is alternatives of which none can (a fixpoint over the graph).
  std::vector<char> can_begin(g->nodes_.size(), 0);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t i = 0; i < g->nodes_.size(); ++i) {
      if (can_begin[i]) continue;
      const GrammarNode& n = g->nodes_[i];
      bool ok = n.kind != Kind::kAlt;
      for (uint32_t a : n.alts) ok = ok || can_begin[a];
      if (ok) can_begin[i] = 1, changed = true;
    }
  }
  if (std::find(can_begin.begin(), can_begin.end(), 0) != can_begin.end())
    return Error("schema at '#': a part admits no value (a $ref that only refers to itself?)");
  return std::shared_ptr<const OutputGrammar>(std::move(g));
}

std::shared_ptr<const OutputGrammar> OutputGrammar::json_object() {
  static const Json empty = Json::object();
  SchemaCompiler c(empty);
  GrammarNode obj;
  obj.kind = Kind::kObject;
  obj.additional = c.any();
  c.g.nodes_.push_back(std::move(obj));
  auto g = std::make_shared<OutputGrammar>(std::move(c.g));
  g->root_ = static_cast<uint32_t>(g->nodes_.size() - 1);
  g->kind_ = "json_object";
  return g;
}

Expected<std::shared_ptr<const OutputGrammar>> OutputGrammar::choice(const std::vector<std::string>& texts) {
  if (texts.empty()) return Error("expected a non-empty array of strings");
  if (texts.size() > kMaxLiterals) return Error("more than " + std::to_string(kMaxLiterals) + " choices");
  for (const auto& t : texts)
    if (t.empty()) return Error("an empty choice cannot be generated");
  static const Json empty = Json::object();
  SchemaCompiler c(empty);
  const uint32_t root = c.literals(texts);
  auto g = std::make_shared<OutputGrammar>(std::move(c.g));
  g->root_ = root;
  g->json_ = false;
  g->kind_ = "choice";
  return std::shared_ptr<const OutputGrammar>(std::move(g));
}

// ---- the matcher ----

GrammarMatcher::GrammarMatcher(const OutputGrammar& g) : g_(&g) {
  MatchFrame root;
  root.node = g.root();
  root.mode = kValue;
  frames_.push_back(root);
  ends_.push_back(1);
}

namespace {

void emit(const std::vector<MatchFrame>& st, std::vector<MatchFrame>& frames, std::vector<uint32_t>& ends) {
  if (ends.size() >= static_cast<size_t>(kMaxAlternatives)) return;
  frames.insert(frames.end(), st.begin(), st.end());
  ends.push_back(static_cast<uint32_t>(frames.size()));
}

struct Stepper {
  const OutputGrammar& g;
  std::vector<MatchFrame>& frames;
  std::vector<uint32_t>& ends;

  void out(const std::vector<MatchFrame>& st) const { emit(st, frames, ends); }

  // A key begins (its opening quote was read) in the object frame on top.
  void start_key(std::vector<MatchFrame>& st) const {
    const MatchFrame& obj = st.back();
    const GrammarNode& n = g.nodes()[obj.node];
    MatchFrame key;
    key.node = obj.node;
    key.mode = kKey;
    // Already-seen keys stay candidates when other keys are allowed, so a repeat is caught rather
    // than taken for an additional key.
    key.bits = low_bits(n.props.size()) & (n.additional >= 0 ? ~uint64_t{0} : ~obj.bits);
    st.push_back(key);
    out(st);
  }

  void step(std::vector<MatchFrame>& st, uint8_t b, int guard) const {
    if (guard > 32) return;  // alternatives of alternatives without end (a schema referring to itself)
    MatchFrame& f = st.back();
    const GrammarNode& n = g.nodes()[f.node];
    // Whitespace between tokens: one space, or one line break and at most kMaxIndent spaces or
    // tabs (`ws`: bit 7 the line break, bits 0-6 the count).
    const auto gap = [&]() {
      if (!g.json()) return false;
      const bool line = (f.ws & 0x80) != 0;
      const int n = f.ws & 0x7F;
      if (b == '\n') {
        if (line) return false;
        f.ws = 0x80;
      } else if (b == ' ' || b == '\t') {
        if (line ? n >= kMaxIndent : n >= 1 || b == '\t') return false;
        f.ws = static_cast<uint8_t>((f.ws & 0x80) | (n + 1));
      } else {
        return false;
      }
      out(st);
      return true;
    };
    switch (f.mode) {
      case kDone:
        gap();
        return;
      case kValue:
        if (gap()) return;
        switch (n.kind) {
          case Kind::kAlt:
            for (uint32_t a : n.alts) {
              std::vector<MatchFrame> copy = st;
              copy.back().node = a;
              step(copy, b, guard + 1);
            }
            return;
          case Kind::kObject:
            if (b != '{' || st.size() > static_cast<size_t>(kMaxDepth)) return;  // a frame per open value
            f.mode = kObjOpen, f.ws = 0, f.bits = 0;
            out(st);
            return;
          case Kind::kArray:
            if (b != '[' || st.size() > static_cast<size_t>(kMaxDepth)) return;
            f.mode = kArrOpen, f.ws = 0, f.count = 0;
            out(st);
            return;
          case Kind::kString:
            if (b != '"') return;
            f.mode = kStr, f.count = 0, f.aux = 0;
            out(st);
            return;
          case Kind::kNumber:
          case Kind::kInteger:
            if (b == '-' && n.sign < 0) f.mode = kNumMinus;
            else if (b == '0' && n.sign <= 0) f.mode = kNumZero;
            else if (b >= '1' && b <= '9') f.mode = kNumInt, f.count = 1;
            else return;
            out(st);
            return;
          case Kind::kLiterals:
            f.mode = kLit, f.count = 0, f.bits = low_bits(n.literals.size());
            literal(st, b);
            return;
        }
        return;
      case kLit:
        literal(st, b);
        return;
      case kStr: {
        const StrByte r = string_byte(f.aux, f.count, n.max_len, b);
        if (r == StrByte::kContent) {
          out(st);
        } else if (r == StrByte::kClose && f.count >= static_cast<uint64_t>(n.min_len)) {
          finish_value(st);
          out(st);
        }
        return;
      }
      case kKey:
        key(st, b);
        return;
      case kObjOpen:
      case kObjNext:
        if (gap()) return;
        if (b == '"') {
          // A key only where one can follow: an object with no keys left to write (or none at
          // all, like a tool without parameters) would otherwise open a key it can never finish.
          if (n.additional >= 0 || (low_bits(n.props.size()) & ~f.bits) != 0) start_key(st);
        } else if (b == '}' && f.mode == kObjOpen && (n.required & ~f.bits) == 0) {
          finish_value(st);
          out(st);
        }
        return;
      case kObjColon: {
        if (gap()) return;
        if (b != ':') return;
        f.mode = kObjAfter, f.ws = 0;
        MatchFrame v;
        v.node = f.aux == 0xFFFF ? static_cast<uint32_t>(n.additional) : n.props[f.aux].node;
        v.mode = kValue;
        st.push_back(v);
        out(st);
        return;
      }
      case kObjAfter:
        if (gap()) return;
        if (b == ',') {
          const bool more = n.additional >= 0 || (low_bits(n.props.size()) & ~f.bits) != 0;
          if (!more) return;
          f.mode = kObjNext, f.ws = 0;
          out(st);
        } else if (b == '}' && (n.required & ~f.bits) == 0) {
          finish_value(st);
          out(st);
        }
        return;
      case kArrOpen:
        if (gap()) return;
        if (b == ']') {
          if (n.min_items > 0) return;
          finish_value(st);
          out(st);
          return;
        }
        if (n.max_items == 0) return;
        f.mode = kArrAfter, f.count = 1, f.ws = 0;
        push_value(st, n.items);
        step(st, b, guard + 1);  // the byte starts the first item
        return;
      case kArrAfter:
        if (gap()) return;
        if (b == ',') {
          if (n.max_items >= 0 && f.count >= static_cast<uint64_t>(n.max_items)) return;
          ++f.count, f.ws = 0;
          push_value(st, n.items);
          out(st);
        } else if (b == ']' && f.count >= static_cast<uint64_t>(n.min_items)) {
          finish_value(st);
          out(st);
        }
        return;
      default:
        if (is_number_mode(f.mode)) {
          uint8_t mode = f.mode;
          uint32_t digits = f.count;
          if (number_byte(mode, digits, n.kind == Kind::kInteger, b)) {
            f.mode = mode, f.count = digits;
            out(st);
          } else if (number_complete(f.mode)) {
            finish_value(st);  // the number ended at the byte before: the byte belongs to what follows
            step(st, b, guard + 1);
          }
        }
        return;
    }
  }

  static void push_value(std::vector<MatchFrame>& st, uint32_t node) {
    MatchFrame v;
    v.node = node;
    v.mode = kValue;
    st.push_back(v);
  }

  void literal(std::vector<MatchFrame>& st, uint8_t b) const {
    MatchFrame& f = st.back();
    const auto& lits = g.nodes()[f.node].literals;
    uint64_t keep = 0, done = 0;
    for (size_t i = 0; i < lits.size(); ++i) {
      if (!(f.bits >> i & 1) || lits[i].size() <= f.count || static_cast<uint8_t>(lits[i][f.count]) != b) continue;
      (lits[i].size() == f.count + 1 ? done : keep) |= uint64_t{1} << i;
    }
    ++f.count;
    if (done != 0) {  // a literal ends here; a longer one may go on (1 and 12)
      std::vector<MatchFrame> ended = st;
      finish_value(ended);
      out(ended);
    }
    if (keep != 0) {
      st.back().bits = keep;
      out(st);
    }
  }

  void key(std::vector<MatchFrame>& st, uint8_t b) const {
    MatchFrame& k = st.back();
    const GrammarNode& obj = g.nodes()[k.node];
    uint16_t aux = k.aux;
    uint32_t chars = 0;
    const StrByte r = string_byte(aux, chars, -1, b);
    if (r == StrByte::kReject) return;
    MatchFrame& o = st[st.size() - 2];
    if (r == StrByte::kClose) {
      int prop = -1;
      for (size_t i = 0; i < obj.props.size(); ++i)
        if ((k.bits >> i & 1) && obj.props[i].key.size() == k.count) prop = static_cast<int>(i);
      if (prop >= 0) {
        if (o.bits >> prop & 1) return;  // a key twice
        o.bits |= uint64_t{1} << prop;
        o.aux = static_cast<uint16_t>(prop);
      } else if (obj.additional >= 0) {
        o.aux = 0xFFFF;
      } else {
        return;
      }
      st.pop_back();
      st.back().mode = kObjColon, st.back().ws = 0;
      out(st);
      return;
    }
    uint64_t keep = 0;
    for (size_t i = 0; i < obj.props.size(); ++i) {
      const std::string& name = obj.props[i].key;
      if ((k.bits >> i & 1) && name.size() > k.count && static_cast<uint8_t>(name[k.count]) == b)
        keep |= uint64_t{1} << i;
    }
    if (keep == 0 && obj.additional < 0) return;
    k.bits = keep, k.aux = aux, ++k.count;
    out(st);
  }
};

}  // namespace

void GrammarMatcher::feed_into(uint8_t b, GrammarMatcher& to) const {
  to.g_ = g_;
  to.frames_.clear();
  to.ends_.clear();
  if (g_ == nullptr) return;
  const Stepper s{*g_, to.frames_, to.ends_};
  // Scratch for one alternative's stack (per thread, so a state that is kept per generated token
  // carries no buffer of its own).
  thread_local std::vector<MatchFrame> work;
  uint32_t start = 0;
  for (uint32_t end : ends_) {
    work.assign(frames_.begin() + start, frames_.begin() + end);
    s.step(work, b, 0);
    start = end;
  }
  if (to.ends_.size() < 2) return;
  // Drop alternatives that became identical (two branches of an anyOf that met again), compacting
  // in place: the kept ones move down, never past one not yet read.
  auto& fr = to.frames_;
  auto& en = to.ends_;
  uint32_t read0 = 0, write = 0;
  size_t kept = 0;
  for (size_t i = 0; i < en.size(); ++i) {
    const uint32_t read1 = en[i], len = read1 - read0;
    bool seen = false;
    for (size_t j = 0, b0 = 0; j < kept && !seen; b0 = en[j], ++j)
      seen = en[j] - b0 == len && std::equal(fr.begin() + b0, fr.begin() + en[j], fr.begin() + read0);
    if (!seen) {
      std::copy(fr.begin() + read0, fr.begin() + read1, fr.begin() + write);
      write += len;
      en[kept++] = write;
    }
    read0 = read1;
  }
  en.resize(kept);
  fr.resize(write);
}

bool GrammarMatcher::feed(std::string_view bytes) {
  GrammarMatcher next;
  for (char c : bytes) {
    feed_into(static_cast<uint8_t>(c), next);
    std::swap(frames_, next.frames_);
    std::swap(ends_, next.ends_);
    if (dead()) return false;
  }
  return true;
}

bool GrammarMatcher::accepting() const {
  uint32_t start = 0;
  for (uint32_t end : ends_) {
    const MatchFrame& top = frames_[end - 1];
    if (end - start == 1 && (top.mode == kDone || number_complete(top.mode))) return true;
    start = end;
  }
  return false;
}

bool GrammarMatcher::finished() const {
  if (dead()) return false;
  uint32_t start = 0;
  for (uint32_t end : ends_) {
    if (end - start != 1 || frames_[start].mode != kDone) return false;
    start = end;
  }
  return true;
}

bool GrammarMatcher::in_free_string() const {
  if (dead()) return false;
  for (uint32_t end : ends_) {
    const MatchFrame& top = frames_[end - 1];
    if (top.mode != kStr || top.aux != 0 || g_->nodes()[top.node].max_len >= 0) return false;
  }
  return true;
}

}  // namespace coda
