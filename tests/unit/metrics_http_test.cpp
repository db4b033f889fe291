// The metrics endpoint's HTTP request parser: complete, partial, oversized
// and bad requests, and the responses it builds.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "supervisor/metrics/http.h"

namespace recycler::metrics::http {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr std::string_view kScrape =
    "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1:9464\r\nAccept: text/plain\r\n"
    "User-Agent: Prometheus/2.42.0\r\n\r\n";

Verdict verdict(std::string_view request) {
  return parse_head(request).verdict;
}
int status(std::string_view request) {
  Parsed p = parse_head(request);
  EXPECT_EQ(p.verdict, Verdict::Refused) << request;
  return p.status;
}

TEST(MetricsHttp, ServesGetAndHeadOfMetrics) {
  EXPECT_EQ(verdict(kScrape), Verdict::Get);
  EXPECT_EQ(parse_head(kScrape).path, Path::Metrics);
  EXPECT_EQ(verdict("HEAD /metrics HTTP/1.0\r\n\r\n"), Verdict::Head);
  EXPECT_EQ(verdict("GET /metrics?x=1 HTTP/1.1\r\n\r\n"), Verdict::Get) << "query ignored";
}

TEST(MetricsHttp, ServesTheProbesPaths) {
  // What kubelet's httpGet probes ask (with its own User-Agent and headers).
  Parsed live = parse_head(
      "GET /healthz HTTP/1.1\r\nHost: 10.0.0.7:9464\r\nUser-Agent: kube-probe/1.35\r\n"
      "Accept: */*\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(live.verdict, Verdict::Get);
  EXPECT_EQ(live.path, Path::Healthz);
  Parsed ready = parse_head("HEAD /readyz?verbose HTTP/1.0\r\n\r\n");
  EXPECT_EQ(ready.verdict, Verdict::Head);
  EXPECT_EQ(ready.path, Path::Readyz);
  EXPECT_EQ(status("GET /healthz/ HTTP/1.1\r\n\r\n"), 404);
  EXPECT_EQ(status("GET /ready HTTP/1.1\r\n\r\n"), 404);
  EXPECT_EQ(status("POST /readyz HTTP/1.1\r\n\r\n"), 405);
}

TEST(MetricsHttp, EveryPrefixOfAGoodRequestIsIncomplete) {
  for (size_t n = 0; n < kScrape.size(); ++n)
    EXPECT_EQ(verdict(kScrape.substr(0, n)), Verdict::Incomplete) << n;
}

TEST(MetricsHttp, OtherPathsAre404AndOtherMethods405) {
  EXPECT_EQ(status("GET / HTTP/1.1\r\n\r\n"), 404);
  EXPECT_EQ(status("GET /metricsx HTTP/1.1\r\n\r\n"), 404);
  EXPECT_EQ(status("GET /metrics/ HTTP/1.1\r\n\r\n"), 404);
  EXPECT_EQ(status("POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n"), 405);
  EXPECT_EQ(status("DELETE / HTTP/1.1\r\n\r\n"), 405);
}

TEST(MetricsHttp, GarbageIsRefusedAsSoonAsItShows) {
  // No need for a whole head: the first bytes tell.
  EXPECT_EQ(status("\x16\x03\x01\x02"), 400) << "a TLS handshake";
  EXPECT_EQ(status(" GET"), 400);
  EXPECT_EQ(status("GET  /metrics"), 400) << "empty target";
  EXPECT_EQ(status("GET /metrics FTP/"), 400);
  EXPECT_EQ(status("GET /met\x01rics"), 400);
  EXPECT_EQ(status("GET /metrics HTTP/1.1\r\r"), 400);
  // Whole heads that are not HTTP/1.x requests.
  EXPECT_EQ(status("GET /metrics\r\n\r\n"), 400) << "HTTP/0.9";
  EXPECT_EQ(status("GET /metrics HTTP/1.1\n\n"), 400) << "bare LF";
  EXPECT_EQ(status("GET http://h/metrics HTTP/1.1\r\n\r\n"), 400) << "absolute-form";
  EXPECT_EQ(status("GET /metrics HTTP/2.0\r\n\r\n"), 505);
  EXPECT_EQ(status("GET /metrics HTTP/1.10\r\n\r\n"), 400);
  EXPECT_EQ(status("GET /metrics HTTP/1.1\r\nno colon\r\n\r\n"), 400);
  EXPECT_EQ(status("GET /metrics HTTP/1.1\r\n: empty name\r\n\r\n"), 400);
  EXPECT_EQ(status("GET /metrics HTTP/1.1\r\n folded: x\r\n\r\n"), 400);
  EXPECT_EQ(status("GET /metrics HTTP/1.1\r\nX: a\x01\r\n\r\n"), 400);
}

TEST(MetricsHttp, AHeadLargerThanTheLimitIs431) {
  std::string endless = "GET /metrics HTTP/1.1\r\n";
  while (endless.size() <= kMaxHead) endless += "X-Filler: 0123456789abcdef\r\n";
  EXPECT_EQ(status(endless), 431);
  EXPECT_EQ(status("GET /" + std::string(kMaxHead, 'a')), 431) << "a request line without end";
  EXPECT_EQ(status(std::string(kScrape).substr(0, 30) + std::string(kMaxHead, 'b') + "\r\n"), 431);
  // Exactly at the limit is fine.
  std::string head = "GET /metrics HTTP/1.1\r\nX: ";
  head += std::string(100 - head.size() - 4, 'y') + "\r\n\r\n";
  ASSERT_EQ(head.size(), 100u);
  EXPECT_EQ(parse_head(head, 100).verdict, Verdict::Get);
  EXPECT_EQ(parse_head(head, 99).verdict, Verdict::Refused);
}

TEST(MetricsHttp, ResponsesCloseTheConnectionAndSayTheirLength) {
  std::string ok = response_head(200, kMetricsContentType, 1234);
  EXPECT_EQ(ok,
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n"
            "Content-Length: 1234\r\nConnection: close\r\n\r\n");
  std::string refused = error_response(405);
  EXPECT_THAT(refused, StartsWith("HTTP/1.1 405 Method Not Allowed\r\n"));
  EXPECT_THAT(refused, HasSubstr("Allow: GET, HEAD\r\n"));
  EXPECT_THAT(refused, HasSubstr("Content-Length: 23\r\n"));
  EXPECT_THAT(refused, ::testing::EndsWith("\r\n\r\n405 Method Not Allowed\n"));
  EXPECT_THAT(error_response(431), StartsWith("HTTP/1.1 431 Request Header Fields Too Large\r\n"));
}

}  // namespace
}  // namespace recycler::metrics::http
