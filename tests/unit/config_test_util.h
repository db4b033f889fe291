// What the config tests share: parsing a snippet as "test.yaml", its
// diagnostics as the lines the user sees, and a temporary directory.
#pragma once

#include <gmock/gmock.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <pwd.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "supervisor/config/parse.h"

namespace recycler::config::test {

namespace fs = std::filesystem;

// Every YAML snippet below starts on line 1 right after R"( so that the
// positions in the expected messages can be read off the snippet.
inline LoadResult parse(std::string_view yaml) {
  return parse_string(yaml, "test.yaml");
}

inline std::vector<std::string> lines(const std::vector<Diagnostic>& diagnostics) {
  std::vector<std::string> out;
  for (const auto& d : diagnostics) out.push_back(d.str());
  return out;
}

inline std::vector<std::string> errors(std::string_view yaml) {
  return lines(parse(yaml).errors);
}
inline std::vector<std::string> warnings(std::string_view yaml) {
  return lines(parse(yaml).warnings);
}

// The single program of a config that must load without errors.
inline ProgramConfig program(std::string_view yaml) {
  LoadResult result = parse(yaml);
  EXPECT_THAT(lines(result.errors), ::testing::IsEmpty());
  if (!result.config || result.config->programs.size() != 1) {
    ADD_FAILURE() << "expected exactly one program";
    return {};
  }
  return result.config->programs[0];
}

inline std::string current_user() {
  return getpwuid(geteuid())->pw_name;
}
inline std::string current_group() {
  return getgrgid(getegid())->gr_name;
}

// A directory under the system temp dir, removed with everything in it.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "recycler-config-XXXXXX").string();
    path_ = mkdtemp(pattern.data());
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }
  fs::path write(const std::string& name, const std::string& text) const {
    fs::path file = path_ / name;
    fs::create_directories(file.parent_path());
    std::ofstream(file) << text;
    return file;
  }

 private:
  fs::path path_;
};

}  // namespace recycler::config::test
