# memra-tune on the real model (label model; a 60-second budget), on the tiny fixture model and on the synthetic
# shape "tiny" (unit; seconds): 2 stages whose output ends with the `best: <setting> ratio=<x>` line, whose traced
# stages' busy and bubble % are printed and in the JSON within 0..100, whose CSV, JSON and SVG are written, and
# the JSON applied as a profile (MEMRA_PP_PROFILE) by memra-bench serve. This file is also the checker, run as
# `cmake -P` by the tests (MODEL: a GGUF path, or SYNTH: a synthetic shape of q4_1 weights).
if(CMAKE_SCRIPT_MODE_FILE)
  if(SYNTH)
    set(prefix ${OUT}/tune-synth-${SYNTH})
    set(model_args --synthetic ${SYNTH} --type q4_1)
  else()
    set(prefix ${OUT}/tune-${N_LAYER})
    set(model_args -m ${MODEL})
  endif()
  file(REMOVE ${prefix}.csv ${prefix}.json ${prefix}.svg ${prefix}-trace.json)
  execute_process(COMMAND ${CMAKE_COMMAND} -E env MEMRA_BACKEND=cpu MEMRA_CPU_DEVICES=2
                          ${TUNE} ${model_args} --stages 2 --seqs 2 --prompt 4 --gen 4 --budget 60 -o ${prefix}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  message("${out}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "memra-tune exited ${rc}: ${err}")
  endif()
  string(STRIP "${out}" out)
  string(REGEX MATCH "[^\n]*$" last "${out}")
  if(NOT last MATCHES "^best: cuts=[a-z]+\\([0-9]+\\) overlap=[01] graph=0 slots=[0-9]+ mb=[0-9]+ rows=[0-9]+ ratio=[0-9]+\\.[0-9]+$")
    message(FATAL_ERROR "the last line is not `best: <setting> ratio=<x>`: '${last}'")
  endif()
  if(NOT err MATCHES "\\[1/[0-9]+\\] cuts=even")
    message(FATAL_ERROR "no progress line ([done/total]) on stderr: ${err}")
  endif()
  if(NOT out MATCHES "graph=1 [^\n]*skipped \\(CPU backend: no graphs\\)")
    message(FATAL_ERROR "the graphs point is not marked skipped on the CPU backend")
  endif()
  # the chosen setting's traced stages: a table with busy % and bubble % columns, a row per stage
  if(HAVE_CJSON AND NOT out MATCHES "best[^\n]*: a traced run [^\n]*\n +stage +layers +device +predicted_s +walks +busy % +bubble %\n +0 +0\\.\\.[0-9]+ [^\n]*\n +1 ")
    message(FATAL_ERROR "no per-stage busy table for the chosen setting")
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
  if(SYNTH)
    string(JSON sname GET "${json}" model synthetic name)
    string(JSON stype GET "${json}" model synthetic type)
    if(NOT sname STREQUAL SYNTH OR NOT stype STREQUAL "q4_1")
      message(FATAL_ERROR "${prefix}.json: the synthetic shape is named ${sname} ${stype}")
    endif()
  endif()
  if(HAVE_CJSON) # busy_pct and bubble_pct of each stage in 0..100, summing to 100, and the trace written
    foreach(s 0 1)
      string(JSON busy GET "${json}" busy stages ${s} busy_pct)
      string(JSON bubble GET "${json}" busy stages ${s} bubble_pct)
      if(busy LESS 0 OR busy GREATER 100 OR bubble LESS 0 OR bubble GREATER 100 OR busy EQUAL 0)
        message(FATAL_ERROR "${prefix}.json: stage ${s} busy ${busy} %, bubble ${bubble} %")
      endif()
      string(JSON walks GET "${json}" busy stages ${s} walks)
      if(walks LESS 1)
        message(FATAL_ERROR "${prefix}.json: stage ${s} has ${walks} walks in the traced run")
      endif()
    endforeach()
    if(NOT EXISTS ${prefix}-trace.json)
      message(FATAL_ERROR "no trace ${prefix}-trace.json")
    endif()
    execute_process(COMMAND ${CMAKE_COMMAND} -E env MEMRA_BACKEND=cpu MEMRA_CPU_DEVICES=2 MEMRA_PP_PROFILE=${prefix}.json
                            ${BENCH} serve ${model_args} --seqs 2 --prompt 4 --tokens 2
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
  add_test(NAME cli_tune_synthetic_tiny COMMAND ${CMAKE_COMMAND} -DTUNE=$<TARGET_FILE:memra-tune>
           -DBENCH=$<TARGET_FILE:memra-bench> -DSYNTH=tiny -DN_LAYER=8 -DOUT=${CMAKE_CURRENT_BINARY_DIR}
           -DHAVE_CJSON=${CJSON_FOUND} -P ${CMAKE_CURRENT_LIST_FILE})
  set_tests_properties(cli_tune_synthetic_tiny PROPERTIES LABELS unit TIMEOUT 120)
  # refusals before any work, each naming what was wrong (no model needed)
  foreach(case "door|MEMRA_PP_OVERLAP is set: it overrides the settings|-E;env;MEMRA_PP_OVERLAP=1;$<TARGET_FILE:memra-tune>;-m;x"
               "stages|--stages 0: expected an integer in 1..64|-E;env;$<TARGET_FILE:memra-tune>;-m;x;--stages;0"
               "devices|--devices 0,1,2: 3 devices for 2 stages|-E;env;$<TARGET_FILE:memra-tune>;-m;x;--devices;0,1,2"
               "budget|--budget 5: expected an integer in 10..86400|-E;env;$<TARGET_FILE:memra-tune>;-m;x;--budget;5"
               "graph_door|MEMRA_PP_GRAPH is set: it overrides the settings|-E;env;MEMRA_PP_GRAPH=1;$<TARGET_FILE:memra-tune>;-m;x"
               "trace_door|MEMRA_TRACE is set: memra-tune records its own traces|-E;env;MEMRA_TRACE=t.json;$<TARGET_FILE:memra-tune>;-m;x"
               "two_models|-m and --synthetic: one model|-E;env;$<TARGET_FILE:memra-tune>;-m;x;--synthetic;tiny"
               "type_of_a_file|--type bf16: the weight type of a --synthetic shape|-E;env;$<TARGET_FILE:memra-tune>;-m;x;--type;bf16"
               "synthetic_name|synthetic model huge of type bf16: shapes are|-E;env;$<TARGET_FILE:memra-tune>;--synthetic;huge")
    string(REPLACE "|" ";" parts "${case}")
    list(GET parts 0 name)
    list(GET parts 1 want)
    list(SUBLIST parts 2 -1 cmd)
    add_test(NAME cli_tune_refuses_${name} COMMAND ${CMAKE_COMMAND} ${cmd})
    set_tests_properties(cli_tune_refuses_${name} PROPERTIES LABELS unit PASS_REGULAR_EXPRESSION "${want}")
  endforeach()
endif()
