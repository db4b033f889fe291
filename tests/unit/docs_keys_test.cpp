// Nothing the parser accepts goes undocumented: every key of every config
// section (config::key_tables()) appears, in backticks, under the heading of
// docs/configuration.md that names its section, and every setting of every
// policy (policies::Registry::keys()) under the heading of docs/policies.md
// that names the policy. A key added to the parser without its line in the
// reference fails here, by name.
#include <gtest/gtest.h>

#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "policies/policy.h"
#include "supervisor/config/parse.h"

namespace recycler {
namespace {

std::string read_doc(const std::string& name) {
  std::ifstream in(std::string(RECYCLER_DOCS_DIR) + "/" + name);
  EXPECT_TRUE(in) << "cannot read docs/" << name;
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

struct Line {
  int heading = 0;  // its level (# = 1), 0 for a line that is no heading
  std::string text;
};

// The lines outside fenced code blocks: a `#` in a YAML example is no heading,
// and a key only an example shows is not documented.
std::vector<Line> prose_lines(const std::string& doc) {
  std::vector<Line> out;
  std::istringstream in(doc);
  bool fenced = false;
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with("```")) {
      fenced = !fenced;
      continue;
    }
    if (fenced) continue;
    int level = 0;
    while (level < static_cast<int>(line.size()) && line[level] == '#') ++level;
    bool heading = level > 0 && level < static_cast<int>(line.size()) && line[level] == ' ';
    out.push_back({heading ? level : 0, line});
  }
  return out;
}

// The text under the first heading that contains `title` (with its
// subsections), or nullopt when no heading does.
std::optional<std::string> section_text(const std::vector<Line>& lines, std::string_view title) {
  for (size_t i = 0; i < lines.size(); ++i) {
    if (lines[i].heading == 0 || lines[i].text.find(title) == std::string::npos) continue;
    std::string body;
    for (size_t j = i + 1; j < lines.size(); ++j) {
      if (lines[j].heading != 0 && lines[j].heading <= lines[i].heading) break;
      body += lines[j].text + "\n";
    }
    return body;
  }
  return std::nullopt;
}

// The inline code spans of `text`: `key`, `limits.memory_max`, `for: 10s`.
std::vector<std::string> code_spans(const std::string& text) {
  std::vector<std::string> spans;
  size_t at = 0;
  while ((at = text.find('`', at)) != std::string::npos) {
    size_t end = text.find('`', at + 1);
    if (end == std::string::npos) break;
    spans.push_back(text.substr(at + 1, end - at - 1));
    at = end + 1;
  }
  return spans;
}

// `key`, `section.key` (`limits.memory_max`), or `key: value`.
bool names_key(const std::vector<std::string>& spans, std::string_view key) {
  for (std::string_view span : spans) {
    if (span == key) return true;
    if (span.size() > key.size() && span.ends_with(key) &&
        span[span.size() - key.size() - 1] == '.')
      return true;
    if (span.starts_with(key) && span.size() > key.size() && span[key.size()] == ':') return true;
  }
  return false;
}

// "programs.*.restart.backoff" is documented under the heading `restart`,
// "programs.*" under `programs`, "log" under `log`, "" under "Top level".
std::string heading_for(std::string_view section) {
  if (section.empty()) return "Top level";
  constexpr std::string_view kProgram = "programs.*.";
  if (section.starts_with(kProgram)) section.remove_prefix(kProgram.size());
  // Appended piecewise: GCC 12 -O3 warns falsely (-Wrestrict) on "`" + std::string.
  std::string heading(1, '`');
  heading.append(section.substr(0, section.find_first_of(".[*")));
  heading.push_back('`');
  return heading;
}

TEST(DocsKeys, EveryConfigKeyIsInConfigurationMd) {
  auto lines = prose_lines(read_doc("configuration.md"));
  auto tables = config::key_tables();
  ASSERT_FALSE(tables.empty());
  for (const auto& table : tables) {
    std::string heading = heading_for(table.section);
    auto text = section_text(lines, heading);
    if (!text) {
      ADD_FAILURE() << "docs/configuration.md has no heading naming " << heading << " (keys of \""
                    << table.section << "\")";
      continue;
    }
    auto spans = code_spans(*text);
    for (std::string_view key : table.keys)
      EXPECT_TRUE(names_key(spans, key))
          << "docs/configuration.md: key `" << key << "` of \"" << table.section
          << "\" is not documented (as `" << key << "`) under the heading naming " << heading;
  }
}

TEST(DocsKeys, EveryPolicyAndSettingIsInPoliciesMd) {
  auto lines = prose_lines(read_doc("policies.md"));
  const auto& registry = policies::Registry::instance();
  auto names = registry.names();
  ASSERT_FALSE(names.empty()) << "no policy registered: is recycler_policies linked whole?";
  for (const auto& name : names) {
    std::string heading(1, '`');
    heading.append(name).push_back('`');
    auto text = section_text(lines, heading);
    if (!text) {
      ADD_FAILURE() << "docs/policies.md has no heading naming the " << heading << " policy";
      continue;
    }
    auto spans = code_spans(*text);
    auto keys = registry.keys(name);
    EXPECT_FALSE(keys.empty()) << "policy " << name << " registered no keys";
    for (std::string_view key : keys)
      EXPECT_TRUE(names_key(spans, key)) << "docs/policies.md: setting `" << key << "` of the "
                                         << name << " policy is not documented under its heading";
  }
}

// The checks themselves: a key missing from its section is found, and one
// named elsewhere in the file does not count.
TEST(DocsKeys, FindsAKeyOnlyUnderItsOwnHeading) {
  auto lines = prose_lines(
      "# Config\n## `limits`\n| `limits.memory_max` | hard |\n`cpu: 1.5`\n"
      "```yaml\npids_max: 1\n```\n## `stop`\n`pids_max` and `signal`\n");
  auto limits = section_text(lines, "`limits`");
  ASSERT_TRUE(limits);
  auto spans = code_spans(*limits);
  EXPECT_TRUE(names_key(spans, "memory_max"));
  EXPECT_TRUE(names_key(spans, "cpu"));
  EXPECT_FALSE(names_key(spans, "pids_max"));  // only in a code block, and under `stop`
  EXPECT_FALSE(names_key(spans, "max"));
  EXPECT_EQ(heading_for("programs.*.restart.backoff"), "`restart`");
  EXPECT_EQ(heading_for("programs.*.listen[]"), "`listen`");
  EXPECT_EQ(heading_for("programs.*"), "`programs`");
  EXPECT_EQ(heading_for("log"), "`log`");
}

}  // namespace
}  // namespace recycler
