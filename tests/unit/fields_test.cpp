// policies/base/fields.h on its own: the words and positions of its
// complaints, in both styles (config sections and policy settings).
#include "policies/base/fields.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <vector>

namespace recycler::fields {
namespace {

using namespace std::chrono_literals;
using ::testing::ElementsAre;
using ::testing::IsEmpty;

// "LINE:COLUMN: MESSAGE" for each complaint.
class Recorded : public ErrorSink {
 public:
  void error(const YAML::Mark& at, std::string message) override {
    lines.push_back(std::to_string(at.line + 1) + ":" + std::to_string(at.column + 1) + ": " +
                    message);
  }
  std::vector<std::string> lines;
};

constexpr std::string_view kKeys[] = {"memory_max", "memory_high", "cpu"};

TEST(Fields, JoinOrListsWithCommasAndOr) {
  std::string_view one[] = {"a"};
  std::string_view three[] = {"a", "b", "c"};
  EXPECT_EQ(join_or(one), "a");
  EXPECT_EQ(join_or(three), "a, b or c");
}

TEST(Fields, SectionStyleNamesTheMapAndKeepsUnknownKeys) {
  Recorded errors;
  Field f{"programs.api.limits", YAML::Load("{memory_mx: 1G, cpu: 1, cpu: 2, zzz: 3}")};
  auto map = read_map(f, errors, Keys(kKeys));
  ASSERT_TRUE(map);
  EXPECT_THAT(errors.lines,
              ElementsAre("1:2: unknown key \"memory_mx\" in programs.api.limits; did you mean "
                          "\"memory_max\"?",
                          "1:25: duplicate key \"cpu\" in programs.api.limits (first at line 1)",
                          "1:33: unknown key \"zzz\" in programs.api.limits"));
  EXPECT_NE(map->find("memory_mx"), nullptr);
  EXPECT_EQ(map->get("cpu")->value.Scalar(), "1") << "the first of two equal keys";
}

TEST(Fields, SettingsStyleListsTheKnownKeysAndDropsUnknownOnes) {
  Recorded errors;
  Field f{"", YAML::Load("{zzz: 3, memory_hgh: 1G}")};
  auto map = read_map(f, errors, Keys(kKeys), MapStyle::Settings);
  ASSERT_TRUE(map);
  EXPECT_THAT(errors.lines,
              ElementsAre("1:2: unknown key \"zzz\"; expected memory_max, memory_high or cpu",
                          "1:10: unknown key \"memory_hgh\"; did you mean \"memory_high\"?"));
  EXPECT_THAT(map->entries(), IsEmpty());
}

TEST(Fields, NotAMapIsSaidInEachStyle) {
  Recorded errors;
  EXPECT_FALSE(read_map(Field{"stop", YAML::Load("[1]")}, errors, std::nullopt));
  EXPECT_FALSE(read_map(Field{"", YAML::Load("[1]")}, errors, std::nullopt, MapStyle::Settings));
  EXPECT_THAT(errors.lines,
              ElementsAre("1:1: stop must be a map", "1:1: must be a map of settings"));
}

TEST(Fields, ANullMapIsAnEmptyOne) {
  Recorded errors;
  auto map = read_map(Field{"log", YAML::Load("~")}, errors, Keys(kKeys));
  ASSERT_TRUE(map);
  EXPECT_THAT(map->entries(), IsEmpty());
  EXPECT_THAT(errors.lines, IsEmpty());
}

TEST(Fields, ALargeMapIsIndexedAndStillFindsEveryKeyInFileOrder) {
  std::string yaml = "{";
  for (int i = 0; i < 1000; ++i)
    yaml += (i ? ", k" : "k") + std::to_string(i) + ": " + std::to_string(i);
  yaml += ", k7: again}";
  Recorded errors;
  auto map = read_map(Field{"programs", YAML::Load(yaml)}, errors, std::nullopt);
  ASSERT_TRUE(map);
  ASSERT_EQ(map->entries().size(), 1000u);
  EXPECT_EQ(map->entries()[999].first, "k999");
  EXPECT_EQ(map->get("k500")->value.Scalar(), "500");
  EXPECT_EQ(map->find("k1000"), nullptr);
  ASSERT_EQ(errors.lines.size(), 1u);
  EXPECT_THAT(errors.lines[0], ::testing::HasSubstr("duplicate key \"k7\" in programs"));
}

TEST(Fields, TypedReadersSayWhatIsWrongAtTheValue) {
  Recorded errors;
  YAML::Node doc = YAML::Load("{a: 12XB, b: 5, c: 10, d: soon, e: SIGNOPE, f: red, g: [1]}");
  Field root{"x", doc};
  auto at = [&](const char* key) { return root.child(key, doc[key], YAML::Mark()); };
  EXPECT_FALSE(read_size(at("a"), errors));
  EXPECT_EQ(read_integer(at("b"), 1, 10, errors), 5u);
  EXPECT_FALSE(read_integer(at("c"), 1, 9, errors));
  EXPECT_FALSE(read_duration(at("d"), errors));
  EXPECT_FALSE(read_signal(at("e"), errors));
  std::string_view colours[] = {"green", "blue"};
  EXPECT_FALSE(read_choice(at("f"), colours, errors));
  EXPECT_FALSE(read_scalar(at("g"), "a string", errors));
  ASSERT_EQ(errors.lines.size(), 6u);
  EXPECT_THAT(errors.lines[0], ::testing::StartsWith("1:5: x.a: invalid size \"12XB\": "));
  EXPECT_EQ(errors.lines[1], "1:20: x.c: 10 is out of range; expected an integer from 1 to 9");
  EXPECT_THAT(errors.lines[2], ::testing::StartsWith("1:27: x.d: invalid duration \"soon\": "));
  EXPECT_THAT(errors.lines[3], ::testing::StartsWith("1:36: x.e: invalid signal \"SIGNOPE\": "));
  EXPECT_EQ(errors.lines[4], "1:48: x.f: invalid value \"red\"; expected green or blue");
  EXPECT_EQ(errors.lines[5], "1:56: x.g must be a string");
}

TEST(Fields, DurationsRatesAndDigits) {
  Recorded errors;
  YAML::Node doc = YAML::Load("{d: 1m30s, r: 1MiB/min}");
  Field root{"", doc};
  EXPECT_EQ(read_duration(root.child("d", doc["d"], YAML::Mark()), errors), 90s);
  EXPECT_EQ(read_rate(root.child("r", doc["r"], YAML::Mark()), errors), 1048576.0 / 60);
  EXPECT_THAT(errors.lines, IsEmpty());
  bool overflow = false;
  EXPECT_EQ(parse_digits("42"), 42u);
  EXPECT_FALSE(parse_digits("-1"));
  EXPECT_FALSE(parse_digits("99999999999999999999", &overflow));
  EXPECT_TRUE(overflow);
}

}  // namespace
}  // namespace recycler::fields
