# memra-tune on the real model (label model; a 60-second budget) and on the tiny fixture model (unit; seconds): 2
# stages whose output ends with the `best: <setting> ratio=<x>` line and whose CSV, JSON and SVG are written, and
# the JSON applied as a profile (MEMRA_PP_PROFILE) by memra-bench serve. This file is also the checker, run as
# `cmake -P` by the tests.
if(CMAKE_SCRIPT_MODE_FILE)
  set(prefix ${OUT}/tune-${N_LAYER})
  file(REMOVE ${prefix}.csv ${prefix}.json ${prefix}.svg)
  execute_process(COMMAND ${CMAKE_COMMAND} -E env MEMRA_BACKEND=cpu MEMRA_CPU_DEVICES=2
                          ${TUNE} -m ${MODEL} --stages 2 --seqs 2 --prompt 4 --gen 4 --budget 60 -o ${prefix}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  message("${out}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "memra-tune exited ${rc}: ${err}")
  endif()
  string(STRIP "${out}" out)
  string(REGEX MATCH "[^\n]*$" last "${out}")
  if(NOT last MATCHES "^best: cuts=[a-z]+\\([0-9]+\\) overlap=[01] slots=[0-9]+ mb=[0-9]+ rows=[0-9]+ ratio=[0-9]+\\.[0-9]+$")
    message(FATAL_ERROR "the last line is not `best: <setting> ratio=<x>`: '${last}'")
  endif()
  if(NOT err MATCHES "\\[1/[0-9]+\\] cuts=even")
    message(FATAL_ERROR "no progress line ([done/total]) on stderr: ${err}")
  endif()
  foreach(ext csv json svg)
    if(NOT EXISTS ${prefix}.${ext})
      message(FATAL_ERROR "memra-tune wrote no ${prefix}.${ext}")
    endif()
  endforeach()
  file(STRINGS ${prefix}.csv csv)
  list(LENGTH csv n)
  if(n LESS 3 OR NOT csv MATCHES "^point,cuts_name,cuts,overlap")
    message(FATAL_ERROR "${prefix}.csv: ${n} lines, expected a header and a row per point")
  endif()
  file(READ ${prefix}.svg svg)
  if(NOT svg MATCHES "^<svg " OR NOT svg MATCHES "<rect x=\"[0-9]+\" y=\"[0-9]+\" width=\"[0-9.]+\"" OR NOT svg MATCHES "</svg>\n$")
    message(FATAL_ERROR "${prefix}.svg is not an SVG bar chart")
  endif()
  file(READ ${prefix}.json json)
  string(JSON stages GET "${json}" stages)
  string(JSON n_layer GET "${json}" model n_layer)
  if(NOT stages EQUAL 2 OR NOT n_layer EQUAL N_LAYER)
    message(FATAL_ERROR "${prefix}.json: stages ${stages}, n_layer ${n_layer}")
  endif()
  if(HAVE_CJSON)
    execute_process(COMMAND ${CMAKE_COMMAND} -E env MEMRA_BACKEND=cpu MEMRA_CPU_DEVICES=2 MEMRA_PP_PROFILE=${prefix}.json
                            ${BENCH} serve -m ${MODEL} --seqs 2 --prompt 4 --tokens 2
                    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
    if(NOT rc EQUAL 0 OR NOT out MATCHES "stages 2")
      message(FATAL_ERROR "memra-bench serve with MEMRA_PP_PROFILE=${prefix}.json: exit ${rc}: ${out}${err}")
    endif()
  endif()
else()
  add_test(NAME model_tune_smollm2 COMMAND ${CMAKE_COMMAND} -DTUNE=$<TARGET_FILE:memra-tune>
           -DBENCH=$<TARGET_FILE:memra-bench> -DMODEL=${MEMRA_MODEL_PATH} -DN_LAYER=30 -DOUT=${CMAKE_CURRENT_BINARY_DIR}
           -DHAVE_CJSON=${CJSON_FOUND} -P ${CMAKE_CURRENT_LIST_FILE})
  set_tests_properties(model_tune_smollm2 PROPERTIES LABELS model TIMEOUT 240)
  add_test(NAME cli_tune_tiny COMMAND ${CMAKE_COMMAND} -DTUNE=$<TARGET_FILE:memra-tune>
           -DBENCH=$<TARGET_FILE:memra-bench> -DMODEL=${CMAKE_BINARY_DIR}/tiny-q4_1.gguf -DN_LAYER=8
           -DOUT=${CMAKE_CURRENT_BINARY_DIR} -DHAVE_CJSON=${CJSON_FOUND} -P ${CMAKE_CURRENT_LIST_FILE})
  set_tests_properties(cli_tune_tiny PROPERTIES LABELS unit TIMEOUT 120 FIXTURES_REQUIRED tiny)
  # refusals before any work, each naming what was wrong (no model needed)
  foreach(case "door|MEMRA_PP_OVERLAP is set: it overrides the settings|-E;env;MEMRA_PP_OVERLAP=1;$<TARGET_FILE:memra-tune>;-m;x"
               "stages|--stages 0: expected an integer in 1..64|-E;env;$<TARGET_FILE:memra-tune>;-m;x;--stages;0"
               "devices|--devices 0,1,2: 3 devices for 2 stages|-E;env;$<TARGET_FILE:memra-tune>;-m;x;--devices;0,1,2"
               "budget|--budget 5: expected an integer in 10..86400|-E;env;$<TARGET_FILE:memra-tune>;-m;x;--budget;5")
    string(REPLACE "|" ";" parts "${case}")
    list(GET parts 0 name)
    list(GET parts 1 want)
    list(SUBLIST parts 2 -1 cmd)
    add_test(NAME cli_tune_refuses_${name} COMMAND ${CMAKE_COMMAND} ${cmd})
    set_tests_properties(cli_tune_refuses_${name} PROPERTIES LABELS unit PASS_REGULAR_EXPRESSION "${want}")
  endforeach()
endif()
