#include "supervisor/config/allocator.h"

#include <algorithm>

namespace recycler::config {
namespace {

// RECYCLER_LIBRARY_ARCH is CMake's CMAKE_LIBRARY_ARCHITECTURE ("" where the
// toolchain has no multiarch directory).
#ifndef RECYCLER_LIBRARY_ARCH
#define RECYCLER_LIBRARY_ARCH ""
#endif

std::vector<std::string> split(std::string_view text, std::string_view separators) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find_first_of(separators, start);
    if (end == std::string_view::npos) end = text.size();
    if (end > start) out.emplace_back(text.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

std::string join(const std::vector<std::string>& items, char separator) {
  std::string out;
  for (const std::string& item : items) {
    if (!out.empty()) out += separator;
    out += item;
  }
  return out;
}

// "glibc.malloc.top_pad" of "glibc.malloc.top_pad=4096".
std::string_view tunable_name(std::string_view entry) {
  return entry.substr(0, entry.find('='));
}

}  // namespace

const PreloadLibrary* find_preload_library(std::string_view name) {
  for (const PreloadLibrary& library : kPreloadLibraries)
    if (library.name == name) return &library;
  return nullptr;
}

std::vector<std::string> preload_candidates(const PreloadLibrary& library) {
  std::vector<std::string> dirs;
  if (std::string_view(RECYCLER_LIBRARY_ARCH).size() > 0)
    dirs.push_back("/usr/lib/" RECYCLER_LIBRARY_ARCH);
  for (const char* dir : {"/usr/lib64", "/usr/lib", "/usr/local/lib"}) dirs.push_back(dir);
  std::vector<std::string> out;
  for (const std::string& dir : dirs) out.push_back(dir + "/" + std::string(library.file));
  return out;
}

void apply_allocator(const AllocatorConfig& allocator, const EnvMap& program_env, EnvMap& env) {
  std::vector<std::string> users_tunables;
  if (auto it = program_env.find("GLIBC_TUNABLES"); it != program_env.end())
    for (const std::string& entry : split(it->second, ":"))
      users_tunables.emplace_back(tunable_name(entry));
  auto user_sets = [&](const GlibcTunable& t) {
    return program_env.count(std::string(t.alias)) > 0 ||
           std::find(users_tunables.begin(), users_tunables.end(), t.tunable) !=
               users_tunables.end();
  };

  std::vector<std::string> tunables;
  auto inherited = env.find("GLIBC_TUNABLES");
  if (inherited != env.end()) tunables = split(inherited->second, ":");
  bool changed = false;
  auto drop = [&](std::string_view name) {
    changed |= std::erase_if(tunables, [&](const std::string& entry) {
                 return tunable_name(entry) == name;
               }) > 0;
  };
  for (const GlibcTunable& t : kGlibcTunables) {
    const std::optional<uint64_t>& value = allocator.*t.value;
    if (!value || user_sets(t)) continue;
    drop(t.tunable);
    // MALLOC_ARENA_MAX is the spelling everyone knows (and greps for);
    // the others have no alias worth keeping apart from GLIBC_TUNABLES.
    if (t.key == "arena_max") {
      env[std::string(t.alias)] = std::to_string(*value);
    } else {
      tunables.push_back(std::string(t.tunable) + "=" + std::to_string(*value));
      changed = true;
    }
  }
  if (changed && tunables.empty())
    env.erase("GLIBC_TUNABLES");
  else if (changed)
    env["GLIBC_TUNABLES"] = join(tunables, ':');

  if (!allocator.preload_path.empty()) {
    std::string& preload = env["LD_PRELOAD"];
    // ld.so separates the list with spaces or colons.
    std::vector<std::string> libraries = split(preload, ": ");
    if (std::find(libraries.begin(), libraries.end(), allocator.preload_path) == libraries.end())
      preload = preload.empty() ? allocator.preload_path : preload + ":" + allocator.preload_path;
  }
  if (allocator.jemalloc_conf && !program_env.count("MALLOC_CONF"))
    env["MALLOC_CONF"] = *allocator.jemalloc_conf;
}

}  // namespace recycler::config
