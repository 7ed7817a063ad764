/* The op table's backend dispatch: validate shapes once, then route each op to the CPU kernels
 * (kernels/cpu/) or the CUDA kernels (kernels/cuda/krn_cuda.h: krn_cuda_<op>(same arguments as
 * krn_<op>_async)) by the kind of the stream's device. No shared state. */
#include <stddef.h>
#include <string.h>

#include "kernels/krn.h"
#include "kernels/cpu/krn_cpu.h"

#if defined(MEMRA_HAVE_CUDA) && __has_include("kernels/cuda/krn_cuda.h")
#include "kernels/cuda/krn_cuda.h"
#include "kernels/cuda/krn_cuda_planes.h"
#define KRN_CUDA 1
#else
#define KRN_CUDA 0
#endif

/* 1 when s runs on a CUDA device; -1 when s is NULL. */
static int on_cuda(dev_stream *s)
{
    if (!s)
        return -1;
    return dev_platform_kind(dev_device_platform(dev_stream_device(s))) == DEV_KIND_CUDA;
}

#if KRN_CUDA
/* Route op (a statement that returns): the CUDA adapter (kernels/cuda/krn_cuda.h, which makes s's device
 * current for the launch and restores the caller's: the op table never leaves it changed), or the CPU
 * wrapper. */
#define DISPATCH(s, op, ...)                                                                              \
    do {                                                                                                  \
        if (on_cuda(s))                                                                                   \
            return krn_cuda_##op(s, __VA_ARGS__);                                                         \
        return krn_cpu_##op##_async(s, __VA_ARGS__);                                                      \
    } while (0)
#else
/* Route op (a statement that returns): the CPU wrapper; MEMRA_E_UNSUPPORTED on a CUDA stream when this
 * build has no CUDA kernels. */
#define DISPATCH(s, op, ...)                                                                              \
    do {                                                                                                  \
        if (on_cuda(s))                                                                                   \
            return MEMRA_E_UNSUPPORTED;                                                                   \
        return krn_cpu_##op##_async(s, __VA_ARGS__);                                                      \
    } while (0)
#endif

/* ns per element of krn_dot_row at n = 4096, 2048 rows, best of 5 (AMD EPYC, 2 cores, the AVX2 path, gcc -O2;
 * 2026-11-30). Only the ratios matter: they balance stages against each other. q5_K is the q6_K figure times
 * q5_K / q6_K measured the same way on the same VM under a parallel build's load (0.215 / 0.217 ns, q4_K 0.172;
 * 2026-12-03): the load moves every figure, not the ratio of two K types run back to back. */
static double cpu_dot_ns(int type)
{
    switch (type) {
    case KRN_F32: return 0.259;
    case KRN_F16: return 0.167;
    case KRN_BF16: return 0.144;
    case KRN_Q8_0: return 0.147;
    case KRN_Q4_0: return 0.197;
    case KRN_Q4_1: return 0.205;
    case KRN_Q4_K: return 0.126;
    case KRN_Q5_K: return 0.152;
    case KRN_Q6_K: return 0.153;
    default: return 0.0;
    }
}

/* The fast mode's ns per element, from the stage shares of a 2-stage serve of SmolLM2-135M Q4_1 (4 sequences,
 * `perf report --sort comm`; docs/bench/cpu.md "Rows of 8"): the head (q8_0, memory-bound) costs 8.6 layers there,
 * each layer's attention, norms and x quantizing included, so a q4 element carries its layer's other ops. The q8_0
 * entry is the GEMM's own time (memra-bench cpu-kernels, B = 1 and 2, weights streamed). */
static double cpu_x8_ns(int type)
{
    switch (type) {
    case KRN_Q8_0: return 0.125;
    case KRN_Q4_0: return 0.112;
    case KRN_Q4_1: return 0.116;
    default: return cpu_dot_ns(type);
    }
}

double krn_weight_cost(int type, int64_t n_out, int64_t n_in, int model)
{
    if (!krn_type_supported(type) || n_out < 0 || n_in < 0)
        return 0.0;
    if (model == KRN_COST_CUDA)
        return (double)n_out * (double)krn_row_bytes(type, n_in);
    if (model != KRN_COST_CPU && model != KRN_COST_CPU_X8)
        return 0.0;
    return (double)n_out * (double)n_in * (model == KRN_COST_CPU_X8 ? cpu_x8_ns(type) : cpu_dot_ns(type));
}

int krn_cost_model(const dev_platform *p)
{
    return dev_platform_kind(p) == DEV_KIND_CUDA ? KRN_COST_CUDA
           : dev_platform_matmul_x8(p)           ? KRN_COST_CPU_X8
                                                 : KRN_COST_CPU;
}

int krn_act_type_ok(int type) { return type == KRN_F32 || type == KRN_F16 || type == KRN_BF16; }

size_t krn_act_bytes(int type) { return type == KRN_F32 ? 4 : (type == KRN_F16 || type == KRN_BF16) ? 2 : 0; }

int krn_bytes_disjoint(const void *a, size_t na, const void *b, size_t nb)
{
    const uintptr_t a0 = (uintptr_t)a, b0 = (uintptr_t)b;
    return a0 + na <= b0 || b0 + nb <= a0;
}

int krn_act_out_ok(const void *y, int yt, const float *in, size_t count)
{
    return yt == KRN_F32 || krn_bytes_disjoint(y, count * krn_act_bytes(yt), in, count * sizeof(float));
}

int krn_rmsnorm_t_async(dev_stream *s, void *y, int yt, const float *x, const float *w, int B, int n, float eps)
{
    if (!s || !y || !krn_act_type_ok(yt) || !x || !w || B <= 0 || n <= 0 || !(eps >= 0.0f) ||
        !krn_act_out_ok(y, yt, x, (size_t)B * n))
        return MEMRA_E_INVAL;
    DISPATCH(s, rmsnorm_t, y, yt, x, w, B, n, eps);
}

int krn_rmsnorm_async(dev_stream *s, float *y, const float *x, const float *w, int B, int n, float eps)
{
    return krn_rmsnorm_t_async(s, y, KRN_F32, x, w, B, n, eps);
}

/* A matmul weight s's backend can read: data, a supported type whose block divides n_in, and a layout
 * that backend reads (PLANES only on CUDA, only of a type with planes). */
static int weight_ok(dev_stream *s, const krn_weight *W)
{
    return W && W->data && W->n_out > 0 && W->n_in > 0 && krn_type_supported(W->type) &&
           krn_row_bytes(W->type, W->n_in) != 0 && krn_layout_check(W, on_cuda(s) == 1, NULL) == 0;
}

int krn_matmul_async(dev_stream *s, float *y, const krn_weight *W, const float *x, int B)
{
    if (!s || !y || !x || B <= 0 || !weight_ok(s, W))
        return MEMRA_E_INVAL;
    DISPATCH(s, matmul, y, W, x, B);
}

static int mm_x_ok(const krn_mm_x *x, int n_in)
{
    return x && x->x && krn_act_type_ok(x->type) && (!x->x8 || krn_x8_row_bytes(n_in));
}

int krn_matmul_parts_x_async(dev_stream *s, const krn_mm_part *parts, int n, const krn_mm_x *x, int B)
{
    if (!s || !parts || n < 1 || n > KRN_MM_PARTS || B <= 0)
        return MEMRA_E_INVAL;
    for (int i = 0; i < n; i++)
        if (!parts[i].y || !weight_ok(s, parts[i].W) || parts[i].W->n_in != parts[0].W->n_in)
            return MEMRA_E_INVAL;
    if (!mm_x_ok(x, parts[0].W->n_in))
        return MEMRA_E_INVAL;
    DISPATCH(s, matmul_parts_x, parts, n, x, B); /* x8 serves PLANES parts: CUDA only (krn_layout_check) */
}

int krn_matmul_parts_async(dev_stream *s, const krn_mm_part *parts, int n, const float *x, int B)
{
    const krn_mm_x xx = { .x = x };
    return krn_matmul_parts_x_async(s, parts, n, &xx, B);
}

int krn_matmul_acc_x_async(dev_stream *s, float *y, const krn_weight *W, const krn_mm_x *x, int B)
{
    if (!s || !y || B <= 0 || !weight_ok(s, W) || !mm_x_ok(x, W->n_in))
        return MEMRA_E_INVAL;
    DISPATCH(s, matmul_acc_x, y, W, x, B);
}

int krn_matmul_acc_async(dev_stream *s, float *y, const krn_weight *W, const float *x, int B)
{
    const krn_mm_x xx = { .x = x };
    return krn_matmul_acc_x_async(s, y, W, &xx, B);
}

int krn_quantize_x8_t_async(dev_stream *s, void *xq, const void *x, int xt, int B, int n)
{
    if (!s || !xq || !x || !krn_act_type_ok(xt) || B <= 0 || !krn_x8_row_bytes(n))
        return MEMRA_E_INVAL;
    DISPATCH(s, quantize_x8_t, xq, x, xt, B, n);
}

int krn_quantize_x8_async(dev_stream *s, void *xq, const float *x, int B, int n)
{
    return krn_quantize_x8_t_async(s, xq, x, KRN_F32, B, n);
}

/* CPU backend: the host repacks (planes, rows of 8). */
typedef struct repack_args { int type, n_out, n_in; const void *src; void *dst; } repack_args;
static void run_repack(void *p)
{
    const repack_args *a = p;
    krn_repack_host(a->type, a->n_out, a->n_in, a->src, a->dst);
}

static void run_rows8(void *p);

/* The host repack into `layout` as a stream op declaring both tensors; dst->layout is set once it is enqueued. */
static int cpu_repack(dev_stream *s, krn_weight *dst, const krn_weight *src, int layout)
{
    const size_t bytes = (size_t)src->n_out * krn_row_bytes(src->type, src->n_in);
    repack_args a = { src->type, src->n_out, src->n_in, src->data, (void *)dst->data };
    dev_access acc[2] = { { .ptr = src->data, .bytes = bytes, .mode = DEV_READ },
                          { .ptr = dst->data, .bytes = bytes, .mode = DEV_WRITE } };
    const int planes = layout == KRN_LAYOUT_PLANES;
    int rc = dev_launch_cpu_async(s, planes ? "repack" : "repack_rows8", planes ? run_repack : run_rows8, &a, sizeof a,
                                  acc, 2);
    if (!rc)
        dst->layout = layout;
    return rc;
}

int krn_repack_async(dev_stream *s, krn_weight *dst, const krn_weight *src)
{
    if (!s || !dst || !src || !dst->data || !src->data || dst->data == src->data || dst->type != src->type ||
        dst->n_out != src->n_out || dst->n_in != src->n_in || src->n_out <= 0 || src->layout != KRN_LAYOUT_BLOCKS ||
        krn_planes_qrow(src->type, src->n_in) == 0) /* 0 also for a type without planes */
        return MEMRA_E_INVAL;
#if KRN_CUDA
    if (on_cuda(s))
        return krn_cuda_repack(s, dst, src);
#else
    if (on_cuda(s))
        return MEMRA_E_UNSUPPORTED;
#endif
    return cpu_repack(s, dst, src, KRN_LAYOUT_PLANES);
}

static void run_rows8(void *p)
{
    const repack_args *a = p;
    const size_t rb = krn_row_bytes(a->type, a->n_in);
    int o = 0;
    for (; o + 8 <= a->n_out; o += 8)
        krn_rows8_pack_group(a->type, a->n_in, (const uint8_t *)a->src + (size_t)o * rb, 8, rb,
                             (uint8_t *)a->dst + (size_t)o * rb);
    memcpy((uint8_t *)a->dst + (size_t)o * rb, (const uint8_t *)a->src + (size_t)o * rb, (size_t)(a->n_out - o) * rb);
}

int krn_repack_rows8_async(dev_stream *s, krn_weight *dst, const krn_weight *src)
{
    if (!s || !dst || !src || !dst->data || !src->data || dst->data == src->data || dst->type != src->type ||
        dst->n_out != src->n_out || dst->n_in != src->n_in || src->layout != KRN_LAYOUT_BLOCKS ||
        !krn_rows8_supported(src->type, src->n_out, src->n_in))
        return MEMRA_E_INVAL;
    if (on_cuda(s))
        return MEMRA_E_UNSUPPORTED;
    return cpu_repack(s, dst, src, KRN_LAYOUT_ROWS8);
}

int krn_add_bias_async(dev_stream *s, float *y, const float *bias, int B, int n)
{
    if (!s || !y || !bias || B <= 0 || n <= 0)
        return MEMRA_E_INVAL;
    DISPATCH(s, add_bias, y, bias, B, n);
}

int krn_rope_async(dev_stream *s, float *x, const int32_t *pos, int B, int n_heads, int head_dim, int n_rot,
                   float freq_base, float freq_scale, int neox)
{
    if (!s || !x || !pos || B <= 0 || n_heads <= 0 || head_dim <= 0 || n_rot <= 0 || n_rot % 2 ||
        n_rot > head_dim || !(freq_base > 0.0f) || !(freq_scale > 0.0f) || (neox != 0 && neox != 1))
        return MEMRA_E_INVAL;
    DISPATCH(s, rope, x, pos, B, n_heads, head_dim, n_rot, freq_base, freq_scale, neox);
}

/* The KV cache holds the activation types (widened exactly by attention, rounded by kv_store). */
int krn_kv_type_ok(int type) { return krn_act_type_ok(type); }

size_t krn_kv_elem_bytes(int type) { return krn_act_bytes(type); }

static int kv_cache_ok(const krn_kv_cache *c) { return c && c->k && c->v && krn_kv_type_ok(c->type); }

int krn_kv_store_async(dev_stream *s, const krn_kv_cache *c, const float *k, const float *v, const int32_t *seq,
                       const int32_t *pos, int B, int kv_dim, int n_ctx)
{
    if (!s || !kv_cache_ok(c) || !k || !v || !seq || !pos || B <= 0 || kv_dim <= 0 || n_ctx <= 0)
        return MEMRA_E_INVAL;
    DISPATCH(s, kv_store, c, k, v, seq, pos, B, kv_dim, n_ctx);
}

int krn_rope_store_async(dev_stream *s, const krn_rope_store *a)
{
    if (!s || !a || !a->q || !a->k || !a->v || !kv_cache_ok(&a->cache) || !a->seq || !a->pos || a->B <= 0 ||
        a->n_head <= 0 || a->n_head_kv <= 0 || a->head_dim <= 0 || a->n_rot <= 0 || a->n_rot % 2 ||
        a->n_rot > a->head_dim || !(a->freq_base > 0.0f) || !(a->freq_scale > 0.0f) ||
        (a->neox != 0 && a->neox != 1) || a->n_ctx <= 0)
        return MEMRA_E_INVAL;
    DISPATCH(s, rope_store, a);
}

int krn_rope_attention_t_async(dev_stream *s, void *out, int out_t, const krn_rope_store *a, float *ws,
                               size_t ws_bytes)
{
    if (!a)
        return MEMRA_E_INVAL;
#if KRN_CUDA
    if (on_cuda(s) && out && krn_act_type_ok(out_t) && a->B > 0 &&
        krn_act_out_ok(out, out_t, a->q, (size_t)a->B * a->n_head * a->head_dim))
        return krn_cuda_rope_attention_t(s, out, out_t, a, ws, ws_bytes); /* it checks the rest, as both ops do */
#endif
    int rc = krn_rope_store_async(s, a);
    if (rc == 0)
        rc = krn_attention_t_async(s, out, out_t, a->q, &a->cache, a->seq, a->pos, a->B, a->n_head, a->n_head_kv,
                                   a->head_dim, a->n_ctx, ws, ws_bytes);
    return rc;
}

int krn_attention_async(dev_stream *s, float *out, const float *q, const krn_kv_cache *c, const int32_t *seq,
                        const int32_t *pos, int B, int n_head, int n_head_kv, int head_dim, int n_ctx)
{
    return krn_attention_ws_async(s, out, q, c, seq, pos, B, n_head, n_head_kv, head_dim, n_ctx, NULL, 0);
}

size_t krn_attention_ws_bytes(int B, int n_head, int head_dim, int n_ctx)
{
    enum { CHUNK = 64 }; /* KRN_CUDA_ATT_MIN_CHUNK (kernels/cuda/krn_cuda.h; the CUDA build checks they agree):
                          * room for the smallest MEMRA_CUDA_ATT_CHUNK */
    if (B <= 0 || n_head <= 0 || head_dim <= 0 || n_ctx <= CHUNK)
        return 0;
    return krn_attention_ws_split_bytes(B, n_head, head_dim, n_ctx / CHUNK + (n_ctx % CHUNK != 0)); /* no n_ctx + 63:
                                                                                * n_ctx may be INT_MAX */
}

size_t krn_attention_ws_split_bytes(int B, int n_head, int head_dim, int n_split)
{
    size_t n = KRN_ATT_WS_TICKETS * sizeof(uint32_t), f = sizeof(float);
    if (B < 0 || n_head < 0 || head_dim < 0 || n_split < 0 || __builtin_mul_overflow(f, (size_t)B, &f) ||
        __builtin_mul_overflow(f, (size_t)n_head, &f) || __builtin_mul_overflow(f, (size_t)n_split, &f) ||
        __builtin_mul_overflow(f, (size_t)head_dim + 2, &f) || __builtin_add_overflow(n, f, &n))
        return SIZE_MAX; /* no allocation gives it: the caller's dev_malloc fails naming the bytes */
    return n;
}

int krn_attention_t_async(dev_stream *s, void *out, int out_t, const float *q, const krn_kv_cache *c,
                          const int32_t *seq, const int32_t *pos, int B, int n_head, int n_head_kv, int head_dim,
                          int n_ctx, float *ws, size_t ws_bytes)
{
    if (!s || !out || !krn_act_type_ok(out_t) || !q || !kv_cache_ok(c) || !seq || !pos || B <= 0 || n_head <= 0 ||
        n_head_kv <= 0 || n_head % n_head_kv || head_dim <= 0 || n_ctx <= 0 ||
        !krn_act_out_ok(out, out_t, q, (size_t)B * n_head * head_dim))
        return MEMRA_E_INVAL;
#if KRN_CUDA
    if (on_cuda(s))
        return krn_cuda_attention_t(s, out, out_t, q, c, seq, pos, B, n_head, n_head_kv, head_dim, n_ctx, ws,
                                    ws_bytes);
#else
    if (on_cuda(s))
        return MEMRA_E_UNSUPPORTED;
#endif
    (void)ws, (void)ws_bytes;
    return krn_cpu_attention_t_async(s, out, out_t, q, c, seq, pos, B, n_head, n_head_kv, head_dim, n_ctx);
}

int krn_attention_ws_async(dev_stream *s, float *out, const float *q, const krn_kv_cache *c, const int32_t *seq,
                           const int32_t *pos, int B, int n_head, int n_head_kv, int head_dim, int n_ctx, float *ws,
                           size_t ws_bytes)
{
    return krn_attention_t_async(s, out, KRN_F32, q, c, seq, pos, B, n_head, n_head_kv, head_dim, n_ctx, ws,
                                 ws_bytes);
}

int krn_swiglu_t_async(dev_stream *s, void *y, int yt, const float *gate, const float *up, int B, int n)
{
    if (!s || !y || !krn_act_type_ok(yt) || !gate || !up || B <= 0 || n <= 0 ||
        !krn_act_out_ok(y, yt, gate, (size_t)B * n) || !krn_act_out_ok(y, yt, up, (size_t)B * n))
        return MEMRA_E_INVAL;
    DISPATCH(s, swiglu_t, y, yt, gate, up, B, n);
}

int krn_matmul_swiglu_x_async(dev_stream *s, void *y, int yt, float *gate, float *up, const krn_weight *Wg,
                              const krn_weight *Wu, const krn_mm_x *x, int B)
{
    if (!s || !y || !krn_act_type_ok(yt) || !gate || !up || B <= 0 || !weight_ok(s, Wg) || !weight_ok(s, Wu) ||
        Wg->n_out != Wu->n_out || Wg->n_in != Wu->n_in || !mm_x_ok(x, Wg->n_in))
        return MEMRA_E_INVAL;
    const size_t t = (size_t)B * Wg->n_out;
    if (!krn_act_out_ok(y, yt, gate, t) || !krn_act_out_ok(y, yt, up, t))
        return MEMRA_E_INVAL;
#if KRN_CUDA
    if (on_cuda(s)) {
        int done = 0, rc = krn_cuda_matmul_swiglu_x(s, y, yt, Wg, Wu, x, B, &done); /* fused where it can */
        if (rc || done)
            return rc;
    }
#endif
    const krn_mm_part p[2] = { { gate, Wg }, { up, Wu } };
    int rc = krn_matmul_parts_x_async(s, p, 2, x, B);
    return rc ? rc : krn_swiglu_t_async(s, y, yt, gate, up, B, Wg->n_out);
}

int krn_swiglu_async(dev_stream *s, float *y, const float *gate, const float *up, int B, int n)
{
    return krn_swiglu_t_async(s, y, KRN_F32, gate, up, B, n);
}

int krn_add_async(dev_stream *s, float *y, const float *a, int B, int n)
{
    if (!s || !y || !a || B <= 0 || n <= 0)
        return MEMRA_E_INVAL;
    DISPATCH(s, add, y, a, B, n);
}

int krn_embed_rows_async(dev_stream *s, float *y, const krn_weight *T, const int32_t *tokens, int B)
{
    if (!s || !y || !T || !T->data || !krn_type_supported(T->type) || T->layout != KRN_LAYOUT_BLOCKS ||
        krn_row_bytes(T->type, T->n_in) == 0 || T->n_out <= 0 || !tokens || B <= 0)
        return MEMRA_E_INVAL;
    DISPATCH(s, embed_rows, y, T, tokens, B);
}

int krn_argmax_async(dev_stream *s, int32_t *out, const float *x, int B, int n)
{
    return krn_argmax_dup_async(s, out, NULL, NULL, 0, x, B, n);
}

int krn_argmax_dup_async(dev_stream *s, int32_t *out, int32_t *dup, const int32_t *dup_at, int n_dup, const float *x,
                         int B, int n)
{
    if (!s || !out || !x || B <= 0 || n <= 0)
        return MEMRA_E_INVAL;
    if (dup) {
        const size_t ob = (size_t)B * sizeof *out, db = (size_t)n_dup * sizeof *dup;
        if (n_dup < (dup_at ? 1 : B) || !krn_bytes_disjoint(dup, db, out, ob) ||
            !krn_bytes_disjoint(dup, db, x, (size_t)B * n * sizeof *x))
            return MEMRA_E_INVAL; /* too few slots, or dup is written while out's and x's bytes are still in use */
        if (dup_at && (!krn_bytes_disjoint(dup_at, ob, out, ob) || !krn_bytes_disjoint(dup_at, ob, dup, db)))
            return MEMRA_E_INVAL; /* the indices would be overwritten while the kernel reads them */
    } else if (dup_at) {
        return MEMRA_E_INVAL; /* indices without slots */
    }
    DISPATCH(s, argmax, out, dup, dup_at, n_dup, x, B, n);
}

int krn_set_pdl(int on)
{
#if KRN_CUDA
    return krn_cuda_set_pdl(on);
#else
    (void)on;
    return 0;
#endif
}
