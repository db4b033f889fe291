# tests of the probe part
recycler_test(probe_test unit SOURCES probe_test.cpp LIBS recycler_core)
recycler_test(service_probe_test unit SOURCES service_probe_test.cpp LIBS recycler_core)
