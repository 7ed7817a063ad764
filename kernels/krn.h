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

/* Byte layouts of a weight's data (krn_weight.layout). */
#define KRN_LAYOUT_BLOCKS 0 /* GGUF: row-major rows of krn_row_bytes(type, n_in) bytes of blocks */
/* Planar (q8_0, q4_0, q4_1, q4_K, q6_K only; a CUDA decode format, built on the owning device by
 * krn_repack_async): a quant plane, row r at r * krn_planes_qrow(type, n_in) bytes (16-byte aligned since n_in
 * is a multiple of the block), then a scales plane at krn_planes_scale_off: per row, per GGUF block, fp16 d
 * (q8_0, q4_0), the pair fp16 d, fp16 m (q4_1), the 16 header bytes d, dmin, scales[12] of a q4_K
 * super-block as in GGUF, or the 18 last bytes int8 scales[16], fp16 d of a q6_K super-block as in GGUF.
 * Same total bytes as the GGUF tensor. Quant bytes of a 32-element (sub-)block: q8_0 the 32 int8 in order;
 * q4_0/q4_1/q4_K 16 bytes where byte 4k+i (k, i in 0..3) holds element 8k+i in its low nibble and element
 * 8k+4+i in its high nibble, so each 32-bit word decodes to 8 consecutive elements (a q4_K super-block is 8
 * such sub-blocks in element order). q6_K (192 bytes per super-block): the low 4 bits of its 256 6-bit
 * quants as 8 such q4 sub-blocks (128 bytes), then the high 2 bits, 8 bytes per 32-element sub-block s (at
 * 128 + 8s): byte 4m+i (m in 0..1, i in 0..3) holds in bits 2f, 2f+1 (f in 0..3) those of element
 * 16m + 4f + i, so masking one word of each plane gives 4 consecutive elements' bytes (the same bits as
 * GGUF's ql, qh, moved). */
#define KRN_LAYOUT_PLANES 1
/* Rows of 8 (q4_0, q4_1, q8_0 only; a CPU format, built by krn_repack_rows8_async where MEMRA_CPU_REPACK is on:
 * the fast mode's int8 GEMM and the exact mode's 8-row dot read it, model/repack.h says which weights take it): rows 8g .. 8g+7 form group g at byte 8g * krn_row_bytes(type, n_in)
 * for every whole group, and the last n_out % 8 rows stay GGUF rows after them; a group is its n_in / 32 blocks in order, block j of the group (8 GGUF
 * blocks' bytes, at j * 8 * block bytes) holding the 8 rows' fp16 d (row r at byte 2r), q4_1 the 8 fp16 m
 * next, then the quants as 32-byte chunks in which dword r is row r's: chunk k (q4: k < 4) holds GGUF quant
 * bytes 4k .. 4k+3 of each row (elements 4k+i in the low nibbles, 16+4k+i in the high ones), q8_0 chunk k (k <
 * 8) its int8 elements 4k .. 4k+3. One 32-byte load gives 4 elements of 8 rows, so an int8 product of 4 x
 * elements lands in the row's own lane: no horizontal sums. Same total bytes as the GGUF tensor. */
#define KRN_LAYOUT_ROWS8 2

/* A weight matrix W (n_out, n_in) of type `type`, living in device memory. BLOCKS: row-major (each of
 * n_out rows is krn_row_bytes(type,n_in) bytes). A 1-D f32 vector (norm weight, bias) uses type KRN_F32,
 * n_out = 1. Zero-initialized `layout` is BLOCKS. */
typedef struct krn_weight {
    int type;         /* krn_type */
    int n_out, n_in;  /* rows, elements per row */
    const void *data; /* device pointer */
    int layout;       /* KRN_LAYOUT_BLOCKS (0, GGUF), KRN_LAYOUT_PLANES or KRN_LAYOUT_ROWS8 */
} krn_weight;

/* What one decode step spends reading a (n_out, n_in) weight of `type` on a backend, for balancing pipeline
 * stages (MEMRA_PP_SPLITS=weights), under a cost model:
 *  - KRN_COST_CUDA: its bytes (decode streams every weight once; bandwidth-bound);
 *  - KRN_COST_CPU: n_out * n_in times the exact CPU dot's nanoseconds per element of that type (a fixed table
 *    measured with krn_dot_row on the reference machine, kernels/krn.c: the CPU is bound by dequantizing and
 *    multiplying, where a q8_0 byte is cheaper than a q4_1 byte);
 *  - KRN_COST_CPU_X8: the same for the fast mode, whose int8 GEMM (rows of 8) makes a q4 element cheaper than a
 *    q8_0 one; types it does not multiply keep the exact dot's time.
 * 0 for an unsupported type or model. */
enum { KRN_COST_CPU = 0, KRN_COST_CUDA = 1, KRN_COST_CPU_X8 = 2 };
double krn_weight_cost(int type, int64_t n_out, int64_t n_in, int model);
/* The cost model of a platform: CUDA, or the CPU in its matmul mode (dev_platform_matmul_x8). */
int krn_cost_model(const dev_platform *p);

/* ---- planar layout helpers (pure C, kernels/repack.c; host code and tests) ---- */
/* 1 when type has a planar layout (q8_0, q4_0, q4_1, q4_K, q6_K). */
int krn_planes_supported(int type);
/* Bytes of one row in the quant plane (q8_0: n_in, q4_0/q4_1/q4_K: n_in / 2, q6_K: 3 n_in / 4); 0 when
 * unsupported or n_in is not a multiple of the type's block (32, q4_K and q6_K 256). */
size_t krn_planes_qrow(int type, int64_t n_in);
/* Byte offset of the scales plane (n_out * qrow); its entries: krn_planes_scale_bytes(type) per block. */
size_t krn_planes_scale_off(int type, int64_t n_out, int64_t n_in);
/* per block: 2 (q8_0, q4_0), 4 (q4_1: d, m), 16 (q4_K), 18 (q6_K: scales[16], d), 0 otherwise */
size_t krn_planes_scale_bytes(int type);
/* GGUF blocks (n_out rows) -> planes, and back; src and dst distinct, both n_out * krn_row_bytes bytes.
 * Host memory. Exact byte permutations: unpack(repack(x)) == x. O(bytes). */
void krn_repack_host(int type, int n_out, int n_in, const void *src_blocks, void *dst_planes);
void krn_unpack_host(int type, int n_out, int n_in, const void *src_planes, void *dst_blocks);
/* ---- rows of 8 (KRN_LAYOUT_ROWS8; kernels/repack.c) ---- */
/* 1 when a (n_out, n_in) weight of type can take the layout: q4_0, q4_1, q8_0, n_out >= 8, n_in % 32 == 0. */
int krn_rows8_supported(int type, int64_t n_out, int64_t n_in);
/* One group: rows[0 .. nr) (GGUF blocks, row r at r * rb, nr in 1..8, rb = krn_row_bytes(type, n_in)) -> the
 * group's 8 * rb bytes at dst; missing rows (nr < 8) are zero bytes (d = 0). And back: the group at src -> its
 * first nr rows. Exact byte permutations. */
void krn_rows8_pack_group(int type, int64_t n_in, const uint8_t *rows, int nr, size_t rb, uint8_t *dst);
void krn_rows8_unpack_group(int type, int64_t n_in, const uint8_t *src, int nr, size_t rb, uint8_t *rows);
/* Whether W's layout can be read by the matmul of a backend (cuda = 1: CUDA, 0: CPU): 0, or MEMRA_E_INVAL
 * with a message naming the layout and what is allowed (PLANES is a CUDA decode format; its type must be
 * q8_0, q4_0, q4_1, q4_K or q6_K; ROWS8 a CPU one, krn_rows8_supported). err may be NULL. */
int krn_layout_check(const krn_weight *W, int cuda, dev_err *err);

/* dst (planes) = src (GGUF blocks), enqueued on s, whose device must own both buffers (distinct,
 * n_out * krn_row_bytes bytes each). dst->type/n_out/n_in must equal src's, src->layout BLOCKS; on
 * success dst->layout is set to KRN_LAYOUT_PLANES at once (the bytes are there when s reaches this op).
 * CUDA: one kernel; CPU: krn_repack_host on the stream. Returns 0 or MEMRA_E_INVAL. */
int krn_repack_async(dev_stream *s, krn_weight *dst, const krn_weight *src);
/* dst (rows of 8) = src (GGUF blocks) on s, a CPU stream whose device owns both buffers (distinct, same
 * bytes); krn_rows8_supported(type, n_out, n_in) and src->layout BLOCKS, else MEMRA_E_INVAL (MEMRA_E_UNSUPPORTED
 * on a CUDA stream). On success dst->layout is KRN_LAYOUT_ROWS8 at once (the bytes are there when s reaches
 * this op). */
int krn_repack_rows8_async(dev_stream *s, krn_weight *dst, const krn_weight *src);

/* ---- activation types (MEMRA_ACT_TYPE) ----
 * The rows a matmul reads (the normed x, the attention output, swiglu's h) may be stored as KRN_F32 (0),
 * KRN_F16 or KRN_BF16. The op producing them (rmsnorm, attention, swiglu: the `_t` forms) computes in f32 and
 * rounds each value to nearest even on store; the ops reading them (matmul, quantize_x8) widen each element
 * exactly on load. So an op over 16-bit rows gives, bit for bit, the f32 op's result over the widened values,
 * on every backend. The residual stream, q/k/v, the KV cache's inputs and the logits stay f32. */
int krn_act_type_ok(int type);     /* 1 for KRN_F32, KRN_F16, KRN_BF16 */
size_t krn_act_bytes(int type);    /* 4, 2, 2; 0 for any other type */
/* 1 when the byte ranges [a, a + na) and [b, b + nb) share no byte. */
int krn_bytes_disjoint(const void *a, size_t na, const void *b, size_t nb);
/* 1 when y (count elements of activation type yt) may be written while the f32 `in` (count floats) is read: an
 * f32 y may be `in` itself (in place, element for element), a 16-bit y must not overlap it (its element i lands
 * on in[i/2], which another thread may not have read yet). */
int krn_act_out_ok(const void *y, int yt, const float *in, size_t count);

/* y (B, n) = x (B, n) / rms(x) * w (n,)    rms = sqrt(mean(x^2) + eps) */
int krn_rmsnorm_async(dev_stream *s, float *y, const float *x, const float *w, int B, int n, float eps);
/* The same with y (B, n) of activation type yt (f32 math, rounded on store; a 16-bit y must not overlap x). */
int krn_rmsnorm_t_async(dev_stream *s, void *y, int yt, const float *x, const float *w, int B, int n, float eps);

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

/* A matmul's input rows in any form: x (B, n_in) of activation type `type` (KRN_F32 = 0, KRN_F16, KRN_BF16),
 * and optionally x8 = krn_quantize_x8_t_async of those rows (NULL: none), which PLANES weights then read
 * instead of x (see "x quantized to int8" below). A zero-initialized krn_mm_x plus .x is plain f32 x. */
typedef struct krn_mm_x {
    const void *x;  /* (B, n_in) elements of `type` */
    int type;       /* activation type */
    const void *x8; /* krn_x8_row_bytes(n_in) per row, or NULL */
} krn_mm_x;
/* krn_matmul_parts_async / krn_matmul_acc_async over x in any form. A 16-bit x gives the bits of the f32 op over
 * the widened rows; x8 gives PLANES parts the int8 products. A row's bits do not depend on B. */
int krn_matmul_parts_x_async(dev_stream *s, const krn_mm_part *parts, int n, const krn_mm_x *x, int B);
int krn_matmul_acc_x_async(dev_stream *s, float *y, const krn_weight *W, const krn_mm_x *x, int B);

/* ---- x quantized to int8 (MEMRA_CUDA_X8), for PLANES weights on CUDA ----
 * Each 32-element block j of a row of x becomes 32 int8 q = rint(x / d) (ties to even, clamped to +-127) with
 * d = max|x| / 127 over the block (q = 0 when d is 0), and s = d * sum q. A block holding a NaN or an infinity
 * gets q = 0 and d = s = NaN (0x7fc00000): its products are NaN, as they would not be finite from f32 x. A PLANES weight
 * then takes its products as exact integer dot products of its quants with q (dp4a on CUDA: ~1.5x the f32-x
 * GEMV's speed on 4-bit planes, docs/cuda-kernels.md "int8 x"), per block: d_w * d * sum(q_w q) plus the
 * weight's offset term (q4_0: -8 d_w s, q4_1: m_w s, q4_K: -m1 s; q6_K none: d_w * d * (sc0 sum(q_w q) +
 * sc1 sum(q_w q)) over its two 16-element halves, q_w = q6 - 32, all in exact integers). x itself is rounded: a
 * result lies within ~0.4 % of max |y| of the f32-x product. Every other layout and type reads x (of its activation
 * type, widened).
 * Layout of one row (krn_x8_row_bytes(n), a multiple of 16, n % 32 == 0): n int8 quants, then n/32 pairs of
 * f32 (d, s); row b of B at b * krn_x8_row_bytes(n). The same bits on every backend and device. */
size_t krn_x8_row_bytes(int n); /* 0 when n <= 0 or n % 32 != 0 */
/* xq = the quantized rows of x (B, n) in host memory (the CPU backend's op; the tests' reference). */
void krn_x8_quantize_host(void *xq, const float *x, int B, int n);
/* The same over x (B, n) of activation type xt: each block widened exactly, then quantized. */
void krn_x8_quantize_t_host(void *xq, const void *x, int xt, int B, int n);
/* The same on s: xq (B * krn_x8_row_bytes(n) bytes of s's device, 16-byte aligned) from x (B, n). */
int krn_quantize_x8_async(dev_stream *s, void *xq, const float *x, int B, int n);
/* The same from x (B, n) of activation type xt (widened exactly: the bytes of quantizing the widened rows).
 * PLANES parts of krn_matmul_parts_x_async / krn_matmul_acc_x_async read the result (krn_mm_x.x8); other parts,
 * and the CPU backend (which has no PLANES weights), read x. */
int krn_quantize_x8_t_async(dev_stream *s, void *xq, const void *x, int xt, int B, int n);

/* y (B, n) += bias (n,) */
int krn_add_bias_async(dev_stream *s, float *y, const float *bias, int B, int n);

/* Rotary embedding in place on x (B, n_heads * head_dim) at positions pos (B,), first n_rot dims of each
 * head. neox=0: pairs (2i, 2i+1) (llama); neox=1: pairs (i, i + n_rot/2) (qwen2 / NeoX).
 * theta_i = pos * freq_scale * freq_base^(-2i/n_rot). */
int krn_rope_async(dev_stream *s, float *x, const int32_t *pos, int B, int n_heads, int head_dim, int n_rot,
                   float freq_base, float freq_scale, int neox);

/* One layer's KV cache: K and V, each (n_seq, n_ctx, kv_dim) elements of `type`: KRN_F32, KRN_F16 or
 * KRN_BF16 (MEMRA_KV_TYPE). A 16-bit cache holds each stored value rounded to nearest even (half the bytes
 * attention streams per key and half the memory); attention widens it back to f32 exactly, so the math
 * after the store is the f32 cache's. */
typedef struct krn_kv_cache {
    void *k, *v; /* device memory, 16-byte aligned for CUDA */
    int type;    /* KRN_F32, KRN_F16, KRN_BF16 */
} krn_kv_cache;
int krn_kv_type_ok(int type);       /* 1 for KRN_F32, KRN_F16, KRN_BF16 */
size_t krn_kv_elem_bytes(int type); /* 4, 2, 2; 0 for any other type */

/* Store each row's k, v (B, kv_dim) into the caches (n_seq, n_ctx, kv_dim) at [seq[b], pos[b]]. */
int krn_kv_store_async(dev_stream *s, const krn_kv_cache *c, const float *k, const float *v, const int32_t *seq,
                       const int32_t *pos, int B, int kv_dim, int n_ctx);

/* The attention prologue in one op: rope on q (B, n_head*head_dim) and k (B, n_head_kv*head_dim) in place,
 * then k and v (B, n_head_kv*head_dim) stored into the caches at [seq[b], pos[b]]. The same bits as
 * krn_rope_async(q), krn_rope_async(k), krn_kv_store_async; one CUDA launch instead of three. */
typedef struct krn_rope_store {
    float *q, *k;                 /* rotated in place */
    const float *v;
    krn_kv_cache cache;           /* (n_seq, n_ctx, n_head_kv*head_dim) each */
    const int32_t *seq, *pos;     /* (B,) device values */
    int B, n_head, n_head_kv, head_dim, n_rot, neox, n_ctx;
    float freq_base, freq_scale;
    int keys; /* attention only (krn_rope_attention_t_async): 0, or a bound the caller guarantees, every row's
               * pos < keys <= n_ctx; CUDA then splits keys, not n_ctx, into chunks (fewer blocks, and a
               * row of one chunk needs no merge). Same bits whatever it is. A row at or past it attends to
               * keys below it only (memory-safe, and wrong: the caller's breach) */
} krn_rope_store;
int krn_rope_store_async(dev_stream *s, const krn_rope_store *a);
/* krn_rope_store_async(s, a) then krn_attention_t_async over a's q, cache, seq, pos and shape into out (out_t),
 * with the workspace ws (as krn_attention_ws_async). One op, so that CUDA can do both in one kernel at B = 1
 * (kernels/cuda/krn_cuda.h, krn_cuda_rope_attention_async); the CPU composes the two. The same bits either way.
 * Returns 0 or either op's code; a->q and a->k hold unspecified values afterwards (rotated or not). */
int krn_rope_attention_t_async(dev_stream *s, void *out, int out_t, const krn_rope_store *a, float *ws,
                               size_t ws_bytes);

/* Causal GQA attention: out (B, n_head*head_dim); row b attends with q[b] over the cache c[seq[b], 0..pos[b]]
 * (inclusive); query head h reads kv head h / (n_head / n_head_kv). Scale 1/sqrt(head_dim), f32 softmax. */
int krn_attention_async(dev_stream *s, float *out, const float *q, const krn_kv_cache *c, const int32_t *seq,
                        const int32_t *pos, int B, int n_head, int n_head_kv, int head_dim, int n_ctx);
/* The same, with a workspace for CUDA's split-K path (n_ctx > one chunk of 64..256 keys, MEMRA_CUDA_ATT_CHUNK:
 * per-chunk partial results): ws is
 * device memory of s's device of ws_bytes >= krn_attention_ws_bytes(B, n_head, head_dim, n_ctx), touched
 * only by ops on s, in order (a stage's scratch). NULL or smaller: a workspace is allocated and freed on s
 * per call (cudaMallocAsync/cudaFreeAsync: two more nodes in a captured graph, and breaks between the
 * kernels that PDL cannot overlap). Same bits either way. A given one also lets the chunks' merge run inside
 * the chunk kernel (one launch instead of two: MEMRA_CUDA_ATT_FUSE, docs/doors.md), using its zeroed tickets.
 * The CPU backend needs none and ignores it. */
int krn_attention_ws_async(dev_stream *s, float *out, const float *q, const krn_kv_cache *c, const int32_t *seq,
                           const int32_t *pos, int B, int n_head, int n_head_kv, int head_dim, int n_ctx, float *ws,
                           size_t ws_bytes);
/* The same with out (B, n_head*head_dim) of activation type out_t (f32 math, rounded on store; a 16-bit out must
 * not overlap q). */
int krn_attention_t_async(dev_stream *s, void *out, int out_t, const float *q, const krn_kv_cache *c,
                          const int32_t *seq, const int32_t *pos, int B, int n_head, int n_head_kv, int head_dim,
                          int n_ctx, float *ws, size_t ws_bytes);
/* Bytes of that workspace for the smallest chunk: KRN_ATT_WS_TICKETS words, then B * n_head * ceil(n_ctx / 64) *
 * (head_dim + 2) floats, when n_ctx > 64, else 0. The tickets (the first KRN_ATT_WS_TICKETS * 4 bytes) must be
 * zero before the workspace's first use (zero it once when allocating it); every call leaves them zero. */
#define KRN_ATT_WS_TICKETS 4096
size_t krn_attention_ws_bytes(int B, int n_head, int head_dim, int n_ctx);
/* The same layout for n_split chunks of any size (the call's own, kernels/cuda): the tickets, then B * n_head *
 * n_split * (head_dim + 2) floats. Both compute in size_t without overflow: SIZE_MAX when the bytes do not fit
 * (a negative argument included). */
size_t krn_attention_ws_split_bytes(int B, int n_head, int head_dim, int n_split);

/* y (B, n) = silu(gate) * up */
int krn_swiglu_async(dev_stream *s, float *y, const float *gate, const float *up, int B, int n);
/* The same with y of activation type yt (f32 math, rounded on store). A 16-bit y must not overlap gate or up
 * (an f32 y may be gate or up: in place). */
int krn_swiglu_t_async(dev_stream *s, void *y, int yt, const float *gate, const float *up, int B, int n);

/* The feed-forward's first half in one op: y (B, n) of activation type yt = silu(x Wg^T) * (x Wu^T), the bits of
 * krn_matmul_parts_x_async({gate, Wg}, {up, Wu}) then krn_swiglu_t_async(y, yt, gate, up). Wg and Wu are
 * (n, n_in). gate and up (B, n) f32 are the op's scratch, their contents unspecified afterwards: CUDA at B = 1
 * with float weights (one type, 16-byte aligned rows) and yt == x->type runs one GEMV whose warps each take a
 * gate row and its up row and store y directly, never writing them (MEMRA_CUDA_GLU=0: the two ops). The rules
 * on y are krn_swiglu_t_async's; y may also overlap x (the forward's 16-bit activation buffer holds both), and
 * then CUDA composes the two ops too, since the fused GEMV would store y while its other warps still read x. */
int krn_matmul_swiglu_x_async(dev_stream *s, void *y, int yt, float *gate, float *up, const krn_weight *Wg,
                              const krn_weight *Wu, const krn_mm_x *x, int B);

/* y (B, n) += a (B, n)   (the residual) */
int krn_add_async(dev_stream *s, float *y, const float *a, int B, int n);

/* y (B, n) = rows tokens[b] of the embedding table T (T->n_out rows of n = T->n_in elements, any krn_type, GGUF
 * blocks), dequantized to f32 with the bits of krn_dequant_row (the host gather, mdl_embed_rows). tokens are
 * device values (B,): a token outside [0, T->n_out) gives a row of zeros (the step that reads it is
 * meaningless; the producer of the token reports why). Lets stage 0 embed a token the previous step picked on
 * the device without the host in between (act_pp_step.feed). */
int krn_embed_rows_async(dev_stream *s, float *y, const krn_weight *T, const int32_t *tokens, int B);

/* out (B,) = index of the max of each row of x (B, n); ties -> lowest index; NaN never wins; -1 for a row
 * with nothing above -inf (every value -inf or NaN: no token to pick, as the host sampler's greedy refuses). */
int krn_argmax_async(dev_stream *s, int32_t *out, const float *x, int B, int n);
/* The same, each index also written to a second destination without a copy op behind the kernel (the pipeline's
 * fed-token slots): dup[b], or with dup_at dup[dup_at[b]], where dup_at (B,) is device memory the kernel reads (so
 * a captured graph serves whichever slots the step's rows name); an index outside [0, n_dup) writes nothing. dup:
 * NULL for none, else n_dup slots of device memory of s's device (at least B without dup_at), overlapping neither
 * out nor x; dup_at overlaps neither out nor dup. */
int krn_argmax_dup_async(dev_stream *s, int32_t *out, int32_t *dup, const int32_t *dup_at, int n_dup, const float *x,
                         int B, int n);

/* Batch invariance of stream s (MEMRA_BATCH_INVARIANT): once set, every matmul enqueued on s gives each row the bits
 * it gets in a step of one row, whatever the step's B (on CUDA: the GEMV at every B, never cuBLAS, whose
 * algorithm depends on B; the CPU kernels are batch-invariant already). Set it before the stream's first matmul,
 * from the thread that enqueues on s (a dev_stream attachment). Returns 0 or MEMRA_E_INVAL (err says why). */
int krn_stream_set_batch_invariant(dev_stream *s, dev_err *err);
/* 1 when krn_stream_set_batch_invariant was called on s, else 0. Cost: two loads. */
int krn_stream_batch_invariant(const dev_stream *s);

/* MEMRA_PDL for the CALLING thread's later CUDA launches (programmatic dependent launch on sm_90); returns
 * the previous setting. A no-op returning 0 without the CUDA kernels. */
int krn_set_pdl(int on);

#endif
