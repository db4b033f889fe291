#include "policies/base/units.h"

#include <gtest/gtest.h>

#include <csignal>
#include <limits>
#include <string>

namespace recycler::units {
namespace {

using namespace std::chrono_literals;

constexpr uint64_t KiB = 1ULL << 10;
constexpr uint64_t MiB = 1ULL << 20;
constexpr uint64_t GiB = 1ULL << 30;
constexpr uint64_t TiB = 1ULL << 40;

// The error text of a rejected size, or "accepted" so a wrong acceptance shows up in the diff.
std::string size_error(std::string_view text) {
  std::string error;
  return parse_size(text, &error) ? "accepted" : error;
}

std::string duration_error(std::string_view text) {
  std::string error;
  return parse_duration(text, &error) ? "accepted" : error;
}

std::string signal_error(std::string_view text) {
  std::string error;
  return parse_signal(text, &error) ? "accepted" : error;
}

// --- parse_size -------------------------------------------------------------

struct SizeCase {
  const char* text;
  uint64_t bytes;
};

class AcceptedSize : public testing::TestWithParam<SizeCase> {};

TEST_P(AcceptedSize, ParsesToBytes) {
  EXPECT_EQ(parse_size(GetParam().text), GetParam().bytes) << GetParam().text;
}

INSTANTIATE_TEST_SUITE_P(
    EveryForm, AcceptedSize,
    testing::Values(SizeCase{"0", 0}, SizeCase{"0.0", 0}, SizeCase{"4096B", 4096},
                    SizeCase{"512K", 512 * KiB}, SizeCase{"512k", 512 * KiB},
                    SizeCase{"512KiB", 512 * KiB}, SizeCase{"512Ki", 512 * KiB},
                    SizeCase{"512M", 512 * MiB}, SizeCase{"512m", 512 * MiB},
                    SizeCase{"512MiB", 512 * MiB}, SizeCase{"1.5G", GiB + GiB / 2},
                    SizeCase{"1.5g", GiB + GiB / 2}, SizeCase{"2GiB", 2 * GiB},
                    SizeCase{"2gib", 2 * GiB}, SizeCase{"1T", TiB}, SizeCase{"1t", TiB},
                    SizeCase{"1TiB", TiB}, SizeCase{"512 MiB", 512 * MiB},
                    SizeCase{"18446744073709551615B", std::numeric_limits<uint64_t>::max()}));

TEST(ParseSize, FractionsRoundDownToWholeBytes) {
  EXPECT_EQ(parse_size("1.1G"), 1181116006u);  // 1.1 * 2^30 = 1181116006.4
  EXPECT_EQ(parse_size("0.9K"), 921u);         // 921.6
  EXPECT_EQ(parse_size("1.6GiB"), 1717986918u);
}

// "memory_max: 512" was 512 bytes: every start OOM-killed in 9 ms, with no word.
TEST(ParseSize, RejectsABareNumberOtherThanZero) {
  EXPECT_EQ(size_error("512"), "missing unit, e.g. \"512MiB\" (\"512B\" for bytes)");
  EXPECT_EQ(size_error("1048576"), "missing unit, e.g. \"1048576MiB\" (\"1048576B\" for bytes)");
  EXPECT_EQ(size_error("0.5"), "missing unit, e.g. \"0.5MiB\" (\"0.5B\" for bytes)");
}

TEST(ParseSize, RejectsEmptyText) {
  EXPECT_EQ(size_error(""), "empty size");
}

TEST(ParseSize, RejectsNegativeSizes) {
  EXPECT_EQ(size_error("-1K"), "sizes cannot be negative");
}

TEST(ParseSize, RejectsTextWithoutANumber) {
  EXPECT_EQ(size_error("abc"), "expected a number, e.g. \"512MiB\"");
  EXPECT_EQ(size_error("G"), "expected a number, e.g. \"512MiB\"");
  EXPECT_EQ(size_error(".5G"), "expected a number, e.g. \"512MiB\"");
}

TEST(ParseSize, RejectsDecimalUnitsWithABinaryHint) {
  EXPECT_EQ(size_error("2GB"), "decimal units are ambiguous; use \"2GiB\" or a byte count");
  EXPECT_EQ(size_error("512MB"), "decimal units are ambiguous; use \"512MiB\" or a byte count");
  EXPECT_EQ(size_error("1kB"), "decimal units are ambiguous; use \"1KiB\" or a byte count");
  EXPECT_EQ(size_error("1.5TB"), "decimal units are ambiguous; use \"1.5TiB\" or a byte count");
}

TEST(ParseSize, RejectsUnknownUnits) {
  EXPECT_EQ(size_error("10X"), "unknown unit \"X\"; use B, K, M, G, T, KiB, MiB, GiB or TiB");
  EXPECT_EQ(size_error("4096b"), "unknown unit \"b\"; use B, K, M, G, T, KiB, MiB, GiB or TiB");
  EXPECT_EQ(size_error("1.5.5G"), "unknown unit \".5G\"; use B, K, M, G, T, KiB, MiB, GiB or TiB");
  EXPECT_EQ(size_error("512 "), "unknown unit \" \"; use B, K, M, G, T, KiB, MiB, GiB or TiB");
}

TEST(ParseSize, RejectsValuesPastUint64Max) {
  EXPECT_EQ(size_error("18446744073709551616"), "too large; the maximum is just under 16 EiB");
  EXPECT_EQ(size_error("16777216T"), "too large; the maximum is just under 16 EiB");
}

TEST(ParseSize, ErrorPointerIsOptional) {
  EXPECT_EQ(parse_size("nope"), std::nullopt);
}

// --- parse_duration ---------------------------------------------------------

struct DurationCase {
  const char* text;
  Duration value;
};

class AcceptedDuration : public testing::TestWithParam<DurationCase> {};

TEST_P(AcceptedDuration, ParsesToMilliseconds) {
  EXPECT_EQ(parse_duration(GetParam().text), GetParam().value) << GetParam().text;
}

INSTANTIATE_TEST_SUITE_P(EveryForm, AcceptedDuration,
                         testing::Values(DurationCase{"250ms", 250ms}, DurationCase{"30s", 30s},
                                         DurationCase{"5m", 5min}, DurationCase{"2h", 2h},
                                         DurationCase{"1d", 24h}, DurationCase{"1h30m", 90min},
                                         DurationCase{"1.5s", 1500ms},
                                         DurationCase{"2h0m5s", 2h + 5s},
                                         DurationCase{"1m0.5s", 60500ms}, DurationCase{"0s", 0ms},
                                         DurationCase{"0.5h", 30min}));

TEST(ParseDuration, FractionsRoundDownToWholeMilliseconds) {
  EXPECT_EQ(parse_duration("1.0005s"), 1000ms);
  EXPECT_EQ(parse_duration("0.5ms"), 0ms);
}

TEST(ParseDuration, RejectsBareNumbers) {
  EXPECT_EQ(duration_error("30"), "missing unit, e.g. \"30s\"");
  EXPECT_EQ(duration_error("1.5"), "missing unit, e.g. \"1.5s\"");
}

TEST(ParseDuration, RejectsATrailingNumberWithoutUnit) {
  EXPECT_EQ(duration_error("1h30"), "missing unit, e.g. \"30s\"");
}

TEST(ParseDuration, RejectsNegativeDurations) {
  EXPECT_EQ(duration_error("-5s"), "durations cannot be negative");
}

TEST(ParseDuration, RejectsEmptyText) {
  EXPECT_EQ(duration_error(""), "empty duration");
}

TEST(ParseDuration, RejectsUnknownUnits) {
  EXPECT_EQ(duration_error("5x"), "unknown unit \"x\"; use ms, s, m, h or d");
  EXPECT_EQ(duration_error("30S"), "unknown unit \"S\"; use ms, s, m, h or d");
  EXPECT_EQ(duration_error("1w"), "unknown unit \"w\"; use ms, s, m, h or d");
}

TEST(ParseDuration, RejectsTextWithoutANumber) {
  EXPECT_EQ(duration_error("s"), "expected a number, e.g. \"30s\"");
  EXPECT_EQ(duration_error("forever"), "expected a number, e.g. \"30s\"");
}

TEST(ParseDuration, RejectsJunkBetweenGroups) {
  EXPECT_EQ(duration_error("5 s"), "unexpected \" s\"");
  EXPECT_EQ(duration_error("1h-5m"), "unexpected \"-5m\"");
}

TEST(ParseDuration, RejectsOverflow) {
  EXPECT_EQ(duration_error("999999999999999d"), "too large");
  EXPECT_EQ(duration_error("106751991167d106751991167d"), "too large");
}

// --- parse_signal -----------------------------------------------------------

TEST(ParseSignal, AcceptsNamesWithOrWithoutSigInAnyCase) {
  EXPECT_EQ(parse_signal("TERM"), SIGTERM);
  EXPECT_EQ(parse_signal("SIGTERM"), SIGTERM);
  EXPECT_EQ(parse_signal("sigterm"), SIGTERM);
  EXPECT_EQ(parse_signal("term"), SIGTERM);
  EXPECT_EQ(parse_signal("KILL"), SIGKILL);
  EXPECT_EQ(parse_signal("SIGUSR1"), SIGUSR1);
  EXPECT_EQ(parse_signal("hup"), SIGHUP);
  EXPECT_EQ(parse_signal("WINCH"), SIGWINCH);
}

TEST(ParseSignal, AcceptsAliases) {
  EXPECT_EQ(parse_signal("IOT"), SIGABRT);
  EXPECT_EQ(parse_signal("CLD"), SIGCHLD);
  EXPECT_EQ(parse_signal("POLL"), SIGIO);
}

TEST(ParseSignal, AcceptsNumbersFromOneToSigrtmax) {
  EXPECT_EQ(parse_signal("15"), 15);
  EXPECT_EQ(parse_signal("1"), 1);
  EXPECT_EQ(parse_signal("40"), 40);
  EXPECT_EQ(parse_signal("64"), 64);
}

TEST(ParseSignal, AcceptsRealTimeNames) {
  EXPECT_EQ(parse_signal("SIGRTMIN"), SIGRTMIN);
  EXPECT_EQ(parse_signal("RTMIN+3"), SIGRTMIN + 3);
  EXPECT_EQ(parse_signal("sigrtmax-2"), SIGRTMAX - 2);
  EXPECT_EQ(parse_signal("RTMAX"), SIGRTMAX);
}

TEST(ParseSignal, RejectsNumbersOutOfRange) {
  EXPECT_EQ(signal_error("0"), "signal numbers range from 1 to 64");
  EXPECT_EQ(signal_error("65"), "signal numbers range from 1 to 64");
  EXPECT_EQ(signal_error("-15"), "signal numbers range from 1 to 64");
}

TEST(ParseSignal, RejectsUnknownNames) {
  EXPECT_EQ(signal_error("FOO"), "unknown signal");
  EXPECT_EQ(signal_error("SIG"), "unknown signal");
  EXPECT_EQ(signal_error("15x"), "unknown signal");
  EXPECT_EQ(signal_error("RTMAX+1"), "unknown signal");
  EXPECT_EQ(signal_error(""), "empty signal");
}

// --- format_size ------------------------------------------------------------

TEST(FormatSize, BytesBelowOneKibibyteArePlain) {
  EXPECT_EQ(format_size(0), "0 B");
  EXPECT_EQ(format_size(512), "512 B");
  EXPECT_EQ(format_size(1023), "1023 B");
}

TEST(FormatSize, WholeUnitsHaveNoDecimals) {
  EXPECT_EQ(format_size(KiB), "1 KiB");
  EXPECT_EQ(format_size(64 * MiB), "64 MiB");
  EXPECT_EQ(format_size(2 * GiB), "2 GiB");
  EXPECT_EQ(format_size(3 * TiB), "3 TiB");
  EXPECT_EQ(format_size(TiB * 1024), "1 PiB");
}

TEST(FormatSize, FractionsRoundToTwoDecimalsWithoutTrailingZeros) {
  EXPECT_EQ(format_size(GiB + GiB / 2), "1.5 GiB");
  EXPECT_EQ(format_size(*parse_size("1.62GiB")), "1.62 GiB");
  EXPECT_EQ(format_size(*parse_size("1.6GiB")), "1.6 GiB");  // 1.5999999 rounds up
  EXPECT_EQ(format_size(KiB + 10), "1.01 KiB");
}

TEST(FormatSize, RoundingCarriesIntoTheNextUnit) {
  EXPECT_EQ(format_size(MiB - 1), "1 MiB");
  // ...except past the largest unit: 16 EiB would not parse back.
  EXPECT_EQ(format_size(std::numeric_limits<uint64_t>::max()), "15.99 EiB");
}

// --- format_duration --------------------------------------------------------

TEST(FormatDuration, UnderASecondIsMilliseconds) {
  EXPECT_EQ(format_duration(0ms), "0ms");
  EXPECT_EQ(format_duration(250ms), "250ms");
  EXPECT_EQ(format_duration(999ms), "999ms");
}

TEST(FormatDuration, SecondsCarryMillisecondsAsDecimals) {
  EXPECT_EQ(format_duration(1s), "1s");
  EXPECT_EQ(format_duration(1500ms), "1.5s");
  EXPECT_EQ(format_duration(3200ms), "3.2s");
  EXPECT_EQ(format_duration(1001ms), "1.001s");
  EXPECT_EQ(format_duration(30s), "30s");
}

TEST(FormatDuration, GroupsRunFromLargestToSmallestNonZeroUnit) {
  EXPECT_EQ(format_duration(5min), "5m");
  EXPECT_EQ(format_duration(90min), "1h30m");
  EXPECT_EQ(format_duration(2h + 5s), "2h0m5s");
  EXPECT_EQ(format_duration(60500ms), "1m0.5s");
  EXPECT_EQ(format_duration(24h), "1d");
  EXPECT_EQ(format_duration(25h), "1d1h");
}

TEST(FormatDuration, NegativeDurationsGetAMinusSign) {
  EXPECT_EQ(format_duration(-1500ms), "-1.5s");
  EXPECT_EQ(format_duration(-250ms), "-250ms");
  EXPECT_EQ(format_duration(Duration::min()), "-106751991167d7h12m55.808s");
}

TEST(FormatDuration, OutputParsesBackToTheSameValue) {
  for (Duration d : {1ms, 999ms, 1001ms, 59999ms, 61001ms, Duration(3723004), Duration(90061001)})
    EXPECT_EQ(parse_duration(format_duration(d)), d) << format_duration(d);
}

// --- signal_name ------------------------------------------------------------

TEST(ParseSize, WhatFormatSizePrintsForHugeSizesReadsBack) {
  // Found by tests/fuzz: format_size printed "3.1 PiB", which did not parse.
  EXPECT_EQ(format_size(3491113434911134), "3.1 PiB");
  EXPECT_EQ(parse_size("3PiB"), 3ULL << 50);
  EXPECT_EQ(parse_size("2E"), 2ULL << 60);
  EXPECT_EQ(parse_size("16EiB"), std::nullopt) << "past 2^64";
}

TEST(ParseSignal, TheCLibrarysReservedNumbersAreRefused) {
  // Found by tests/fuzz: 32 parsed, but its name ("signal 32") did not.
  std::string why;
  EXPECT_EQ(parse_signal("32", &why), std::nullopt);
  EXPECT_EQ(why, "signal 32 is reserved by the C library");
  EXPECT_EQ(parse_signal("33"), std::nullopt);
  EXPECT_EQ(parse_signal("34"), SIGRTMIN);
}

TEST(SignalName, NamesStandardSignals) {
  EXPECT_EQ(signal_name(SIGTERM), "SIGTERM");
  EXPECT_EQ(signal_name(15), "SIGTERM");
  EXPECT_EQ(signal_name(SIGKILL), "SIGKILL");
  EXPECT_EQ(signal_name(SIGABRT), "SIGABRT");
  EXPECT_EQ(signal_name(SIGIO), "SIGIO");
}

TEST(SignalName, NamesRealTimeSignalsRelativeToSigrtmin) {
  EXPECT_EQ(signal_name(SIGRTMIN), "SIGRTMIN");
  EXPECT_EQ(signal_name(SIGRTMIN + 3), "SIGRTMIN+3");
}

TEST(SignalName, UnnamedNumbersAreSpelledOut) {
  EXPECT_EQ(signal_name(32), "signal 32");  // reserved by glibc, below SIGRTMIN
  EXPECT_EQ(signal_name(99), "signal 99");
  EXPECT_EQ(signal_name(0), "signal 0");
}

TEST(SignalName, EveryNameParsesBackToItsNumber) {
  for (int sig = 1; sig <= SIGRTMAX; ++sig) {
    std::string name = signal_name(sig);
    if (name.starts_with("signal ")) continue;
    EXPECT_EQ(parse_signal(name), sig) << name;
  }
}

TEST(Quote, EscapesItsQuotesBackslashesAndControlCharacters) {
  EXPECT_EQ(quote("memory_mx"), "\"memory_mx\"");
  EXPECT_EQ(quote("say \"hi\""), "\"say \\\"hi\\\"\"");
  EXPECT_EQ(quote("a\\b"), "\"a\\\\b\"");
  EXPECT_EQ(quote("\x1b[31mred\r\n"), "\"\\x1b[31mred\\x0d\\x0a\"");
  EXPECT_EQ(quote("caf\xc3\xa9"), "\"caf\xc3\xa9\"") << "UTF-8 stays";
  EXPECT_EQ(quote("\xff"), "\"\\xff\"");
}

}  // namespace
}  // namespace recycler::units
