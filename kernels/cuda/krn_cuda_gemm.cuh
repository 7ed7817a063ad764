/* cuBLAS GEMM for large B (kernels/cuda/krn_cuda_gemm.cu): y (B, n_out) = x (B, n_in) @ W^T on tensor
 * cores when B is large enough that the fused GEMV (which reads W once per 8 rows of x) loses.
 * Plain C declarations: included by krn_cuda_dispatch.cu, by tests/gpu_gemm.c and by memra-bench; not part
 * of the op table (krn_cuda.h), which reaches it through krn_cuda_matmul.
 *
 * Which weights: f16 and bf16 (x is rounded to W's type by a small kernel, then cublasGemmEx with fp32
 * accumulation, CUBLAS_COMPUTE_32F) and f32 (cublasGemmEx 32F, no TF32: CUBLAS_DEFAULT_MATH). Block types
 * (q8_0, q4_*, q6_k) always take the fused dequant GEMV. Also required, else the GEMV runs: n_in % 8 == 0,
 * W->data and y 16-byte aligned, for f32 x 16-byte aligned too (so cuBLAS's algorithm choice, and hence
 * the bits, depend on the shape only).
 *
 * x of an activation type (the _x forms; kernels/krn.h "activation types"): x of W's own 16-bit type is passed
 * to cuBLAS as it is, no conversion kernel (when 16-byte aligned; else it is copied into the conversion buffer
 * first); any other x is converted from its type into the buffer (16-bit x widened exactly, then rounded to W's
 * type; for f32 W, widened to f32). The buffer holds the bytes the f32-x path would convert to when x holds
 * the widened values, so the result has that path's bits, given the same shape and operands aligned alike
 * (cudaMalloc'd buffers: 256 bytes).
 *
 * State: one cuBLAS handle + a 32 MiB workspace + a grow-only conversion buffer PER dev_stream, attached to
 * it (dev_stream_attach, slot DEV_SLOT_KRN_GEMM), created on the stream's first large-B matmul (or by
 * krn_cuda_gemm_prepare) and freed by dev_stream_destroy. Two streams (two stages on one GPU) never share
 * a handle or a workspace. Call every function here from the thread that enqueues on s.
 *
 * Determinism: the same shape on the same GPU model, toolkit and cuBLAS gives the same bits on any run and
 * any stream (one handle per stream with its own workspace, no atomics mode). NOT batch-invariant: a row's
 * bits depend on B (cuBLAS picks kernels per shape), which is why the threshold is never below 16 (decode
 * and speculative verify, B <= 9, stay on the batch-invariant GEMV). */
#ifndef KRN_CUDA_GEMM_CUH
#define KRN_CUDA_GEMM_CUH

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "device/dev.h"
#include "device/err.h"
#include "kernels/krn.h"

#define KRN_CUDA_GEMM_MIN_B_DEFAULT 2        /* threshold when MEMRA_CUDA_GEMM_MIN_B is unset or invalid: the floor.
                                              * On the 8B shapes cuBLAS costs about the GEMV's B = 1 time at every
                                              * B up to 64, while the GEMV is fp32-FMA bound above B = 1 (3.3-4.2x at
                                              * B = 8, docs/bench/gpu-kernels.md). A batch-invariant stream
                                              * (krn_stream_set_batch_invariant) never takes cuBLAS. */
#define KRN_CUDA_GEMM_MIN_B_FLOOR 2          /* smallest threshold used (1 is raised to it: one row stays on the GEMV) */
#define KRN_CUDA_GEMM_WORKSPACE (32u << 20)  /* cuBLAS workspace per stream, bytes (Hopper's recommendation) */

/* The threshold in force: 0 = cuBLAS never used, else B >= this takes cuBLAS. From MEMRA_CUDA_GEMM_MIN_B
 * (read once per process): unset or empty -> KRN_CUDA_GEMM_MIN_B_DEFAULT; 0 -> 0; 1 -> 2; larger ->
 * itself; not an integer >= 0 -> the default, with one warning on stderr naming the value. krn_cuda_gemm_set_min_b overrides it. Thread-safe, a relaxed load. */
int krn_cuda_gemm_min_b(void);

/* Test/bench hook: force the threshold to min_b (same clamping as the variable; < 0 = back to the
 * variable's value). Process-wide; set it while no thread enqueues matmuls. Returns the previous value. */
int krn_cuda_gemm_set_min_b(int min_b);

/* 1 when W's type, shape and alignment (with these y, x) let the cuBLAS path run at all (ignores B and
 * the threshold), else 0. Host-only, no CUDA call. */
int krn_cuda_gemm_eligible(const krn_weight *W, float *y, const float *x);
/* The same for x of activation type xt (f32 x: as above; 16-bit x: aligned to its element). */
int krn_cuda_gemm_eligible_x(const krn_weight *W, float *y, const void *x, int xt);

/* The hook krn_cuda_matmul calls first: when eligible and B >= the threshold (> 0), enqueue the cuBLAS
 * GEMM on s and set *done = 1; otherwise *done = 0 and nothing is enqueued (the caller runs the GEMV).
 * Returns 0, or MEMRA_E_DEVICE / MEMRA_E_NOMEM (state creation or a cuBLAS call failed; err says which)
 * with *done = 1 (do not run the GEMV over a half-enqueued op). s must be a CUDA stream; its device is
 * made current for the call and the caller's restored. Cost: a capture-status query and, on the first use
 * per stream, cublasCreate + a 32 MiB cudaMalloc. */
int krn_cuda_gemm_try(dev_stream *s, float *y, const krn_weight *W, const float *x, int B, int *done,
                      dev_err *err);

/* krn_cuda_gemm_try over x of activation type xt (what krn_matmul_parts_x_async / krn_matmul_acc_x_async
 * reach; a krn_mm_x's x8 is not read here: PLANES weights never take cuBLAS); acc = 1: y += x @ W^T, the add
 * in cuBLAS's epilogue (beta = 1). */
int krn_cuda_gemm_try_x(dev_stream *s, float *y, const krn_weight *W, const void *x, int xt, int B, int acc,
                        int *done, dev_err *err);

/* Enqueue the cuBLAS path regardless of the threshold (the benchmark and tests compare it with the
 * GEMV). MEMRA_E_INVAL when not krn_cuda_gemm_eligible or B < 1; else as krn_cuda_gemm_try. */
int krn_cuda_gemm_async(dev_stream *s, float *y, const krn_weight *W, const float *x, int B, dev_err *err);
/* The same over x of activation type xt (MEMRA_E_INVAL when not krn_cuda_gemm_eligible_x). */
int krn_cuda_gemm_x_async(dev_stream *s, float *y, const krn_weight *W, const void *x, int xt, int B, dev_err *err);

/* Create s's cuBLAS state now (no-op when it exists or the threshold is 0), so that no handle is created
 * inside a later graph capture. Host-synchronous for the allocations. 0 or MEMRA_E_DEVICE/NOMEM. */
int krn_cuda_gemm_prepare(dev_stream *s, dev_err *err);

/* Liveness counter: cuBLAS GEMMs enqueued (or captured) since the process started, all streams. */
uint64_t krn_cuda_gemm_count(void);

#ifdef __cplusplus
}
#endif

#endif
