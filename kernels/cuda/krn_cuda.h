/* The CUDA implementation of the op table (kernels/krn.h), callable from C. kernels/krn.c calls these when
 * a dev_stream is a CUDA stream, passing dev_stream_native(s) as cuda_stream (a cudaStream_t).
 *
 * Every function has the parameters of its krn_*_async twin, with `void *cuda_stream` in place of the
 * dev_stream and an optional `dev_err *err` last (NULL allowed). It validates the arguments on the host,
 * enqueues one or two kernels on cuda_stream and returns at once: 0, MEMRA_E_INVAL (bad shape, type or
 * alignment; err says which and what is allowed) or MEMRA_E_DEVICE (launch failed: err names the kernel
 * and the CUDA error, read with cudaGetLastError). B == 0 is a no-op. The stream's device must be current
 * on the calling thread (cudaSetDevice), as for any CUDA launch. Pointers are device memory reachable from
 * that device. Data-dependent faults are not reported: kv_store drops a row whose pos is outside
 * [0, n_ctx), attention clamps pos into it, seq is trusted (the caller checks both on the host), and
 * embed_rows writes zeros for a token outside the table.
 *
 * Deterministic: every reduction has a fixed order and no atomics, so the same inputs give the same bits
 * on any stream and any run. Matmul row results also do not depend on B (a row of a batch of 8 has the
 * bits it has alone). Nothing here allocates except attention with n_ctx > KRN_CUDA_ATT_CHUNK, which takes
 * a stream-ordered workspace (cudaMallocAsync/cudaFreeAsync on cuda_stream). docs/cuda-kernels.md has the
 * kernel designs. */
#ifndef KRN_CUDA_KRN_CUDA_H
#define KRN_CUDA_KRN_CUDA_H

#include <stdint.h>

/* The project's headers are C: in a .cu (C++) translation unit they must get C linkage. */
#ifdef __cplusplus
extern "C" {
#endif

#include "device/err.h"
#include "kernels/krn.h"

/* Keys per split of the decode attention (split-K flash decoding): MEMRA_CUDA_ATT_CHUNK picks 64, 128 or
 * 256 (the largest, KRN_CUDA_ATT_CHUNK, sizes the block's score buffer) for the whole process, so results
 * never depend on the GPU or on n_ctx. */
#define KRN_CUDA_ATT_CHUNK 256
#define KRN_CUDA_ATT_MIN_CHUNK 64
#define KRN_CUDA_ATT_CHUNK_DEFAULT 64 /* 8B bf16, 200 / 900 keys: 12 / 11 % faster than 256 (docs/cuda-kernels.md) */
/* The largest chunk count whose merge runs fused in the chunk kernel (MEMRA_CUDA_ATT_FUSE; see krn_cuda_attention.cu).
 * 0: never, the combine kernel merges. The fused merge saves the combine's launch, which pays only while rows fit one
 * chunk, and there the caller's keys bound (krn_rope_store.keys) skips the merge itself: with it the 8B step takes
 * 3862.7 us with the combine against 3863.2 fused at an 8-token prompt, 3977.3 against 3984.1 at 200 keys;
 * at 500 and 900 keys the fused merge costs 19 and 26 us more (docs/cuda-kernels.md "Attention"). */
#define KRN_CUDA_ATT_FUSE_DEFAULT 0
/* Largest head_dim attention accepts (a multiple of 4). */
#define KRN_CUDA_ATT_MAX_HEAD_DIM 256

/* y (B, n) = x (B, n) / rms(x) * w (n,)    one block per row; y of activation type yt (KRN_F32, KRN_F16,
 * KRN_BF16: f32 math, rounded to nearest even on store) */
int krn_cuda_rmsnorm_async(void *cuda_stream, void *y, int yt, const float *x, const float *w, int B, int n,
                           float eps, dev_err *err);

/* y (B, n_out) = x (B, n_in) @ W^T: fused dequant GEMV, one warp per output row, B <= 8 rows per launch
 * (larger B: one launch per 8 rows). W->data must be 2-byte aligned (f32: 4); for block types x must be
 * 16-byte aligned. y and x must not overlap. */
int krn_cuda_matmul_async(void *cuda_stream, float *y, const krn_weight *W, const float *x, int B, dev_err *err);

/* krn_matmul_parts_x_async / krn_matmul_acc_x_async: y_i (=, or += when acc) x @ W_i^T for n parts sharing
 * x and n_in; x->x of activation type x->type (16-bit rows are widened exactly on load: the bits of the f32
 * product over the widened rows); PLANES parts read x->x8 instead when it is not NULL (kernels/krn.h,
 * krn_cuda_matmul_x8.cu; 16-byte aligned). Parts of one float type (f32/f16/bf16) with 16-byte aligned data and n_in % 8 == 0 go in one
 * launch per 8 rows of x (the grid walks the parts' rows as one list); any other mix is one launch per part.
 * The bits of each y_i are those of krn_cuda_matmul_async (plus, with acc, of one float add). */
int krn_cuda_matmul_parts_async(void *cuda_stream, const krn_mm_part *parts, int n, const krn_mm_x *x, int B,
                                int acc, dev_err *err);

/* krn_matmul_swiglu_x_async's fused GEMV at B = 1 (kernels/krn.h): y (1, n) of x->type = silu(x Wg^T) * (x Wu^T),
 * each warp a gate row then its up row, lane 0 storing y; MEMRA_PDL as the GEMVs (MEMRA_CUDA_GLU, docs/doors.md).
 * krn_cuda_glu_fits says when it applies: B = 1, Wg and Wu one float type (not PLANES), n_in % 8 == 0, their data
 * and x 16-byte aligned, yt == x->type, y aligned to its element and sharing no byte with x (a warp stores its
 * unit while others still read x: the forward's 16-bit activation buffer holds xb and h alike, so there the op
 * composes the two ops), and MEMRA_CUDA_GLU not 0 (cuBLAS never takes B = 1: krn_cuda_gemm.cuh). */
int krn_cuda_glu_fits(const void *y, int yt, const krn_weight *Wg, const krn_weight *Wu, const krn_mm_x *x, int B);
int krn_cuda_matmul_swiglu_async(void *cuda_stream, void *y, const krn_weight *Wg, const krn_weight *Wu,
                                 const krn_mm_x *x, dev_err *err);

/* xq (B * krn_x8_row_bytes(n) bytes, 16-byte aligned) = x (B, n) of activation type xt quantized to int8 per
 * 32-block: the bytes of krn_x8_quantize_host over the (widened) rows. One warp per block. */
int krn_cuda_quantize_x8_async(void *cuda_stream, void *xq, const void *x, int xt, int B, int n, dev_err *err);

/* y (B, n) += bias (n,) */
int krn_cuda_add_bias_async(void *cuda_stream, float *y, const float *bias, int B, int n, dev_err *err);

/* Rotary embedding in place on x (B, n_heads*head_dim) at pos (B,); see krn_rope_async. n_rot even,
 * n_rot <= head_dim. */
int krn_cuda_rope_async(void *cuda_stream, float *x, const int32_t *pos, int B, int n_heads, int head_dim,
                        int n_rot, float freq_base, float freq_scale, int neox, dev_err *err);

/* k, v (B, kv_dim) -> the caches c (n_seq, n_ctx, kv_dim) at [seq[b], pos[b]] (f16/bf16: rounded to nearest
 * even) */
int krn_cuda_kv_store_async(void *cuda_stream, const krn_kv_cache *c, const float *k, const float *v,
                            const int32_t *seq, const int32_t *pos, int B, int kv_dim, int n_ctx, dev_err *err);

/* krn_rope_store_async: rope q and k, store k and v at [seq, pos]; the bits of rope, rope, kv_store. */
int krn_cuda_rope_store_async(void *cuda_stream, const krn_rope_store *a, dev_err *err);

/* Causal GQA attention, see krn_attention_async. head_dim % 4 == 0 and <= KRN_CUDA_ATT_MAX_HEAD_DIM; q,
 * out and the caches 16-byte aligned. n_ctx <= the chunk size: one kernel (one block per (row, head));
 * larger: split-K over chunks of that many keys + a fixed-order combine (same bits as the one-kernel path
 * for keys below one chunk). */
int krn_cuda_attention_async(void *cuda_stream, float *out, const float *q, const krn_kv_cache *c,
                             const int32_t *seq, const int32_t *pos, int B, int n_head, int n_head_kv, int head_dim,
                             int n_ctx, dev_err *err);
/* The same with the split path's workspace given (see krn_attention_ws_async): ws of ws_bytes >=
 * krn_attention_ws_bytes(...), its tickets zero (krn.h), is used and nothing is allocated (the merge fused into
 * the chunk kernel when MEMRA_CUDA_ATT_FUSE allows); NULL or smaller: allocated per call. out of
 * activation type out_t (f32 math, rounded on store; the workspace stays f32). */
int krn_cuda_attention_ws_async(void *cuda_stream, void *out, int out_t, const float *q, const krn_kv_cache *c,
                                const int32_t *seq, const int32_t *pos, int B, int n_head, int n_head_kv,
                                int head_dim, int n_ctx, float *ws, size_t ws_bytes, dev_err *err);
/* krn_cuda_rope_store_async then krn_cuda_attention_ws_async (a's q, cache, seq, pos, shape), with rope's work
 * done inside the attention kernel at B = 1 (MEMRA_CUDA_ATT_ROPE): each block turns its own q heads and the row's
 * k in registers, and the chunk holding the row's position stores k and v. The same bits as the two ops; a's q and
 * k are then left unrotated (nothing reads them after attention). Other shapes take the two ops. */
int krn_cuda_rope_attention_async(void *cuda_stream, void *out, int out_t, const krn_rope_store *a, float *ws,
                                  size_t ws_bytes, dev_err *err);
/* Liveness counter: krn_cuda_rope_attention_async calls that ran rope inside the attention kernel. */
uint64_t krn_cuda_rope_attention_fused_count(void);
/* Liveness counter: attention calls whose merge ran fused in the chunk kernel (MEMRA_CUDA_ATT_FUSE) since the
 * process started, all streams. */
uint64_t krn_cuda_attention_fused_count(void);

/* y (B, n) = silu(gate) * up, y of activation type yt (a 16-bit y must not overlap gate or up) */
int krn_cuda_swiglu_async(void *cuda_stream, void *y, int yt, const float *gate, const float *up, int B, int n,
                          dev_err *err);

/* y (B, n) += a (B, n) */
int krn_cuda_add_async(void *cuda_stream, float *y, const float *a, int B, int n, dev_err *err);

/* out (B,) = argmax of each row of x (B, n); ties -> lowest index; NaN never wins; -1 when nothing in the row
 * is above -inf. dup (may be NULL): the same indices again, at dup[b], or with dup_at at dup[dup_at[b]] when that
 * is in [0, n_dup) (krn_argmax_dup_async). */
int krn_cuda_argmax_async(void *cuda_stream, int32_t *out, int32_t *dup, const int32_t *dup_at, int n_dup,
                          const float *x, int B, int n, dev_err *err);

/* y (B, T->n_in) = rows tokens[b] of the table T dequantized to f32: the bits of krn_dequant_row for every
 * finite (and infinite) value of every type (a NaN gives a NaN whose payload may differ from the host's). A
 * token outside [0, T->n_out) gives a row of zeros (not reported). T: any type, layout BLOCKS, n_in a multiple
 * of the type's block; no alignment needed (bytes are read one by one); y must not overlap T or tokens. One
 * block per row (krn_cuda_embed.cu). */
int krn_cuda_embed_rows_async(void *cuda_stream, float *y, const krn_weight *T, const int32_t *tokens, int B,
                              dev_err *err);

/* Programmatic dependent launch (MEMRA_PDL, sm_90) for the kernels the CALLING THREAD enqueues from now on:
 * on = 1 launches each with cudaLaunchKernelEx + cudaLaunchAttributeProgrammaticStreamSerialization, so a
 * kernel's blocks may be scheduled while its predecessor on the stream finishes; every kernel of this
 * table waits (griddepcontrol.wait) for its predecessor's completion before its first memory access, so
 * results are the same bits either way. Thread-local; default 0. Returns the previous setting. */
int krn_cuda_set_pdl(int on);

/* ---- dev_stream adapters: krn_cuda_<op>(s, same arguments as krn_<op>_async), the form kernels/krn.c
 * dispatches to. Each calls its _async twin on dev_stream_native(s) with err = NULL (the status code is
 * all that comes back; call the _async form directly for the message). s must be a CUDA stream; its
 * device is made current for the launch and the caller's current device restored. ---- */
int krn_cuda_rmsnorm_t(dev_stream *s, void *y, int yt, const float *x, const float *w, int B, int n, float eps);
int krn_cuda_matmul(dev_stream *s, float *y, const krn_weight *W, const float *x, int B);
int krn_cuda_matmul_parts_x(dev_stream *s, const krn_mm_part *parts, int n, const krn_mm_x *x, int B);
int krn_cuda_matmul_acc_x(dev_stream *s, float *y, const krn_weight *W, const krn_mm_x *x, int B);
int krn_cuda_quantize_x8_t(dev_stream *s, void *xq, const void *x, int xt, int B, int n);
int krn_cuda_add_bias(dev_stream *s, float *y, const float *bias, int B, int n);
int krn_cuda_rope(dev_stream *s, float *x, const int32_t *pos, int B, int n_heads, int head_dim, int n_rot,
                  float freq_base, float freq_scale, int neox);
int krn_cuda_rope_store(dev_stream *s, const krn_rope_store *a);
int krn_cuda_kv_store(dev_stream *s, const krn_kv_cache *c, const float *k, const float *v, const int32_t *seq,
                      const int32_t *pos, int B, int kv_dim, int n_ctx);
int krn_cuda_attention_t(dev_stream *s, void *out, int out_t, const float *q, const krn_kv_cache *c,
                         const int32_t *seq, const int32_t *pos, int B, int n_head, int n_head_kv, int head_dim,
                         int n_ctx, float *ws, size_t ws_bytes);
int krn_cuda_rope_attention_t(dev_stream *s, void *out, int out_t, const krn_rope_store *a, float *ws,
                              size_t ws_bytes);
int krn_cuda_swiglu_t(dev_stream *s, void *y, int yt, const float *gate, const float *up, int B, int n);
/* krn_matmul_swiglu_x_async's fused GEMV when it applies (*done = 1; see kernels/krn.h), else *done = 0 and
 * nothing is enqueued (the caller composes the two ops). */
int krn_cuda_matmul_swiglu_x(dev_stream *s, void *y, int yt, const krn_weight *Wg, const krn_weight *Wu,
                             const krn_mm_x *x, int B, int *done);
int krn_cuda_add(dev_stream *s, float *y, const float *a, int B, int n);
int krn_cuda_argmax(dev_stream *s, int32_t *out, int32_t *dup, const int32_t *dup_at, int n_dup, const float *x, int B,
                    int n);
int krn_cuda_embed_rows(dev_stream *s, float *y, const krn_weight *T, const int32_t *tokens, int B);

#ifdef __cplusplus
}
#endif

#endif
