# memra-server end to end (tests/server_test.py) on the real model with the CPU backend: the official openai
# client (skipped, exit 77, when the openai package is missing: scripts/setup installs it) and plain http.client
# (SSE framing, errors, malformed requests, SIGTERM). Registered only when memra-server is built.
if(TARGET memra-server)
  find_package(Python3 COMPONENTS Interpreter)
  if(Python3_Interpreter_FOUND)
    execute_process(COMMAND ${Python3_EXECUTABLE} -c "import openai" RESULT_VARIABLE _memra_no_openai
                    OUTPUT_QUIET ERROR_QUIET)
    if(_memra_no_openai)
      message(STATUS "memra: server_openai_client skips: python3 has no openai package "
                     "(python3 -m pip install --break-system-packages openai)")
    endif()
    add_test(NAME server_openai_client
             COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/server_test.py openai
                     $<TARGET_FILE:memra-server> $<TARGET_FILE:memra-run> ${MEMRA_MODEL_PATH})
    add_test(NAME server_http_errors_and_framing
             COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/server_test.py http
                     $<TARGET_FILE:memra-server> ${MEMRA_MODEL_PATH})
    set_tests_properties(server_openai_client server_http_errors_and_framing PROPERTIES
      LABELS model TIMEOUT 300 SKIP_RETURN_CODE 77 ENVIRONMENT "MEMRA_BACKEND=cpu")
    # the malformed requests on the tiny model (cli.cmake writes it): a unit test, so the sanitizer legs run it
    add_test(NAME server_malformed_requests_only_4xx_on_the_tiny_model
             COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/server_test.py fuzz
                     $<TARGET_FILE:memra-server> ${TINY})
    set_tests_properties(server_malformed_requests_only_4xx_on_the_tiny_model PROPERTIES
      LABELS unit TIMEOUT 600 FIXTURES_REQUIRED tiny ENVIRONMENT "MEMRA_BACKEND=cpu")
    # a --chat-template of an unknown format: refused at start (exit 2), the formats named
    add_test(NAME server_chat_template_of_an_unknown_format_is_refused
             COMMAND sh -c "\"$0\" -m /nonexistent.gguf --chat-template bogus || echo \"exit $?\""
                     $<TARGET_FILE:memra-server>)
    set_tests_properties(server_chat_template_of_an_unknown_format_is_refused PROPERTIES LABELS unit TIMEOUT 60
      PASS_REGULAR_EXPRESSION "--chat-template bogus: MEMRA_E_UNSUPPORTED: chat template not recognised .*chatml.*exit 2")
    # curl, as docs/server.md uses it (scripts/setup installs curl)
    add_test(NAME server_curl_sse_framing_and_errors
             COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/server_test.py curl
                     $<TARGET_FILE:memra-server> ${TINY})
    set_tests_properties(server_curl_sse_framing_and_errors PROPERTIES
      LABELS unit TIMEOUT 300 FIXTURES_REQUIRED tiny ENVIRONMENT "MEMRA_BACKEND=cpu")
    # 64 concurrent clients for 2 minutes on loopback (tiny model): no error, nothing lost or duplicated, every
    # slot freed; bounded in count (64 threads) and time (120 s + the drain)
    add_test(NAME server_64_clients_2_minutes
             COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/server_test.py load
                     $<TARGET_FILE:memra-server> ${CMAKE_CURRENT_SOURCE_DIR}/server_load.py ${TINY} 64 120)
    set_tests_properties(server_64_clients_2_minutes PROPERTIES
      LABELS stress TIMEOUT 600 FIXTURES_REQUIRED tiny ENVIRONMENT "MEMRA_BACKEND=cpu")
  else()
    message(STATUS "memra: the memra-server tests are not registered: no python3")
  endif()
else()
  message(STATUS "memra: the memra-server tests are not registered: memra-server is not built")
endif()
