# Every dependency comes from a Debian 12 package; scripts/install-deps installs them.
find_package(PkgConfig REQUIRED)
pkg_check_modules(LIBUV REQUIRED IMPORTED_TARGET libuv>=1.44)
pkg_check_modules(LIBCGROUP REQUIRED IMPORTED_TARGET libcgroup>=2.0)
# Request-counting patterns on worker output: named groups, and JIT for the hot path.
pkg_check_modules(PCRE2 REQUIRED IMPORTED_TARGET libpcre2-8>=10.40)
find_package(yaml-cpp 0.7 REQUIRED)
find_package(spdlog 1.10 REQUIRED)
find_package(fmt REQUIRED)
find_package(CLI11 2.1 REQUIRED)
# The control socket's protocol: one JSON object per line.
find_package(nlohmann_json 3.10 REQUIRED)
find_package(Boost 1.74 REQUIRED COMPONENTS filesystem)
if(RECYCLER_BUILD_TESTS)
  find_package(GTest REQUIRED)
endif()
if(RECYCLER_BUILD_BENCH)
  find_package(benchmark QUIET)
endif()
