# gpu_kernels' attention tests once more with 256-key chunks (MEMRA_CUDA_ATT_CHUNK is read once per process): each
# warp then takes several batches of 8 keys per chunk, the path where an f32 cache's later V batches are staged
# inside the values loop (the default 64-key chunks give every warp one batch).
if(TARGET gpu_kernels)
  add_test(NAME gpu_kernels_att_chunk256 COMMAND gpu_kernels)
  set_tests_properties(gpu_kernels_att_chunk256 PROPERTIES LABELS gpu TIMEOUT 600 SKIP_RETURN_CODE 77
    ENVIRONMENT "MEMRA_CUDA_ATT_CHUNK=256;GPU_KERNELS_ONLY=test_attention*;MEMRA_BACKEND=cpu")
endif()

# gpu_kernels' attention tests once more with the chunks' merge fused into the chunk kernel wherever a workspace is
# given (MEMRA_CUDA_ATT_FUSE=64; the default, 0, never fuses): test_attention_fused_merge_reuses_its_tickets
# (63 chunks) and the given-workspace rows then hold the fused merge to the combine kernel's bits.
if(TARGET gpu_kernels)
  add_test(NAME gpu_kernels_att_fuse COMMAND gpu_kernels)
  set_tests_properties(gpu_kernels_att_fuse PROPERTIES LABELS gpu TIMEOUT 600 SKIP_RETURN_CODE 77
    ENVIRONMENT "MEMRA_CUDA_ATT_FUSE=64;GPU_KERNELS_ONLY=test_attention*;MEMRA_BACKEND=cpu")
endif()

# ... and with the combine kernel at every chunk count (MEMRA_CUDA_ATT_FUSE=0, the default, set here explicitly).
if(TARGET gpu_kernels)
  add_test(NAME gpu_kernels_att_combine COMMAND gpu_kernels)
  set_tests_properties(gpu_kernels_att_combine PROPERTIES LABELS gpu TIMEOUT 600 SKIP_RETURN_CODE 77
    ENVIRONMENT "MEMRA_CUDA_ATT_FUSE=0;GPU_KERNELS_ONLY=test_attention*;MEMRA_BACKEND=cpu")
endif()

# gpu_glu once more with 4 loads per batch (MEMRA_CUDA_MM_DEEP=0; the default walks 8 on 16-bit weights): the fused
# gate/up + swiglu GEMV's other walk, the same bits as the two ops.
if(TARGET gpu_glu)
  add_test(NAME gpu_glu_u4 COMMAND gpu_glu)
  set_tests_properties(gpu_glu_u4 PROPERTIES LABELS gpu TIMEOUT 600 SKIP_RETURN_CODE 77
    ENVIRONMENT "MEMRA_CUDA_MM_DEEP=0;MEMRA_BACKEND=cpu")
endif()

# Two MPI ranks on the CUDA backend (docs/scale-out-nccl.md "What is chosen when"): memra-gate replay under
# mpirun -np 2 is bit-identical, and the line boundary 0 prints names the transport it must take. On GPUs 0 and 1
# with NCCL built: NCCL (skips with fewer than 2 GPUs); the same with MEMRA_PP_NCCL=0: host-staged MPI naming the
# door; both ranks on GPU 0: host-staged MPI naming the one GPU (NCCL refuses two ranks on one GPU). Skips without
# an MPI build or mpirun. The model is a synthetic shape (no file on a GPU machine): every rank generates it.
if(MEMRA_HAVE_CUDA)
  if(MEMRA_HAVE_MPI)
    find_program(MEMRA_MPIRUN NAMES mpirun mpiexec)
  endif()
  if(MEMRA_HAVE_NCCL)
    set(_nccl_built 1)
  else()
    set(_nccl_built 0)
  endif()
  function(memra_mpi_gpu_test name)
    if(MEMRA_HAVE_MPI AND MEMRA_MPIRUN)
      add_test(NAME ${name} COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/mpi_scale_out.sh pick ${MEMRA_MPIRUN}
               ${PROJECT_BINARY_DIR} synthetic:tiny:bf16 cuda ${ARGN})
    else()
      add_test(NAME ${name} COMMAND sh -c "echo 'SKIP: this build has no MPI or no mpirun (MEMRA_MPI, openmpi-bin)'; exit 77")
    endif()
    set_tests_properties(${name} PROPERTIES LABELS gpu TIMEOUT 600 SKIP_RETURN_CODE 77 RUN_SERIAL TRUE)
  endfunction()
  memra_mpi_gpu_test(mpi_two_gpus_replay_takes_nccl_and_is_bit_identical 0,1 ${_nccl_built} 2)
  memra_mpi_gpu_test(mpi_two_gpus_with_the_nccl_door_shut_replay_is_host_staged_and_bit_identical 0,1
                     ${_nccl_built} 2 MEMRA_PP_NCCL=0)
  memra_mpi_gpu_test(mpi_two_ranks_on_one_gpu_replay_is_host_staged_and_bit_identical 0,0 ${_nccl_built} 2)
endif()
