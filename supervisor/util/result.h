// Result<T>: a value or an error message, for whatever can fail at run time
// or on bad input (OS calls, files, traces). No exception crosses recycler's
// own interfaces: config errors are collected as Diagnostics (config/parse.h),
// and the exceptions of the libraries underneath (yaml-cpp, CLI11, the
// standard library) are caught where they are called.
#pragma once

#include <string>
#include <utility>
#include <variant>

namespace recycler {

struct Error {
  std::string message;
  int code = 0;  // errno where one applies
  // Trying the same again cannot succeed (spawn: exec of a file that is
  // missing, not executable or not a program): no retry.
  bool permanent = false;
};

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Error error) : v_(std::move(error)) {}

  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }
  T& value() { return std::get<0>(v_); }
  const T& value() const { return std::get<0>(v_); }
  T& operator*() { return value(); }
  T* operator->() { return &value(); }
  const Error& error() const { return std::get<1>(v_); }
  T value_or(T fallback) const { return ok() ? value() : std::move(fallback); }

 private:
  std::variant<T, Error> v_;
};

// Result<void>
struct Ok {};
using Status = Result<Ok>;

// "what: strerror(errno)" with errno captured.
Error errno_error(const std::string& what, int err);
Error errno_error(const std::string& what);

}  // namespace recycler
