# recycler_options: warnings (and -Werror unless RECYCLER_WERROR=OFF) plus the
# sanitizers named in RECYCLER_SANITIZE, for the project's own targets.
add_library(recycler_options INTERFACE)
target_compile_options(recycler_options INTERFACE -Wall -Wextra -Wpedantic -Wshadow
                       -Wnon-virtual-dtor -Wold-style-cast -Wcast-align)
if(RECYCLER_WERROR)
  target_compile_options(recycler_options INTERFACE -Werror)
endif()
if(RECYCLER_SANITIZE)
  target_compile_options(recycler_options INTERFACE -fsanitize=${RECYCLER_SANITIZE}
                         -fno-omit-frame-pointer -fno-sanitize-recover=all)
  # GCC 12's flow analysis misfires on sanitizer-instrumented libstdc++ code
  # (std::regex's std::function): a false positive, not a finding.
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    target_compile_options(recycler_options INTERFACE -Wno-maybe-uninitialized)
  endif()
  target_link_options(recycler_options INTERFACE -fsanitize=${RECYCLER_SANITIZE})
endif()
if(RECYCLER_FUZZ)
  # Coverage for libFuzzer in every project target; the fuzz binaries link
  # the fuzzer itself (tests/fuzz).
  target_compile_options(recycler_options INTERFACE -fsanitize=fuzzer-no-link)
endif()
