#include "policies/base/units.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <csignal>
#include <limits>
#include <vector>

#include "policies/base/escape.h"

namespace recycler::units {
namespace {

// Fractions are scaled exactly: a 19-digit fraction times a 2^40 unit needs
// more than 64 bits, and going through double would round "1.1G" differently
// on different inputs.
__extension__ typedef unsigned __int128 u128;

constexpr uint64_t kMaxU64 = std::numeric_limits<uint64_t>::max();
constexpr int kMaxFractionDigits = 19;  // 10^19 still fits in 64 bits

// "12.75" -> whole 12, fraction 75, digits 2. Digits past the 19th are dropped:
// they cannot move a result that is rounded down to a whole byte or millisecond.
struct Decimal {
  std::string_view text;
  uint64_t whole = 0;
  bool whole_overflow = false;
  uint64_t fraction = 0;
  int fraction_digits = 0;
};

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

char lower(char c) {
  return static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
}

std::string lowercase(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = lower(c);
  return out;
}

// Takes digits[.digits] from the front of `s`; a '.' without a digit after it
// is left for the caller to reject as part of the unit.
std::optional<Decimal> take_decimal(std::string_view& s) {
  size_t i = 0;
  while (i < s.size() && is_digit(s[i])) ++i;
  if (i == 0) return std::nullopt;
  Decimal d;
  d.whole_overflow =
      std::from_chars(s.data(), s.data() + i, d.whole).ec == std::errc::result_out_of_range;
  if (i + 1 < s.size() && s[i] == '.' && is_digit(s[i + 1])) {
    ++i;
    for (; i < s.size() && is_digit(s[i]); ++i) {
      if (d.fraction_digits == kMaxFractionDigits) continue;
      d.fraction = d.fraction * 10 + static_cast<uint64_t>(s[i] - '0');
      ++d.fraction_digits;
    }
  }
  d.text = s.substr(0, i);
  s.remove_prefix(i);
  return d;
}

// floor(d * unit), or nullopt when it does not fit in `max`.
std::optional<uint64_t> scale(const Decimal& d, uint64_t unit, uint64_t max) {
  if (d.whole_overflow) return std::nullopt;
  u128 total = static_cast<u128>(d.whole) * unit;
  u128 pow10 = 1;
  for (int i = 0; i < d.fraction_digits; ++i) pow10 *= 10;
  total += static_cast<u128>(d.fraction) * unit / pow10;
  if (total > max) return std::nullopt;
  return static_cast<uint64_t>(total);
}

template <typename T>
std::optional<T> fail(std::string* error, std::string message) {
  if (error) *error = std::move(message);
  return std::nullopt;
}

struct Unit {
  std::string_view name;
  uint64_t factor;
};

// Matched case-insensitively, so "1.5G", "512m" and "2gib" all work. Plain
// bytes are spelled "B" only: a lowercase "b" reads as bits.
constexpr std::array<Unit, 19> kSizeUnits{{{"", 1},
                                           {"k", 1ULL << 10},
                                           {"ki", 1ULL << 10},
                                           {"kib", 1ULL << 10},
                                           {"m", 1ULL << 20},
                                           {"mi", 1ULL << 20},
                                           {"mib", 1ULL << 20},
                                           {"g", 1ULL << 30},
                                           {"gi", 1ULL << 30},
                                           {"gib", 1ULL << 30},
                                           {"t", 1ULL << 40},
                                           {"ti", 1ULL << 40},
                                           {"tib", 1ULL << 40},
                                           // format_size prints these for
                                           // what is larger: they read back.
                                           {"p", 1ULL << 50},
                                           {"pi", 1ULL << 50},
                                           {"pib", 1ULL << 50},
                                           {"e", 1ULL << 60},
                                           {"ei", 1ULL << 60},
                                           {"eib", 1ULL << 60}}};

std::optional<uint64_t> size_factor(std::string_view unit) {
  std::string key = lowercase(unit);
  for (const auto& u : kSizeUnits)
    if (u.name == key) return u.factor;
  return std::nullopt;
}

bool is_decimal_size_unit(std::string_view unit) {
  std::string key = lowercase(unit);
  return key == "kb" || key == "mb" || key == "gb" || key == "tb" || key == "pb" || key == "eb";
}

struct SignalName {
  int number;
  std::string_view name;  // without "SIG"
};

// Canonical names first: signal_name() returns the first match.
constexpr SignalName kSignals[] = {
    {SIGHUP, "HUP"},       {SIGINT, "INT"},       {SIGQUIT, "QUIT"}, {SIGILL, "ILL"},
    {SIGTRAP, "TRAP"},     {SIGABRT, "ABRT"},     {SIGBUS, "BUS"},   {SIGFPE, "FPE"},
    {SIGKILL, "KILL"},     {SIGUSR1, "USR1"},     {SIGSEGV, "SEGV"}, {SIGUSR2, "USR2"},
    {SIGPIPE, "PIPE"},     {SIGALRM, "ALRM"},     {SIGTERM, "TERM"},
#ifdef SIGSTKFLT
    {SIGSTKFLT, "STKFLT"},
#endif
    {SIGCHLD, "CHLD"},     {SIGCONT, "CONT"},     {SIGSTOP, "STOP"}, {SIGTSTP, "TSTP"},
    {SIGTTIN, "TTIN"},     {SIGTTOU, "TTOU"},     {SIGURG, "URG"},   {SIGXCPU, "XCPU"},
    {SIGXFSZ, "XFSZ"},     {SIGVTALRM, "VTALRM"}, {SIGPROF, "PROF"}, {SIGWINCH, "WINCH"},
    {SIGIO, "IO"},
#ifdef SIGPWR
    {SIGPWR, "PWR"},
#endif
    {SIGSYS, "SYS"},       {SIGABRT, "IOT"},      {SIGCHLD, "CLD"},  {SIGIO, "POLL"},
};

// "RTMIN", "RTMIN+3", "RTMAX-2": the same spellings signal_name() produces.
std::optional<int> realtime_signal(std::string_view upper) {
  int base = 0;
  if (upper.starts_with("RTMIN")) {
    base = SIGRTMIN;
  } else if (upper.starts_with("RTMAX")) {
    base = SIGRTMAX;
  } else {
    return std::nullopt;
  }
  std::string_view rest = upper.substr(5);
  if (rest.empty()) return base;
  if (rest.size() < 2 || (rest[0] != '+' && rest[0] != '-')) return std::nullopt;
  int offset = 0;
  auto [ptr, ec] = std::from_chars(rest.data() + 1, rest.data() + rest.size(), offset);
  if (ec != std::errc() || ptr != rest.data() + rest.size()) return std::nullopt;
  int sig = rest[0] == '+' ? base + offset : base - offset;
  if (sig < SIGRTMIN || sig > SIGRTMAX) return std::nullopt;
  return sig;
}

std::string trim_zeros(std::string s) {
  if (s.find('.') == std::string::npos) return s;
  while (s.back() == '0') s.pop_back();
  if (s.back() == '.') s.pop_back();
  return s;
}

// `value` in units of 1/10^decimals, printed with exactly that many decimals
// and then trailing zeros dropped: (150, 2) -> "1.5".
std::string fixed_point(uint64_t value, int decimals) {
  uint64_t div = 1;
  for (int i = 0; i < decimals; ++i) div *= 10;
  std::string out = std::to_string(value / div);
  if (decimals == 0) return out;
  std::string frac = std::to_string(value % div);
  out += '.' + std::string(static_cast<size_t>(decimals) - frac.size(), '0') + frac;
  return trim_zeros(out);
}

}  // namespace

std::optional<uint64_t> parse_size(std::string_view text, std::string* error) {
  if (text.empty()) return fail<uint64_t>(error, "empty size");
  if (text.front() == '-') return fail<uint64_t>(error, "sizes cannot be negative");
  std::string_view rest = text;
  auto number = take_decimal(rest);
  if (!number) return fail<uint64_t>(error, "expected a number, e.g. \"512MiB\"");
  // "512 MiB" is what format_size() prints, so accept it back.
  if (rest.size() > 1 && rest.front() == ' ') rest.remove_prefix(1);
  if (is_decimal_size_unit(rest)) {
    std::string binary{static_cast<char>(std::toupper(static_cast<unsigned char>(rest[0])))};
    return fail<uint64_t>(error, "decimal units are ambiguous; use \"" + std::string(number->text) +
                                     binary + "iB\" or a byte count");
  }
  // A bare number reads as bytes in some tools and as MiB in others: "512"
  // was taken for 512 bytes, and a memory_max of 512 OOM-killed every start.
  // Only 0 means the same in every unit.
  if (rest.empty() && (number->whole != 0 || number->fraction != 0))
    return fail<uint64_t>(error, "missing unit, e.g. \"" + std::string(number->text) + "MiB\" (\"" +
                                     std::string(number->text) + "B\" for bytes)");
  auto factor = rest == "B" ? std::optional<uint64_t>(1) : size_factor(rest);
  if (!factor)
    return fail<uint64_t>(error, "unknown unit \"" + std::string(rest) +
                                     "\"; use B, K, M, G, T, KiB, MiB, GiB or TiB");
  auto bytes = scale(*number, *factor, kMaxU64);
  if (!bytes) return fail<uint64_t>(error, "too large; the maximum is just under 16 EiB");
  return bytes;
}

std::optional<Duration> parse_duration(std::string_view text, std::string* error) {
  if (text.empty()) return fail<Duration>(error, "empty duration");
  if (text.front() == '-') return fail<Duration>(error, "durations cannot be negative");
  constexpr Unit kUnits[] = {
      {"ms", 1}, {"s", 1000}, {"m", 60'000}, {"h", 3'600'000}, {"d", 86'400'000}};
  constexpr auto kMax = static_cast<uint64_t>(std::numeric_limits<Duration::rep>::max());
  std::string_view rest = text;
  uint64_t total = 0;
  while (!rest.empty()) {
    auto number = take_decimal(rest);
    if (!number) {
      if (rest == text) return fail<Duration>(error, "expected a number, e.g. \"30s\"");
      return fail<Duration>(error, "unexpected \"" + std::string(rest) + "\"");
    }
    size_t n = 0;
    while (n < rest.size() && std::isalpha(static_cast<unsigned char>(rest[n]))) ++n;
    std::string_view unit = rest.substr(0, n);
    rest.remove_prefix(n);
    if (unit.empty()) {
      if (!rest.empty()) return fail<Duration>(error, "unexpected \"" + std::string(rest) + "\"");
      return fail<Duration>(error, "missing unit, e.g. \"" + std::string(number->text) + "s\"");
    }
    const Unit* found = nullptr;
    for (const auto& u : kUnits)
      if (u.name == unit) found = &u;
    if (!found)
      return fail<Duration>(error,
                            "unknown unit \"" + std::string(unit) + "\"; use ms, s, m, h or d");
    auto ms = scale(*number, found->factor, kMax);
    if (!ms || *ms > kMax - total) return fail<Duration>(error, "too large");
    total += *ms;
  }
  return Duration(static_cast<Duration::rep>(total));
}

std::optional<int> parse_signal(std::string_view text, std::string* error) {
  if (text.empty()) return fail<int>(error, "empty signal");
  if (is_digit(text.front()) || text.front() == '-') {
    int sig = 0;
    auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), sig);
    if (ec == std::errc() && ptr == text.data() + text.size()) {
      if (sig < 1 || sig > SIGRTMAX)
        return fail<int>(error, "signal numbers range from 1 to " + std::to_string(SIGRTMAX));
      // 32 and 33: between the standard signals and SIGRTMIN, glibc's own
      // (threads); no program expects them.
      if (signal_name(sig).starts_with("signal "))
        return fail<int>(error, "signal " + std::to_string(sig) + " is reserved by the C library");
      return sig;
    }
    return fail<int>(error, "unknown signal");
  }
  std::string upper(text);
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  std::string_view name = upper;
  if (name.starts_with("SIG")) name.remove_prefix(3);
  for (const auto& s : kSignals)
    if (s.name == name) return s.number;
  if (auto rt = realtime_signal(name)) return rt;
  return fail<int>(error, "unknown signal");
}

std::string format_size(uint64_t bytes) {
  constexpr std::string_view kUnitNames[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  size_t unit = 0;
  while (unit + 1 < std::size(kUnitNames) && bytes >= (1ULL << (10 * (unit + 1)))) ++unit;
  if (unit == 0) return std::to_string(bytes) + " B";
  // Round to the nearest hundredth, which may carry into the next unit
  // (1023.999 KiB prints as "1 MiB", not "1024 KiB"); in EiB, down, so that
  // the largest sizes do not print as 16 EiB, which parse_size refuses.
  auto hundredths = [&](size_t u) {
    u128 factor = static_cast<u128>(1) << (10 * u);
    u128 half = u + 1 < std::size(kUnitNames) ? factor / 2 : 0;
    return static_cast<uint64_t>((static_cast<u128>(bytes) * 100 + half) / factor);
  };
  uint64_t value = hundredths(unit);
  if (value >= 1024 * 100 && unit + 1 < std::size(kUnitNames)) value = hundredths(++unit);
  return fixed_point(value, 2) + " " + std::string(kUnitNames[unit]);
}

std::string format_duration(Duration d) {
  // The magnitude in unsigned arithmetic: negating Duration::min() would overflow.
  bool negative = d < Duration::zero();
  auto ms = static_cast<uint64_t>(d.count());
  if (negative) ms = 0 - ms;
  std::string out = negative ? "-" : "";
  if (ms < 1000) return out + std::to_string(ms) + "ms";
  // Groups run from the largest non-zero unit down to the smallest non-zero
  // one, zeros in between included ("2h0m5s"); milliseconds become decimals
  // of the seconds ("1m0.5s"), so parse_duration() reads every result back.
  constexpr Unit kGroups[] = {{"d", 86'400'000}, {"h", 3'600'000}, {"m", 60'000}, {"s", 1000}};
  size_t start = out.size();
  for (const auto& g : kGroups) {
    uint64_t n = ms / g.factor;
    uint64_t below = ms % g.factor;
    if (g.name == "s") {
      out += fixed_point(ms, 3) + "s";
      break;
    }
    if (n > 0 || out.size() > start) out += std::to_string(n) + std::string(g.name);
    ms = below;
    if (ms == 0) break;
  }
  return out;
}

std::string signal_name(int sig) {
  for (const auto& s : kSignals)
    if (s.number == sig) return "SIG" + std::string(s.name);
  if (sig == SIGRTMIN) return "SIGRTMIN";
  if (sig > SIGRTMIN && sig <= SIGRTMAX) return "SIGRTMIN+" + std::to_string(sig - SIGRTMIN);
  return "signal " + std::to_string(sig);
}

namespace {

// Damerau-Levenshtein (optimal string alignment): a swapped pair of letters,
// the commonest typo, costs 1 rather than 2.
size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[a.size()][b.size()];
}

}  // namespace

std::string quote(std::string_view s) {
  // A value from a file, printed: its own quotes and backslashes escaped,
  // then every control byte (escape_text), so nothing reaches the terminal
  // raw and the quotes delimit it. Appended, not `"\"" + ... + "\""`:
  // GCC 12 at -O2 warns falsely (-Wrestrict) there.
  std::string inner;
  inner.reserve(s.size());
  for (char c : s) {
    if (c == '"' || c == '\\') inner += '\\';
    inner += c;
  }
  std::string out;
  out.reserve(inner.size() + 2);
  out.append(1, '"').append(escape_text(inner)).append(1, '"');
  return out;
}

std::string suggest(std::string_view word, const std::vector<std::string>& candidates) {
  // Case is ignored, so "Memory_Max" finds "memory_max" at distance 0.
  std::string lower = lowercase(word);
  size_t limit = std::max<size_t>(1, word.size() / 3);
  std::string best;
  size_t best_distance = limit + 1;
  for (const auto& candidate : candidates) {
    size_t d = edit_distance(lower, lowercase(candidate));
    if (d < best_distance) {
      best = candidate;
      best_distance = d;
    }
  }
  return best;
}

std::optional<double> parse_rate(std::string_view text, std::string* error) {
  auto fail = [&](std::string why) -> std::optional<double> {
    if (error) *error = std::move(why);
    return std::nullopt;
  };
  size_t slash = text.rfind('/');
  if (slash == std::string_view::npos)
    return fail("expected a size per s, min or h, e.g. " + quote("1MiB/min"));
  static constexpr std::pair<std::string_view, double> kPer[] = {
      {"s", 1}, {"m", 60}, {"min", 60}, {"h", 3600}};
  std::string_view per = text.substr(slash + 1);
  auto it = std::find_if(std::begin(kPer), std::end(kPer),
                         [&](const auto& unit) { return unit.first == per; });
  if (it == std::end(kPer)) return fail("unknown time unit " + quote(per) + "; use s, min or h");
  auto bytes = parse_size(text.substr(0, slash), error);
  if (!bytes) return std::nullopt;
  return static_cast<double>(*bytes) / it->second;
}

}  // namespace recycler::units
