# tests of the timeline part: the trace format and writer, the replay loop and
# its JSON output, and the acceptance test over the trace corpus.
recycler_test(timeline_test unit SOURCES timeline_test.cpp LIBS recycler_timeline)
recycler_test(replay_test unit SOURCES replay_test.cpp LIBS recycler_timeline)
recycler_test(budget_replay_test unit SOURCES budget_replay_test.cpp LIBS recycler_timeline)
# Its tests are the rows of the corpus's expected.csv: listed again before each
# ctest run, so that a changed manifest needs no rebuild.
set(CMAKE_GTEST_DISCOVER_TESTS_DISCOVERY_MODE PRE_TEST)
recycler_test(replay_corpus_test unit SOURCES replay_corpus_test.cpp LIBS recycler_timeline)
unset(CMAKE_GTEST_DISCOVER_TESTS_DISCOVERY_MODE)
