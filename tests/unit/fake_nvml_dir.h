// The directory a fake NVML driver (tests/support/fake_nvml) answers from,
// made fresh for each test and named in RECYCLER_FAKE_NVML_DIR.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace recycler::testing {

class FakeNvmlDir {
 public:
  FakeNvmlDir() {
    char tmpl[] = "/tmp/fake-nvml.XXXXXX";
    dir_ = ::mkdtemp(tmpl);
    std::filesystem::create_directory(dir_ / "procs");
    ::setenv("RECYCLER_FAKE_NVML_DIR", dir_.c_str(), 1);
  }
  ~FakeNvmlDir() {
    ::unsetenv("RECYCLER_FAKE_NVML_DIR");
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  // Writes `name` (relative to the directory) with `text`.
  void write(const std::string& name, const std::string& text) const {
    std::ofstream(dir_ / name) << text;
  }
  void remove(const std::string& name) const { std::filesystem::remove(dir_ / name); }
  // Process queries the driver answered so far.
  int calls() const {
    std::ifstream in(dir_ / "calls");
    int n = 0;
    for (std::string line; std::getline(in, line);) ++n;
    return n;
  }
  const std::filesystem::path& path() const { return dir_; }

 private:
  std::filesystem::path dir_;
};

}  // namespace recycler::testing
