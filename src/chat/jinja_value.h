// Values of the Jinja subset interpreter, with Python's semantics where templates can see them:
// truthiness, equality, str() and repr() output, insertion-ordered dicts, int/float distinction.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace coda::jinja {

// A template error: syntax, a type error at render time, or the template's own raise_exception.
// Thrown inside the interpreter only; the public API turns it into a coda::Error.
struct TemplateError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
// The template's own raise_exception(message): its text is the whole error.
struct RaisedError : TemplateError {
  using TemplateError::TemplateError;
};

// What one render may still spend. A chat template comes from a GGUF file or a flag, and a hostile
// or broken one must end its render with an error instead of holding a server thread or its
// memory: a loop nested in a loop of a million, a string or a list doubled in a loop, a list that
// holds itself twice at each of 40 levels (2^40 elements to print). Template::render installs a
// budget on its thread; every statement and expression, every container element that printing,
// comparing or searching visits, and every byte of string and value made, spend from it.
// Outside a render (converting a request to values) nothing is counted.
class RenderBudget {
 public:
  RenderBudget(int64_t steps, int64_t bytes);
  ~RenderBudget();
  RenderBudget(const RenderBudget&) = delete;
  RenderBudget& operator=(const RenderBudget&) = delete;
  // Spend from the current render's budget; throw TemplateError once it is spent.
  static void steps(int64_t n) {
    if (current_ && (current_->steps_left_ -= n) < 0) current_->spent("steps");
  }
  static void bytes(int64_t n) {
    if (current_ && (current_->bytes_left_ -= n) < 0) current_->spent("bytes");
  }

 private:
  [[noreturn]] void spent(const char* what);

  static inline thread_local RenderBudget* current_ = nullptr;
  RenderBudget* previous_;
  int64_t steps_, bytes_, steps_left_, bytes_left_;
};

class Value;
using Array = std::vector<Value>;
// Dicts keep insertion order, as Python's do (tojson and iteration depend on it).
struct Object {
  std::vector<std::pair<std::string, Value>> items;
  const Value* find(const std::string& key) const;
  void set(const std::string& key, Value v);
};

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> named;
  const Value* get(size_t index, const char* name) const;
};
using Function = std::function<Value(const CallArgs&)>;

class Value {
 public:
  enum class Kind { Undefined, None, Bool, Int, Float, String, Array, Object, Namespace, Function };

  Value() = default;  // undefined
  // Copies are counted against the render's budget (RenderBudget): a template that copies a
  // large string or list in a loop is what exhausts memory.
  Value(const Value& o) : kind_(o.kind_), tuple_(o.tuple_), int_(o.int_), float_(o.float_), str_(o.str_), ref_(o.ref_) {
    RenderBudget::bytes(static_cast<int64_t>(sizeof(Value) + str_.size()));
  }
  Value& operator=(const Value& o) {
    if (this != &o) *this = Value(o);
    return *this;
  }
  Value(Value&&) noexcept = default;
  Value& operator=(Value&&) noexcept = default;
  static Value undefined(std::string name = "") {
    Value v;
    v.str_ = std::move(name);
    return v;
  }
  static Value none() { return Value(Kind::None); }
  Value(bool b) : kind_(Kind::Bool), int_(b) {}                      // NOLINT: implicit conversions keep builtins short
  Value(int64_t i) : kind_(Kind::Int), int_(i) {}                    // NOLINT
  Value(int i) : kind_(Kind::Int), int_(i) {}                        // NOLINT
  Value(double d) : kind_(Kind::Float), float_(d) {}                 // NOLINT
  Value(std::string s) : kind_(Kind::String), str_(std::move(s)) {   // NOLINT
    RenderBudget::bytes(static_cast<int64_t>(sizeof(Value) + str_.size()));
  }
  Value(const char* s) : kind_(Kind::String), str_(s) {}             // NOLINT
  Value(Array a) : kind_(Kind::Array), ref_(std::make_shared<Array>(std::move(a))) {}     // NOLINT
  Value(Object o) : kind_(Kind::Object), ref_(std::make_shared<Object>(std::move(o))) {}  // NOLINT
  // A Python tuple: an array that prints as (a, b).
  static Value tuple(Array a) {
    Value v(std::move(a));
    v.tuple_ = true;
    return v;
  }
  static Value namespace_(Object o) {
    Value v(std::move(o));
    v.kind_ = Kind::Namespace;
    return v;
  }
  static Value function(Function f) {
    Value v(Kind::Function);
    v.ref_ = std::make_shared<Function>(std::move(f));
    return v;
  }
  // Throws TemplateError past 64 levels of nesting (hostile input; real messages are shallow).
  static Value from_json(const nlohmann::ordered_json& j, int depth = 0);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::Undefined; }
  bool is_none() const { return kind_ == Kind::None; }
  bool is_string() const { return kind_ == Kind::String; }
  bool is_number() const { return kind_ == Kind::Int || kind_ == Kind::Float; }
  bool is_array() const { return kind_ == Kind::Array; }
  bool is_mapping() const { return kind_ == Kind::Object || kind_ == Kind::Namespace; }

  bool as_bool() const { return int_ != 0; }
  int64_t as_int() const { return int_; }
  double as_double() const { return kind_ == Kind::Float ? float_ : static_cast<double>(int_); }
  const std::string& as_string() const { return str_; }
  // The name an undefined value was looked up by (for error messages).
  const std::string& undefined_name() const { return str_; }
  const Array& array() const { return arr(); }
  Array& array_mut() { return arr(); }
  const Object& object() const { return obj(); }
  Object& object_mut() { return obj(); }  // namespaces are mutable through `set ns.x = ...`
  const Function& fn() const { return *static_cast<Function*>(ref_.get()); }
  // Whether `o` is this value's object or is reachable from it (cycle checks for namespaces).
  bool reaches(const Object* o) const;

  bool truthy() const;
  // Python's str(): strings as is, containers as repr(), None/True/False capitalised.
  std::string str() const;
  std::string repr() const;
  // json.dumps(x, ensure_ascii=False, indent=indent) as Hugging Face's tojson filter calls it.
  std::string to_json(int indent = -1) const;
  const char* type_name() const;

  friend bool operator==(const Value& a, const Value& b);

 private:
  explicit Value(Kind k) : kind_(k) {}
  void to_json_at(std::string& out, int indent, int depth) const;

  Kind kind_ = Kind::Undefined;
  bool tuple_ = false;
  int64_t int_ = 0;
  double float_ = 0;
  std::string str_;
  // The Array, Object or Function, whichever kind_ says: one pointer instead of three keeps a
  // value at 72 bytes, which matters for a long conversation converted from JSON.
  std::shared_ptr<void> ref_;
  Array& arr() const { return *static_cast<Array*>(ref_.get()); }
  Object& obj() const { return *static_cast<Object*>(ref_.get()); }
};

// Python's repr() of a float: shortest round-trip digits, ".0" for integral values.
std::string python_float(double d);

}  // namespace coda::jinja
