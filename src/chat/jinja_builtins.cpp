#include "chat/jinja_builtins.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <ctime>

namespace coda::jinja {

namespace {

constexpr int64_t kMaxRange = 1 << 20;  // range() beyond this is a hostile template, not a chat

[[noreturn]] void fail(const std::string& what) {
  throw TemplateError(what);
}

// UTF-8 code points as byte ranges (malformed bytes count as one code point each).
std::vector<std::string> code_points(const std::string& s) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
    if (i + len > s.size()) len = 1;
    for (size_t k = 1; k < len; ++k)
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) len = 1;
    out.push_back(s.substr(i, len));
    i += len;
  }
  return out;
}

bool is_ascii(const std::string& s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; });
}

const std::string& need_string(const Value& v, const char* what) {
  if (!v.is_string()) fail(std::string(what) + ": expected a string, got " + v.type_name());
  return v.as_string();
}

int64_t need_int(const Value& v, const char* what) {
  if (v.kind() == Value::Kind::Int || v.kind() == Value::Kind::Bool) return v.as_int();
  fail(std::string(what) + ": expected an integer, got " + v.type_name());
}

bool is_py_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

std::string strip(const std::string& s, const Value* chars, bool left, bool right) {
  auto drop = [&](char c) {
    if (chars && !chars->is_none()) return need_string(*chars, "strip").find(c) != std::string::npos;
    return is_py_space(c);
  };
  size_t b = 0, e = s.size();
  if (left)
    while (b < e && drop(s[b])) ++b;
  if (right)
    while (e > b && drop(s[e - 1])) --e;
  return s.substr(b, e - b);
}

Value split(const std::string& s, const Value* sep_v, const Value* max_v) {
  int64_t max_split = max_v ? need_int(*max_v, "split") : -1;
  Array out;
  if (!sep_v || sep_v->is_none()) {  // whitespace runs, no empty strings
    size_t i = 0;
    while (true) {
      while (i < s.size() && is_py_space(s[i])) ++i;
      if (i >= s.size()) break;
      if (max_split == 0) {
        size_t e = s.size();
        while (e > i && is_py_space(s[e - 1])) --e;
        out.emplace_back(s.substr(i, e - i));
        break;
      }
      size_t e = i;
      while (e < s.size() && !is_py_space(s[e])) ++e;
      out.emplace_back(s.substr(i, e - i));
      --max_split;
      i = e;
    }
    return Value(std::move(out));
  }
  const std::string& sep = need_string(*sep_v, "split");
  if (sep.empty()) fail("split: empty separator");
  size_t start = 0;
  while (max_split != 0) {
    const size_t at = s.find(sep, start);
    if (at == std::string::npos) break;
    out.emplace_back(s.substr(start, at - start));
    start = at + sep.size();
    --max_split;
  }
  out.emplace_back(s.substr(start));
  return Value(std::move(out));
}

std::string replace(const std::string& s, const std::string& from, const std::string& to, int64_t count) {
  if (from.empty()) {  // Python inserts `to` around every code point
    // Count before building: the code points of a long string alone are many allocations.
    int64_t points = 0;
    for (unsigned char c : s) points += (c & 0xC0) != 0x80;
    if (count >= 0) points = std::min(points, count);
    RenderBudget::bytes(static_cast<int64_t>(s.size()) + (points + 1) * static_cast<int64_t>(32 + to.size()));
    std::string out;
    int64_t done = 0;
    for (const auto& cp : code_points(s)) {
      if (count < 0 || done < count) {
        out += to;
        ++done;
      }
      out += cp;
    }
    if (count < 0 || done < count) out += to;
    return out;
  }
  std::string out;
  size_t start = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    const size_t at = s.find(from, start);
    if (at == std::string::npos) break;
    RenderBudget::bytes(static_cast<int64_t>(to.size()));
    out += s.substr(start, at - start) + to;
    start = at + from.size();
    ++done;
  }
  return out + s.substr(start);
}

std::string map_ascii(std::string s, int (*f)(int)) {
  for (char& c : s)
    if (static_cast<unsigned char>(c) < 0x80) c = static_cast<char>(f(static_cast<unsigned char>(c)));
  return s;
}

std::string title_case(const std::string& s) {
  std::string out = s;
  bool prev_cased = false;
  for (char& c : out) {
    const unsigned char u = static_cast<unsigned char>(c);
    const bool alpha = u < 0x80 && std::isalpha(u);
    if (alpha) c = static_cast<char>(prev_cased ? std::tolower(u) : std::toupper(u));
    prev_cased = alpha;
  }
  return out;
}

bool affix_match(const std::string& s, const Value& arg, bool prefix) {
  auto one = [&](const std::string& a) {
    if (a.size() > s.size()) return false;
    return prefix ? s.compare(0, a.size(), a) == 0 : s.compare(s.size() - a.size(), a.size(), a) == 0;
  };
  if (arg.is_array()) {
    for (const auto& v : arg.array())
      if (one(need_string(v, prefix ? "startswith" : "endswith"))) return true;
    return false;
  }
  return one(need_string(arg, prefix ? "startswith" : "endswith"));
}

Value string_method(const std::string& s, const std::string& name, const CallArgs& a) {
  const Value* a0 = a.get(0, "__0");
  if (name == "startswith" || name == "endswith") {
    if (!a0) fail(name + "() takes at least 1 argument");
    return Value(affix_match(s, *a0, name == "startswith"));
  }
  if (name == "strip") return Value(strip(s, a0, true, true));
  if (name == "lstrip") return Value(strip(s, a0, true, false));
  if (name == "rstrip") return Value(strip(s, a0, false, true));
  if (name == "split") return split(s, a.get(0, "sep"), a.get(1, "maxsplit"));
  if (name == "replace") {
    const Value* from = a.get(0, "old");
    const Value* to = a.get(1, "new");
    const Value* count = a.get(2, "count");
    if (!from || !to) fail("replace() takes at least 2 arguments");
    return Value(replace(s, need_string(*from, "replace"), need_string(*to, "replace"),
                         count ? need_int(*count, "replace") : -1));
  }
  if (name == "upper") return Value(map_ascii(s, ::toupper));
  if (name == "lower") return Value(map_ascii(s, ::tolower));
  if (name == "title") return Value(title_case(s));
  if (name == "capitalize") {
    std::string out = map_ascii(s, ::tolower);
    if (!out.empty() && static_cast<unsigned char>(out[0]) < 0x80)
      out[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(out[0])));
    return Value(out);
  }
  if (name == "find" || name == "count") {
    if (!a0) fail(name + "() takes at least 1 argument");
    const std::string& needle = need_string(*a0, name.c_str());
    if (name == "find") {
      const size_t at = s.find(needle);
      return Value(at == std::string::npos ? int64_t{-1} : static_cast<int64_t>(code_points(s.substr(0, at)).size()));
    }
    if (needle.empty()) return Value(static_cast<int64_t>(code_points(s).size()) + 1);
    int64_t n = 0;
    for (size_t at = s.find(needle); at != std::string::npos; at = s.find(needle, at + needle.size())) ++n;
    return Value(n);
  }
  if (name == "join") {
    if (!a0) fail("join() takes 1 argument");
    std::string out;
    bool first = true;
    for (const auto& v : iterate(*a0)) {
      if (!first) out += s;
      out += need_string(v, "join");
      first = false;
    }
    return Value(out);
  }
  if (name == "isdigit" || name == "isalpha" || name == "isspace" || name == "isalnum") {
    if (s.empty()) return Value(false);
    for (unsigned char c : s) {
      const bool ok = name == "isdigit"   ? std::isdigit(c)
                      : name == "isalpha" ? std::isalpha(c)
                      : name == "isspace" ? std::isspace(c)
                                          : std::isalnum(c);
      if (!ok) return Value(false);
    }
    return Value(true);
  }
  fail("'str' object has no method '" + name + "'");
}

Value dict_method(const Value& obj, const std::string& name, const CallArgs& a) {
  const Object& o = obj.object();
  if (name == "items") {
    Array out;
    for (const auto& [k, v] : o.items) out.push_back(Value::tuple(Array{Value(k), v}));
    return Value(std::move(out));
  }
  if (name == "keys") {
    Array out;
    for (const auto& kv : o.items) out.emplace_back(kv.first);
    return Value(std::move(out));
  }
  if (name == "values") {
    Array out;
    for (const auto& kv : o.items) out.push_back(kv.second);
    return Value(std::move(out));
  }
  if (name == "get") {
    const Value* key = a.get(0, "key");
    if (!key) fail("get() takes at least 1 argument");
    const Value* def = a.get(1, "default");
    if (key->is_string())
      if (const Value* v = o.find(key->as_string())) return *v;
    return def ? *def : Value::none();
  }
  fail("'dict' object has no method '" + name + "'");
}

bool is_string_method(const std::string& n) {
  static const char* const names[] = {"startswith", "endswith", "strip",   "lstrip",  "rstrip",  "split",
                                      "replace",    "upper",    "lower",   "title",   "find",    "count",
                                      "join",       "isdigit",  "isalpha", "isspace", "isalnum", "capitalize"};
  return std::any_of(std::begin(names), std::end(names), [&](const char* m) { return n == m; });
}

const Value& attribute(const Value& v, const std::string& name) {
  static const Value kUndefined;
  if (v.is_mapping())
    if (const Value* f = v.object().find(name)) return *f;
  return kUndefined;
}

// Python's ordering for sort/min/max: numbers with numbers, strings with strings.
bool less_than(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) return a.as_double() < b.as_double();
  if (a.is_string() && b.is_string()) return a.as_string() < b.as_string();
  fail(std::string("'<' not supported between '") + a.type_name() + "' and '" + b.type_name() + "'");
}

CallArgs shift_args(const CallArgs& a, size_t from) {
  CallArgs out;
  for (size_t i = from; i < a.positional.size(); ++i) out.positional.push_back(a.positional[i]);
  out.named = a.named;
  return out;
}

}  // namespace

Array iterate(const Value& v) {
  RenderBudget::steps(1);
  switch (v.kind()) {
    case Value::Kind::Undefined:
      return {};
    case Value::Kind::Array:
      return v.array();
    case Value::Kind::Object:
    case Value::Kind::Namespace: {
      Array keys;
      for (const auto& kv : v.object().items) keys.emplace_back(kv.first);
      return keys;
    }
    case Value::Kind::String: {
      RenderBudget::steps(static_cast<int64_t>(v.as_string().size()));
      Array out;
      for (auto& cp : code_points(v.as_string())) out.emplace_back(std::move(cp));
      return out;
    }
    default:
      fail(std::string("'") + v.type_name() + "' object is not iterable");
  }
}

int64_t length_of(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined:
      return 0;
    case Value::Kind::String:
      return is_ascii(v.as_string()) ? static_cast<int64_t>(v.as_string().size())
                                     : static_cast<int64_t>(code_points(v.as_string()).size());
    case Value::Kind::Array:
      return static_cast<int64_t>(v.array().size());
    case Value::Kind::Object:
    case Value::Kind::Namespace:
      return static_cast<int64_t>(v.object().items.size());
    default:
      fail(std::string("object of type '") + v.type_name() + "' has no len()");
  }
}

Value slice(const Value& v, const Value& start_v, const Value& stop_v, const Value& step_v) {
  Array items;
  const bool is_str = v.is_string();
  if (is_str) {
    for (auto& cp : code_points(v.as_string())) items.emplace_back(std::move(cp));
  } else if (v.is_array()) {
    items = v.array();
  } else {
    fail(std::string("'") + v.type_name() + "' object is not subscriptable");
  }
  const int64_t n = static_cast<int64_t>(items.size());
  const bool has_step = !step_v.is_undefined() && !step_v.is_none();
  const int64_t step = has_step ? need_int(step_v, "slice step") : 1;
  if (step == 0) fail("slice step cannot be zero");
  auto bound = [&](const Value& b, int64_t def) {
    if (b.is_undefined() || b.is_none()) return def;
    int64_t i = need_int(b, "slice index");
    if (i < 0) i += n;
    if (step > 0) return std::clamp<int64_t>(i, 0, n);
    return std::clamp<int64_t>(i, -1, n - 1);
  };
  const int64_t start = bound(start_v, step > 0 ? 0 : n - 1);
  const int64_t stop = bound(stop_v, step > 0 ? n : -1);
  Array out;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) out.push_back(items[static_cast<size_t>(i)]);
  if (!is_str) return Value(std::move(out));
  std::string s;
  for (const auto& c : out) s += c.as_string();
  return Value(s);
}

Value method_of(const Value& obj, const std::string& name) {
  if (obj.is_string() && is_string_method(name)) {
    const std::string s = obj.as_string();
    return Value::function([s, name](const CallArgs& a) { return string_method(s, name, a); });
  }
  if (obj.kind() == Value::Kind::Object && (name == "items" || name == "keys" || name == "values" || name == "get")) {
    return Value::function([obj, name](const CallArgs& a) { return dict_method(obj, name, a); });
  }
  return Value::undefined();
}

bool apply_test(const std::string& name, const Value& v, const CallArgs& a) {
  using K = Value::Kind;
  const Value* arg = a.get(0, "value");
  auto need_arg = [&]() -> const Value& {
    if (!arg) fail("test '" + name + "' takes an argument");
    return *arg;
  };
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "string") return v.is_string();
  if (name == "number") return v.is_number();
  if (name == "integer") return v.kind() == K::Int;
  if (name == "float") return v.kind() == K::Float;
  if (name == "boolean") return v.kind() == K::Bool;
  if (name == "true") return v.kind() == K::Bool && v.as_bool();
  if (name == "false") return v.kind() == K::Bool && !v.as_bool();
  if (name == "mapping") return v.is_mapping();
  if (name == "sequence") return v.is_array() || v.is_string() || v.is_mapping() || v.is_undefined();
  if (name == "iterable") return v.is_array() || v.is_string() || v.is_mapping() || v.is_undefined();
  if (name == "callable") return v.kind() == K::Function;
  if (name == "equalto" || name == "eq" || name == "==" || name == "sameas") return v == need_arg();
  if (name == "ne" || name == "!=") return !(v == need_arg());
  if (name == "lt" || name == "lessthan") return less_than(v, need_arg());
  if (name == "gt" || name == "greaterthan") return less_than(need_arg(), v);
  if (name == "le") return !less_than(need_arg(), v);
  if (name == "ge") return !less_than(v, need_arg());
  if (name == "in") {
    const Value& c = need_arg();
    if (c.is_string()) return c.as_string().find(need_string(v, "in")) != std::string::npos;
    for (const auto& x : iterate(c))
      if (x == v) return true;
    return false;
  }
  if (name == "odd" || name == "even") {
    const int64_t i = need_int(v, name.c_str());
    return ((i % 2) != 0) == (name == "odd");
  }
  if (name == "divisibleby") {
    const int64_t d = need_int(need_arg(), "divisibleby");
    if (d == 0) fail("divisibleby: division by zero");
    return need_int(v, "divisibleby") % d == 0;
  }
  if (name == "lower" || name == "upper") {
    const std::string& s = need_string(v, name.c_str());
    return s == map_ascii(s, name == "lower" ? ::tolower : ::toupper);
  }
  fail("no test named '" + name + "'");
}

Value apply_filter(const std::string& name, const Value& v, const CallArgs& a) {
  const Value* a0 = a.get(0, "__0");
  if (name == "length" || name == "count") return Value(length_of(v));
  if (name == "string") return v.is_string() ? v : Value(v.str());
  if (name == "trim") {
    if (v.is_undefined()) return Value("");
    return Value(strip(v.is_string() ? v.as_string() : v.str(), a.get(0, "chars"), true, true));
  }
  if (name == "tojson") {
    const Value* indent = a.get(0, "indent");
    int ind = -1;
    if (indent && !indent->is_none())
      ind = static_cast<int>(std::clamp<int64_t>(need_int(*indent, "tojson indent"), 0, 64));
    const Value* sort_keys = a.get(4, "sort_keys");
    if (sort_keys && sort_keys->truthy() && v.is_mapping()) {
      Object sorted = v.object();
      std::sort(sorted.items.begin(), sorted.items.end(),
                [](const auto& x, const auto& y) { return x.first < y.first; });
      return Value(Value(std::move(sorted)).to_json(ind));
    }
    return Value(v.to_json(ind));
  }
  if (name == "items") {
    if (v.is_undefined()) return Value(Array{});
    if (!v.is_mapping()) fail(std::string("items: expected a mapping, got ") + v.type_name());
    return dict_method(v, "items", a);
  }
  if (name == "list") return Value(iterate(v));
  if (name == "first" || name == "last") {
    Array items = iterate(v);
    if (items.empty()) return Value::undefined("first/last of an empty sequence");
    return name == "first" ? items.front() : items.back();
  }
  if (name == "default" || name == "d") {
    const bool boolean = a.get(1, "boolean") && a.get(1, "boolean")->truthy();
    const bool use_default = boolean ? !v.truthy() : v.is_undefined();
    if (!use_default) return v;
    return a.get(0, "default_value") ? *a.get(0, "default_value") : Value("");
  }
  if (name == "join") {
    const Value* sep = a.get(0, "d");
    const Value* attr = a.get(1, "attribute");
    std::string out;
    bool first = true;
    for (const auto& x : iterate(v)) {
      if (!first && sep) out += sep->str();
      const Value& item = attr ? attribute(x, attr->str()) : x;
      out += item.str();
      first = false;
    }
    return Value(out);
  }
  if (name == "upper" || name == "lower" || name == "capitalize" || name == "title") {
    return string_method(v.is_string() ? v.as_string() : v.str(), name, CallArgs{});
  }
  if (name == "replace") {
    CallArgs r;
    r.positional = a.positional;
    return string_method(v.is_string() ? v.as_string() : v.str(), "replace", r);
  }
  if (name == "select" || name == "reject" || name == "selectattr" || name == "rejectattr") {
    const bool by_attr = name.size() > 6;
    const bool keep = name.rfind("select", 0) == 0;
    size_t i = 0;
    std::string attr;
    if (by_attr) {
      if (!a0) fail(name + ": needs an attribute name");
      attr = need_string(*a0, name.c_str());
      i = 1;
    }
    const Value* test = i < a.positional.size() ? &a.positional[i] : nullptr;
    const CallArgs test_args = shift_args(a, i + 1);
    Array out;
    for (const auto& x : iterate(v)) {
      const Value& subject = by_attr ? attribute(x, attr) : x;
      const bool r = test ? apply_test(need_string(*test, name.c_str()), subject, test_args) : subject.truthy();
      if (r == keep) out.push_back(x);
    }
    return Value(std::move(out));
  }
  if (name == "map") {
    Array out;
    const Value* attr = a.get(99, "attribute");
    for (const auto& x : iterate(v)) {
      if (attr) {
        const Value& got = attribute(x, attr->str());
        const Value* def = a.get(99, "default");
        out.push_back(got.is_undefined() && def ? *def : got);
      } else {
        if (!a0) fail("map: needs a filter name or attribute=");
        out.push_back(apply_filter(need_string(*a0, "map"), x, shift_args(a, 1)));
      }
    }
    return Value(std::move(out));
  }
  if (name == "reverse") {
    if (v.is_string()) return slice(v, Value(), Value(), Value(-1));
    Array items = iterate(v);
    std::reverse(items.begin(), items.end());
    return Value(std::move(items));
  }
  if (name == "sort") {
    Array items = iterate(v);
    RenderBudget::steps(static_cast<int64_t>(items.size()) * static_cast<int64_t>(std::bit_width(items.size())));
    const Value* reverse = a.get(0, "reverse");
    const Value* attr = a.get(2, "attribute");
    std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
      return attr ? less_than(attribute(x, attr->str()), attribute(y, attr->str())) : less_than(x, y);
    });
    if (reverse && reverse->truthy()) std::reverse(items.begin(), items.end());
    return Value(std::move(items));
  }
  if (name == "unique") {
    Array out;
    for (const auto& x : iterate(v))
      if (std::find(out.begin(), out.end(), x) == out.end()) out.push_back(x);  // == counts each comparison
    return Value(std::move(out));
  }
  if (name == "min" || name == "max") {
    Array items = iterate(v);
    if (items.empty()) return Value::undefined("min/max of an empty sequence");
    Value best = items[0];
    for (const auto& x : items)
      if (name == "min" ? less_than(x, best) : less_than(best, x)) best = x;
    return best;
  }
  if (name == "sum") {
    Value total(int64_t{0});
    for (const auto& x : iterate(v)) {
      if (!x.is_number()) fail("sum: expected numbers");
      total = total.kind() == Value::Kind::Int && x.kind() == Value::Kind::Int
                  ? Value(total.as_int() + x.as_int())
                  : Value(total.as_double() + x.as_double());
    }
    return total;
  }
  if (name == "int") {
    if (v.kind() == Value::Kind::Float) return Value(static_cast<int64_t>(v.as_double()));
    if (v.is_number() || v.kind() == Value::Kind::Bool) return Value(v.as_int());
    if (v.is_string()) {
      char* end = nullptr;
      const long long i = std::strtoll(v.as_string().c_str(), &end, 10);
      if (end && *end == '\0' && !v.as_string().empty()) return Value(static_cast<int64_t>(i));
    }
    return a0 ? *a0 : Value(int64_t{0});
  }
  if (name == "float") {
    if (v.is_number()) return Value(v.as_double());
    if (v.is_string()) {
      char* end = nullptr;
      const double d = std::strtod(v.as_string().c_str(), &end);
      if (end && *end == '\0' && !v.as_string().empty()) return Value(d);
    }
    return a0 ? *a0 : Value(0.0);
  }
  if (name == "abs") {
    if (v.kind() == Value::Kind::Int) return Value(v.as_int() < 0 ? -v.as_int() : v.as_int());
    if (v.is_number()) return Value(std::fabs(v.as_double()));
    fail(std::string("abs: expected a number, got ") + v.type_name());
  }
  if (name == "safe" || name == "e" || name == "escape") {
    if (name != "safe") fail("filter '" + name + "' is not supported (templates render without autoescape)");
    return v;
  }
  if (name == "dictsort") {
    if (!v.is_mapping()) fail("dictsort: expected a mapping");
    Object sorted = v.object();
    std::stable_sort(sorted.items.begin(), sorted.items.end(),
                     [](const auto& x, const auto& y) { return x.first < y.first; });
    return dict_method(Value(std::move(sorted)), "items", CallArgs{});
  }
  if (name == "indent") {
    const int64_t width = a0 ? need_int(*a0, "indent") : 4;
    const bool first = a.get(1, "first") && a.get(1, "first")->truthy();
    const std::string pad(static_cast<size_t>(std::clamp<int64_t>(width, 0, 1024)), ' ');
    const std::string s = v.str();
    std::string out = first ? pad : "";
    for (size_t i = 0; i < s.size(); ++i) {
      out += s[i];
      if (s[i] == '\n' && i + 1 < s.size() && s[i + 1] != '\n') {
        RenderBudget::bytes(static_cast<int64_t>(pad.size()));
        out += pad;
      }
    }
    return Value(out);
  }
  fail("no filter named '" + name + "'");
}

Object global_functions() {
  Object g;
  g.set("range", Value::function([](const CallArgs& a) {
          int64_t start = 0, stop = 0, step = 1;
          if (a.positional.size() == 1) {
            stop = need_int(a.positional[0], "range");
          } else if (a.positional.size() >= 2) {
            start = need_int(a.positional[0], "range");
            stop = need_int(a.positional[1], "range");
            if (a.positional.size() > 2) step = need_int(a.positional[2], "range");
          } else {
            fail("range() takes 1 to 3 arguments");
          }
          if (step == 0) fail("range() step must not be zero");
          Array out;
          for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
            if (static_cast<int64_t>(out.size()) >= kMaxRange)
              fail("range() larger than " + std::to_string(kMaxRange) + " items");
            out.emplace_back(i);
          }
          RenderBudget::bytes(static_cast<int64_t>(out.size() * sizeof(Value)));
          return Value(std::move(out));
        }));
  g.set("namespace", Value::function([](const CallArgs& a) {
          Object o;
          for (const auto& p : a.positional) {
            if (!p.is_mapping()) fail("namespace() takes keyword arguments or a mapping");
            for (const auto& [k, v] : p.object().items) o.set(k, v);
          }
          for (const auto& [k, v] : a.named) o.set(k, v);
          return Value::namespace_(std::move(o));
        }));
  g.set("dict", Value::function([](const CallArgs& a) {
          Object o;
          for (const auto& [k, v] : a.named) o.set(k, v);
          return Value(std::move(o));
        }));
  g.set("raise_exception", Value::function([](const CallArgs& a) -> Value {
          throw RaisedError(a.positional.empty() ? std::string("raise_exception called") : a.positional[0].str());
        }));
  g.set("strftime_now", Value::function([](const CallArgs& a) {
          const Value* fmt = a.get(0, "format");
          if (!fmt) fail("strftime_now() takes a format");
          // SOURCE_DATE_EPOCH pins "now" for reproducible renders (tests, debugging).
          std::time_t now = std::time(nullptr);
          if (const char* epoch = std::getenv("SOURCE_DATE_EPOCH")) now = static_cast<std::time_t>(std::atoll(epoch));
          std::tm tm{};
          localtime_r(&now, &tm);
          char buf[256];
          const size_t n = std::strftime(buf, sizeof buf, need_string(*fmt, "strftime_now").c_str(), &tm);
          return Value(std::string(buf, n));
        }));
  return g;
}

}  // namespace coda::jinja
