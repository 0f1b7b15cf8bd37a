// Error handling for the whole library: user errors travel as values, never as exits or aborts.
//
// `Status` says whether an operation succeeded; `Expected<T>` carries either a value or an `Error`.
// Messages are written for the person who has to fix the input: what was wrong, where, and what is
// allowed.
#pragma once

#include <cassert>
#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace coda {

class Error {
 public:
  explicit Error(std::string message) : message_(std::move(message)) {}
  const std::string& message() const { return message_; }

 private:
  std::string message_;
};

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Error e) : error_(std::move(e)) {}  // NOLINT: implicit so `return Error(...)` works.
  static Status Ok() { return Status(); }

  bool ok() const { return !error_.has_value(); }
  explicit operator bool() const { return ok(); }
  const Error& error() const {
    assert(!ok());
    return *error_;
  }
  const std::string& message() const { return error().message(); }

 private:
  std::optional<Error> error_;
};

template <typename T>
class [[nodiscard]] Expected {
 public:
  Expected(T value) : v_(std::in_place_index<0>, std::move(value)) {}  // NOLINT
  Expected(Error e) : v_(std::in_place_index<1>, std::move(e)) {}      // NOLINT

  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }

  T& value() & {
    assert(ok());
    return std::get<0>(v_);
  }
  const T& value() const& {
    assert(ok());
    return std::get<0>(v_);
  }
  T&& value() && {
    assert(ok());
    return std::get<0>(std::move(v_));
  }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::move(*this).value(); }

  const Error& error() const {
    assert(!ok());
    return std::get<1>(v_);
  }
  const std::string& message() const { return error().message(); }
  Status status() const { return ok() ? Status() : Status(error()); }

 private:
  std::variant<T, Error> v_;
};

}  // namespace coda

// Propagates a failed Status/Expected to the caller.
#define CODA_RETURN_IF_ERROR(expr)                       \
  do {                                                   \
    auto coda_status_ = (expr);                          \
    if (!coda_status_.ok()) return coda_status_.error(); \
  } while (0)

#define CODA_CONCAT_INNER_(a, b) a##b
#define CODA_CONCAT_(a, b) CODA_CONCAT_INNER_(a, b)
// `CODA_ASSIGN_OR_RETURN(auto x, f());` binds the value or returns the error.
#define CODA_ASSIGN_OR_RETURN(lhs, expr) CODA_ASSIGN_OR_RETURN_IMPL_(CODA_CONCAT_(coda_expected_, __LINE__), lhs, expr)
#define CODA_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                \
  if (!tmp.ok()) return tmp.error();                \
  lhs = std::move(tmp).value()
