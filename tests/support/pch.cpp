// The object the tests' precompiled header is built with (tests/CMakeLists.txt:
// recycler_test_pch); nothing of its own.
