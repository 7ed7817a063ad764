/* CPU kernels of the op table (kernels/krn.h). Each op is two things:
 *   - a pure function krn_cpu_<op>(const krn_cpu_<op>_args *) over plain pointers (host memory; on the
 *     CPU backend device memory IS host memory), testable without any stream;
 *   - krn_cpu_<op>_async(s, ...): copies the args into a dev_launch_cpu_async op and declares every buffer
 *     the kernel touches (pointer, exact byte range, mode) for the grant check, remote-read counter and
 *     stream-order race checker of the CPU backend.
 * Every kernel is single-threaded with a fixed loop order, so the same inputs give the same bits. Shapes are
 * validated by kernels/krn.c before dispatch; the functions here assume valid shapes. */
#ifndef KRN_CPU_KRN_CPU_H
#define KRN_CPU_KRN_CPU_H

#include <stdint.h>
#include "device/dev.h"
#include "kernels/krn.h"

/* Activation types (kernels/krn.h): the `yt`, `xt`, `out_t` fields come last, so 0 (KRN_F32) is the default. */
/* y (B, n) = x (B, n) / sqrt(mean(x^2) + eps) * w (n,); y of type yt */
typedef struct krn_cpu_rmsnorm_args { void *y; const float *x, *w; int B, n; float eps; int yt; } krn_cpu_rmsnorm_args;
/* y (B, n_out) = x (B, n_in) @ W^T (acc = 1: y +=); W of type `type` (GGUF rows of row_bytes each) in `layout`
 * (KRN_LAYOUT_BLOCKS or KRN_LAYOUT_ROWS8); x of type xt */
typedef struct krn_cpu_matmul_args {
    float *y; const void *w; const void *x; int type, n_out, n_in, B; size_t row_bytes; int acc; int xt;
    int x8; /* 1: the fast mode (x quantized to int8 blocks, krn_x8_gemm); only for krn_x8_type_ok types, n_in % 32 == 0 */
    int layout;
    int threads; /* > 1: the output rows split over an OpenMP team of this many (dev_platform_cpu_threads); 0, 1: one */
} krn_cpu_matmul_args;
/* y (B, n) += bias (n,) */
typedef struct krn_cpu_add_bias_args { float *y; const float *bias; int B, n; } krn_cpu_add_bias_args;
/* in-place rotary embedding of x (B, n_heads*head_dim) at pos (B,) */
typedef struct krn_cpu_rope_args {
    float *x; const int32_t *pos; int B, n_heads, head_dim, n_rot; float freq_base, freq_scale; int neox;
} krn_cpu_rope_args;
/* caches (n_seq, n_ctx, kv_dim)[seq[b], pos[b]] = k, v (B, kv_dim) */
typedef struct krn_cpu_kv_store_args {
    krn_kv_cache c; const float *k, *v; const int32_t *seq, *pos; int B, kv_dim, n_ctx;
} krn_cpu_kv_store_args;
/* out (B, n_head*head_dim) = softmax(q k^T / sqrt(head_dim)) v over cache[seq[b], 0..pos[b]] */
typedef struct krn_cpu_attention_args {
    void *out; const float *q; krn_kv_cache c; const int32_t *seq, *pos;
    int B, n_head, n_head_kv, head_dim, n_ctx; int out_t;
} krn_cpu_attention_args;
/* y (B, n) = silu(gate) * up; y of type yt */
typedef struct krn_cpu_swiglu_args { void *y; const float *gate, *up; int B, n; int yt; } krn_cpu_swiglu_args;
/* y (B, n) += a (B, n) */
typedef struct krn_cpu_add_args { float *y; const float *a; int B, n; } krn_cpu_add_args;
/* out (B,) = argmax of each row of x (B, n), lowest index on ties; -1 when nothing is above -inf; dup (may be
 * NULL) gets the same indices, at b or at dup_at[b] (krn_argmax_dup_async) */
typedef struct krn_cpu_argmax_args {
    int32_t *out, *dup;
    const int32_t *dup_at; /* NULL: dup[b]; else dup[dup_at[b]] when in [0, n_dup) */
    int n_dup;
    const float *x;
    int B, n;
} krn_cpu_argmax_args;
/* y (B, n_in) = rows tokens[b] of table (n_out rows of row_bytes bytes of `type`) dequantized; zeros for a token
 * outside [0, n_out) */
typedef struct krn_cpu_embed_rows_args {
    float *y; const void *table; const int32_t *tokens; int type, n_out, n_in, B; size_t row_bytes;
} krn_cpu_embed_rows_args;

/* ---- pure kernels (run on the calling thread) ---- */
void krn_cpu_rmsnorm(const krn_cpu_rmsnorm_args *a);
/* Exact mode: a 16-bit x is widened into a malloc'd f32 copy first (exact). Fast mode (x8): x is quantized
 * once into a buffer of B * krn_x8_row_bytes(n_in) bytes (on the stack up to 16 KiB, else malloc'd). If a
 * malloc fails y gets NaN rows. */
void krn_cpu_matmul(const krn_cpu_matmul_args *a);
void krn_cpu_add_bias(const krn_cpu_add_bias_args *a);
void krn_cpu_rope(const krn_cpu_rope_args *a);
/* Rows whose seq/pos fall outside the cache are skipped (krn.c cannot see device-side values; the model
 * guarantees them). */
void krn_cpu_kv_store(const krn_cpu_kv_store_args *a);
/* Scratch, sized once per call: the scores of a kv head's group over the longest row (group x (pos+1) floats,
 * on the stack up to 4096, else malloc'd), ATT_TILE widened rows for a 16-bit cache, one f32 row for a 16-bit
 * out (computed in f32, then rounded). A failed malloc writes NaN rows: visible, never silent. */
void krn_cpu_attention(const krn_cpu_attention_args *a);
void krn_cpu_swiglu(const krn_cpu_swiglu_args *a);
void krn_cpu_add(const krn_cpu_add_args *a);
void krn_cpu_argmax(const krn_cpu_argmax_args *a);
/* krn_dequant_row of each picked row (kernels/cpu/cpu_embed.c): the host gather's bits */
void krn_cpu_embed_rows(const krn_cpu_embed_rows_args *a);

/* ---- launch wrappers (same signatures as kernels/krn.h; shapes already validated) ---- */
int krn_cpu_rmsnorm_t_async(dev_stream *s, void *y, int yt, const float *x, const float *w, int B, int n, float eps);
int krn_cpu_matmul_async(dev_stream *s, float *y, const krn_weight *W, const float *x, int B);
/* x->x8 (kernels/krn.h "x quantized to int8") is not read: it serves PLANES weights, which the CPU never holds. */
int krn_cpu_matmul_parts_x_async(dev_stream *s, const krn_mm_part *parts, int n, const krn_mm_x *x, int B);
int krn_cpu_matmul_acc_x_async(dev_stream *s, float *y, const krn_weight *W, const krn_mm_x *x, int B);
/* krn_x8_quantize_t_host (kernels/x8.c) on s, over the widened rows of x (type xt) */
int krn_cpu_quantize_x8_t_async(dev_stream *s, void *xq, const void *x, int xt, int B, int n);
int krn_cpu_add_bias_async(dev_stream *s, float *y, const float *bias, int B, int n);
int krn_cpu_rope_async(dev_stream *s, float *x, const int32_t *pos, int B, int n_heads, int head_dim, int n_rot,
                       float freq_base, float freq_scale, int neox);
int krn_cpu_rope_store_async(dev_stream *s, const krn_rope_store *a); /* three ops: no launch to save */
int krn_cpu_kv_store_async(dev_stream *s, const krn_kv_cache *c, const float *k, const float *v,
                           const int32_t *seq, const int32_t *pos, int B, int kv_dim, int n_ctx);
int krn_cpu_attention_t_async(dev_stream *s, void *out, int out_t, const float *q, const krn_kv_cache *c,
                              const int32_t *seq, const int32_t *pos, int B, int n_head, int n_head_kv, int head_dim,
                              int n_ctx);
int krn_cpu_swiglu_t_async(dev_stream *s, void *y, int yt, const float *gate, const float *up, int B, int n);
int krn_cpu_add_async(dev_stream *s, float *y, const float *a, int B, int n);
int krn_cpu_argmax_async(dev_stream *s, int32_t *out, int32_t *dup, const int32_t *dup_at, int n_dup, const float *x,
                         int B, int n);
/* declares the WHOLE table (the row read depends on the device-side tokens), tokens and y */
int krn_cpu_embed_rows_async(dev_stream *s, float *y, const krn_weight *T, const int32_t *tokens, int B);

#endif
