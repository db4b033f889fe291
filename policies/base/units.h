// Human-friendly sizes, durations and signal names, in both directions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "policies/base/time.h"

namespace recycler::units {

// Sizes: "512K", "512KiB", "512M", "512MiB", "1.5G", "2GiB", "1T", "1TiB", "4096B" for plain
// bytes, and "0". A bare number other than 0 is refused: the unit is required, as it is for
// durations. K/M/G/T and KiB/MiB/GiB/TiB are powers of 1024.
// Decimal units ("MB", "GB") are rejected as ambiguous. Fractions round down to whole bytes.
// Returns nullopt and sets *error to a sentence fragment ("unknown unit \"MB\" ...") on failure.
std::optional<uint64_t> parse_size(std::string_view text, std::string* error = nullptr);

// Durations: one or more <number><unit> groups, unit in ms, s, m, h, d: "250ms", "30s", "5m",
// "1h30m", "1.5s". A bare number is rejected (the unit is required).
std::optional<Duration> parse_duration(std::string_view text, std::string* error = nullptr);

// A growth rate, a size per s, m, min or h ("1MiB/min", "64KiB/s", "2GiB/h"),
// in bytes per second; the size as parse_size reads it. Returns nullopt and
// sets *error to a sentence fragment on failure.
std::optional<double> parse_rate(std::string_view text, std::string* error = nullptr);

// Signals: "TERM", "SIGTERM", "sigterm", "15".
std::optional<int> parse_signal(std::string_view text, std::string* error = nullptr);

// "2 GiB", "64 MiB", "1.5 GiB", "512 B": the largest binary unit, up to 2 decimals, no
// trailing zeros.
std::string format_size(uint64_t bytes);
// "250ms", "3.2s", "5m", "1h30m", "2h0m5s" -> compact, exact to the millisecond.
std::string format_duration(Duration d);
// "SIGTERM"; "signal 42" for unnamed numbers.
std::string signal_name(int sig);

// "\"word\"": a name or value as config errors quote it, with its quotes,
// backslashes and control characters escaped ("a\x1b[2J" stays on its line).
std::string quote(std::string_view s);

// The closest candidate by edit distance when it is close enough to be a likely typo
// ("memory_mx" -> "memory_max"); "" otherwise.
std::string suggest(std::string_view word, const std::vector<std::string>& candidates);

}  // namespace recycler::units
