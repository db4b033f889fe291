// The fields of a structured log event, apart from the log itself: code that
// decides what to log without writing it (engine/) builds these.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

namespace recycler::log {

struct Field {
  using Value = std::variant<std::string, int64_t, uint64_t, double, bool>;
  Field(std::string k, std::string v) : key(std::move(k)), value(std::move(v)) {}
  Field(std::string k, const char* v) : key(std::move(k)), value(std::string(v)) {}
  Field(std::string k, std::string_view v) : key(std::move(k)), value(std::string(v)) {}
  Field(std::string k, bool v) : key(std::move(k)), value(v) {}
  Field(std::string k, double v) : key(std::move(k)), value(v) {}
  template <typename I>
  requires std::is_integral_v<I> Field(std::string k, I v)
      : key(std::move(k)),
        value(std::is_signed_v<I> ? Value(static_cast<int64_t>(v))
                                  : Value(static_cast<uint64_t>(v))) {}
  std::string key;
  Value value;
};
using Fields = std::vector<Field>;

}  // namespace recycler::log
