#include "policies/base/fields.h"

#include <algorithm>
#include <charconv>

#include "policies/base/units.h"

namespace recycler::fields {

using units::quote;
using units::suggest;

std::string join_or(std::span<const std::string_view> words) {
  std::string out;
  for (size_t i = 0; i < words.size(); ++i) {
    if (i > 0) out += i + 1 == words.size() ? " or " : ", ";
    out += words[i];
  }
  return out;
}

bool all_digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

std::optional<uint64_t> parse_digits(std::string_view s, bool* overflow) {
  if (!all_digits(s)) return std::nullopt;
  uint64_t v = 0;
  if (std::from_chars(s.data(), s.data() + s.size(), v).ec != std::errc()) {
    if (overflow) *overflow = true;
    return std::nullopt;
  }
  return v;
}

void MapView::add(std::string key, Field field) {
  if (!index_.empty() || entries_.size() + 1 > kScanLimit) {
    if (index_.empty())
      for (size_t i = 0; i < entries_.size(); ++i) index_.emplace(entries_[i].first, i);
    index_.emplace(key, entries_.size());
  }
  entries_.emplace_back(std::move(key), std::move(field));
}

const Field* MapView::find(std::string_view key) const {
  if (!index_.empty()) {
    auto it = index_.find(key);
    return it == index_.end() ? nullptr : &entries_[it->second].second;
  }
  for (const auto& [k, f] : entries_)
    if (k == key) return &f;
  return nullptr;
}

namespace {

// Merges nested deeper than this, or more entries merged into one map, are
// errors: aliases make a small file expand exponentially otherwise.
constexpr int kMaxMergeDepth = 8;
constexpr size_t kMaxMergedEntries = 10000;

// The plain `<<` key (YAML 1.1's merge key); a quoted "<<" is a plain key.
bool is_merge_key(const YAML::Node& key) {
  return key.IsScalar() && key.Scalar() == "<<" && key.Tag() != "!";
}

struct MapReader {
  ErrorSink& errors;
  std::optional<Keys> known;
  MapStyle style;
  bool extensions;
  size_t merged_entries = 0;

  std::optional<MapView> read(const Field& f, int depth) {
    const bool section = style == MapStyle::Section;
    // " in programs.api" for a section; nothing for settings, whose path the
    // config puts in front of the whole message.
    const std::string where = section ? " " + f.where() : "";
    MapView view;
    if (f.null()) return view;
    if (!f.value.IsMap()) {
      errors.error(f.mark(), section ? f.path + " must be a map" : "must be a map of settings");
      return std::nullopt;
    }
    std::vector<std::string> names;
    if (known) names.assign(known->begin(), known->end());
    std::optional<YAML::Mark> merge_at;
    YAML::Node merge;
    for (const auto& entry : f.value) {
      const YAML::Node& key = entry.first;
      if (!key.IsScalar()) {
        errors.error(key.Mark(), "keys" + where + " must be strings");
        continue;
      }
      if (is_merge_key(key)) {
        if (merge_at)
          errors.error(key.Mark(), "duplicate merge key \"<<\"" + where + " (first at line " +
                                       std::to_string(merge_at->line + 1) +
                                       "); merge several maps with <<: [*a, *b]");
        else
          merge_at = key.Mark(), merge = entry.second;
        continue;
      }
      const std::string& name = key.Scalar();
      if (const Field* first = view.find(name)) {
        errors.error(key.Mark(), "duplicate key " + quote(name) + where + " (first at line " +
                                     std::to_string(first->key_mark.line + 1) + ")");
        continue;
      }
      if (extensions && name.starts_with("x-")) continue;
      if (known && std::find(known->begin(), known->end(), name) == known->end()) {
        std::string hint = suggest(name, names);
        std::string advice = hint.empty() ? "" : "; did you mean " + quote(hint) + "?";
        if (!section && hint.empty()) advice = "; expected " + join_or(*known);
        errors.error(key.Mark(), "unknown key " + quote(name) + where + advice);
        if (!section) continue;
      }
      view.add(name, f.child(name, entry.second, key.Mark()));
    }
    if (merge_at) merge_into(view, f, merge, *merge_at, depth);
    return view;
  }

  // YAML 1.1 merge: `<<: *map` or `<<: [*a, *b]` adds the keys the map does
  // not have itself, the earlier of several maps first. Each merged entry
  // keeps its own position, where the anchored map holds it.
  void merge_into(MapView& view, const Field& f, const YAML::Node& value, const YAML::Mark& at,
                  int depth) {
    std::vector<YAML::Node> sources;
    if (value.IsSequence())
      for (const YAML::Node& item : value) sources.push_back(item);
    else
      sources.push_back(value);
    const std::string what = "merge key \"<<\" " + f.where();
    for (const YAML::Node& source : sources) {
      if (!source.IsMap()) {
        errors.error(source.IsDefined() && !source.IsNull() ? source.Mark() : at,
                     what + " must be given a map or a list of maps (e.g. <<: *defaults)");
        continue;
      }
      if (depth >= kMaxMergeDepth) {
        errors.error(at, what + ": merges nested deeper than " + std::to_string(kMaxMergeDepth));
        return;
      }
      auto merged = read(Field{f.path, source, at}, depth + 1);
      if (!merged) continue;
      for (const auto& [name, field] : merged->entries()) {
        if (++merged_entries > kMaxMergedEntries) {
          errors.error(
              at, what + ": more than " + std::to_string(kMaxMergedEntries) + " merged entries");
          return;
        }
        if (!view.find(name)) view.add(name, f.child(name, field.value, field.key_mark));
      }
    }
  }
};

}  // namespace

std::optional<MapView> read_map(const Field& f, ErrorSink& errors, std::optional<Keys> known,
                                MapStyle style, bool extensions) {
  MapReader reader{errors, known, style, extensions};
  return reader.read(f, 0);
}

std::optional<std::string> read_scalar(const Field& f, std::string_view kind, ErrorSink& errors) {
  if (f.value.IsScalar()) return f.value.Scalar();
  errors.error(f.mark(), f.path + " must be " + std::string(kind));
  return std::nullopt;
}

std::optional<uint64_t> read_integer(const Field& f, uint64_t lo, uint64_t hi, ErrorSink& errors) {
  auto text = read_scalar(f, "an integer", errors);
  if (!text) return std::nullopt;
  std::string expected =
      "expected an integer from " + std::to_string(lo) + " to " + std::to_string(hi);
  bool overflow = false;
  auto v = parse_digits(*text, &overflow);
  bool negative = text->starts_with('-') && all_digits(std::string_view(*text).substr(1));
  if (overflow || negative || (v && (*v < lo || *v > hi))) {
    errors.error(f.mark(), f.path + ": " + *text + " is out of range; " + expected);
    return std::nullopt;
  }
  if (!v) {
    errors.error(f.mark(), f.path + ": invalid value " + quote(*text) + "; " + expected);
    return std::nullopt;
  }
  return v;
}

template <typename T>
std::optional<T> parse_as(const Field& f, const std::string& text, std::string_view kind,
                          Parser<T> parse, ErrorSink& errors) {
  std::string why;
  auto v = parse(text, &why);
  if (!v)
    errors.error(f.mark(),
                 f.path + ": invalid " + std::string(kind) + " " + quote(text) + ": " + why);
  return v;
}

template std::optional<uint64_t> parse_as(const Field&, const std::string&, std::string_view,
                                          Parser<uint64_t>, ErrorSink&);
template std::optional<Duration> parse_as(const Field&, const std::string&, std::string_view,
                                          Parser<Duration>, ErrorSink&);
template std::optional<int> parse_as(const Field&, const std::string&, std::string_view,
                                     Parser<int>, ErrorSink&);
template std::optional<double> parse_as(const Field&, const std::string&, std::string_view,
                                        Parser<double>, ErrorSink&);

namespace {

template <typename T>
std::optional<T> read_unit(const Field& f, std::string_view kind, Parser<T> parse,
                           ErrorSink& errors) {
  auto text = read_scalar(f, "a " + std::string(kind), errors);
  if (!text) return std::nullopt;
  return parse_as<T>(f, *text, kind, parse, errors);
}

}  // namespace

std::optional<uint64_t> read_size(const Field& f, ErrorSink& errors) {
  return read_unit<uint64_t>(f, "size", units::parse_size, errors);
}
std::optional<Duration> read_duration(const Field& f, ErrorSink& errors) {
  return read_unit<Duration>(f, "duration", units::parse_duration, errors);
}
std::optional<int> read_signal(const Field& f, ErrorSink& errors) {
  return read_unit<int>(f, "signal", units::parse_signal, errors);
}
std::optional<double> read_rate(const Field& f, ErrorSink& errors) {
  return read_unit<double>(f, "rate", units::parse_rate, errors);
}

std::optional<std::string> read_choice(const Field& f, std::span<const std::string_view> names,
                                       ErrorSink& errors) {
  auto text = read_scalar(f, "a string", errors);
  if (!text) return std::nullopt;
  if (std::find(names.begin(), names.end(), *text) != names.end()) return text;
  errors.error(f.mark(),
               f.path + ": invalid value " + quote(*text) + "; expected " + join_or(names));
  return std::nullopt;
}

}  // namespace recycler::fields
