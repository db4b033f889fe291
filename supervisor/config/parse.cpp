// Loading a config, in three steps: parse (the YAML into a Config, the
// section readers in parse_*.cpp), check against this host (check.cpp) and
// compile the policies (compile.cpp). Every step reports what is wrong and
// carries on, so a single load lists every problem; the Config is handed out
// only when nothing was reported as an error.
#include "supervisor/config/parse.h"

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <sstream>

#include "supervisor/config/check.h"
#include "supervisor/config/compile.h"
#include "supervisor/config/parse_util.h"
#include "supervisor/util/escape.h"
#include "supervisor/util/fd.h"

namespace recycler::config {
namespace detail {
namespace {

void parse_programs(const Field* f, const YAML::Mark& root, const fs::path& base, Parsed& parsed,
                    Report& r) {
  if (!f) return r.error(root, "programs is required");
  auto map = read_map(*f, r, std::nullopt);
  if (!map) return;
  if (map->entries().empty()) return r.error(f->mark(), "programs must not be empty");
  for (const auto& [name, program] : map->entries()) {
    parsed.config.programs.push_back(parse_program(name, program, base, parsed.specs.emplace_back(),
                                                   parsed.programs.emplace_back(), r));
    check_listen_taken(program, parsed.config.programs, r);
  }
}

// Where each YAML document of a text starts and where its content does, for
// at most `limit` documents. yaml-cpp 0.7's LoadAll never returns on a stray
// ',' after a document (it yields null documents at that place forever):
// events, counted, end.
class DocumentStarts final : public YAML::EventHandler {
 public:
  struct Document {
    YAML::Mark start;
    YAML::Mark content;
  };
  static std::vector<Document> of(const std::string& text, size_t limit) {
    std::istringstream in(text);
    YAML::Parser parser(in);
    DocumentStarts starts;
    while (starts.documents_.size() < limit && parser.HandleNextDocument(starts)) {
    }
    return std::move(starts.documents_);
  }

  void OnDocumentStart(const YAML::Mark& mark) override {
    documents_.push_back({mark, mark});
    first_ = true;
  }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark& mark, YAML::anchor_t) override { content(mark); }
  void OnAlias(const YAML::Mark& mark, YAML::anchor_t) override { content(mark); }
  void OnScalar(const YAML::Mark& mark, const std::string&, YAML::anchor_t,
                const std::string&) override {
    content(mark);
  }
  void OnSequenceStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {
    content(mark);
  }
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {
    content(mark);
  }
  void OnMapEnd() override {}

 private:
  void content(const YAML::Mark& mark) {
    if (std::exchange(first_, false) && !documents_.empty()) documents_.back().content = mark;
  }

  std::vector<Document> documents_;
  bool first_ = false;
};

// The first tab among the leading whitespace of a line, up to line `last`
// (0-based; the line a parse error was found on).
std::optional<YAML::Mark> tab_in_indentation(std::string_view text, int last) {
  int line = 0;
  for (size_t start = 0; start < text.size() && line <= last; ++line) {
    size_t end = std::min(text.find('\n', start), text.size());
    for (size_t i = start; i < end && (text[i] == ' ' || text[i] == '\t'); ++i) {
      if (text[i] != '\t') continue;
      YAML::Mark mark;
      mark.pos = static_cast<int>(i);
      mark.line = line;
      mark.column = static_cast<int>(i - start);
      return mark;
    }
    start = end + 1;
  }
  return std::nullopt;
}

// The text as one YAML document; nullopt, reported, when it is not one.
std::optional<YAML::Node> read_document(const std::string& text, Report& r) {
  try {
    std::vector<DocumentStarts::Document> documents = DocumentStarts::of(text, 2);
    if (documents.size() > 1) {
      const DocumentStarts::Document& second = documents[1];
      size_t pos = second.start.pos < 0 ? text.size() : static_cast<size_t>(second.start.pos);
      std::string_view at = std::string_view(text).substr(std::min(pos, text.size()));
      if (at.starts_with("---") || at.starts_with("..."))
        r.error(second.content, "the config must be a single YAML document");
      else
        r.error(second.start, "invalid YAML: unexpected " + (at.empty() ? std::string("end of file")
                                                                        : quote(at.substr(0, 1))));
      return std::nullopt;
    }
    return YAML::Load(text);
  } catch (const YAML::Exception& e) {
    YAML::Mark at = e.mark.is_null() ? start_of_file() : e.mark;
    // yaml-cpp says "end of map not found" for a tab: name the tab instead.
    if (auto tab = tab_in_indentation(text, at.line))
      r.error(*tab, "invalid YAML: a tab in the indentation; YAML indents with spaces only");
    else
      r.error(at, "invalid YAML: " + e.msg);
    return std::nullopt;
  }
}

// Step 1: the document into a Config, syntax and values only.
std::optional<Parsed> parse_config(const YAML::Node& document, const std::string& file,
                                   const fs::path& base, Report& r) {
  if (!document || document.IsNull()) {
    r.error(start_of_file(), "the config is empty; expected a map with a \"programs\" key");
    return std::nullopt;
  }
  Field root{"", document};
  if (!root.value.IsMap()) {
    r.error(start_of_file(), "the config must be a map with a \"programs\" key");
    return std::nullopt;
  }
  Parsed parsed;
  Config& config = parsed.config;
  config.path = file;
  // x-* keys hold anchors for merge keys (<<: *defaults), as in docker-compose.
  auto top = read_map(root, r, kTopKeys, fields::MapStyle::Section, /*extensions=*/true);
  if (auto* v = top->find("log")) parse_log(*v, config.log, r);
  if (auto* v = top->get("cgroup_root")) parse_cgroup_root(*v, config.cgroup_root, r);
  if (auto* v = top->find("gpu")) parse_gpu(*v, base, config.gpu, r);
  if (auto* v = top->find("control")) parse_control(*v, base, config.control, parsed.control, r);
  if (auto* v = top->find("metrics")) parse_metrics(*v, config.metrics, r);
  if (auto* v = top->find("preempt")) parse_preempt(*v, config.preempt, r);
  if (auto* v = top->find("budget")) parse_budget(*v, base, config.budget, r);
  if (auto* v = top->get("exit")) parse_exit(*v, config.exit, r);
  parse_programs(top->find("programs"), root.value.Mark(), base, parsed, r);
  if (!config.budget)
    for (const ProgramSites& sites : parsed.programs)
      if (sites.budget)
        r.error(sites.budget->slot, sites.budget->mark,
                sites.budget->path +
                    ": there is no top-level budget: section for it to take "
                    "part in; add one, or remove this");
  if (!config.metrics)
    for (const ProgramSites& sites : parsed.programs)
      if (sites.drain)
        r.warning(sites.drain->slot, sites.drain->mark,
                  sites.drain->path +
                      " delays each recycle, but without a metrics: section there is no "
                      "/readyz for a probe to see the worker unready; add metrics: {listen: "
                      "0.0.0.0:9464}");
  return parsed;
}

LoadResult parse_document(std::string_view yaml, const std::string& file, const fs::path& base,
                          const HostLookup& host) {
  Report r(file);
  std::optional<YAML::Node> document = read_document(std::string(yaml), r);
  if (!document) return std::move(r).finish(std::nullopt);
  std::optional<Parsed> parsed = parse_config(*document, file, base, r);
  if (!parsed) return std::move(r).finish(std::nullopt);
  check_host(*parsed, host, r);
  // Policies and request patterns, built once.
  for (size_t i = 0; i < parsed->specs.size(); ++i)
    compile(parsed->specs[i], parsed->config.programs[i], r, host.container_memory_limit());
  check_nvml(parsed->config, parsed->specs, host, r);
  compile_budget(parsed->config, r);
  return std::move(r).finish(std::move(parsed->config));
}

}  // namespace
}  // namespace detail

std::string Diagnostic::str() const {
  std::string kind = warning ? "warning: " : "error: ";
  // Keys and values come from the file: one line each, nothing raw.
  if (line == 0) return escape_text(file + ": " + kind + message);
  return escape_text(file + ":" + std::to_string(line) + ":" + std::to_string(column) + ": " +
                     kind + message);
}

LoadResult load_file(const std::string& path) {
  return load_file(path, HostLookup::real());
}

LoadResult load_file(const std::string& path, const HostLookup& host) {
  Result<std::string> text = read_regular_file(path, kMaxConfigBytes);
  if (!text) {
    detail::Report r(path);
    std::string why = text.error().message;
    if (why.rfind(path + ": ", 0) == 0) why.erase(0, path.size() + 2);
    r.error(YAML::Mark::null_mark(), "cannot read config: " + why);
    return std::move(r).finish(std::nullopt);
  }
  return detail::parse_document(*text, path, std::filesystem::path(path).parent_path(), host);
}

LoadResult parse_string(std::string_view yaml, const std::string& file_name) {
  return parse_string(yaml, file_name, HostLookup::real());
}

LoadResult parse_string(std::string_view yaml, const std::string& file_name,
                        const HostLookup& host) {
  return detail::parse_document(yaml, file_name, std::filesystem::path(file_name).parent_path(),
                                host);
}

std::vector<KeyTable> key_tables() {
  using namespace detail;
  return {{"", kTopKeys},
          {"log", kLogKeys},
          {"gpu", kGpuKeys},
          {"control", kControlKeys},
          {"metrics", kMetricsKeys},
          {"preempt", kPreemptKeys},
          {"budget", kBudgetKeys},
          {"exit", kExitKeys},
          {"budget.pressure", kBudgetPressureKeys},
          {"budget.timeline", kTimelineKeys},
          {"programs.*", kProgramKeys},
          {"programs.*.allocator", kAllocatorKeys},
          {"programs.*.devices", kDevicesKeys},
          {"programs.*.limits", kLimitKeys},
          {"programs.*.rlimits", kRlimitKeys},
          {"programs.*.rlimits.*", kRlimitRangeKeys},
          {"programs.*.stop", kStopKeys},
          {"programs.*.restart", kRestartKeys},
          {"programs.*.restart.backoff", kBackoffKeys},
          {"programs.*.restart.crash_loop", kCrashLoopKeys},
          {"programs.*.requests", kRequestsKeys},
          {"programs.*.checkpoint", kCheckpointKeys},
          {"programs.*.gang", kGangKeys},
          {"programs.*.drain", kDrainKeys},
          {"programs.*.budget", kProgramBudgetKeys},
          {"programs.*.diagnose", kDiagnoseKeys},
          {"programs.*.timeline", kTimelineKeys},
          {"programs.*.listen[]", kListenKeys},
          {"programs.*.recycle", kRecycleKeys}};
}

}  // namespace recycler::config
