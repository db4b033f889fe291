# tests of the policies part. Policies register themselves from static
# initialisers: link the library whole so that none is dropped.
set(RECYCLER_POLICIES_WHOLE "$<LINK_LIBRARY:WHOLE_ARCHIVE,recycler_policies>")
recycler_test(policy_args_test unit SOURCES policy_args_test.cpp LIBS recycler_policies yaml-cpp)
recycler_test(policy_memory_test unit
  SOURCES policy_memory_test.cpp LIBS ${RECYCLER_POLICIES_WHOLE} yaml-cpp)
recycler_test(policy_max_requests_test unit
  SOURCES policy_max_requests_test.cpp LIBS ${RECYCLER_POLICIES_WHOLE} yaml-cpp)
recycler_test(policy_max_lifetime_test unit
  SOURCES policy_max_lifetime_test.cpp LIBS ${RECYCLER_POLICIES_WHOLE} yaml-cpp)
recycler_test(policy_watchdog_test unit
  SOURCES policy_watchdog_test.cpp LIBS ${RECYCLER_POLICIES_WHOLE} yaml-cpp)
recycler_test(policy_threads_test unit
  SOURCES policy_threads_test.cpp LIBS ${RECYCLER_POLICIES_WHOLE} yaml-cpp)
recycler_test(recycle_gate_test unit SOURCES recycle_gate_test.cpp LIBS recycler_engine)
recycler_test(policy_leak_test unit
  SOURCES policy_leak_test.cpp LIBS ${RECYCLER_POLICIES_WHOLE} yaml-cpp)
recycler_test(trend_test unit SOURCES trend_test.cpp LIBS recycler_policies)
recycler_test(fields_test unit SOURCES fields_test.cpp LIBS recycler_fields)
