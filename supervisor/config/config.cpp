#include "supervisor/config/config.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <cctype>
#include <charconv>

#include "policies/base/sample.h"
#include "policies/policy.h"

namespace recycler::config {

std::string ListenAddress::str() const {
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

std::string ListenSocket::address() const {
  return tcp ? tcp->str() : "unix:" + path;
}

std::optional<ListenAddress> parse_listen_address(std::string_view text, std::string* why) {
  ListenAddress out;
  size_t colon = text.rfind(':');
  if (colon == std::string_view::npos) {
    *why = "expected HOST:PORT or [IPV6]:PORT, e.g. 127.0.0.1:9464";
    return std::nullopt;
  }
  std::string_view host = text.substr(0, colon), port = text.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    out.v6 = true;
    host = host.substr(1, host.size() - 2);
  } else if (host.find(':') != std::string_view::npos) {
    *why = "an IPv6 address goes in brackets: [::1]:9464";
    return std::nullopt;
  }
  out.host = std::string(host);
  unsigned char addr[sizeof(in6_addr)];
  if (::inet_pton(out.v6 ? AF_INET6 : AF_INET, out.host.c_str(), addr) != 1) {
    *why = "\"" + out.host + "\" is not a numeric " + (out.v6 ? "IPv6" : "IPv4") +
           " address (host names are not resolved; 0.0.0.0 or [::] listen on all)";
    return std::nullopt;
  }
  unsigned value = 0;
  auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
  if (port.empty() || ec != std::errc() || end != port.data() + port.size() || value > 65535) {
    *why = "the port must be a number from 0 to 65535 (0: any free port)";
    return std::nullopt;
  }
  out.port = static_cast<uint16_t>(value);
  return out;
}

const PolicyConfig* ProgramConfig::request_counting_policy() const {
  for (const PolicyConfig& p : policies)
    if (p.policy && (p.policy->needs() & policies::kNeedsRequests)) return &p;
  return nullptr;
}

std::optional<uint64_t> ProgramConfig::requests_batch_below() const {
  std::optional<uint64_t> below;
  for (const PolicyConfig& p : policies)
    if (auto from = p.policy ? p.policy->requests_exact_from() : std::nullopt)
      below = std::min(below.value_or(*from), *from);
  return below;
}

std::optional<uint64_t> ProgramConfig::requests_held_below() const {
  auto set = env.find(kRequestsBatchBelowVar);
  if (set == env.end()) return requests_batch_below();
  std::string_view v = set->second;
  while (!v.empty() && std::isspace(static_cast<unsigned char>(v.front()))) v.remove_prefix(1);
  while (!v.empty() && std::isspace(static_cast<unsigned char>(v.back()))) v.remove_suffix(1);
  if (v == "unlimited") return std::nullopt;
  uint64_t n = 0;
  auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  if (ec != std::errc() || end != v.data() + v.size()) return 1;
  return std::max<uint64_t>(n, 1);
}

Duration preempt_checkpoint_window(const ProgramConfig& program, Duration deadline) {
  Duration room = std::max(deadline - program.stop.timeout, deadline / 2);
  return std::min(program.checkpoint.timeout, room);
}

std::optional<uint64_t> BudgetLimit::resolve(std::optional<uint64_t> capacity) const {
  if (!percent) return bytes;
  if (!capacity) return std::nullopt;
  return static_cast<uint64_t>(static_cast<long double>(*capacity) * *percent / 100);
}

unsigned BudgetConfig::worker_needs(bool processes) const {
  // Each worker's figure by the metric: the victim's size and growth, and
  // with scope: workers the sum itself; each process's own for a program
  // whose processes the budget recycles one at a time.
  bool process_metric = metric == "rss" || metric == "pss" || metric == "uss";
  unsigned needs = process_metric ? policies::kNeedsProcessMemory : policies::kNeedsCgroupMemory;
  if (processes) needs |= policies::kNeedsProcessMemory | policies::kNeedsProcesses;
  return needs;
}

bool ProgramConfig::checkpoints() const {
  return checkpoint.given || std::any_of(policies.begin(), policies.end(), [](const auto& p) {
           return p.policy && p.policy->checkpoints();
         });
}

bool ProgramConfig::budget_processes() const {
  if (budget.process) return *budget.process;
  return std::any_of(policies.begin(), policies.end(),
                     [](const auto& p) { return p.policy && p.policy->per_process(); });
}

std::string ProgramConfig::request_source() const {
  if (requests)
    return "counts requests from output lines matching /" + requests->pattern +
           "/ and RECYCLER_REQUESTS=N reports on its notify socket (NOTIFY_SOCKET)";
  return "counts only RECYCLER_REQUESTS=N reports on its notify socket (NOTIFY_SOCKET); a "
         "worker that sends none is never recycled by it: see examples/gunicorn/ "
         "(recycler_notify) or set requests.pattern";
}

const ProgramConfig* Config::find(const std::string& name) const {
  for (const auto& program : programs)
    if (program.name == name) return &program;
  return nullptr;
}

bool Config::needs_gpu() const {
  for (const auto& program : programs)
    for (const auto& p : program.policies)
      if (p.policy && (p.policy->needs() & policies::kNeedsGpu)) return true;
  return false;
}

std::optional<std::string> Config::nvml_library() const {
  if (gpu) return gpu->nvml;
  if (needs_gpu()) return GpuConfig{}.nvml;
  return std::nullopt;
}

}  // namespace recycler::config
