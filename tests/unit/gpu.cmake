# tests of the GPU part (supervisor/gpu): NVML through the fake drivers of
# tests/support/fake_nvml, one executable per driver (both are
# libnvidia-ml.so.1: one process loads one of them).
recycler_test(gpu_usage_test unit SOURCES gpu_usage_test.cpp LIBS recycler_gpu)
recycler_test(nvml_test unit SOURCES nvml_test.cpp LIBS recycler_core)
target_compile_definitions(nvml_test PRIVATE FAKE_NVML="$<TARGET_FILE:fake_nvml>")
add_dependencies(nvml_test fake_nvml)
recycler_test(nvml_mig_test unit SOURCES nvml_mig_test.cpp LIBS recycler_gpu)
target_compile_definitions(nvml_mig_test PRIVATE FAKE_NVML="$<TARGET_FILE:fake_nvml_mig>")
add_dependencies(nvml_mig_test fake_nvml_mig)
