// The tree-walking evaluator. Scoping follows Jinja2: a for-loop body gets a fresh scope on every
// iteration (a `set` inside it is gone at the next iteration and after the loop; namespaces exist
// to carry state out), if-blocks share their enclosing scope, macros see the globals, the render
// variables and the template's top level plus their own arguments.
#include <cmath>

#include "chat/jinja.h"
#include "chat/jinja_ast.h"
#include "chat/jinja_builtins.h"

namespace coda::jinja {

namespace {

constexpr size_t kMaxOutput = size_t{64} << 20;  // a chat prompt is far smaller; a runaway loop is not
constexpr int kMaxDepth = 200;                   // macro recursion

struct LocatedError : TemplateError {
  using TemplateError::TemplateError;
};

enum class Flow { Normal, Break, Continue };

class Interpreter {
 public:
  Interpreter(const std::string& source, const Object& variables) : source_(source) {
    frames_.push_back(std::make_shared<Object>(global_functions()));
    frames_.push_back(std::make_shared<Object>(variables));
    frames_.push_back(std::make_shared<Object>());  // the template's top level
  }

  std::string run(const Body& body) {
    exec_body(body);
    return std::move(out_);
  }

 private:
  using Frames = std::vector<std::shared_ptr<Object>>;

  [[noreturn]] void fail_at(size_t pos, const std::string& what) const {
    throw LocatedError("template error at line " + std::to_string(line_of(source_, pos)) + ": " + what);
  }

  void write(const std::string& s) {
    if (out_.size() + s.size() > kMaxOutput)
      throw LocatedError("template output exceeds " + std::to_string(kMaxOutput >> 20) + " MiB");
    out_ += s;
  }

  Value lookup(const std::string& name) const {
    for (auto it = frames_.rbegin(); it != frames_.rend(); ++it)
      if (const Value* v = (*it)->find(name)) return *v;
    return Value::undefined("'" + name + "' is undefined");
  }

  Flow exec_body(const Body& body) {
    for (const auto& n : body) {
      const Flow f = exec(*n);
      if (f != Flow::Normal) return f;
    }
    return Flow::Normal;
  }

  Flow exec(const Node& n) {
    try {
      RenderBudget::steps(1);
      return exec_node(n);
    } catch (const LocatedError&) {
      throw;
    } catch (const RaisedError&) {
      throw;
    } catch (const TemplateError& e) {
      fail_at(n.pos, e.what());
    }
  }

  Flow exec_node(const Node& n) {
    switch (n.kind) {
      case Node::Kind::Text:
        write(n.text);
        return Flow::Normal;
      case Node::Kind::Output: {
        const Value v = eval(*n.expr);
        write(v.str());
        return Flow::Normal;
      }
      case Node::Kind::If:
        for (const auto& [cond, body] : n.branches)
          if (!cond || eval(*cond).truthy()) return exec_body(body);
        return Flow::Normal;
      case Node::Kind::For:
        return exec_for(n);
      case Node::Kind::Set: {
        Value v = eval(*n.expr);
        if (n.attr.empty()) {
          frames_.back()->set(n.targets[0], std::move(v));
        } else {
          Value ns = lookup(n.targets[0]);
          if (ns.kind() != Value::Kind::Namespace)
            fail_at(n.pos, "cannot set attribute '" + n.attr + "' on '" + n.targets[0] + "': not a namespace");
          if (v.reaches(&ns.object())) fail_at(n.pos, "cannot store namespace '" + n.targets[0] + "' inside itself");
          ns.object_mut().set(n.attr, std::move(v));
        }
        return Flow::Normal;
      }
      case Node::Kind::SetBlock: {
        std::string saved;
        saved.swap(out_);
        exec_body(n.body);
        saved.swap(out_);
        frames_.back()->set(n.targets[0], Value(saved));
        return Flow::Normal;
      }
      case Node::Kind::Macro:
        frames_.back()->set(n.targets[0], make_macro(n));
        return Flow::Normal;
      case Node::Kind::Break:
        return Flow::Break;
      case Node::Kind::Continue:
        return Flow::Continue;
    }
    return Flow::Normal;
  }

  void bind_targets(Object& frame, const std::vector<std::string>& targets, const Value& item, size_t pos) {
    if (targets.size() == 1) {
      frame.set(targets[0], item);
      return;
    }
    const Array parts = iterate(item);
    if (parts.size() != targets.size())
      fail_at(pos, "cannot unpack " + std::to_string(parts.size()) + " values into " + std::to_string(targets.size()) +
                       " loop variables");
    for (size_t i = 0; i < targets.size(); ++i) frame.set(targets[i], parts[i]);
  }

  Flow exec_for(const Node& n) {
    const Value seq = eval(*n.expr);
    if (seq.is_none()) fail_at(n.pos, "'NoneType' object is not iterable");
    Array items = iterate(seq);
    if (n.filter) {  // the filter runs before loop.* is computed, as in Jinja2
      Array kept;
      for (const auto& item : items) {
        frames_.push_back(std::make_shared<Object>());
        bind_targets(*frames_.back(), n.targets, item, n.pos);
        const bool keep = eval(*n.filter).truthy();
        frames_.pop_back();
        if (keep) kept.push_back(item);
      }
      items = std::move(kept);
    }
    if (items.empty()) {
      if (!n.else_body.empty()) exec_body(n.else_body);
      return Flow::Normal;
    }
    const int64_t len = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < len; ++i) {
      RenderBudget::steps(4);  // the loop variable and its frame
      Object loop;
      loop.set("index0", Value(i));
      loop.set("index", Value(i + 1));
      loop.set("revindex0", Value(len - i - 1));
      loop.set("revindex", Value(len - i));
      loop.set("first", Value(i == 0));
      loop.set("last", Value(i == len - 1));
      loop.set("length", Value(len));
      loop.set("depth", Value(1));
      loop.set("depth0", Value(0));
      if (i > 0) loop.set("previtem", items[static_cast<size_t>(i - 1)]);
      if (i + 1 < len) loop.set("nextitem", items[static_cast<size_t>(i + 1)]);
      loop.set("cycle", Value::function([i](const CallArgs& a) {
                 if (a.positional.empty()) throw TemplateError("loop.cycle() needs at least one value");
                 return a.positional[static_cast<size_t>(i) % a.positional.size()];
               }));
      auto frame = std::make_shared<Object>();
      frame->set("loop", Value(std::move(loop)));
      bind_targets(*frame, n.targets, items[static_cast<size_t>(i)], n.pos);
      frames_.push_back(frame);
      const Flow f = exec_body(n.body);
      frames_.pop_back();
      if (f == Flow::Break) break;
    }
    return Flow::Normal;
  }

  Value make_macro(const Node& n) {
    const Node* node = &n;
    // Globals, variables, top level. Weak: the macro is stored in one of these frames, and a strong
    // reference back would be a cycle that outlives the render.
    std::vector<std::weak_ptr<Object>> scope(frames_.begin(), frames_.begin() + 3);
    return Value::function([this, node, scope](const CallArgs& args) -> Value {
      if (depth_ >= kMaxDepth) throw TemplateError("macro recursion deeper than " + std::to_string(kMaxDepth));
      auto frame = std::make_shared<Object>();
      if (args.positional.size() > node->params.size())
        throw TemplateError("macro '" + node->targets[0] + "' takes " + std::to_string(node->params.size()) +
                            " arguments, got " + std::to_string(args.positional.size()));
      for (size_t i = 0; i < node->params.size(); ++i) {
        const auto& [pname, def] = node->params[i];
        const Value* given = args.get(i, pname.c_str());
        if (given) {
          frame->set(pname, *given);
        } else if (def) {
          frame->set(pname, eval(*def));
        } else {
          frame->set(pname, Value::undefined("'" + pname + "' is undefined"));
        }
      }
      Frames saved = std::move(frames_);
      frames_.clear();
      for (const auto& w : scope) frames_.push_back(w.lock());
      frames_.push_back(frame);
      std::string saved_out;
      saved_out.swap(out_);
      ++depth_;
      try {
        exec_body(node->body);
      } catch (...) {
        --depth_;
        frames_ = std::move(saved);
        out_.swap(saved_out);
        throw;
      }
      --depth_;
      frames_ = std::move(saved);
      out_.swap(saved_out);
      return Value(saved_out);
    });
  }

  CallArgs eval_args(const Expr& e) {
    CallArgs a;
    for (const auto& x : e.items) a.positional.push_back(eval(*x));
    for (const auto& [k, x] : e.kwargs) a.named.emplace_back(k, eval(*x));
    return a;
  }

  [[noreturn]] void undefined_error(const Value& v) const {
    throw TemplateError(v.undefined_name().empty() ? "undefined value" : v.undefined_name());
  }

  Value get_attr(const Value& obj, const std::string& name) {
    if (obj.is_undefined()) undefined_error(obj);
    Value m = method_of(obj, name);
    if (!m.is_undefined()) return m;
    if (obj.is_mapping()) {
      if (const Value* v = obj.object().find(name)) return *v;
    }
    return Value::undefined("'" + std::string(obj.type_name()) + " object' has no attribute '" + name + "'");
  }

  Value get_item(const Value& obj, const Value& key) {
    if (obj.is_undefined()) undefined_error(obj);
    if (obj.is_mapping()) {
      if (key.is_string())
        if (const Value* v = obj.object().find(key.as_string())) return *v;
      return Value::undefined("'" + std::string(obj.type_name()) + " object' has no attribute " + key.repr());
    }
    if ((obj.is_array() || obj.is_string()) && (key.kind() == Value::Kind::Int || key.kind() == Value::Kind::Bool)) {
      const int64_t n = length_of(obj);
      int64_t i = key.as_int();
      if (i < 0) i += n;
      if (i < 0 || i >= n) return Value::undefined(std::string(obj.type_name()) + " index out of range");
      if (obj.is_array()) return obj.array()[static_cast<size_t>(i)];
      return slice(obj, Value(i), Value(i + 1), Value());
    }
    if (key.is_string()) return get_attr(obj, key.as_string());
    return Value::undefined("'" + std::string(obj.type_name()) + " object' has no item " + key.repr());
  }

  Value eval(const Expr& e) {
    RenderBudget::steps(1);
    switch (e.kind) {
      case Expr::Kind::Literal:
        return e.value;
      case Expr::Kind::Name:
        return lookup(e.name);
      case Expr::Kind::List:
      case Expr::Kind::Tuple: {
        Array a;
        for (const auto& x : e.items) a.push_back(eval(*x));
        return e.kind == Expr::Kind::Tuple ? Value::tuple(std::move(a)) : Value(std::move(a));
      }
      case Expr::Kind::Dict: {
        Object o;
        for (size_t i = 0; i + 1 < e.items.size(); i += 2) {
          const Value k = eval(*e.items[i]);
          if (!k.is_string()) throw TemplateError("dict keys must be strings in templates");
          o.set(k.as_string(), eval(*e.items[i + 1]));
        }
        return Value(std::move(o));
      }
      case Expr::Kind::Attr:
        return get_attr(eval(*e.a), e.name);
      case Expr::Kind::Index:
        return get_item(eval(*e.a), eval(*e.b));
      case Expr::Kind::Slice: {
        const Value obj = eval(*e.a);
        if (obj.is_undefined()) undefined_error(obj);
        Value parts[3];
        for (int i = 0; i < 3; ++i)
          if (e.items[static_cast<size_t>(i)]) parts[i] = eval(*e.items[static_cast<size_t>(i)]);
        return slice(obj, parts[0], parts[1], parts[2]);
      }
      case Expr::Kind::Call: {
        const Value f = eval(*e.a);
        if (f.kind() != Value::Kind::Function) {
          if (f.is_undefined()) undefined_error(f);
          throw TemplateError(std::string("'") + f.type_name() + "' object is not callable");
        }
        return f.fn()(eval_args(e));
      }
      case Expr::Kind::Filter: {
        const Value v = eval(*e.a);
        return apply_filter(e.name, v, eval_args(e));
      }
      case Expr::Kind::Test: {
        const Value v = eval(*e.a);
        return Value(apply_test(e.name, v, eval_args(e)) != e.negated);
      }
      case Expr::Kind::Unary: {
        const Value v = eval(*e.a);
        if (e.name == "not") return Value(!v.truthy());
        if (v.kind() == Value::Kind::Int || v.kind() == Value::Kind::Bool)
          return Value(e.name == "-" ? -v.as_int() : v.as_int());
        if (v.kind() == Value::Kind::Float) return Value(e.name == "-" ? -v.as_double() : v.as_double());
        if (v.is_undefined()) undefined_error(v);
        throw TemplateError(std::string("bad operand type for unary ") + e.name + ": '" + v.type_name() + "'");
      }
      case Expr::Kind::Binary:
        return eval_binary(e);
      case Expr::Kind::Cond:
        if (eval(*e.b).truthy()) return eval(*e.a);
        return e.c ? eval(*e.c) : Value::undefined("conditional without else");
    }
    return Value();
  }

  static bool contains(const Value& container, const Value& item) {
    if (container.is_undefined()) return false;
    if (container.is_string()) {
      if (!item.is_string())
        throw TemplateError(std::string("'in <string>' requires string as left operand, not ") + item.type_name());
      RenderBudget::steps(static_cast<int64_t>(container.as_string().size() / 64));
      return container.as_string().find(item.as_string()) != std::string::npos;
    }
    if (container.is_mapping()) return item.is_string() && container.object().find(item.as_string()) != nullptr;
    if (container.is_array()) {
      for (const auto& x : container.array())
        if (x == item) return true;
      return false;
    }
    throw TemplateError(std::string("argument of type '") + container.type_name() + "' is not iterable");
  }

  Value eval_binary(const Expr& e) {
    const std::string& op = e.name;
    if (op == "and") {
      Value a = eval(*e.a);
      return a.truthy() ? eval(*e.b) : a;
    }
    if (op == "or") {
      Value a = eval(*e.a);
      return a.truthy() ? a : eval(*e.b);
    }
    const Value a = eval(*e.a);
    const Value b = eval(*e.b);
    if (op == "==") return Value(a == b);
    if (op == "!=") return Value(!(a == b));
    if (op == "in") return Value(contains(b, a));
    if (op == "not in") return Value(!contains(b, a));
    if (op == "~") return Value(a.str() + b.str());
    if (a.is_undefined()) undefined_error(a);
    if (b.is_undefined()) undefined_error(b);
    auto type_error = [&]() -> TemplateError {
      return TemplateError("unsupported operand types for " + op + ": '" + a.type_name() + "' and '" + b.type_name() +
                           "'");
    };
    if (op == "<" || op == ">" || op == "<=" || op == ">=") {
      int cmp;
      if (a.is_number() && b.is_number()) {
        cmp = a.as_double() < b.as_double() ? -1 : a.as_double() > b.as_double() ? 1 : 0;
      } else if (a.is_string() && b.is_string()) {
        cmp = a.as_string().compare(b.as_string());
      } else {
        throw type_error();
      }
      if (op == "<") return Value(cmp < 0);
      if (op == ">") return Value(cmp > 0);
      if (op == "<=") return Value(cmp <= 0);
      return Value(cmp >= 0);
    }
    const bool ints = (a.kind() == Value::Kind::Int || a.kind() == Value::Kind::Bool) &&
                      (b.kind() == Value::Kind::Int || b.kind() == Value::Kind::Bool);
    const bool nums =
        (a.is_number() || a.kind() == Value::Kind::Bool) && (b.is_number() || b.kind() == Value::Kind::Bool);
    if (op == "+") {
      if (ints) return Value(a.as_int() + b.as_int());
      if (nums) return Value(a.as_double() + b.as_double());
      if (a.is_string() && b.is_string()) return Value(a.as_string() + b.as_string());
      if (a.is_array() && b.is_array()) {
        Array out = a.array();
        out.insert(out.end(), b.array().begin(), b.array().end());
        return Value(std::move(out));
      }
      throw type_error();
    }
    if (op == "*") {
      if (ints) return Value(a.as_int() * b.as_int());
      if (nums) return Value(a.as_double() * b.as_double());
      const Value& seq = a.is_number() ? b : a;
      const Value& count = a.is_number() ? a : b;
      if (count.kind() == Value::Kind::Int && (seq.is_string() || seq.is_array())) {
        const int64_t times = std::max<int64_t>(0, count.as_int());
        if (static_cast<double>(times) * static_cast<double>(std::max<int64_t>(1, length_of(seq))) > kMaxOutput)
          throw TemplateError("repetition result too large");
        if (seq.is_string()) {
          std::string out;
          for (int64_t i = 0; i < times; ++i) out += seq.as_string();
          return Value(out);
        }
        Array out;
        for (int64_t i = 0; i < times; ++i) out.insert(out.end(), seq.array().begin(), seq.array().end());
        return Value(std::move(out));
      }
      throw type_error();
    }
    if (!nums) throw type_error();
    if (op == "-") return ints ? Value(a.as_int() - b.as_int()) : Value(a.as_double() - b.as_double());
    if (op == "/") {
      if (b.as_double() == 0) throw TemplateError("division by zero");
      return Value(a.as_double() / b.as_double());
    }
    if (op == "//" || op == "%") {
      if (b.as_double() == 0) throw TemplateError(op == "//" ? "integer division by zero" : "modulo by zero");
      if (ints) {
        const int64_t x = a.as_int(), y = b.as_int();
        int64_t q = x / y;
        if ((x % y != 0) && ((x < 0) != (y < 0))) --q;  // Python floors
        return op == "//" ? Value(q) : Value(x - q * y);
      }
      const double q = std::floor(a.as_double() / b.as_double());
      return op == "//" ? Value(q) : Value(a.as_double() - q * b.as_double());
    }
    if (op == "**") {
      const double r = std::pow(a.as_double(), b.as_double());
      if (ints && b.as_int() >= 0 && std::fabs(r) < 9007199254740992.0) return Value(static_cast<int64_t>(r));
      return Value(r);
    }
    throw TemplateError("unknown operator " + op);
  }

  const std::string& source_;
  Frames frames_;
  std::string out_;
  int depth_ = 0;
};

}  // namespace

Expected<Template> Template::parse(const std::string& source) {
  Template t;
  t.source_ = std::make_shared<const std::string>(source);
  try {
    t.body_ = std::make_shared<const Body>(parse_template(*t.source_));
  } catch (const TemplateError& e) {
    return Error(e.what());
  }
  return t;
}

Expected<std::string> Template::render(const Object& variables, const RenderLimits& limits) const {
  try {
    RenderBudget budget(limits.steps, limits.bytes);
    Interpreter in(*source_, variables);
    return in.run(*body_);
  } catch (const TemplateError& e) {
    return Error(e.what());
  }
}

}  // namespace coda::jinja
