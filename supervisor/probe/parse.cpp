#include "supervisor/probe/parse.h"

#include <charconv>
#include <initializer_list>
#include <limits>
#include <span>

namespace recycler::probe {
namespace {

constexpr uint64_t kKiB = 1024;

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

std::string_view trim_left(std::string_view s) {
  size_t i = 0;
  while (i < s.size() && is_space(s[i])) ++i;
  return s.substr(i);
}

bool all_space(std::string_view s) {
  return trim_left(s).empty();
}

// Cuts the next whitespace-separated token off the front of `rest`.
std::string_view next_token(std::string_view& rest) {
  rest = trim_left(rest);
  size_t end = 0;
  while (end < rest.size() && !is_space(rest[end])) ++end;
  std::string_view token = rest.substr(0, end);
  rest.remove_prefix(end);
  return token;
}

// Cuts the next line (without its '\n') off the front of `rest`.
std::string_view next_line(std::string_view& rest) {
  size_t eol = rest.find('\n');
  std::string_view line = rest.substr(0, eol);
  rest.remove_prefix(eol == std::string_view::npos ? rest.size() : eol + 1);
  return line;
}

// A number at the front of `s`; `s` keeps what follows it.
std::optional<uint64_t> take_u64(std::string_view& s) {
  uint64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc()) return std::nullopt;
  s.remove_prefix(static_cast<size_t>(end - s.data()));
  return v;
}

std::optional<uint64_t> checked_mul(uint64_t a, uint64_t b) {
  if (b != 0 && a > std::numeric_limits<uint64_t>::max() / b) return std::nullopt;
  return a * b;
}

// Sums the fields that are present; empty when none is.
std::optional<uint64_t> sum_present(std::initializer_list<std::optional<uint64_t>> parts) {
  std::optional<uint64_t> sum;
  for (const auto& p : parts)
    if (p) sum = sum.value_or(0) + *p;
  return sum;
}

// "Key:   1234 kB" -> bytes.
std::optional<uint64_t> parse_kb(std::string_view value) {
  value = trim_left(value);
  std::optional<uint64_t> kb = take_u64(value);
  if (!kb) return std::nullopt;
  value = trim_left(value);
  if (value.substr(0, 2) != "kB" || !all_space(value.substr(2))) return std::nullopt;
  return checked_mul(*kb, kKiB);
}

// A key of a "key value" file and where its value goes.
struct Field {
  std::string_view name;
  std::optional<uint64_t>* slot;
};

std::optional<uint64_t>* find_slot(std::span<const Field> fields, std::string_view name) {
  for (const Field& f : fields)
    if (f.name == name) return f.slot;
  return nullptr;
}

// "Key:  1234 kB" lines into the slots of `fields`; other lines are skipped.
void parse_kb_lines(std::string_view text, std::span<const Field> fields) {
  while (!text.empty()) {
    std::string_view line = next_line(text);
    size_t colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    std::optional<uint64_t>* slot = find_slot(fields, line.substr(0, colon));
    if (!slot) continue;
    if (std::optional<uint64_t> bytes = parse_kb(line.substr(colon + 1))) *slot = bytes;
  }
}

}  // namespace

std::optional<uint64_t> parse_u64(std::string_view text) {
  std::optional<uint64_t> v = take_u64(text);
  if (!v || !all_space(text)) return std::nullopt;
  return v;
}

void parse_memory_stat(std::string_view text, bool v2, CgroupMemory& out) {
  // v2 keys, and the parts of `kernel` for kernels that lack it.
  std::optional<uint64_t> anon, file, shmem, kernel;
  std::optional<uint64_t> kernel_stack, pagetables, percpu, sock, slab, slab_r, slab_u;
  // v1: hierarchical totals and this cgroup's own figures.
  std::optional<uint64_t> total_rss, total_cache, total_shmem, rss, cache, shmem1;

  const Field v2_fields[] = {{"anon", &anon},
                             {"file", &file},
                             {"shmem", &shmem},
                             {"kernel", &kernel},
                             {"kernel_stack", &kernel_stack},
                             {"pagetables", &pagetables},
                             {"percpu", &percpu},
                             {"sock", &sock},
                             {"slab", &slab},
                             {"slab_reclaimable", &slab_r},
                             {"slab_unreclaimable", &slab_u}};
  const Field v1_fields[] = {{"total_rss", &total_rss},
                             {"total_cache", &total_cache},
                             {"total_shmem", &total_shmem},
                             {"rss", &rss},
                             {"cache", &cache},
                             {"shmem", &shmem1}};
  const std::span<const Field> fields = v2 ? std::span<const Field>(v2_fields) : v1_fields;

  while (!text.empty()) {
    std::string_view line = next_line(text);
    size_t sp = line.find(' ');
    if (sp == std::string_view::npos) continue;
    std::optional<uint64_t>* slot = find_slot(fields, line.substr(0, sp));
    if (!slot) continue;
    if (std::optional<uint64_t> value = parse_u64(line.substr(sp + 1))) *slot = value;
  }

  if (v2) {
    out.anon = anon;
    out.file = file;
    out.shmem = shmem;
    // `slab` is the sum of the two slab_* lines where a kernel prints all three.
    std::optional<uint64_t> slab_all = slab ? slab : sum_present({slab_r, slab_u});
    out.kernel = kernel ? kernel : sum_present({kernel_stack, pagetables, percpu, sock, slab_all});
  } else {
    out.anon = total_rss ? total_rss : rss;
    out.file = total_cache ? total_cache : cache;
    out.shmem = total_shmem ? total_shmem : shmem1;
    out.kernel.reset();
  }
}

std::optional<uint64_t> parse_cpu_stat_usage_usec(std::string_view text) {
  while (!text.empty()) {
    std::string_view line = next_line(text);
    if (next_token(line) != "usage_usec") continue;
    return parse_u64(trim_left(line));
  }
  return std::nullopt;
}

std::optional<double> parse_pressure_some_avg10(std::string_view text) {
  return parse_pressure_avg10(text, false);
}

std::optional<double> parse_pressure_avg10(std::string_view text, bool full) {
  while (!text.empty()) {
    std::string_view rest = next_line(text);
    if (next_token(rest) != (full ? "full" : "some")) continue;
    for (std::string_view field = next_token(rest); !field.empty(); field = next_token(rest)) {
      constexpr std::string_view kAvg10 = "avg10=";
      if (field.substr(0, kAvg10.size()) != kAvg10) continue;
      field.remove_prefix(kAvg10.size());
      double v = 0;
      auto [end, ec] = std::from_chars(field.data(), field.data() + field.size(), v);
      if (ec != std::errc() || end != field.data() + field.size() || v < 0) return std::nullopt;
      return v;
    }
    return std::nullopt;
  }
  return std::nullopt;
}

HostMemory parse_meminfo(std::string_view text) {
  HostMemory out;
  while (!text.empty()) {
    std::string_view rest = next_line(text);
    std::string_view key = next_token(rest);
    std::optional<uint64_t>* field = key == "MemTotal:"       ? &out.total
                                     : key == "MemAvailable:" ? &out.available
                                     : key == "AnonPages:"    ? &out.anon
                                                              : nullptr;
    if (!field) continue;
    auto kib = parse_u64(next_token(rest));
    if (kib && next_token(rest) == "kB" && *kib <= UINT64_MAX / 1024) *field = *kib * 1024;
  }
  return out;
}

ProcessMemory parse_smaps_rollup(std::string_view text) {
  ProcessMemory out;
  std::optional<uint64_t> private_clean, private_dirty, private_hugetlb;
  const Field fields[] = {{"Rss", &out.rss},
                          {"Pss", &out.pss},
                          {"Anonymous", &out.anon},
                          {"Private_Clean", &private_clean},
                          {"Private_Dirty", &private_dirty},
                          {"Private_Hugetlb", &private_hugetlb}};
  // The header line ("56..-7f.. ---p 00000000 00:00 0 [rollup]") matches no key.
  parse_kb_lines(text, fields);
  if (private_clean || private_dirty)
    out.uss = sum_present({private_clean, private_dirty, private_hugetlb});
  return out;
}

StatusMemory parse_status_memory(std::string_view text) {
  StatusMemory out;
  const Field fields[] = {{"VmRSS", &out.rss}, {"RssAnon", &out.anon}};
  parse_kb_lines(text, fields);
  return out;
}

std::optional<uint64_t> parse_statm_rss(std::string_view text, uint64_t page_size) {
  if (!take_u64(text)) return std::nullopt;  // size
  std::optional<uint64_t> pages = parse_u64(next_token(text));
  if (!pages) return std::nullopt;
  return checked_mul(*pages, page_size);
}

namespace {

// The fields of /proc/PID/stat from 3 (state) to 2 + out.size(), into `out`
// (out[0] is field 3). The comm field (2) may hold spaces and parentheses, so
// fields are counted from the last ')'. False without a ')' or when the text
// ends before the last field wanted.
bool stat_fields(std::string_view text, std::span<std::string_view> out) {
  size_t close = text.rfind(')');
  if (close == std::string_view::npos) return false;
  std::string_view rest = text.substr(close + 1);
  for (std::string_view& field : out) {
    field = next_token(rest);
    if (field.empty()) return false;
  }
  return true;
}

}  // namespace

std::optional<uint32_t> parse_stat_threads(std::string_view text) {
  std::string_view fields[20 - 2];  // 3 .. 20 (num_threads)
  if (!stat_fields(text, fields)) return std::nullopt;
  std::optional<uint64_t> n = parse_u64(fields[20 - 3]);
  if (!n || *n > std::numeric_limits<uint32_t>::max()) return std::nullopt;
  return static_cast<uint32_t>(*n);
}

std::optional<ProcStat> parse_stat(std::string_view text) {
  std::string_view fields[24 - 2];  // 3 (state) .. 24 (rss)
  if (!stat_fields(text, fields)) return std::nullopt;
  auto field = [&](int i) { return fields[i - 3]; };
  std::optional<uint64_t> ppid = parse_u64(field(4)), session = parse_u64(field(6)),
                          flags = parse_u64(field(9)), utime = parse_u64(field(14)),
                          stime = parse_u64(field(15)), start = parse_u64(field(22)),
                          vsize = parse_u64(field(23)), rss = parse_u64(field(24));
  if (!ppid || !session || !flags || !utime || !stime || !start || !vsize || !rss)
    return std::nullopt;
  ProcStat out;
  out.state = field(3).size() == 1 ? field(3)[0] : '?';
  out.ppid = *ppid;
  out.session = *session;
  out.flags = *flags;
  out.utime = *utime;
  out.stime = *stime;
  out.starttime = *start;
  out.vsize = *vsize;
  out.rss_pages = *rss;
  return out;
}

}  // namespace recycler::probe
