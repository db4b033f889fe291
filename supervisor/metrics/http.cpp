#include "supervisor/metrics/http.h"

#include <fmt/format.h>

#include <cctype>
#include <cstring>

namespace recycler::metrics::http {
namespace {

// RFC 9110 tchar: what a method or a header name is made of.
bool tchar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) ||
         (c != '\0' && std::strchr("!#$%&'*+-.^_`|~", c));
}

// Visible ASCII: what a request target is made of.
bool vchar(char c) {
  return c > 0x20 && c < 0x7f;
}

const char* reason(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 431:
      return "Request Header Fields Too Large";
    case 503:
      return "Service Unavailable";
    case 505:
      return "HTTP Version Not Supported";
  }
  return "Error";
}

Parsed refuse(int status) {
  return {Verdict::Refused, status};
}

// The request line, complete or not: a refusal as soon as it cannot become
// valid; Incomplete while it still may.
Parsed check_request_line(std::string_view line, bool complete) {
  size_t i = 0;
  while (i < line.size() && tchar(line[i])) ++i;
  if (i == line.size()) return complete ? refuse(400) : Parsed{};
  if (line[i] != ' ' || i == 0) return refuse(400);
  std::string_view method = line.substr(0, i);
  size_t target_start = ++i;
  while (i < line.size() && vchar(line[i])) ++i;
  if (i == line.size()) return complete ? refuse(400) : Parsed{};
  if (line[i] != ' ' || i == target_start) return refuse(400);
  std::string_view target = line.substr(target_start, i - target_start);
  std::string_view version = line.substr(i + 1);
  constexpr std::string_view kPrefix = "HTTP/";
  std::string_view seen = version.substr(0, kPrefix.size());
  if (seen != kPrefix.substr(0, seen.size())) return refuse(400);
  if (!complete) return {};
  if (version.size() != 8 || !std::isdigit(static_cast<unsigned char>(version[5])) ||
      version[6] != '.' || !std::isdigit(static_cast<unsigned char>(version[7])))
    return refuse(400);
  if (version[5] != '1') return refuse(505);
  if (target.front() != '/') return refuse(400);  // origin-form only
  std::string_view path = target.substr(0, target.find('?'));
  bool get = method == "GET", head = method == "HEAD";
  if (!get && !head) return refuse(405);
  Parsed served{get ? Verdict::Get : Verdict::Head, 200};
  if (path == "/metrics")
    served.path = Path::Metrics;
  else if (path == "/healthz")
    served.path = Path::Healthz;
  else if (path == "/readyz")
    served.path = Path::Readyz;
  else
    return refuse(404);
  return served;
}

// One header line (without its line end): NAME ":" VALUE.
bool valid_header(std::string_view line) {
  size_t colon = line.find(':');
  if (colon == std::string_view::npos || colon == 0) return false;
  for (size_t i = 0; i < colon; ++i)
    if (!tchar(line[i])) return false;
  for (char c : line.substr(colon + 1))
    if ((c < 0x20 && c != '\t') || c == 0x7f) return false;
  return true;
}

std::string_view strip_cr(std::string_view line) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  return line;
}

}  // namespace

Parsed parse_head(std::string_view received, size_t max_head) {
  size_t first_end = received.find('\n');
  if (first_end == std::string_view::npos) {
    if (received.size() > max_head) return refuse(431);
    std::string_view partial = received;
    if (!partial.empty() && partial.back() == '\r') partial.remove_suffix(1);
    if (partial.find('\r') != std::string_view::npos) return refuse(400);
    return check_request_line(partial, false);
  }
  if (first_end + 1 > max_head) return refuse(431);
  std::string_view request_line = received.substr(0, first_end);
  if (request_line.empty() || request_line.back() != '\r') return refuse(400);
  request_line.remove_suffix(1);
  Parsed verdict = check_request_line(request_line, true);
  if (verdict.verdict == Verdict::Refused) return verdict;

  // Headers, up to the empty line that ends the head.
  size_t pos = first_end + 1;
  while (true) {
    size_t end = received.find('\n', pos);
    if (end == std::string_view::npos) return received.size() > max_head ? refuse(431) : Parsed{};
    if (end + 1 > max_head) return refuse(431);
    std::string_view raw = received.substr(pos, end - pos);
    if (raw.empty() || raw.back() != '\r') return refuse(400);  // bare LF
    std::string_view line = strip_cr(raw);
    if (line.empty()) return verdict;  // the head is complete
    if (!valid_header(line)) return refuse(400);
    pos = end + 1;
  }
}

std::string response_head(int status, std::string_view content_type, size_t content_length) {
  return fmt::format(
      "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n{}\r\n",
      status, reason(status), content_type, content_length,
      status == 405 ? "Allow: GET, HEAD\r\n" : "");
}

std::string error_response(int status) {
  std::string body = fmt::format("{} {}\n", status, reason(status));
  return response_head(status, "text/plain; charset=utf-8", body.size()) + body;
}

}  // namespace recycler::metrics::http
