# Extra ctest registrations of the embedding API (included by tests/CMakeLists.txt): the ABI check, the
# examples run on a tiny model, and the install/consumer test. Targets named here (memra_shared,
# example-*) are defined by cmake/memra-api.cmake; add_test resolves them when the build is generated.
set(_api_env "MEMRA_BACKEND=cpu;MEMRA_SRC_DIR=${PROJECT_SOURCE_DIR};MEMRA_BIN_DIR=${PROJECT_BINARY_DIR}")

# ---- the model the examples run on: a tiny synthetic one when memra-mkgguf exists, else the real one ----
if(TARGET memra-mkgguf)
  set(_api_model ${CMAKE_CURRENT_BINARY_DIR}/api-tiny.gguf)
  set(_api_label unit)
  add_test(NAME api_tiny_model COMMAND memra-mkgguf -o ${_api_model} --layers 4 --ctx 256)
  set_tests_properties(api_tiny_model PROPERTIES LABELS unit FIXTURES_SETUP api_tiny TIMEOUT 60)
  set(_api_fixture FIXTURES_REQUIRED api_tiny)
else()
  set(_api_model ${MEMRA_MODEL_PATH})
  set(_api_label model)
  set(_api_fixture)
endif()

# ---- ABI: only memra_* exported from libmemra.so; and the checker itself catches a leak ----
add_test(NAME api_abi_check COMMAND sh ${PROJECT_SOURCE_DIR}/scripts/abi-check $<TARGET_FILE:memra_shared>
         ${PROJECT_SOURCE_DIR}/include/memra/memra.h ${PROJECT_SOURCE_DIR}/include/memra/status.h)
set_tests_properties(api_abi_check PROPERTIES LABELS unit TIMEOUT 60
  PASS_REGULAR_EXPRESSION "abi-check: OK: [0-9]+ symbols, all memra_\\*, every MEMRA_API function")
# file(CONFIGURE) writes only when the text changes: a re-configure leaves the probe built
file(CONFIGURE OUTPUT ${CMAKE_CURRENT_BINARY_DIR}/abi_leak_probe.c
     CONTENT "int memra_fine(void) { return 1; }\nint leaked_internal_symbol(void) { return 2; }\n")
add_library(abi_leak_probe SHARED ${CMAKE_CURRENT_BINARY_DIR}/abi_leak_probe.c) # default visibility: leaks
add_test(NAME api_abi_check_flags_a_leaked_symbol
         COMMAND sh -c "sh '${PROJECT_SOURCE_DIR}/scripts/abi-check' '$<TARGET_FILE:abi_leak_probe>'; test $? -eq 1")
set_tests_properties(api_abi_check_flags_a_leaked_symbol PROPERTIES LABELS unit TIMEOUT 60
  PASS_REGULAR_EXPRESSION "leaked_internal_symbol")

# ---- the examples, run ----
add_test(NAME example_simple COMMAND example-simple ${_api_model} "Hello" 8)
add_test(NAME example_server COMMAND example-server ${_api_model} 4 8)
add_test(NAME example_server_pp3 COMMAND example-server ${_api_model} 5 6)
foreach(t example_simple example_server example_server_pp3)
  set_tests_properties(${t} PROPERTIES LABELS ${_api_label} TIMEOUT 300 SKIP_RETURN_CODE 77
    ENVIRONMENT "${_api_env};MEMRA_MODEL=${_api_model}" ${_api_fixture})
endforeach()
set_tests_properties(example_server PROPERTIES PASS_REGULAR_EXPRESSION "client 3: 8 tokens")
set_tests_properties(example_server_pp3 PROPERTIES
  ENVIRONMENT "${_api_env};MEMRA_PP_STAGES=3;MEMRA_PP_DEVICES=0,1,2;MEMRA_PP_OVERLAP=1"
  PASS_REGULAR_EXPRESSION "client 4: 6 tokens.*server: 3 stages, 3 micro-batches")

# ---- the minimal example on the real model (normal leg; skipped when the file is absent) ----
add_test(NAME example_simple_real_model
         COMMAND sh -c "test -f '${MEMRA_MODEL_PATH}' || { echo 'skipped: no model at ${MEMRA_MODEL_PATH}'; exit 77; }; exec \"$1\" '${MEMRA_MODEL_PATH}' 'The capital of France is' 4"
                 sh $<TARGET_FILE:example-simple>)
set_tests_properties(example_simple_real_model PROPERTIES LABELS model TIMEOUT 300 SKIP_RETURN_CODE 77
  ENVIRONMENT "${_api_env}" PASS_REGULAR_EXPRESSION "Paris")

# ---- install + a consumer built against the installed package (normal leg only) ----
if(MEMRA_SANITIZE STREQUAL "")
  add_test(NAME api_install_consumer
           COMMAND sh ${PROJECT_SOURCE_DIR}/examples/consumer/test-installed.sh ${PROJECT_BINARY_DIR}
                   ${PROJECT_SOURCE_DIR} ${_api_model})
  set_tests_properties(api_install_consumer PROPERTIES LABELS install TIMEOUT 600 ${_api_fixture}
    ENVIRONMENT "${_api_env}" PASS_REGULAR_EXPRESSION "install test: OK")
  # docs/getting-started.md's install, find_package and pkg-config recipes, run as written on a clean environment
  add_test(NAME api_getting_started_recipes
           COMMAND sh ${PROJECT_SOURCE_DIR}/examples/consumer/test-recipes.sh ${PROJECT_BINARY_DIR}
                   ${PROJECT_SOURCE_DIR} ${_api_model})
  set_tests_properties(api_getting_started_recipes PROPERTIES LABELS install TIMEOUT 600 ${_api_fixture}
    ENVIRONMENT "${_api_env}" PASS_REGULAR_EXPRESSION "getting-started recipes: OK")
endif()
