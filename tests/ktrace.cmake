# test_ktrace checks memra-bench's kernel-timeline arithmetic, a tool source compiled into the test.
target_sources(test_ktrace PRIVATE ${PROJECT_SOURCE_DIR}/tools/memra-bench/ktrace_report.c)
target_include_directories(test_ktrace PRIVATE ${PROJECT_SOURCE_DIR}/tools/memra-bench)
