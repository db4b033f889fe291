// Reading YAML maps and their values, for the config sections and the policy
// factories alike: every problem is reported at the node it concerns (its
// file:line:col comes from the YAML mark) and reading carries on, so a single
// load lists every problem. Values are read by kind (sizes, durations,
// signals, rates, bounded integers, one of a list of names) with the same
// words wherever they appear.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "policies/base/enums.h"
#include "policies/base/time.h"

namespace recycler::fields {

// Where problems go.
class ErrorSink {
 public:
  virtual ~ErrorSink() = default;
  virtual void error(const YAML::Mark& at, std::string message) = 0;
  // Valid but likely not what was meant; ignored by sinks that keep errors only.
  virtual void warning(const YAML::Mark& at, std::string message) {
    (void)at;
    (void)message;
  }
};

// "a, b or c"
std::string join_or(std::span<const std::string_view> words);

bool all_digits(std::string_view s);
// Digits only: a sign, a fraction, an exponent or a boolean is not an integer
// here. *overflow is set for digits past 2^64.
std::optional<uint64_t> parse_digits(std::string_view s, bool* overflow = nullptr);

// A node together with the dotted path that names it in messages. Fields are
// copied, never assigned: assigning a YAML::Node rebinds the node it refers to
// and would rewrite the document being read.
struct Field {
  std::string path;  // "" for the document (or a policy's settings) itself
  YAML::Node value;
  YAML::Mark key_mark = YAML::Mark::null_mark();  // where the key naming it sits

  bool null() const { return !value.IsDefined() || value.IsNull(); }
  // yaml-cpp gives an empty value the mark of whatever token follows it, which
  // may be lines further down, so errors about it point at its key instead.
  YAML::Mark mark() const { return null() && !key_mark.is_null() ? key_mark : value.Mark(); }
  std::string where() const { return path.empty() ? "at the top level" : "in " + path; }

  Field child(const std::string& key, const YAML::Node& v, const YAML::Mark& at) const {
    return Field{path.empty() ? key : path + "." + key, v, at};
  }
  Field item(size_t index, const YAML::Node& v) const {
    return Field{path + "[" + std::to_string(index) + "]", v, v.Mark()};
  }
};

// The entries of a map, each key once, in file order. Small maps are
// searched in place; a large one (the programs of a big config) is indexed,
// so that reading it, duplicate checks included, stays linear.
class MapView {
 public:
  void add(std::string key, Field field);
  const std::vector<std::pair<std::string, Field>>& entries() const { return entries_; }

  // Present, even when null.
  const Field* find(std::string_view key) const;
  // Present and not null: a null value means "use the default".
  const Field* get(std::string_view key) const {
    const Field* f = find(key);
    return f && !f->null() ? f : nullptr;
  }

 private:
  static constexpr size_t kScanLimit = 32;
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::vector<std::pair<std::string, Field>> entries_;
  std::unordered_map<std::string, size_t, Hash, std::equal_to<>> index_;  // past kScanLimit
};

using Keys = std::span<const std::string_view>;

// How a map's problems are worded.
enum class MapStyle {
  // A config section: messages name the map ("in programs.api"); an unknown
  // key gets a did-you-mean when one is close, and is kept.
  Section,
  // A policy's settings (the config puts the policy's path in front): an
  // unknown key gets a did-you-mean or the list of known keys, and is dropped.
  Settings,
};

// Reads a map, reporting a non-map, non-string keys and duplicate keys (which
// yaml-cpp accepts, and then answers lookups with the first). With `known`
// set, keys outside it are errors too. A null map is an empty one; nullopt
// for a node that is not a map.
//
// Merge keys (YAML 1.1, which yaml-cpp resolves the aliases of but does not
// merge): `<<: *defaults` or `<<: [*a, *b]` adds each key of those maps that
// the map does not set itself (explicit keys win wherever they stand; of
// several maps, the earlier), after the map's own entries. A merged entry
// keeps its position in the file, at the anchored map, and is checked
// against `known` like any other. A quoted "<<" is an ordinary key.
// With `extensions`, keys starting with "x-" are skipped (never unknown):
// a place for anchors, as docker-compose files have.
std::optional<MapView> read_map(const Field& f, ErrorSink& errors, std::optional<Keys> known,
                                MapStyle style = MapStyle::Section, bool extensions = false);

// Each reader reports what is wrong at the value and returns nullopt.
std::optional<std::string> read_scalar(const Field& f, std::string_view kind, ErrorSink& errors);
std::optional<uint64_t> read_integer(const Field& f, uint64_t lo, uint64_t hi, ErrorSink& errors);
std::optional<uint64_t> read_size(const Field& f, ErrorSink& errors);
std::optional<Duration> read_duration(const Field& f, ErrorSink& errors);
std::optional<int> read_signal(const Field& f, ErrorSink& errors);
std::optional<double> read_rate(const Field& f, ErrorSink& errors);  // bytes per second
// Parses `text` (the value's) with `parse`, reporting its complaint as an
// invalid `kind`.
template <typename T>
using Parser = std::optional<T> (*)(std::string_view, std::string*);
template <typename T>
std::optional<T> parse_as(const Field& f, const std::string& text, std::string_view kind,
                          Parser<T> parse, ErrorSink& errors);
// One of `names`.
std::optional<std::string> read_choice(const Field& f, std::span<const std::string_view> names,
                                       ErrorSink& errors);
// One of the names of an enum's table.
template <typename E, size_t N>
std::optional<E> read_choice(const Field& f, const EnumName<E> (&table)[N], ErrorSink& errors) {
  std::string_view names[N];
  for (size_t i = 0; i < N; ++i) names[i] = table[i].name;
  auto name = read_choice(f, names, errors);
  if (!name) return std::nullopt;
  return enum_value(table, *name);
}

}  // namespace recycler::fields
