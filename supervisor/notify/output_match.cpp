#include "supervisor/notify/output_match.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <charconv>
#include <limits>
#include <utility>

namespace recycler::notify {
namespace {

// Backtracking steps per line: plenty for any sane pattern on a log line,
// and a bound on what `(a+)+$` can cost on a hostile one.
constexpr uint32_t kMatchLimit = 1'000'000;

PCRE2_SPTR bytes(const char* s) {
  return reinterpret_cast<PCRE2_SPTR>(s);
}

std::optional<pid_t> parse_pid(std::string_view s) {
  int64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size()) return {};
  if (v <= 0 || v > std::numeric_limits<pid_t>::max()) return {};
  return static_cast<pid_t>(v);
}

}  // namespace

std::optional<OutputMatcher> OutputMatcher::compile(const std::string& pattern,
                                                    std::string* error) {
  int code = 0;
  PCRE2_SIZE offset = 0;
  // NEVER_UTF: a (*UTF) in the pattern would make every non-UTF-8 line an error.
  pcre2_code* compiled = pcre2_compile(bytes(pattern.data()), pattern.size(), PCRE2_NEVER_UTF,
                                       &code, &offset, nullptr);
  if (!compiled) {
    if (error) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(code, message, sizeof message);
      *error = std::string(reinterpret_cast<const char*>(message)) + " at offset " +
               std::to_string(offset);
    }
    return std::nullopt;
  }
  OutputMatcher m;
  m.code_ = compiled;
  // Without JIT support pcre2_match interprets the same pattern: slower, same answers.
  pcre2_jit_compile(compiled, PCRE2_JIT_COMPLETE);
  m.data_ = pcre2_match_data_create_from_pattern(compiled, nullptr);
  m.context_ = pcre2_match_context_create(nullptr);
  if (!m.data_ || !m.context_) {
    if (error) *error = "out of memory";
    return std::nullopt;
  }
  pcre2_set_match_limit(m.context_, kMatchLimit);
  int group = pcre2_substring_number_from_name(compiled, bytes("pid"));
  m.has_pid_group_ = group > 0 || group == PCRE2_ERROR_NOUNIQUESUBSTRING;  // (?J) duplicates
  return m;
}

OutputMatcher::Match OutputMatcher::match(std::string_view line) const {
  // PCRE2 10.42 refuses a null subject even with length 0.
  const char* subject = line.empty() ? "" : line.data();
  if (pcre2_match(code_, bytes(subject), line.size(), 0, 0, data_, context_) < 0) return {};
  Match m{true, std::nullopt};
  if (has_pid_group_) {
    // A pid has at most 10 digits; anything longer is not one.
    PCRE2_UCHAR digits[16];
    PCRE2_SIZE length = sizeof digits;
    if (pcre2_substring_copy_byname(data_, bytes("pid"), digits, &length) == 0)
      m.pid = parse_pid(std::string_view(reinterpret_cast<const char*>(digits), length));
  }
  return m;
}

OutputMatcher::OutputMatcher(OutputMatcher&& o) noexcept
    : code_(std::exchange(o.code_, nullptr)),
      data_(std::exchange(o.data_, nullptr)),
      context_(std::exchange(o.context_, nullptr)),
      has_pid_group_(o.has_pid_group_) {}

OutputMatcher& OutputMatcher::operator=(OutputMatcher&& o) noexcept {
  if (this != &o) {
    release();
    code_ = std::exchange(o.code_, nullptr);
    data_ = std::exchange(o.data_, nullptr);
    context_ = std::exchange(o.context_, nullptr);
    has_pid_group_ = o.has_pid_group_;
  }
  return *this;
}

OutputMatcher::~OutputMatcher() {
  release();
}

void OutputMatcher::release() {
  pcre2_match_data_free(data_);
  pcre2_match_context_free(context_);
  pcre2_code_free(code_);
  data_ = nullptr;
  context_ = nullptr;
  code_ = nullptr;
}

}  // namespace recycler::notify
