# tests of the notify part
recycler_test(notify_test unit
  SOURCES notify_message_test.cpp notify_socket_test.cpp notify_helper_test.cpp notify_gunicorn_test.cpp
  LIBS recycler_core)
recycler_test(output_match_test unit SOURCES output_match_test.cpp LIBS recycler_notify_parse)
recycler_test(read_pacer_test unit SOURCES read_pacer_test.cpp LIBS recycler_core)
