// `allocator:`, from the config to a worker's environment. Fragmentation of
// glibc's malloc (one arena per thread, freed memory kept in each) is fought
// with a few variables; this file knows which, and how they meet the
// environment the worker would get anyway.
//
// What each key sets (nothing else is touched):
//   arena_max       MALLOC_ARENA_MAX=N
//   trim_threshold  GLIBC_TUNABLES glibc.malloc.trim_threshold=BYTES
//   mmap_threshold  GLIBC_TUNABLES glibc.malloc.mmap_threshold=BYTES
//   top_pad         GLIBC_TUNABLES glibc.malloc.top_pad=BYTES
//   preload         LD_PRELOAD gains the library (jemalloc, tcmalloc or a path)
//   jemalloc_conf   MALLOC_CONF=TEXT
// The program's own `env:` wins, as with `threads:`: a setting it makes in
// either of glibc's spellings (GLIBC_TUNABLES or the MALLOC_*_ variable) is
// left alone; what recycler itself inherited is overridden.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "supervisor/config/config.h"

namespace recycler::config {

// An allocator `preload:` knows by name, as Debian packages it.
struct PreloadLibrary {
  std::string_view name;     // what the config says: "jemalloc"
  std::string_view file;     // the shared object: "libjemalloc.so.2"
  std::string_view package;  // Debian's package that installs it: "libjemalloc2"
};
inline constexpr PreloadLibrary kPreloadLibraries[] = {
    {"jemalloc", "libjemalloc.so.2", "libjemalloc2"},
    {"tcmalloc", "libtcmalloc_minimal.so.4", "libtcmalloc-minimal4"}};

const PreloadLibrary* find_preload_library(std::string_view name);

// Where a named library is looked for, in this order: the multiarch
// directory of the architecture recycler was built for (Debian, Ubuntu:
// /usr/lib/x86_64-linux-gnu), then /usr/lib64 (Fedora, RHEL), /usr/lib
// (Arch, Alpine) and /usr/local/lib (built from source).
std::vector<std::string> preload_candidates(const PreloadLibrary& library);

// Ranges the parser enforces. glibc ignores an mmap_threshold above
// HEAP_MAX_SIZE / 2 (32 MiB on 64-bit) without a word; arena_max 0 means
// "the default" to glibc, which is what leaving it out says.
inline constexpr uint64_t kMaxMmapThreshold = 4 * 1024 * 1024 * sizeof(long);
inline constexpr uint64_t kMaxArenas = 65536;

// glibc's names for what `allocator:` sets through GLIBC_TUNABLES or
// MALLOC_ARENA_MAX; `alias` is the older variable that sets the same.
struct GlibcTunable {
  std::string_view key;      // in `allocator:`
  std::string_view tunable;  // in GLIBC_TUNABLES
  std::string_view alias;    // its environment variable
  std::optional<uint64_t> AllocatorConfig::*value;
};
inline constexpr GlibcTunable kGlibcTunables[] = {
    {"arena_max", "glibc.malloc.arena_max", "MALLOC_ARENA_MAX", &AllocatorConfig::arena_max},
    {"trim_threshold", "glibc.malloc.trim_threshold", "MALLOC_TRIM_THRESHOLD_",
     &AllocatorConfig::trim_threshold},
    {"mmap_threshold", "glibc.malloc.mmap_threshold", "MALLOC_MMAP_THRESHOLD_",
     &AllocatorConfig::mmap_threshold},
    {"top_pad", "glibc.malloc.top_pad", "MALLOC_TOP_PAD_", &AllocatorConfig::top_pad}};

using EnvMap = std::map<std::string, std::string>;

// Adds what `allocator` sets to `env`, the worker's environment so far (what
// recycler inherited, with `program_env` already applied over it):
// - MALLOC_ARENA_MAX and MALLOC_CONF are set unless program_env sets them
//   (or, for arena_max, names glibc.malloc.arena_max in its GLIBC_TUNABLES).
//   glibc lets GLIBC_TUNABLES beat MALLOC_ARENA_MAX, so an inherited
//   glibc.malloc.arena_max entry is dropped.
// - The GLIBC_TUNABLES value is merged entry by entry: ours replace
//   inherited entries of the same name and are appended; an entry the
//   program's env sets, or whose MALLOC_*_ alias it sets, stays and ours is
//   left out.
// - LD_PRELOAD keeps whatever it had, the program's env included, and gets
//   the library appended (once): the libraries before it still come first,
//   so a malloc hook (a profiler, heaptrack) forwards to the chosen
//   allocator, and an allocator the user preloads keeps malloc.
void apply_allocator(const AllocatorConfig& allocator, const EnvMap& program_env, EnvMap& env);

}  // namespace recycler::config
