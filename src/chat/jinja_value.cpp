#include "chat/jinja_value.h"

#include <charconv>
#include <cmath>
#include <cstdio>

#include "chat/jinja.h"

namespace coda::jinja {

static_assert(sizeof(Value) <= 72, "a long conversation holds one Value per field; keep it small");

RenderBudget::RenderBudget(int64_t steps, int64_t bytes)
    : previous_(current_), steps_(steps), bytes_(bytes), steps_left_(steps), bytes_left_(bytes) {
  current_ = this;
}

RenderBudget::~RenderBudget() {
  current_ = previous_;
}

void RenderBudget::spent(const char* what) {
  // Leave the budget exhausted-but-quiet so that values destroyed and copied while the error
  // unwinds do not throw again.
  current_ = nullptr;
  const bool steps = what[0] == 's';
  throw TemplateError(std::string("the template ") + kOverBudget + " (over " +
                      std::to_string(steps ? steps_ : bytes_ >> 20) + (steps ? " steps" : " MiB of values") +
                      "); it loops without end or is built to exhaust the server");
}

const Value* Object::find(const std::string& key) const {
  RenderBudget::steps(static_cast<int64_t>(items.size() / 8));  // a search of a large object is work
  for (const auto& [k, v] : items)
    if (k == key) return &v;
  return nullptr;
}

void Object::set(const std::string& key, Value v) {
  RenderBudget::steps(static_cast<int64_t>(items.size() / 8));
  for (auto& [k, old] : items) {
    if (k == key) {
      old = std::move(v);
      return;
    }
  }
  items.emplace_back(key, std::move(v));
}

const Value* CallArgs::get(size_t index, const char* name) const {
  for (const auto& [k, v] : named)
    if (k == name) return &v;
  return index < positional.size() ? &positional[index] : nullptr;
}

Value Value::from_json(const nlohmann::ordered_json& j, int depth) {
  if (depth > 64) throw TemplateError("JSON nested deeper than 64 levels");
  switch (j.type()) {
    case nlohmann::json::value_t::null:
      return none();
    case nlohmann::json::value_t::boolean:
      return Value(j.get<bool>());
    case nlohmann::json::value_t::number_integer:
      return Value(j.get<int64_t>());
    case nlohmann::json::value_t::number_unsigned:
      return Value(static_cast<int64_t>(j.get<uint64_t>()));
    case nlohmann::json::value_t::number_float:
      return Value(j.get<double>());
    case nlohmann::json::value_t::string:
      return Value(j.get<std::string>());
    case nlohmann::json::value_t::array: {
      Array a;
      for (const auto& e : j) a.push_back(from_json(e, depth + 1));
      return Value(std::move(a));
    }
    case nlohmann::json::value_t::object: {
      Object o;
      for (const auto& [k, v] : j.items()) o.items.emplace_back(k, from_json(v, depth + 1));
      return Value(std::move(o));
    }
    default:
      return none();
  }
}

bool Value::reaches(const Object* o) const {
  RenderBudget::steps(1);
  if ((kind_ == Kind::Object || kind_ == Kind::Namespace) && ref_.get() == o) return true;
  if (kind_ == Kind::Array)
    for (const auto& v : arr())
      if (v.reaches(o)) return true;
  if (kind_ == Kind::Object || kind_ == Kind::Namespace)
    for (const auto& kv : obj().items)
      if (kv.second.reaches(o)) return true;
  return false;
}

bool Value::truthy() const {
  switch (kind_) {
    case Kind::Undefined:
    case Kind::None:
      return false;
    case Kind::Bool:
    case Kind::Int:
      return int_ != 0;
    case Kind::Float:
      return float_ != 0;
    case Kind::String:
      return !str_.empty();
    case Kind::Array:
      return !arr().empty();
    case Kind::Object:
      return !obj().items.empty();
    default:
      return true;
  }
}

std::string python_float(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  if (d == 0) return std::signbit(d) ? "-0.0" : "0.0";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string sci(buf, r.ptr);  // e.g. "-1.2345e+02"
  const size_t e = sci.find('e');
  const int exp10 = std::stoi(sci.substr(e + 1));
  std::string digits;
  const bool neg = sci[0] == '-';
  for (size_t i = neg ? 1 : 0; i < e; ++i)
    if (sci[i] != '.') digits += sci[i];
  std::string out = neg ? "-" : "";
  if (exp10 < -4 || exp10 >= 16) {  // Python's repr switches to exponent notation here
    out += digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char eb[16];
    std::snprintf(eb, sizeof eb, "e%c%02d", exp10 < 0 ? '-' : '+', std::abs(exp10));
    return out + eb;
  }
  if (exp10 < 0) return out + "0." + std::string(static_cast<size_t>(-exp10 - 1), '0') + digits;
  const size_t int_len = static_cast<size_t>(exp10) + 1;
  if (digits.size() <= int_len) return out + digits + std::string(int_len - digits.size(), '0') + ".0";
  return out + digits.substr(0, int_len) + "." + digits.substr(int_len);
}

namespace {

std::string python_repr_string(const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos;
  const bool has_double = s.find('"') != std::string::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (unsigned char c : s) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == static_cast<unsigned char>(quote)) {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      char b[8];
      std::snprintf(b, sizeof b, "\\x%02x", c);
      out += b;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + quote;
}

void json_string(std::string& out, const std::string& s) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (c < 0x20) {
          char b[8];
          std::snprintf(b, sizeof b, "\\u%04x", c);
          out += b;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
}

}  // namespace

std::string Value::repr() const {
  RenderBudget::steps(1);
  switch (kind_) {
    case Kind::String:
      RenderBudget::bytes(static_cast<int64_t>(str_.size()));
      return python_repr_string(str_);
    case Kind::Array: {
      std::string out = tuple_ ? "(" : "[";
      for (size_t i = 0; i < arr().size(); ++i) out += (i ? ", " : "") + arr()[i].repr();
      if (tuple_) return out + (arr().size() == 1 ? ",)" : ")");
      return out + "]";
    }
    case Kind::Object: {
      std::string out = "{";
      bool first = true;
      for (const auto& [k, v] : obj().items) {
        out += (first ? "" : ", ") + python_repr_string(k) + ": " + v.repr();
        first = false;
      }
      return out + "}";
    }
    default:
      return str();
  }
}

std::string Value::str() const {
  switch (kind_) {
    case Kind::Undefined:
      return "";
    case Kind::None:
      return "None";
    case Kind::Bool:
      return int_ ? "True" : "False";
    case Kind::Int:
      return std::to_string(int_);
    case Kind::Float:
      return python_float(float_);
    case Kind::String:
      return str_;
    case Kind::Namespace:
      return "<Namespace>";
    case Kind::Function:
      return "<function>";
    default:
      return repr();
  }
}

void Value::to_json_at(std::string& out, int indent, int depth) const {
  RenderBudget::steps(1);
  auto newline = [&](int d) {
    if (indent < 0) return;
    RenderBudget::bytes(static_cast<int64_t>(indent) * d + 1);
    out += '\n';
    out.append(static_cast<size_t>(indent * d), ' ');
  };
  switch (kind_) {
    case Kind::Undefined:
      throw TemplateError("tojson: cannot serialize an undefined value" +
                          (str_.empty() ? std::string() : " ('" + str_ + "')"));
    case Kind::None:
      out += "null";
      return;
    case Kind::Bool:
      out += int_ ? "true" : "false";
      return;
    case Kind::Int:
      out += std::to_string(int_);
      return;
    case Kind::Float:
      if (!std::isfinite(float_)) {
        out += std::isnan(float_) ? "NaN" : (float_ > 0 ? "Infinity" : "-Infinity");
        return;
      }
      out += python_float(float_);
      return;
    case Kind::String:
      RenderBudget::bytes(static_cast<int64_t>(str_.size()));
      json_string(out, str_);
      return;
    case Kind::Array: {
      if (arr().empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t i = 0; i < arr().size(); ++i) {
        if (i) out += indent < 0 ? ", " : ",";
        newline(depth + 1);
        arr()[i].to_json_at(out, indent, depth + 1);
      }
      newline(depth);
      out += ']';
      return;
    }
    case Kind::Object:
    case Kind::Namespace: {
      if (obj().items.empty()) {
        out += "{}";
        return;
      }
      out += '{';
      bool first = true;
      for (const auto& [k, v] : obj().items) {
        if (!first) out += indent < 0 ? ", " : ",";
        first = false;
        newline(depth + 1);
        json_string(out, k);
        out += ": ";
        v.to_json_at(out, indent, depth + 1);
      }
      newline(depth);
      out += '}';
      return;
    }
    case Kind::Function:
      throw TemplateError("tojson: cannot serialize a function");
  }
}

std::string Value::to_json(int indent) const {
  std::string out;
  to_json_at(out, indent, 0);
  return out;
}

const char* Value::type_name() const {
  switch (kind_) {
    case Kind::Undefined:
      return "undefined";
    case Kind::None:
      return "NoneType";
    case Kind::Bool:
      return "bool";
    case Kind::Int:
      return "int";
    case Kind::Float:
      return "float";
    case Kind::String:
      return "str";
    case Kind::Array:
      return "list";
    case Kind::Object:
      return "dict";
    case Kind::Namespace:
      return "Namespace";
    case Kind::Function:
      return "function";
  }
  return "?";
}

bool operator==(const Value& a, const Value& b) {
  using K = Value::Kind;
  RenderBudget::steps(1);
  if (a.is_number() && b.is_number()) {
    if (a.kind_ == K::Int && b.kind_ == K::Int) return a.int_ == b.int_;
    return a.as_double() == b.as_double();
  }
  if ((a.kind_ == K::Bool && b.is_number()) || (b.kind_ == K::Bool && a.is_number()))
    return a.as_double() == b.as_double();
  if (a.kind_ != b.kind_) return false;
  switch (a.kind_) {
    case K::Undefined:
    case K::None:
      return true;
    case K::Bool:
      return a.int_ == b.int_;
    case K::String:
      return a.str_ == b.str_;
    case K::Array:
      return a.arr() == b.arr();
    case K::Object: {
      if (a.obj().items.size() != b.obj().items.size()) return false;
      for (const auto& [k, v] : a.obj().items) {
        const Value* other = b.obj().find(k);
        if (!other || !(*other == v)) return false;
      }
      return true;
    }
    default:
      return a.ref_ == b.ref_;
  }
}

}  // namespace coda::jinja
