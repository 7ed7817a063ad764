# Tracing (included by tests/CMakeLists.txt): test_trace keeps its 2-stage tiny trace for the JSON checks; the
# memra-trace tool's summary on a hand-written trace; its HTML viewer in headless Chromium on a SmolLM2 trace.
find_package(Python3 COMPONENTS Interpreter)
set_tests_properties(test_trace PROPERTIES FIXTURES_SETUP trace_tiny)
if(Python3_FOUND)
  add_test(NAME trace_json_parses_pairs_begins_and_links_stages
           COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/trace_check.py
                   ${PROJECT_BINARY_DIR}/tests/trace-tiny.json 2)
  set_tests_properties(trace_json_parses_pairs_begins_and_links_stages PROPERTIES LABELS unit TIMEOUT 60
    FIXTURES_REQUIRED trace_tiny PASS_REGULAR_EXPRESSION "trace_check: OK")
endif()
if(TARGET memra-trace)
  # trace_synth.json: stage 0 walks [0,10] [20,30], stage 1 walks [12,20] [30,40] in a 40 us window:
  # bubble 50 % and 55 %, mean 52.5 %
  add_test(NAME trace_summary_bubble_is_the_hand_computed_value
           COMMAND memra-trace summary ${CMAKE_CURRENT_SOURCE_DIR}/trace_synth.json)
  set_tests_properties(trace_summary_bubble_is_the_hand_computed_value PROPERTIES LABELS unit TIMEOUT 60
    PASS_REGULAR_EXPRESSION "stage 1: 2 walks, busy 45.0%, bubble 55.0%.*credit: out slot 0.*\nbubble 52.5% \\(mean over 2 stages")
  add_test(NAME trace_summary_refuses_a_file_that_is_not_json
           COMMAND memra-trace summary ${CMAKE_CURRENT_SOURCE_DIR}/trace.cmake)
  set_tests_properties(trace_summary_refuses_a_file_that_is_not_json PROPERTIES LABELS unit TIMEOUT 60
    PASS_REGULAR_EXPRESSION "trace.cmake: not valid JSON \\(at byte 0\\)")
  # a file without a command, a missing file, an unwritable output: each named, with why
  add_test(NAME trace_names_a_file_given_without_a_command
           COMMAND memra-trace ${CMAKE_CURRENT_SOURCE_DIR}/trace_synth.json)
  set_tests_properties(trace_names_a_file_given_without_a_command PROPERTIES LABELS unit TIMEOUT 60
    PASS_REGULAR_EXPRESSION "trace_synth.json': expected a command and a file \\(summary FILE, html FILE -o OUT\\)")
  add_test(NAME trace_names_a_missing_file_and_why
           COMMAND memra-trace summary ${PROJECT_BINARY_DIR}/no-such-trace.json)
  set_tests_properties(trace_names_a_missing_file_and_why PROPERTIES LABELS unit TIMEOUT 60
    PASS_REGULAR_EXPRESSION "cannot open .*no-such-trace.json: No such file or directory")
  add_test(NAME trace_html_names_an_unwritable_output_and_why
           COMMAND memra-trace html ${CMAKE_CURRENT_SOURCE_DIR}/trace_synth.json -o /nonexistent-dir/t.html)
  set_tests_properties(trace_html_names_an_unwritable_output_and_why PROPERTIES LABELS unit TIMEOUT 60
    PASS_REGULAR_EXPRESSION "cannot open /nonexistent-dir/t.html for writing: No such file or directory")
  add_test(NAME trace_html_viewer_draws_both_stages_and_hops_in_chromium
           COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/trace_html.sh ${PROJECT_BINARY_DIR} ${PROJECT_SOURCE_DIR}
                   ${MEMRA_MODEL_PATH})
  set_tests_properties(trace_html_viewer_draws_both_stages_and_hops_in_chromium PROPERTIES LABELS model TIMEOUT 300
    SKIP_RETURN_CODE 77 PASS_REGULAR_EXPRESSION "trace_html: OK")
endif()
if(TARGET memra-run)
  add_test(NAME trace_memra_run_names_an_unwritable_trace_path
           COMMAND memra-run -m ${MEMRA_MODEL_PATH} -p Hi -n 1 --stages 2 --trace /nonexistent-dir/t.json)
  set_tests_properties(trace_memra_run_names_an_unwritable_trace_path PROPERTIES LABELS model TIMEOUT 120
    ENVIRONMENT "MEMRA_BACKEND=cpu" PASS_REGULAR_EXPRESSION "--trace /nonexistent-dir/t.json: .*cannot open /nonexistent-dir/t.json")
endif()
if(TARGET memra-trace AND Python3_FOUND)
  # a ~100 MB trace: summary and html stream it within 256 MB of memory; the viewer draws it decimated (Chromium).
  # Under a sanitizer the shadow memory is no measure of the reader's: a 10 MB trace, bounded only loosely
  if(MEMRA_SANITIZE STREQUAL "")
    set(_big 100 256)
  else()
    set(_big 10 2048)
  endif()
  add_test(NAME trace_big_summary_streams_in_bounded_memory_and_the_viewer_decimates
           COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/trace_big.py $<TARGET_FILE:memra-trace>
                   ${PROJECT_BINARY_DIR}/tests/trace-big ${_big})
  set_tests_properties(trace_big_summary_streams_in_bounded_memory_and_the_viewer_decimates PROPERTIES
    LABELS stress TIMEOUT 900 PASS_REGULAR_EXPRESSION "trace_big: OK")
  # the streaming reader refuses a file cut in the middle of its events
  add_test(NAME trace_summary_refuses_a_truncated_trace
           COMMAND sh -c "head -c 700 '${CMAKE_CURRENT_SOURCE_DIR}/trace_synth.json' > '${PROJECT_BINARY_DIR}/tests/trace-cut.json' && '$<TARGET_FILE:memra-trace>' summary '${PROJECT_BINARY_DIR}/tests/trace-cut.json'")
  set_tests_properties(trace_summary_refuses_a_truncated_trace PROPERTIES LABELS unit TIMEOUT 60
    PASS_REGULAR_EXPRESSION "not valid JSON \\(the traceEvents array is not closed: truncated\\?\\)")
endif()
