/* dev_stream adapters of the CUDA op table: krn_cuda_<op>(dev_stream *s, ...) -> krn_cuda_<op>_async on
 * dev_stream_native(s). kernels/krn.c calls these for streams of a CUDA device. The device layer never
 * changes a thread's current device, so each adapter makes the stream's device current for the launch and
 * restores the caller's afterwards (cudaGetDevice is a thread-local read; cudaSetDevice runs only when the
 * devices differ). A stream without a native handle (not a CUDA stream) is MEMRA_E_INVAL. Also the
 * MEMRA_PDL switch. Shared mutable state: krn_pdl_on and krn_pdl_after_foreign (thread-local: each thread reads
 * and writes only its own); the current device is per host thread too. */
#include <stdio.h>
#include <stdlib.h>

#include "kernels/cuda/krn_cuda_util.cuh"
#include "kernels/cuda/krn_cuda_gemm.cuh"

/* MEMRA_PDL: per launching thread (each stage actor enqueues its own stream). */
static thread_local int krn_pdl_on = 0;
/* 1 after a launch that is not ours (cuBLAS) on this thread: those kernels never trigger a successor, and kernels
 * launched with the PDL attribute behind a grid that never triggered read wrong data in the pipelined gates (the
 * fused GLU GEMV, docs/cuda-kernels.md "Gate/up + swiglu in one GEMV"), so the next kernel goes without it. */
static thread_local int krn_pdl_after_foreign = 0;

extern "C" int krn_cuda_set_pdl(int on) {
    const int prev = krn_pdl_on;
    krn_pdl_on = on ? 1 : 0;
    return prev;
}

void krn_cuda_pdl_foreign_launched(void) { krn_pdl_after_foreign = 1; }

int krn_cuda_pdl_take(void) {
    const int after_foreign = krn_pdl_after_foreign;
    krn_pdl_after_foreign = 0;
    return krn_pdl_on && !after_foreign;
}

int krn_cuda_pdl_early(int bit) {
    static int cache = KRN_TUNE_UNREAD;
    static const int allowed[32] = {0,  1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11, 12, 13, 14, 15,
                                    16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31};
    return (krn_cuda_tune_or("MEMRA_CUDA_PDL_EARLY", allowed, 32, KRN_EARLY_DEFAULT, &cache) & bit) != 0;
}

int krn_cuda_tune(const char *name, const int *allowed, int n, int *cache) {
    return krn_cuda_tune_or(name, allowed, n, 0, cache);
}

int krn_cuda_tune_or(const char *name, const int *allowed, int n, int def, int *cache) {
    int f = __atomic_load_n(cache, __ATOMIC_RELAXED);
    if (f != KRN_TUNE_UNREAD)
        return f;
    const char *e = getenv(name);
    f = def;
    if (e && *e) {
        char *end = NULL;
        const long v = strtol(e, &end, 10);
        int ok = 0;
        for (int i = 0; i < n && *end == '\0'; i++)
            ok |= v == allowed[i];
        if (ok) {
            f = (int)v;
        } else {
            char list[128] = "";
            for (int i = 0, at = 0; i < n && at < (int)sizeof list - 12; i++)
                at += snprintf(list + at, sizeof list - at, i ? ", %d" : "%d", allowed[i]);
            fprintf(stderr, "memra: %s=%s ignored (allowed: %s); the default is used\n", name, e, list);
        }
    }
    __atomic_store_n(cache, f, __ATOMIC_RELAXED);
    return f;
}

int krn_cuda_enter(dev_stream *s, cudaStream_t *st, int *prev, dev_err *err) {
    void *h = s ? dev_stream_native(s) : NULL;
    if (!h)
        return dev_err_set(err, MEMRA_E_INVAL, "krn_cuda: stream '%s' is not a CUDA stream",
                           s ? dev_stream_name(s) : "(null)");
    const int ord = dev_device_ordinal(dev_stream_device(s));
    int rc = krn_cuda_call_check(err, cudaGetDevice(prev), "krn_cuda: cudaGetDevice");
    if (!rc && *prev != ord)
        rc = krn_cuda_call_check(err, cudaSetDevice(ord), "krn_cuda: cudaSetDevice");
    if (rc)
        (void)cudaGetLastError();
    *st = (cudaStream_t)h;
    return rc;
}

void krn_cuda_leave(int prev) {
    int cur = -1;
    if (cudaGetDevice(&cur) == cudaSuccess && cur != prev)
        cudaSetDevice(prev);
}

#define ADAPT(call)                                                                                            \
    do {                                                                                                       \
        cudaStream_t st;                                                                                       \
        int prev_, rc_ = krn_cuda_enter(s, &st, &prev_, NULL);                                                 \
        if (rc_)                                                                                               \
            return rc_;                                                                                        \
        rc_ = (call);                                                                                          \
        krn_cuda_leave(prev_);                                                                                 \
        return rc_;                                                                                            \
    } while (0)

extern "C" int krn_cuda_rmsnorm_t(dev_stream *s, void *y, int yt, const float *x, const float *w, int B, int n,
                                  float eps) {
    ADAPT(krn_cuda_rmsnorm_async(st, y, yt, x, w, B, n, eps, NULL));
}

extern "C" int krn_cuda_matmul(dev_stream *s, float *y, const krn_weight *W, const float *x, int B) {
    int done = 0, rc = krn_cuda_gemm_try(s, y, W, x, B, &done, NULL); /* cuBLAS at large B (krn_cuda_gemm.cuh) */
    if (done)
        return rc;
    ADAPT(krn_cuda_matmul_async(st, y, W, x, B, NULL));
}

/* Large B: each part cuBLAS may take goes there (x of any activation type; x8 is for PLANES parts, which never
 * take cuBLAS); the rest share one GEMV launch as before. */
extern "C" int krn_cuda_matmul_parts_x(dev_stream *s, const krn_mm_part *parts, int n, const krn_mm_x *x, int B) {
    krn_mm_part rest[KRN_MM_PARTS];
    int n_rest = 0;
    if (!x)
        return MEMRA_E_INVAL;
    for (int i = 0; i < n && i < KRN_MM_PARTS; i++) {
        int done = 0, rc = krn_cuda_gemm_try_x(s, parts[i].y, parts[i].W, x->x, x->type, B, 0, &done, NULL);
        if (rc)
            return rc;
        if (!done)
            rest[n_rest++] = parts[i];
    }
    if (n_rest == 0)
        return 0;
    ADAPT(krn_cuda_matmul_parts_async(st, rest, n_rest, x, B, 0, NULL));
}

extern "C" int krn_cuda_matmul_acc_x(dev_stream *s, float *y, const krn_weight *W, const krn_mm_x *x, int B) {
    if (!x)
        return MEMRA_E_INVAL;
    int done = 0, rc = krn_cuda_gemm_try_x(s, y, W, x->x, x->type, B, 1, &done, NULL);
    if (done)
        return rc;
    const krn_mm_part p = {y, W};
    ADAPT(krn_cuda_matmul_parts_async(st, &p, 1, x, B, 1, NULL));
}

extern "C" int krn_cuda_quantize_x8_t(dev_stream *s, void *xq, const void *x, int xt, int B, int n) {
    ADAPT(krn_cuda_quantize_x8_async(st, xq, x, xt, B, n, NULL));
}

extern "C" int krn_cuda_rope_store(dev_stream *s, const krn_rope_store *a) {
    ADAPT(krn_cuda_rope_store_async(st, a, NULL));
}

extern "C" int krn_cuda_add_bias(dev_stream *s, float *y, const float *bias, int B, int n) {
    ADAPT(krn_cuda_add_bias_async(st, y, bias, B, n, NULL));
}

extern "C" int krn_cuda_rope(dev_stream *s, float *x, const int32_t *pos, int B, int n_heads, int head_dim,
                             int n_rot, float freq_base, float freq_scale, int neox) {
    ADAPT(krn_cuda_rope_async(st, x, pos, B, n_heads, head_dim, n_rot, freq_base, freq_scale, neox, NULL));
}

extern "C" int krn_cuda_kv_store(dev_stream *s, const krn_kv_cache *c, const float *k, const float *v,
                                 const int32_t *seq, const int32_t *pos, int B, int kv_dim, int n_ctx) {
    ADAPT(krn_cuda_kv_store_async(st, c, k, v, seq, pos, B, kv_dim, n_ctx, NULL));
}

extern "C" int krn_cuda_attention_t(dev_stream *s, void *out, int out_t, const float *q, const krn_kv_cache *c,
                                    const int32_t *seq, const int32_t *pos, int B, int n_head, int n_head_kv,
                                    int head_dim, int n_ctx, float *ws, size_t ws_bytes) {
    ADAPT(krn_cuda_attention_ws_async(st, out, out_t, q, c, seq, pos, B, n_head, n_head_kv, head_dim, n_ctx, ws,
                                      ws_bytes, NULL));
}

extern "C" int krn_cuda_rope_attention_t(dev_stream *s, void *out, int out_t, const krn_rope_store *a, float *ws,
                                         size_t ws_bytes) {
    ADAPT(krn_cuda_rope_attention_async(st, out, out_t, a, ws, ws_bytes, NULL));
}

extern "C" int krn_cuda_matmul_swiglu_x(dev_stream *s, void *y, int yt, const krn_weight *Wg, const krn_weight *Wu,
                                        const krn_mm_x *x, int B, int *done) {
    *done = 0;
    if (!krn_cuda_glu_fits(y, yt, Wg, Wu, x, B))
        return 0;
    *done = 1;
    ADAPT(krn_cuda_matmul_swiglu_async(st, y, Wg, Wu, x, NULL));
}

extern "C" int krn_cuda_swiglu_t(dev_stream *s, void *y, int yt, const float *gate, const float *up, int B, int n) {
    ADAPT(krn_cuda_swiglu_async(st, y, yt, gate, up, B, n, NULL));
}

extern "C" int krn_cuda_add(dev_stream *s, float *y, const float *a, int B, int n) {
    ADAPT(krn_cuda_add_async(st, y, a, B, n, NULL));
}

extern "C" int krn_cuda_argmax(dev_stream *s, int32_t *out, int32_t *dup, const int32_t *dup_at, int n_dup,
                               const float *x, int B, int n) {
    ADAPT(krn_cuda_argmax_async(st, out, dup, dup_at, n_dup, x, B, n, NULL));
}

extern "C" int krn_cuda_embed_rows(dev_stream *s, float *y, const krn_weight *T, const int32_t *tokens, int B) {
    ADAPT(krn_cuda_embed_rows_async(st, y, T, tokens, B, NULL));
}
