// One table per enum, {value, name}, and the conversions made from it: the
// names are what config files and the command line accept and what logs
// print, so that they can be pasted back.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace recycler {

template <typename E>
struct EnumName {
  E value;
  const char* name;
};

// The name of `value` in `table`; "unknown" for a value not in it.
template <typename E, size_t N>
constexpr const char* enum_name(const EnumName<E> (&table)[N], E value) {
  for (const auto& entry : table)
    if (entry.value == value) return entry.name;
  return "unknown";
}

// The value named `name` in `table`, if any.
template <typename E, size_t N>
constexpr std::optional<E> enum_value(const EnumName<E> (&table)[N], std::string_view name) {
  for (const auto& entry : table)
    if (name == entry.name) return entry.value;
  return std::nullopt;
}

// The names of `table`, in its order.
template <typename E, size_t N>
std::vector<std::string> enum_names(const EnumName<E> (&table)[N]) {
  std::vector<std::string> names;
  for (const auto& entry : table) names.emplace_back(entry.name);
  return names;
}

}  // namespace recycler
