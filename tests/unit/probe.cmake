# tests of the probe part
recycler_test(probe_test unit SOURCES probe_test.cpp LIBS recycler_core)
