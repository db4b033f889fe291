// The top-level `metrics:` section and the listen addresses it (and the
// command line's --metrics) accepts.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/unit/config_test_util.h"

namespace recycler::config {
namespace {

using test::errors;
using test::parse;
using ::testing::ElementsAre;

std::optional<ListenAddress> address(std::string_view text) {
  std::string why;
  return parse_listen_address(text, &why);
}

std::string why_not(std::string_view text) {
  std::string why;
  EXPECT_FALSE(parse_listen_address(text, &why)) << text;
  return why;
}

TEST(ListenAddress, TakesIpv4AndBracketedIpv6) {
  EXPECT_EQ(address("127.0.0.1:9464"), (ListenAddress{"127.0.0.1", 9464, false}));
  EXPECT_EQ(address("0.0.0.0:0"), (ListenAddress{"0.0.0.0", 0, false}));
  EXPECT_EQ(address("[::1]:9464"), (ListenAddress{"::1", 9464, true}));
  EXPECT_EQ(address("[::]:65535"), (ListenAddress{"::", 65535, true}));
  EXPECT_EQ(address("[::1]:9464")->str(), "[::1]:9464");
  EXPECT_EQ(address("10.1.2.3:80")->str(), "10.1.2.3:80");
}

TEST(ListenAddress, RefusesWhatItCannotBindWithoutAResolver) {
  EXPECT_THAT(why_not("9464"), ::testing::HasSubstr("HOST:PORT"));
  EXPECT_THAT(why_not("localhost:9464"), ::testing::HasSubstr("not a numeric IPv4 address"));
  EXPECT_THAT(why_not("::1:9464"), ::testing::HasSubstr("in brackets"));
  EXPECT_THAT(why_not("[127.0.0.1]:9464"), ::testing::HasSubstr("not a numeric IPv6 address"));
  EXPECT_THAT(why_not("127.0.0.1:65536"), ::testing::HasSubstr("0 to 65535"));
  EXPECT_THAT(why_not("127.0.0.1:"), ::testing::HasSubstr("0 to 65535"));
  EXPECT_THAT(why_not("127.0.0.1:94x"), ::testing::HasSubstr("0 to 65535"));
  EXPECT_THAT(why_not("127.0.0.1:-1"), ::testing::HasSubstr("0 to 65535"));
}

TEST(MetricsConfig, OffUnlessTheSectionIsThere) {
  auto loaded = parse("programs: {a: {command: [/bin/true]}}\n");
  ASSERT_TRUE(loaded.config);
  EXPECT_FALSE(loaded.config->metrics);
}

TEST(MetricsConfig, ABareSectionListensOnTheDefault) {
  auto loaded = parse("metrics:\nprograms: {a: {command: [/bin/true]}}\n");
  ASSERT_TRUE(loaded.config);
  ASSERT_TRUE(loaded.config->metrics);
  EXPECT_EQ(loaded.config->metrics->listen.str(), "127.0.0.1:9464");
}

TEST(MetricsConfig, ReadsListen) {
  auto loaded = parse("metrics: {listen: '[::1]:9100'}\nprograms: {a: {command: [/bin/true]}}\n");
  ASSERT_TRUE(loaded.config);
  EXPECT_EQ(loaded.config->metrics->listen, (ListenAddress{"::1", 9100, true}));
}

TEST(MetricsConfig, ErrorsNameFileLineColumnAndKey) {
  EXPECT_THAT(errors(R"(metrics:
  listen: localhost:9464
programs: {a: {command: [/bin/true]}}
)"),
              ElementsAre("test.yaml:2:11: error: metrics.listen: \"localhost\" is not a numeric "
                          "IPv4 address (host names are not resolved; 0.0.0.0 or [::] listen on "
                          "all)"));
  EXPECT_THAT(errors("metrics: {lisen: 127.0.0.1:1}\nprograms: {a: {command: [/bin/true]}}\n"),
              ElementsAre("test.yaml:1:11: error: unknown key \"lisen\" in metrics; did you mean "
                          "\"listen\"?"));
  EXPECT_THAT(errors("metrics: {listen: [1]}\nprograms: {a: {command: [/bin/true]}}\n"),
              ElementsAre(::testing::HasSubstr("metrics.listen")));
}

}  // namespace
}  // namespace recycler::config
