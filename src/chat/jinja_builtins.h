// Filters, tests, methods and global functions of the Jinja subset: the ones Hugging Face chat
// templates use, with Jinja2's (and Python's) semantics. Internal to src/chat/.
#pragma once

#include <string>

#include "chat/jinja_value.h"

namespace coda::jinja {

// Values templates iterate: list items, dict keys, string characters; undefined is empty.
Array iterate(const Value& v);
// len(): strings count code points.
int64_t length_of(const Value& v);
// Python slicing for lists and strings (code points).
Value slice(const Value& v, const Value& start, const Value& stop, const Value& step);

// `v | name(args)`. Throws TemplateError for an unknown filter or bad arguments.
Value apply_filter(const std::string& name, const Value& v, const CallArgs& args);
// `v is name(args)`.
bool apply_test(const std::string& name, const Value& v, const CallArgs& args);
// `obj.name` when it names a str/dict method: the bound method; undefined otherwise.
Value method_of(const Value& obj, const std::string& name);
// range, namespace, dict, raise_exception, strftime_now.
Object global_functions();

}  // namespace coda::jinja
