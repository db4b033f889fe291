// The Prometheus text exposition format (version 0.0.4), written directly
// into one string: HELP and TYPE lines per family, then its samples.
//
// Label values come from config files and workers (program names, policy
// names): they are escaped as the format says (backslash, double quote,
// newline); HELP text escapes backslash and newline. Names are the caller's
// constants. Pure: no I/O, no clock.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace recycler::metrics {

enum class Type { Counter, Gauge, Histogram };

struct Label {
  std::string_view name;
  std::string_view value;
};

// Fixed buckets (upper bounds, ascending; +Inf is implicit), a count and a
// sum. observe() is a short scan over the bounds: cheap enough for every
// sample of every worker.
class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  void observe(double value);

  const std::vector<double>& bounds() const { return bounds_; }
  // Per bucket, not cumulative; one more than bounds() (the +Inf bucket).
  const std::vector<uint64_t>& counts() const { return counts_; }
  uint64_t count() const { return count_; }
  double sum() const { return sum_; }

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;
  uint64_t count_ = 0;
  double sum_ = 0;
};

// Upper bounds for recycler_sample_duration_seconds: reading a worker's
// probes takes tens of microseconds (cgroup files) to milliseconds (smaps of
// a large process).
inline const std::vector<double> kSampleDurationBuckets = {
    0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025,
    0.005,   0.01,     0.025,   0.05,   0.1,     0.25,   1};

class TextWriter {
 public:
  // HELP and TYPE of the family `name`; its samples follow.
  void family(std::string_view name, std::string_view help, Type type);
  void sample(std::string_view name, std::span<const Label> labels, double value);
  void sample(std::string_view name, std::span<const Label> labels, uint64_t value);
  void sample(std::string_view name, std::initializer_list<Label> labels, double value) {
    sample(name, std::span<const Label>(labels.begin(), labels.size()), value);
  }
  void sample(std::string_view name, std::initializer_list<Label> labels, uint64_t value) {
    sample(name, std::span<const Label>(labels.begin(), labels.size()), value);
  }
  // NAME_bucket{...,le="..."} (cumulative, +Inf last), NAME_sum, NAME_count.
  void histogram(std::string_view name, std::span<const Label> labels, const Histogram& h);

  const std::string& text() const { return out_; }
  std::string take() { return std::move(out_); }
  void reserve(size_t bytes) { out_.reserve(bytes); }

 private:
  void labels(std::span<const Label> labels, const Label* extra = nullptr);

  std::string out_;
};

// A label value as the format wants it: \ -> \\, " -> \", newline -> \n.
std::string escape_label_value(std::string_view value);
// HELP text: \ -> \\, newline -> \n.
std::string escape_help(std::string_view help);
// A sample value: integers in full, others in the shortest form that reads
// back the same; +Inf, -Inf, NaN.
std::string format_value(double value);

}  // namespace recycler::metrics
