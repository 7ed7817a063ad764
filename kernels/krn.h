/* The op table: every operation the model's forward needs, enqueued on a stream (`_async`, returns at once).
 * Each op dispatches on the stream's backend: kernels/cpu/ (a dev_launch_cpu_async op declaring the
 * buffers it touches) or kernels/cuda/. All pointers are device memory of the stream's device or of a
 * device it holds a peer grant for. B is the number of rows (tokens) in the op; rows are independent
 * except in attention, where row b of sequence seq[b] attends over that sequence's cache [0, pos[b]].
 * Every op is deterministic: fixed reduction order, no atomics in reductions, so the same inputs give the
 * same bits on any stream, device or stage. Returns 0 or MEMRA_E_* (bad shape/type: MEMRA_E_INVAL). */
#ifndef KRN_KRN_H
#define KRN_KRN_H

#include <stdint.h>
#include "device/dev.h"
#include "kernels/quant.h"

/* A weight matrix W (n_out, n_in) of type `type`, row-major (each of n_out rows is krn_row_bytes(type,n_in)
 * bytes), living in device memory. A 1-D f32 vector (norm weight, bias) uses type KRN_F32, n_out = 1. */
typedef struct krn_weight {
    int type;         /* krn_type */
    int n_out, n_in;  /* rows, elements per row */
    const void *data; /* device pointer */
} krn_weight;

/* y (B, n) = x (B, n) / rms(x) * w (n,)    rms = sqrt(mean(x^2) + eps) */
int krn_rmsnorm_async(dev_stream *s, float *y, const float *x, const float *w, int B, int n, float eps);

/* y (B, n_out) = x (B, n_in) @ W^T (n_in, n_out)      (W of any krn_type) */
int krn_matmul_async(dev_stream *s, float *y, const krn_weight *W, const float *x, int B);

/* The fused forms of krn_matmul_async the forward uses: the same bits as the plain ops they replace, in
 * fewer CUDA launches (one GEMV walks every part's rows; the residual add happens in the GEMV's store). */
#define KRN_MM_PARTS 3 /* most matrices one krn_matmul_parts_async call takes (q, k, v) */
typedef struct krn_mm_part {
    float *y;            /* (B, W->n_out) */
    const krn_weight *W; /* (n_out, n_in) */
} krn_mm_part;
/* y_i (B, W_i n_out) = x (B, n_in) @ W_i^T for i < n, 1 <= n <= KRN_MM_PARTS, every W_i of one n_in; the
 * same bits as n krn_matmul_async calls. One CUDA launch when the parts share a float type (f32/f16/bf16)
 * and 16-byte alignment; otherwise one per part (an error then may leave earlier parts enqueued). */
int krn_matmul_parts_async(dev_stream *s, const krn_mm_part *parts, int n, const float *x, int B);

/* y (B, n_out) += x (B, n_in) @ W^T: the same bits as krn_matmul_async into t, then krn_add_async(y, t). */
int krn_matmul_acc_async(dev_stream *s, float *y, const krn_weight *W, const float *x, int B);

/* y (B, n) += bias (n,) */
int krn_add_bias_async(dev_stream *s, float *y, const float *bias, int B, int n);

/* Rotary embedding in place on x (B, n_heads * head_dim) at positions pos (B,), first n_rot dims of each
 * head. neox=0: pairs (2i, 2i+1) (llama); neox=1: pairs (i, i + n_rot/2) (qwen2 / NeoX).
 * theta_i = pos * freq_scale * freq_base^(-2i/n_rot). */
int krn_rope_async(dev_stream *s, float *x, const int32_t *pos, int B, int n_heads, int head_dim, int n_rot,
                   float freq_base, float freq_scale, int neox);

/* Store each row's k, v (B, kv_dim) into the caches (n_seq, n_ctx, kv_dim) at [seq[b], pos[b]]. */
int krn_kv_store_async(dev_stream *s, float *k_cache, float *v_cache, const float *k, const float *v,
                       const int32_t *seq, const int32_t *pos, int B, int kv_dim, int n_ctx);

/* Causal GQA attention: out (B, n_head*head_dim); row b attends with q[b] over k/v_cache[seq[b], 0..pos[b]]
 * (inclusive); query head h reads kv head h / (n_head / n_head_kv). Scale 1/sqrt(head_dim), f32 softmax. */
int krn_attention_async(dev_stream *s, float *out, const float *q, const float *k_cache, const float *v_cache,
                        const int32_t *seq, const int32_t *pos, int B, int n_head, int n_head_kv, int head_dim,
                        int n_ctx);

/* y (B, n) = silu(gate) * up */
int krn_swiglu_async(dev_stream *s, float *y, const float *gate, const float *up, int B, int n);

/* y (B, n) += a (B, n)   (the residual) */
int krn_add_async(dev_stream *s, float *y, const float *a, int B, int n);

/* out (B,) = index of the max of each row of x (B, n); ties -> lowest index. */
int krn_argmax_async(dev_stream *s, int32_t *out, const float *x, int B, int n);

/* MEMRA_PDL for the CALLING thread's later CUDA launches (programmatic dependent launch on sm_90); returns
 * the previous setting. A no-op returning 0 without the CUDA kernels. */
int krn_set_pdl(int on);

#endif
