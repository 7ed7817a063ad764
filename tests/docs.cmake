# scripts/check-timeless (CONVENTIONS "Timeless"): the whole tree's comments and docs, and the check's own fixtures.
find_package(Python3 COMPONENTS Interpreter QUIET)
if(Python3_Interpreter_FOUND)
  set(_timeless ${PROJECT_SOURCE_DIR}/scripts/check-timeless)
  add_test(NAME docs_comments_and_docs_are_timeless COMMAND ${Python3_EXECUTABLE} ${_timeless})
  # The bad fixture must fail and name each offence by file:line and rule (and nothing in code or a table row).
  add_test(NAME docs_timeless_check_names_each_offence_by_file_and_line
    COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/timeless/expect-bad.sh ${Python3_EXECUTABLE} ${_timeless}
      ${CMAKE_CURRENT_SOURCE_DIR}/timeless/bad)
  add_test(NAME docs_timeless_check_passes_code_tables_and_present_tense
    COMMAND ${Python3_EXECUTABLE} ${_timeless} ${CMAKE_CURRENT_SOURCE_DIR}/timeless/good)
  set_tests_properties(docs_comments_and_docs_are_timeless docs_timeless_check_names_each_offence_by_file_and_line
    docs_timeless_check_passes_code_tables_and_present_tense PROPERTIES LABELS unit TIMEOUT 60)
endif()
