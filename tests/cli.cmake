# Command-line contracts: the tools run as a user runs them.
# Tiny models are written at test time by memra-mkgguf (fixture); the real model comes from scripts/setup.
set(TINY ${CMAKE_BINARY_DIR}/tiny-q4_1.gguf)
add_test(NAME cli_mkgguf_tiny COMMAND memra-mkgguf -o ${TINY} --layers 8 --type q4_1)
set_tests_properties(cli_mkgguf_tiny PROPERTIES FIXTURES_SETUP tiny LABELS unit)

function(memra_cli name label)
  add_test(NAME ${name} COMMAND ${ARGN})
  set_tests_properties(${name} PROPERTIES LABELS ${label} TIMEOUT 900 ENVIRONMENT "MEMRA_BACKEND=cpu")
  if(label STREQUAL "unit" OR label STREQUAL "stress")
    set_tests_properties(${name} PROPERTIES FIXTURES_REQUIRED tiny)
  endif()
endfunction()

# memra-gate on the tiny model: every arm at N=3 over three devices, and the soak, 20 runs with delays.
foreach(arm eager replay batch prime prime-batch spec)
  memra_cli(cli_gate_tiny_${arm} unit ${CMAKE_COMMAND} -E env MEMRA_PP_STAGES=3 MEMRA_PP_DEVICES=0,1,2
            MEMRA_PP_OVERLAP=1 $<TARGET_FILE:memra-gate> ${arm} -m ${TINY})
endforeach()
memra_cli(cli_gate_tiny_soak stress ${CMAKE_COMMAND} -E env MEMRA_PP_STAGES=4 MEMRA_PP_DEVICES=0,1,1,2
          MEMRA_PP_OVERLAP=1 $<TARGET_FILE:memra-gate> soak --runs 20 -m ${TINY})
# K-quant weights (q4_K layers, a q6_K head) in the fast mode: the int8 K-quant GEMM keeps split = unsplit
set(TINY_K ${CMAKE_BINARY_DIR}/tiny-q4_K.gguf)
add_test(NAME cli_mkgguf_tiny_kquant COMMAND memra-mkgguf -o ${TINY_K} --layers 4 --embd 256 --heads 4 --kv-heads 2
         --ff 512 --type q4_K --embd-type q6_K)
set_tests_properties(cli_mkgguf_tiny_kquant PROPERTIES FIXTURES_SETUP tiny_k LABELS unit)
foreach(arm batch prime)
  memra_cli(cli_gate_tiny_kquant_fast_${arm} unit ${CMAKE_COMMAND} -E env MEMRA_CPU_X8=1 MEMRA_PP_STAGES=3
            MEMRA_PP_DEVICES=0,1,2 $<TARGET_FILE:memra-gate> ${arm} -m ${TINY_K})
  set_tests_properties(cli_gate_tiny_kquant_fast_${arm} PROPERTIES FIXTURES_REQUIRED "tiny;tiny_k")
endforeach()
# A q5_K model (weights and embeddings; its 256-element blocks need embd and ff multiples of 256) through the CPU
# backend: split over three devices, bit-identical to unsplit.
set(TINY_Q5K ${CMAKE_BINARY_DIR}/tiny-q5_K.gguf)
add_test(NAME cli_mkgguf_tiny_q5_K COMMAND memra-mkgguf -o ${TINY_Q5K} --layers 4 --embd 256 --ff 512 --type q5_K
         --embd-type q5_K)
set_tests_properties(cli_mkgguf_tiny_q5_K PROPERTIES FIXTURES_SETUP tiny_q5_K LABELS unit)
foreach(arm eager replay)
  memra_cli(cli_gate_tiny_q5_K_${arm} unit ${CMAKE_COMMAND} -E env MEMRA_PP_STAGES=3 MEMRA_PP_DEVICES=0,1,2
            MEMRA_PP_OVERLAP=1 $<TARGET_FILE:memra-gate> ${arm} -m ${TINY_Q5K})
  set_tests_properties(cli_gate_tiny_q5_K_${arm} PROPERTIES FIXTURES_REQUIRED tiny_q5_K)
endforeach()
# the fast mode: q5_K through the int8 K-quant GEMM (kernels/x8_kquant.c)
memra_cli(cli_gate_tiny_q5_K_batch_x8 unit ${CMAKE_COMMAND} -E env MEMRA_PP_STAGES=3 MEMRA_PP_DEVICES=0,1,2
          MEMRA_CPU_X8=1 $<TARGET_FILE:memra-gate> batch -m ${TINY_Q5K})
set_tests_properties(cli_gate_tiny_q5_K_batch_x8 PROPERTIES FIXTURES_REQUIRED tiny_q5_K)
# a gate whose split never runs exits 1 (door shut: vacuous), and a refused seam exits 2 with the message
memra_cli(cli_gate_door_shut_fails unit $<TARGET_FILE:memra-gate> eager -m ${TINY})
set_tests_properties(cli_gate_door_shut_fails PROPERTIES WILL_FAIL TRUE)
memra_cli(cli_gate_batch_refused unit ${CMAKE_COMMAND} -E env MEMRA_PP_STAGES=2 MEMRA_PP_DEVICES=0,1 MEMRA_BATCH_PP=0
          $<TARGET_FILE:memra-gate> batch -m ${TINY})
set_tests_properties(cli_gate_batch_refused PROPERTIES PASS_REGULAR_EXPRESSION "refused: .*Use MEMRA_BATCH_PP=1")

# The real model (normal leg only): gates over N, cut lists and placements, and real text.
if(TRUE) # without the file these fail loudly in the normal leg: scripts/setup fetches it
  set(M ${MEMRA_MODEL_PATH})
  set(cases
    "eager|MEMRA_PP_STAGES=2|MEMRA_PP_DEVICES=0,1"
    "replay|MEMRA_PP_STAGES=2|MEMRA_PP_DEVICES=0,1|MEMRA_PP_OVERLAP=1"
    "replay|MEMRA_PP_STAGES=3|MEMRA_PP_SPLITS=4,20"
    "eager|MEMRA_PP_STAGES=4|MEMRA_PP_DEVICES=0,0,1,1"
    "replay|MEMRA_PP_STAGES=5|MEMRA_PP_SPLITS=1,2,3,29|MEMRA_PP_DEVICES=0,1,2,3,4|MEMRA_PP_OVERLAP=1"
    "replay|MEMRA_PP_STAGES=8|MEMRA_PP_DEVICES=0,1,2,3,4,5,6,7|MEMRA_PP_OVERLAP=1"
    "eager|MEMRA_PP_STAGES=8|MEMRA_PP_SPLITS=3,7,11,15,19,23,27"
    "replay|MEMRA_PP_STAGES=6|MEMRA_PP_DEVICES=0,0,1,1,2,2|MEMRA_PP_OVERLAP=1"
    "eager|MEMRA_PP_STAGES=7|MEMRA_PP_SPLITS=2,6,9,14,20,25|MEMRA_PP_DEVICES=6,5,4,3,2,1,0"
    "batch|MEMRA_PP_STAGES=8|MEMRA_PP_DEVICES=0,1,2,3,4,5,6,7"
    "prime|MEMRA_PP_STAGES=6|MEMRA_PP_SPLITS=5,10,15,20,25|MEMRA_PP_DEVICES=0,1,2,3,4,5"
    "spec|MEMRA_PP_STAGES=4|MEMRA_PP_SPLITS=1,2,29"
    "eager|MEMRA_PP_STAGES=2|MEMRA_PP_DEVICES=0,1|MEMRA_PP_SHARD=0"
    "batch|MEMRA_PP_STAGES=2|MEMRA_PP_DEVICES=0,1"
    "prime|MEMRA_PP_STAGES=2|MEMRA_PP_DEVICES=0,1"
    "prime-batch|MEMRA_PP_STAGES=3|MEMRA_PP_DEVICES=0,1,2"
    "spec|MEMRA_PP_STAGES=2|MEMRA_PP_DEVICES=0,1"
    "replay|MEMRA_PP_STAGES=3|MEMRA_PP_DEVICES=0,1,2|MEMRA_PP_OVERLAP=1|MEMRA_KV_TYPE=f16"
    "prime|MEMRA_PP_STAGES=2|MEMRA_PP_DEVICES=0,1|MEMRA_KV_TYPE=bf16"
    "batch|MEMRA_PP_STAGES=2|MEMRA_PP_DEVICES=0,1|MEMRA_ACT_TYPE=bf16"
    "spec|MEMRA_PP_STAGES=3|MEMRA_PP_DEVICES=0,1,2|MEMRA_ACT_TYPE=f16"
    "batch|MEMRA_PP_STAGES=3|MEMRA_PP_DEVICES=0,1,2|MEMRA_CPU_X8=1"
    "prime|MEMRA_PP_STAGES=3|MEMRA_PP_DEVICES=0,1,2|MEMRA_CPU_X8=1")
  if(OpenMP_C_FOUND) # a matmul split over a thread team; a build without OpenMP refuses MEMRA_CPU_THREADS > 1
    list(APPEND cases "batch|MEMRA_PP_STAGES=2|MEMRA_PP_DEVICES=0,1|MEMRA_CPU_X8=1|MEMRA_CPU_THREADS=2"
                      "replay|MEMRA_PP_STAGES=2|MEMRA_PP_DEVICES=0,1|MEMRA_CPU_THREADS=3")
  endif()
  set(i 0)
  foreach(c ${cases})
    string(REPLACE "|" ";" parts "${c}")
    list(POP_FRONT parts arm)
    memra_cli(cli_gate_smollm2_${i}_${arm} model ${CMAKE_COMMAND} -E env ${parts}
              $<TARGET_FILE:memra-gate> ${arm} -m ${M})
    math(EXPR i "${i} + 1")
  endforeach()
  memra_cli(cli_run_smollm2_greedy model $<TARGET_FILE:memra-run> -m ${M} -p "The capital of France is" -n 8
            --temp 0 --stages 2)
  set_tests_properties(cli_run_smollm2_greedy PROPERTIES PASS_REGULAR_EXPRESSION "The capital of France is Paris")
  # a 16-bit KV cache (half the memory) keeps the real model's answer
  memra_cli(cli_run_smollm2_greedy_kv_f16 model $<TARGET_FILE:memra-run> -m ${M} -p "The capital of France is" -n 8
            --temp 0 --kv-type f16)
  set_tests_properties(cli_run_smollm2_greedy_kv_f16 PROPERTIES PASS_REGULAR_EXPRESSION "Paris")
  # bf16 matmul inputs over two stages keep the real model's answer
  memra_cli(cli_run_smollm2_greedy_act_bf16 model $<TARGET_FILE:memra-run> -m ${M} -p "The capital of France is" -n 8
            --temp 0 --stages 2 --act-type bf16)
  set_tests_properties(cli_run_smollm2_greedy_act_bf16 PROPERTIES PASS_REGULAR_EXPRESSION "Paris")
endif()

# a bad --kv-type is named with what is allowed
memra_cli(cli_run_bad_kv_type unit $<TARGET_FILE:memra-run> -m ${TINY} -p hi --kv-type f8)
set_tests_properties(cli_run_bad_kv_type PROPERTIES PASS_REGULAR_EXPRESSION "--kv-type f8: expected f32, f16 or bf16")
memra_cli(cli_run_bad_act_type unit $<TARGET_FILE:memra-run> -m ${TINY} -p hi --act-type bf8)
set_tests_properties(cli_run_bad_act_type PROPERTIES PASS_REGULAR_EXPRESSION "--act-type bf8: expected f32, f16 or bf16")
# usage errors: one line naming what was wrong and "see memra-run --help", never the whole help text
memra_cli(cli_run_missing_model_is_named unit $<TARGET_FILE:memra-run> -p hi)
memra_cli(cli_run_too_many_devices_are_counted unit $<TARGET_FILE:memra-run> -m ${TINY} -p hi --stages 2
          --devices 0,1,2)
memra_cli(cli_run_flag_at_the_end_needs_a_value unit $<TARGET_FILE:memra-run> -m ${TINY} -p)
memra_cli(cli_run_unknown_option_is_one_line unit $<TARGET_FILE:memra-run> -m ${TINY} -p hi --bogus 1)
set_tests_properties(cli_run_missing_model_is_named PROPERTIES
  PASS_REGULAR_EXPRESSION "memra-run: no model given: -m MODEL.gguf is required \\(see memra-run --help\\)")
set_tests_properties(cli_run_too_many_devices_are_counted PROPERTIES
  PASS_REGULAR_EXPRESSION "--devices 0,1,2: 3 devices for --stages 2; give one device per stage")
set_tests_properties(cli_run_flag_at_the_end_needs_a_value PROPERTIES
  PASS_REGULAR_EXPRESSION "-p needs a value after it: expected the prompt text")
set_tests_properties(cli_run_unknown_option_is_one_line PROPERTIES
  PASS_REGULAR_EXPRESSION "unknown option '--bogus' \\(see memra-run --help\\)")
foreach(t cli_run_missing_model_is_named cli_run_too_many_devices_are_counted cli_run_flag_at_the_end_needs_a_value
          cli_run_unknown_option_is_one_line)
  set_tests_properties(${t} PROPERTIES FAIL_REGULAR_EXPRESSION "usage: memra-run|missing value")
endforeach()
# "door shut" is explained in --help and next to a library error that uses the words
memra_cli(cli_run_help_explains_door_shut unit $<TARGET_FILE:memra-run> --help)
set_tests_properties(cli_run_help_explains_door_shut PROPERTIES
  PASS_REGULAR_EXPRESSION "Doors are MEMRA_\\* environment variables.*door .shut. .unset, or.*one stage, no pipeline")
memra_cli(cli_run_door_error_explains_door_shut unit ${CMAKE_COMMAND} -E env MEMRA_PP_STAGES=two
          $<TARGET_FILE:memra-run> -m ${TINY} -p hi -n 2)
set_tests_properties(cli_run_door_error_explains_door_shut PROPERTIES
  PASS_REGULAR_EXPRESSION "MEMRA_PP_STAGES=two.*door shut means unset or off, the plain path: one stage, no pipeline")
# stdout starts with the prompt; stderr times the prompt and the generation apart
memra_cli(cli_run_echoes_prompt_and_splits_tok_s unit $<TARGET_FILE:memra-run> -m ${TINY} -p "hello world" -n 6
          --temp 0 --stages 2)
set_tests_properties(cli_run_echoes_prompt_and_splits_tok_s PROPERTIES PASS_REGULAR_EXPRESSION
  "hello world.*prompt: +[0-9]+ tokens in [0-9.]+ s \\([0-9.]+ tok/s, up to the first generated token\\)\nmemra-run: generation: +5 tokens in [0-9.]+ s \\([0-9.]+ generated tok/s, after the first\\)")

# --spec prints exactly plain greedy's text (tiny model in every leg; SmolLM2 in the normal leg)
memra_cli(cli_run_tiny_spec_equals_greedy unit sh ${CMAKE_CURRENT_SOURCE_DIR}/spec_equals_greedy.sh
          $<TARGET_FILE:memra-run> ${TINY} 3)
# --chat on a model without a chat template is named once (no doubled status); --chat-template gives it one; a
# template of an unknown format is refused before the model loads
memra_cli(cli_run_chat_without_a_template_is_named unit $<TARGET_FILE:memra-run> -m ${TINY} -p hi -n 2 --chat)
set_tests_properties(cli_run_chat_without_a_template_is_named PROPERTIES
  PASS_REGULAR_EXPRESSION "memra-run: prompt 1: MEMRA_E_UNSUPPORTED: memra_chat_apply: the model has no chat template"
  FAIL_REGULAR_EXPRESSION "UNSUPPORTED: MEMRA_E_UNSUPPORTED")
memra_cli(cli_run_chat_template_gives_a_model_one unit $<TARGET_FILE:memra-run> -m ${TINY} -p hi -n 2
          --chat-template chatml)
set_tests_properties(cli_run_chat_template_gives_a_model_one PROPERTIES
  PASS_REGULAR_EXPRESSION "1 sequence\\(s\\): [0-9]+ prompt \\+ [0-9]+ generated tokens")
memra_cli(cli_run_chat_template_of_an_unknown_format_is_refused unit sh -c
          "\"$0\" -m /nonexistent.gguf -p hi --chat-template bogus || echo \"exit $?\"" $<TARGET_FILE:memra-run>)
set_tests_properties(cli_run_chat_template_of_an_unknown_format_is_refused PROPERTIES
  PASS_REGULAR_EXPRESSION "--chat-template bogus: MEMRA_E_UNSUPPORTED: chat template not recognised .*chatml.*exit 2")
# -n past the context: both end where it fills (every position used), say so, and exit 0
memra_cli(cli_run_tiny_spec_equals_greedy_to_a_full_context unit sh ${CMAKE_CURRENT_SOURCE_DIR}/spec_equals_greedy.sh
          $<TARGET_FILE:memra-run> ${TINY} 2 500 128)
memra_cli(cli_run_smollm2_spec_equals_greedy model sh ${CMAKE_CURRENT_SOURCE_DIR}/spec_equals_greedy.sh
          $<TARGET_FILE:memra-run> ${MEMRA_MODEL_PATH} 2)
# memra-bench pp-scaling with device-fed steps (warm-up token + fed step, then each next step fed on the device):
# PP-2 decodes the tokens PP-1 does, and host, device and fed greedy decode the same tokens; --kernel-trace is
# refused on the CPU backend (or in a build without CUPTI)
memra_cli(cli_bench_pp_scaling_fed_same_tokens unit $<TARGET_FILE:memra-bench> pp-scaling -m ${TINY} --stages 2
          --seqs 2 --tokens 6 --device-argmax 2)
set_tests_properties(cli_bench_pp_scaling_fed_same_tokens PROPERTIES PASS_REGULAR_EXPRESSION "\\(same tokens\\)")
memra_cli(cli_bench_pp_scaling_fed_equals_host unit sh ${CMAKE_CURRENT_SOURCE_DIR}/bench_fed_equals_host.sh
          $<TARGET_FILE:memra-bench> ${TINY})
# --ctx sizes the KV cache: one position short of what --prompt, --tokens and the two warm-up steps need is refused up front,
# naming the count; exactly enough runs (its last timed token sits in the cache's last position)
memra_cli(cli_bench_pp_scaling_ctx_too_small_refused unit $<TARGET_FILE:memra-bench> pp-scaling -m ${TINY}
          --stages 2 --seqs 2 --tokens 4 --prompt 8 --ctx 13 --device-argmax 2)
set_tests_properties(cli_bench_pp_scaling_ctx_too_small_refused PROPERTIES PASS_REGULAR_EXPRESSION
  "--prompt 8 and --tokens 4 need 14 positions per sequence .2 warm-up steps.. the KV cache holds 13 .--ctx N sets it.")
memra_cli(cli_bench_pp_scaling_ctx_exactly_enough unit $<TARGET_FILE:memra-bench> pp-scaling -m ${TINY}
          --stages 2 --seqs 2 --tokens 4 --prompt 8 --ctx 14 --device-argmax 2)
set_tests_properties(cli_bench_pp_scaling_ctx_exactly_enough PROPERTIES PASS_REGULAR_EXPRESSION "\\(same tokens\\)")
# memra-bench serve: 8 requests through the scheduler and each alone on 2 stages (a file and a synthetic shape):
# every request decodes its own tokens among the others; a bad flag is refused naming it
memra_cli(cli_bench_serve_every_request_as_alone unit $<TARGET_FILE:memra-bench> serve -m ${TINY} --stages 2
          --seqs 8 --tokens 6 --prompt 5 --check-all 1)
set_tests_properties(cli_bench_serve_every_request_as_alone PROPERTIES PASS_REGULAR_EXPRESSION
  "requests with the same tokens alone and among 8: 8 of 8.*ratio=")
memra_cli(cli_bench_serve_synthetic unit $<TARGET_FILE:memra-bench> serve --synthetic tiny --stages 2 --seqs 4
          --tokens 4 --micro-batches 2)
set_tests_properties(cli_bench_serve_synthetic PROPERTIES PASS_REGULAR_EXPRESSION
  "micro-batches 2.*request 0: the same tokens alone and among 4: yes")
memra_cli(cli_bench_serve_bad_micro_batches unit $<TARGET_FILE:memra-bench> serve -m ${TINY} --seqs 2
          --micro-batches 3)
set_tests_properties(cli_bench_serve_bad_micro_batches PROPERTIES PASS_REGULAR_EXPRESSION
  "micro_batches = 3 \\(allowed 0..n_seq = 2")
memra_cli(cli_bench_unknown_subcommand_is_named unit $<TARGET_FILE:memra-bench> decoed -m ${TINY})
set_tests_properties(cli_bench_unknown_subcommand_is_named PROPERTIES
  PASS_REGULAR_EXPRESSION "memra-bench: unknown subcommand 'decoed'\nusage: memra-bench <subcommand>")
memra_cli(cli_bench_every_subcommand_has_help unit sh ${CMAKE_CURRENT_SOURCE_DIR}/bench_help.sh
          $<TARGET_FILE:memra-bench>)
set_tests_properties(cli_bench_every_subcommand_has_help PROPERTIES PASS_REGULAR_EXPRESSION "bench_help: OK")
memra_cli(cli_bench_kernel_trace_refused_on_cpu unit $<TARGET_FILE:memra-bench> pp-scaling -m ${TINY} --stages 2
          --kernel-trace ${CMAKE_BINARY_DIR}/kt.csv)
set_tests_properties(cli_bench_kernel_trace_refused_on_cpu PROPERTIES
  PASS_REGULAR_EXPRESSION "--kernel-trace traces CUDA kernels. this run's backend is the CPU;--kernel-trace needs a build with CUDA 13")

# The set-up scripts: apt-install waits (bounded) for a held apt/dpkg lock; configuring a built folder again
# rewrites no generated source, so scripts/setup's configure on every call rebuilds nothing
add_test(NAME scripts_apt_install_waits_for_the_dpkg_lock
         COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/apt_install_lock.sh ${PROJECT_SOURCE_DIR})
add_test(NAME scripts_reconfigure_rebuilds_nothing
         COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/reconfigure_keeps_build.sh ${PROJECT_SOURCE_DIR})
set_tests_properties(scripts_apt_install_waits_for_the_dpkg_lock PROPERTIES LABELS unit TIMEOUT 60
  PASS_REGULAR_EXPRESSION "apt-install lock: OK")
set_tests_properties(scripts_reconfigure_rebuilds_nothing PROPERTIES LABELS unit TIMEOUT 120
  PASS_REGULAR_EXPRESSION "reconfigure keeps the build: OK")
# SIGINT/SIGTERM mid-run: memra-run prints the text so far (one prompt: the same text as a run of that many
# tokens; several: each request's lines prefixed [i]), says so on stderr and exits 130 / 143
memra_cli(cli_run_sigint_prints_the_text_so_far_and_exits_130 unit sh ${CMAKE_CURRENT_SOURCE_DIR}/run_sigint.sh
          $<TARGET_FILE:memra-run> $<TARGET_FILE:memra-mkgguf>)
set_tests_properties(cli_run_sigint_prints_the_text_so_far_and_exits_130 PROPERTIES TIMEOUT 300)
