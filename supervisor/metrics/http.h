// The little HTTP/1.x the metrics endpoint speaks (server.h): a bounded
// parser of one request head and the response to it. Every response closes
// the connection, so there is no keep-alive, no pipelining and no body to
// read. Pure: bytes in, a verdict out.
//
// Only GET and HEAD of `/metrics`, `/healthz` and `/readyz` (a query string
// is ignored) are served; another path is 404, another method 405, a head that is not
// HTTP/1.x is 400 (505 for another HTTP version), one larger than the limit
// 431. Garbage is refused as soon as the request line shows it is garbage,
// without waiting for the rest of the head.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace recycler::metrics::http {

// Request line and headers together, at most.
inline constexpr size_t kMaxHead = 8 << 10;

enum class Verdict {
  Incomplete,  // no end of head yet: read on
  Get,         // GET of `path`
  Head,        // HEAD of `path`: the same head, no body
  Refused,     // answer with `status` and close
};

// What is served: the metrics, and the probes' answers (liveness: the loop
// is on time; readiness: every worker is ready), as Kubernetes asks them.
enum class Path { Metrics, Healthz, Readyz };

struct Parsed {
  Verdict verdict = Verdict::Incomplete;
  int status = 0;  // for Refused: 400, 404, 405, 431 or 505
  Path path = Path::Metrics;
};

// Looks at what has arrived so far of a request (`received` is everything
// read on the connection).
Parsed parse_head(std::string_view received, size_t max_head = kMaxHead);

// A whole response with Connection: close. `content_length` is the body's
// length (also for HEAD, which sends no body).
std::string response_head(int status, std::string_view content_type, size_t content_length);
// A refusal: head and a one-line plain-text body.
std::string error_response(int status);

inline constexpr std::string_view kProbeContentType = "text/plain; charset=utf-8";
inline constexpr std::string_view kMetricsContentType = "text/plain; version=0.0.4; charset=utf-8";

}  // namespace recycler::metrics::http
