/* CUDA side of the planar weight layout (KRN_LAYOUT_PLANES, kernels/krn.h), callable from C: the repack
 * kernel (GGUF blocks -> planes, on the device that owns the tensor) and the GEMV over planes. Conventions
 * as kernels/cuda/krn_cuda.h: validate on the host, enqueue on cuda_stream, return at once with 0,
 * MEMRA_E_INVAL (err says what and what is allowed) or MEMRA_E_DEVICE (launch failed); the stream's device
 * must be current. Deterministic, batch-invariant, no atomics. */
#ifndef KRN_CUDA_KRN_CUDA_PLANES_H
#define KRN_CUDA_KRN_CUDA_PLANES_H

#ifdef __cplusplus
extern "C" {
#endif

#include "device/err.h"
#include "kernels/krn.h"

/* dst->data (planes) = src->data (GGUF blocks): same type (q8_0, q4_0, q4_1, q4_K, q6_K) and shape, src BLOCKS,
 * distinct device buffers of n_out * krn_row_bytes bytes, dst 16-byte aligned, src 2-byte aligned. Sets
 * dst->layout = KRN_LAYOUT_PLANES on success. One kernel, one thread per 16 output quant bytes. */
int krn_cuda_repack_async(void *cuda_stream, krn_weight *dst, const krn_weight *src, dev_err *err);

/* y (B, n_out) = x (B, n_in) @ W^T for a PLANES W (q8_0, q4_0, q4_1, q4_K, q6_K): W->data and x 16-byte aligned,
 * y and x not overlapping; B <= 8 rows per launch (larger B: one launch per 8 rows). A row's bits do not
 * depend on B (krn_cuda_matmul_p.cu). */
int krn_cuda_matmul_planes_async(void *cuda_stream, float *y, const krn_weight *W, const float *x, int B,
                                 dev_err *err);

/* dev_stream adapter (kernels/krn.c): krn_cuda_repack_async on dev_stream_native(s), err = NULL, with s's
 * device made current for the launch and the caller's restored. (The planes GEMV is reached through
 * krn_cuda_matmul, like every layout.) */
int krn_cuda_repack(dev_stream *s, krn_weight *dst, const krn_weight *src);

#ifdef __cplusplus
}
#endif

#endif
