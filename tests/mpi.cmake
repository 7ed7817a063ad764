# Stages in several processes (docs/scale-out.md): mpirun -np P over the real model (label model: the normal leg).
# Registered only in a build with MPI and an mpirun to launch it; a build without MPI has none of these.
if(MEMRA_HAVE_MPI)
  find_program(MEMRA_MPIRUN NAMES mpirun mpiexec)
endif()
if(MEMRA_HAVE_MPI AND MEMRA_MPIRUN)
  set(_mpi ${CMAKE_CURRENT_SOURCE_DIR}/mpi_scale_out.sh)
  function(memra_mpi_test name)
    add_test(NAME ${name} COMMAND sh ${_mpi} ${ARGN})
    set_tests_properties(${name} PROPERTIES LABELS model TIMEOUT 600 SKIP_RETURN_CODE 77
                         RUN_SERIAL TRUE ENVIRONMENT "MEMRA_BACKEND=cpu")
  endfunction()
  set(_a ${MEMRA_MPIRUN} ${PROJECT_BINARY_DIR} ${MEMRA_MODEL_PATH})
  foreach(arm eager replay batch prime)
    memra_mpi_test(mpi_two_ranks_gate_${arm}_is_bit_identical gate ${_a} ${arm} 2)
    memra_mpi_test(mpi_four_ranks_gate_${arm}_is_bit_identical gate ${_a} ${arm} 4)
  endforeach()
  foreach(arm prime-batch spec)
    memra_mpi_test(mpi_two_ranks_gate_${arm}_is_bit_identical gate ${_a} ${arm} 2)
  endforeach()
  # several stages per rank: consecutive stages share a rank (a local boundary between them, MPI to the next rank)
  memra_mpi_test(mpi_four_stages_on_two_ranks_replay_is_bit_identical gate ${_a} replay 2
                 MEMRA_PP_STAGES=4 MEMRA_PP_OVERLAP=1)
  memra_mpi_test(mpi_five_stages_on_three_ranks_batch_is_bit_identical gate ${_a} batch 3
                 MEMRA_PP_STAGES=5 MEMRA_PP_DEVICES=0,1,0,1,0)
  # MEMRA_PP_DEVICES without MEMRA_PP_STAGES: one stage per rank opens the door before the doors are read
  memra_mpi_test(mpi_two_ranks_devices_without_stages_batch_is_bit_identical gate ${_a} batch 2
                 MEMRA_PP_DEVICES=0,1)
  # a synthetic shape travels in CREATE: every rank generates the same weights (its own layers only)
  memra_mpi_test(mpi_two_ranks_synthetic_model_batch_is_bit_identical gate ${MEMRA_MPIRUN} ${PROJECT_BINARY_DIR}
                 synthetic:tiny:q4_1 batch 2)
  # each boundary's transport, picked at create and printed by its producer's rank: host-staged MPI on the CPU
  # backend; MEMRA_PP_NCCL=0, read by rank 0 only, reaches boundary 1's producer (rank 1) through CREATE
  memra_mpi_test(mpi_three_ranks_on_the_cpu_say_each_boundary_is_host_staged_and_why pick ${_a} cpu - 0 3)
  memra_mpi_test(mpi_the_nccl_door_shut_on_rank_0_reaches_every_producer_rank pick ${_a} cpu - 0 3 MEMRA_PP_NCCL=0)
  # BND_NCCL's wiring without a GPU: MEMRA_TEST_NCCL_EMU=1 puts every boundary between ranks on the shared-memory
  # stand-in for NCCL (transport/bnd_shm.h, NCCL's stream semantics): the create-time pick and id, the header-only
  # wire, credits returned on enqueue, and a dying transport's abort of a stream waiting in a send; each test also
  # requires every boundary's line to name the stand-in
  function(memra_mpi_emu_test name)
    memra_mpi_test(${name} ${ARGN})
    set_tests_properties(${name} PROPERTIES ENVIRONMENT "MEMRA_BACKEND=cpu;MEMRA_TEST_NCCL_EMU=1")
  endfunction()
  foreach(arm eager replay batch prime prime-batch spec)
    memra_mpi_emu_test(mpi_nccl_stand_in_two_ranks_gate_${arm}_is_bit_identical gate ${_a} ${arm} 2)
  endforeach()
  memra_mpi_emu_test(mpi_nccl_stand_in_four_ranks_gate_batch_is_bit_identical gate ${_a} batch 4)
  memra_mpi_emu_test(mpi_nccl_stand_in_four_stages_on_two_ranks_overlapped_replay_is_bit_identical gate ${_a} replay 2
                     MEMRA_PP_STAGES=4 MEMRA_PP_OVERLAP=1)
  memra_mpi_emu_test(mpi_nccl_stand_in_five_stages_on_three_ranks_batch_is_bit_identical gate ${_a} batch 3
                     MEMRA_PP_STAGES=5 MEMRA_PP_DEVICES=0,1,0,1,0)
  memra_mpi_emu_test(mpi_nccl_stand_in_three_ranks_say_each_boundary_takes_it pick ${_a} cpu - 0 3)
  memra_mpi_emu_test(mpi_nccl_stand_in_with_the_door_shut_stays_host_staged pick ${_a} cpu - 0 2 MEMRA_PP_NCCL=0)
  memra_mpi_emu_test(mpi_nccl_stand_in_greedy_text_equals_one_process run ${_a} 2)
  memra_mpi_emu_test(mpi_nccl_stand_in_dead_rank_ends_every_rank_within_5s kill ${_a} KILL 1)
  memra_mpi_emu_test(mpi_nccl_stand_in_stuck_rank_ends_every_rank_within_5s kill ${_a} STOP 1)
  memra_mpi_test(mpi_two_ranks_greedy_text_equals_one_process run ${_a} 2)
  memra_mpi_test(mpi_four_ranks_greedy_text_equals_one_process run ${_a} 4)
  memra_mpi_test(mpi_two_ranks_each_load_only_their_layers load ${_a} 2)
  memra_mpi_test(mpi_four_ranks_each_load_only_their_layers load ${_a} 4)
  memra_mpi_test(mpi_dead_rank_ends_every_rank_within_5s kill ${_a} KILL 1)
  memra_mpi_test(mpi_stuck_rank_ends_every_rank_within_5s kill ${_a} STOP 1)
  memra_mpi_test(mpi_stuck_rank_0_ends_every_rank_within_5s kill ${_a} STOP 0)
  memra_mpi_test(mpi_ctrl_c_on_mpirun_ends_every_rank kill ${_a} INT mpirun)
  memra_mpi_test(mpi_rank_with_another_model_file_refuses refuse ${_a})
  memra_mpi_test(mpi_two_hosts_over_veth_gates_pass netns ${_a})
  # memra-server with its stage 1 in rank 1: the openai client's greedy chat = the one-process server's, SIGTERM on
  # rank 0 ends every process (tests/server_test.py mpi; exit 77 without the openai package)
  find_package(Python3 COMPONENTS Interpreter)
  if(TARGET memra-server AND Python3_Interpreter_FOUND)
    add_test(NAME mpi_two_ranks_server_chat_equals_one_process
             COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/server_test.py mpi
                     $<TARGET_FILE:memra-server> ${MEMRA_MPIRUN} ${MEMRA_MODEL_PATH})
    set_tests_properties(mpi_two_ranks_server_chat_equals_one_process PROPERTIES LABELS model TIMEOUT 600
                         SKIP_RETURN_CODE 77 RUN_SERIAL TRUE ENVIRONMENT "MEMRA_BACKEND=cpu")
  endif()
endif()
