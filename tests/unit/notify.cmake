# tests of the notify part
recycler_test(notify_test unit
  SOURCES notify_message_test.cpp notify_socket_test.cpp notify_helper_test.cpp notify_gunicorn_test.cpp
    notify_runtime_dir_test.cpp
  LIBS recycler_core)
# Split by subject for its readers, compiled as one (gtest's headers once).
set_target_properties(notify_test PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE 0)
recycler_test(output_match_test unit SOURCES output_match_test.cpp LIBS recycler_notify_parse)
recycler_test(read_pacer_test unit SOURCES read_pacer_test.cpp LIBS recycler_core)
