# tests of the metrics endpoint's parts
recycler_test(metrics_text_test unit SOURCES metrics_text_test.cpp LIBS recycler_metrics)
recycler_test(metrics_http_test unit SOURCES metrics_http_test.cpp LIBS recycler_metrics)
