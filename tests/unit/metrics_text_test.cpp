// The Prometheus text exposition writer: HELP/TYPE lines, label escaping,
// value formats and histogram buckets, compared with the exact text.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "supervisor/metrics/text.h"

namespace recycler::metrics {
namespace {

TEST(MetricsText, FamilyHasHelpAndTypeThenSamples) {
  TextWriter w;
  w.family("recycler_worker_up", "Whether the worker's process runs.", Type::Gauge);
  w.sample("recycler_worker_up", {{"program", "api"}, {"slot", "0"}}, uint64_t{1});
  w.sample("recycler_worker_up", {{"program", "api"}, {"slot", "1"}}, uint64_t{0});
  w.family("recycler_oom_kills_total", "OOM kills.", Type::Counter);
  w.sample("recycler_oom_kills_total", {}, uint64_t{3});
  EXPECT_EQ(w.text(),
            "# HELP recycler_worker_up Whether the worker's process runs.\n"
            "# TYPE recycler_worker_up gauge\n"
            "recycler_worker_up{program=\"api\",slot=\"0\"} 1\n"
            "recycler_worker_up{program=\"api\",slot=\"1\"} 0\n"
            "# HELP recycler_oom_kills_total OOM kills.\n"
            "# TYPE recycler_oom_kills_total counter\n"
            "recycler_oom_kills_total 3\n");
}

TEST(MetricsText, LabelValuesEscapeBackslashQuoteAndNewline) {
  EXPECT_EQ(escape_label_value(R"(a\b"c)"
                               "\n"
                               "d"),
            R"(a\\b\"c\nd)");
  TextWriter w;
  w.sample("m", {{"reason", "say \"hi\"\\\nbye"}}, uint64_t{1});
  EXPECT_EQ(w.text(), "m{reason=\"say \\\"hi\\\"\\\\\\nbye\"} 1\n");
  // UTF-8 and other characters are left alone.
  EXPECT_EQ(escape_label_value("größe {x}"), "größe {x}");
}

TEST(MetricsText, HelpEscapesBackslashAndNewlineButNotQuotes) {
  EXPECT_EQ(escape_help("a \"b\"\\\nc"), "a \"b\"\\\\\\nc");
  TextWriter w;
  w.family("m", "two\nlines", Type::Counter);
  EXPECT_EQ(w.text(), "# HELP m two\\nlines\n# TYPE m counter\n");
}

TEST(MetricsText, ValuesAreExactIntegersOrShortestFloats) {
  EXPECT_EQ(format_value(0), "0");
  EXPECT_EQ(format_value(1234567890123), "1234567890123");
  EXPECT_EQ(format_value(-5), "-5");
  EXPECT_EQ(format_value(0.25), "0.25");
  EXPECT_EQ(format_value(1.5e-05), "1.5e-05");
  EXPECT_EQ(format_value(1e20), "1e+20");
  EXPECT_EQ(format_value(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(format_value(-std::numeric_limits<double>::infinity()), "-Inf");
  EXPECT_EQ(format_value(std::nan("")), "NaN");
  TextWriter w;
  w.sample("bytes", {}, uint64_t{18446744073709551615u});
  EXPECT_EQ(w.text(), "bytes 18446744073709551615\n") << "a uint64 is written in full";
}

TEST(MetricsText, HistogramBucketsAreCumulativeWithInfSumAndCount) {
  Histogram h({0.01, 0.001, 0.1});  // sorted on construction
  h.observe(0.0005);
  h.observe(0.001);  // on a bound: that bucket (le is "less or equal")
  h.observe(0.05);
  h.observe(3);
  ASSERT_EQ(h.counts(), (std::vector<uint64_t>{2, 0, 1, 1}));
  TextWriter w;
  w.family("d_seconds", "Durations.", Type::Histogram);
  Label program{"program", "a"};
  w.histogram("d_seconds", std::span<const Label>(&program, 1), h);
  EXPECT_EQ(w.text(),
            "# HELP d_seconds Durations.\n"
            "# TYPE d_seconds histogram\n"
            "d_seconds_bucket{program=\"a\",le=\"0.001\"} 2\n"
            "d_seconds_bucket{program=\"a\",le=\"0.01\"} 2\n"
            "d_seconds_bucket{program=\"a\",le=\"0.1\"} 3\n"
            "d_seconds_bucket{program=\"a\",le=\"+Inf\"} 4\n"
            "d_seconds_sum{program=\"a\"} 3.0515\n"
            "d_seconds_count{program=\"a\"} 4\n");
}

TEST(MetricsText, AnEmptyHistogramStillHasEveryBucket) {
  Histogram h({1});
  TextWriter w;
  w.histogram("h", {}, h);
  EXPECT_EQ(w.text(),
            "h_bucket{le=\"1\"} 0\n"
            "h_bucket{le=\"+Inf\"} 0\n"
            "h_sum 0\n"
            "h_count 0\n");
}

}  // namespace
}  // namespace recycler::metrics
