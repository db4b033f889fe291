// A program's allocator: section (supervisor/config/allocator.h says what
// each key sets). Whether the preloaded library is installed, and trusted,
// is for check.cpp: here its name or path is read and where to look is noted.
#include <cctype>

#include "supervisor/config/parse_util.h"

namespace recycler::config::detail {
namespace {

std::string unknown_allocator(const std::string& text) {
  std::vector<std::string> names;
  for (const PreloadLibrary& l : kPreloadLibraries) names.emplace_back(l.name);
  std::string hint = suggest(text, names);
  return "unknown allocator " + quote(text) +
         (hint.empty() ? "" : "; did you mean " + quote(hint) + "?") +
         " (expected jemalloc, tcmalloc or the path of a library)";
}

// A library by name (jemalloc) or by path; the files it may be are left for
// the host check.
void parse_preload(const Field& f, const fs::path& base, ProgramSites& sites, Report& r) {
  auto text = read_scalar(f, "a string", r);
  if (!text) return;
  if (text->empty()) return r.error(f.mark(), f.path + " must not be empty");
  if (text->find('/') == std::string::npos) {
    const PreloadLibrary* library = find_preload_library(*text);
    if (!library) return r.error(f.mark(), f.path + ": " + unknown_allocator(*text));
    sites.preload = PreloadSite{Site{f.path, f.mark(), r.reserve(), *text}, library,
                                preload_candidates(*library)};
    return;
  }
  // ld.so splits LD_PRELOAD at spaces and colons, with no way to escape them.
  auto bad = std::find_if(text->begin(), text->end(),
                          [](char c) { return c == ' ' || c == ':' || control_char(c); });
  if (bad != text->end())
    return r.error(f.mark(), f.path + ": " + quote(*text) +
                                 " cannot be preloaded: LD_PRELOAD cannot hold a path with "
                                 "spaces, colons or control characters");
  std::error_code ec;
  std::string path = fs::absolute(base / *text, ec).lexically_normal().string();
  sites.preload = PreloadSite{Site{f.path, f.mark(), r.reserve(), *text}, nullptr, {path}};
}

// jemalloc reads MALLOC_CONF as NAME:VALUE pairs separated by commas and
// only complains (on the worker's stderr) when the worker starts; the shape
// is checked here, the names are jemalloc's business.
void parse_jemalloc_conf(const Field& f, AllocatorConfig& a, Report& r) {
  auto text = read_scalar(f, "a string", r);
  if (!text) return;
  std::string expected =
      "expected NAME:VALUE pairs separated by commas, e.g. "
      "\"background_thread:true,dirty_decay_ms:5000\"";
  if (text->empty()) return r.error(f.mark(), f.path + " must not be empty; " + expected);
  auto name_char = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
  std::string_view rest = *text;
  while (true) {
    size_t comma = rest.find(',');
    std::string_view pair = rest.substr(0, comma);
    size_t colon = pair.find(':');
    bool valid = colon != std::string_view::npos && colon > 0 && colon + 1 < pair.size() &&
                 std::all_of(pair.begin(), pair.begin() + colon, name_char) &&
                 std::none_of(pair.begin(), pair.end(), control_char);
    if (!valid)
      return r.error(f.mark(), f.path + ": invalid option " + quote(pair) + " in " + quote(*text) +
                                   "; " + expected);
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  a.jemalloc_conf = *text;
}

}  // namespace

void parse_allocator(const Field& f, const fs::path& base, ProgramConfig& p, ProgramSites& sites,
                     Report& r) {
  auto map = read_map(f, r, kAllocatorKeys);
  if (!map) return;
  AllocatorConfig& a = p.allocator;
  if (auto* v = map->get("arena_max")) a.arena_max = read_integer(*v, 1, kMaxArenas, r);
  if (auto* v = map->get("trim_threshold")) a.trim_threshold = read_size(*v, r);
  if (auto* v = map->get("mmap_threshold")) {
    auto size = read_size(*v, r);
    if (size && *size > kMaxMmapThreshold)
      r.error(v->mark(), v->path + ": " + format_size(*size) + " is above glibc's maximum of " +
                             format_size(kMaxMmapThreshold) +
                             ", which it would ignore without a word");
    else
      a.mmap_threshold = size;
  }
  if (auto* v = map->get("top_pad")) a.top_pad = read_size(*v, r);
  if (auto* v = map->get("preload")) parse_preload(*v, base, sites, r);
  if (auto* v = map->get("jemalloc_conf")) parse_jemalloc_conf(*v, a, r);
  // What the found preload would ignore (check.cpp): only a preload that was
  // read can be found.
  if (const Field* preload = map->get("preload"); preload && sites.preload) {
    const Field* conf = map->get("jemalloc_conf");
    sites.allocator = AllocatorSite{f.path, preload->mark(),
                                    conf ? conf->mark() : YAML::Mark::null_mark(), r.reserve()};
  }
}

}  // namespace recycler::config::detail
