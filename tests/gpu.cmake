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
