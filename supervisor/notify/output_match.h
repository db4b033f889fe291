// Request counting from a worker's output: each line that matches the
// program's `requests.pattern` is one request; a named group (?<pid>\d+)
// attributes it to the process that served it (gunicorn's access log prints
// the worker's pid with %(p)s). Runs for every output line, so a match
// allocates nothing.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <string_view>

// PCRE2's opaque types, so that pcre2.h stays out of this header.
struct pcre2_real_code_8;
struct pcre2_real_match_data_8;
struct pcre2_real_match_context_8;

namespace recycler::notify {

class OutputMatcher {
 public:
  // Compiles with PCRE2: bytes, not UTF-8 (worker output may be anything),
  // JIT when the platform has it. On a bad pattern: nullopt, and *error (when
  // given) = "<PCRE2's message> at offset N".
  static std::optional<OutputMatcher> compile(const std::string& pattern, std::string* error);

  struct Match {
    bool matched = false;
    std::optional<pid_t> pid;  // the "pid" group, when it took part and holds a valid pid
  };
  // A line whose match runs past PCRE2's backtracking limit counts as no match:
  // a pathological pattern must not stall the supervisor.
  Match match(std::string_view line) const;
  bool has_pid_group() const { return has_pid_group_; }

  OutputMatcher(OutputMatcher&& o) noexcept;
  OutputMatcher& operator=(OutputMatcher&& o) noexcept;
  OutputMatcher(const OutputMatcher&) = delete;
  OutputMatcher& operator=(const OutputMatcher&) = delete;
  ~OutputMatcher();

 private:
  OutputMatcher() = default;
  void release();

  pcre2_real_code_8* code_ = nullptr;
  // Scratch space for match(), made once: the supervisor is single-threaded.
  pcre2_real_match_data_8* data_ = nullptr;
  pcre2_real_match_context_8* context_ = nullptr;
  bool has_pid_group_ = false;
};

}  // namespace recycler::notify
