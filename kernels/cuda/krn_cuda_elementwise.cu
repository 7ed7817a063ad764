/* Row and element ops of the op table on CUDA: rmsnorm, rope, kv_store, swiglu, add, add_bias, argmax.
 * rmsnorm and swiglu write y of an activation type (f32, f16, bf16): f32 math, rounded on store.
 * rmsnorm's sum of squares uses one block per row with a fixed-order tree (per-thread strided loop, warp
 * butterfly, warp totals added in warp order), so results are deterministic; argmax's merge does not depend on
 * its order (below), so its 8 blocks a row give the one-block result.
 * Shared mutable state: none. */
#include <math.h>
#include <cooperative_groups.h>
#include "kernels/cuda/krn_cuda_util.cuh"
#include "kernels/cuda/krn_cuda_rope.cuh"

namespace cg = cooperative_groups;

#define EW_THREADS 256   /* threads per block of the element-wise kernels */
#define ROW_THREADS 256  /* threads per row of rmsnorm (8 warps) */

static unsigned ew_blocks(size_t n) { return (unsigned)((n + EW_THREADS - 1) / EW_THREADS); }

/* Shared checks of the element-wise ops: B >= 0, n > 0 (or B == 0), no NULL pointers. 1 = go on. */
static int ew_check(dev_err *err, int *rc, const char *op, int B, int n, const void *p0, const void *p1,
                    const void *p2) {
    *rc = 0;
    if (B < 0 || n <= 0) {
        *rc = dev_err_set(err, MEMRA_E_INVAL, "%s: B=%d n=%d (need B >= 0, n > 0)", op, B, n);
        return 0;
    }
    if (B == 0)
        return 0;
    if (!p0 || !p1 || !p2) {
        *rc = dev_err_set(err, MEMRA_E_INVAL, "%s: NULL pointer argument", op);
        return 0;
    }
    if ((size_t)B * (size_t)n > (size_t)INT32_MAX * EW_THREADS) { /* grid.x limit */
        *rc = dev_err_set(err, MEMRA_E_INVAL, "%s: B*n = %zu too large", op, (size_t)B * (size_t)n);
        return 0;
    }
    return 1;
}

/* ---- rmsnorm: one block per row; any n or alignment. y of activation type YT: the f32 value of each
 * element, rounded on store (krn_act_of), so a 16-bit y holds the f32 kernel's results rounded. ---- */
template <int YT>
__global__ void __launch_bounds__(ROW_THREADS) rmsnorm_kernel(krn_act_e<YT> *__restrict__ y,
                                                               const float *__restrict__ x,
                                                               const float *__restrict__ w, int n, float eps,
                                                               int early) {
    krn_pdl_enter_early(early);
    __shared__ float red[32];
    const float *xr = x + (size_t)blockIdx.x * n;
    krn_act_e<YT> *yr = y + (size_t)blockIdx.x * n;
    float ss = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        ss = fmaf(xr[i], xr[i], ss);
    ss = krn_block_sum(ss, red);
    const float scale = 1.0f / sqrtf(ss / (float)n + eps);
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        yr[i] = krn_act_of<YT>(xr[i] * scale * w[i]);
}

/* n % 4 == 0, n <= 4 * RMS_V4 * ROW_THREADS, 16-byte aligned rows (y's: aligned for a store of 4 elements, 8
 * bytes when 16-bit): every load of a row in flight at once
 * (x and w held in registers between the two passes), w's issued before the PDL wait (a weight: written at
 * load, immutable during a forward). The per-thread loop above waits for one L2 round trip per step: ~10 us
 * per row at n = 4096 on an H200 (ncu), ~40 % of a decode step's non-GEMV time. Same order as that loop
 * for a thread's own elements is not kept: thread t adds its float4s j = 0, 1, ... (x, y, z, w), then the
 * fixed block tree; deterministic. */
#define RMS_V4 8
template <int YT>
__global__ void __launch_bounds__(ROW_THREADS) rmsnorm_vec_kernel(krn_act_e<YT> *__restrict__ y,
                                                                   const float *__restrict__ x,
                                                                   const float *__restrict__ w, int n, float eps,
                                                                   int early) {
    __shared__ float red[32];
    const int n4 = n / 4;
    const float4 *w4 = (const float4 *)w;
    float4 wv[RMS_V4], xv[RMS_V4];
#pragma unroll
    for (int j = 0; j < RMS_V4; j++) {
        const int i = threadIdx.x + j * ROW_THREADS;
        wv[j] = i < n4 ? __ldg(w4 + i) : make_float4(0.f, 0.f, 0.f, 0.f);
    }
    krn_pdl_enter_early_after_loads(early);
    const float4 *xr = (const float4 *)(x + (size_t)blockIdx.x * n);
    krn_act_e<YT> *yr = y + (size_t)blockIdx.x * n;
#pragma unroll
    for (int j = 0; j < RMS_V4; j++) {
        const int i = threadIdx.x + j * ROW_THREADS;
        xv[j] = i < n4 ? xr[i] : make_float4(0.f, 0.f, 0.f, 0.f);
    }
    float ss = 0.0f;
#pragma unroll
    for (int j = 0; j < RMS_V4; j++) {
        ss = fmaf(xv[j].x, xv[j].x, ss);
        ss = fmaf(xv[j].y, xv[j].y, ss);
        ss = fmaf(xv[j].z, xv[j].z, ss);
        ss = fmaf(xv[j].w, xv[j].w, ss);
    }
    ss = krn_block_sum(ss, red);
    const float scale = 1.0f / sqrtf(ss / (float)n + eps);
#pragma unroll
    for (int j = 0; j < RMS_V4; j++) {
        const int i = threadIdx.x + j * ROW_THREADS;
        if (i < n4)
            krn_stx4<YT>(yr, i, make_float4(xv[j].x * scale * wv[j].x, xv[j].y * scale * wv[j].y,
                                            xv[j].z * scale * wv[j].z, xv[j].w * scale * wv[j].w));
    }
}

/* rmsnorm_vec_kernel (vec) or rmsnorm_kernel for y's type. */
template <int YT>
static void rmsnorm_launch(int vec, int B, cudaStream_t st, void *y, const float *x, const float *w, int n, float eps) {
    const int early = krn_cuda_pdl_early(KRN_EARLY_NORM);
    if (vec)
        krn_launch(rmsnorm_vec_kernel<YT>, (unsigned)B, ROW_THREADS, 0, st, (krn_act_e<YT> *)y, x, w, n, eps, early);
    else
        krn_launch(rmsnorm_kernel<YT>, (unsigned)B, ROW_THREADS, 0, st, (krn_act_e<YT> *)y, x, w, n, eps, early);
}

/* The two kernels add the squares in different orders, so the path is part of the result: vec when n % 4 == 0,
 * n <= 8192, x and w 16-byte aligned and y aligned for its 4-element stores (f32 16 bytes, as before; 16-bit
 * 8 bytes). A 16-bit y thus holds the rounded bits of an f32 y taking the same path. */
extern "C" int krn_cuda_rmsnorm_async(void *cuda_stream, void *y, int yt, const float *x, const float *w, int B, int n,
                                      float eps, dev_err *err) {
    int rc;
    if (!ew_check(err, &rc, "krn_cuda_rmsnorm", B, n, y, x, w))
        return rc;
    if (!(eps >= 0.0f))
        return dev_err_set(err, MEMRA_E_INVAL, "krn_cuda_rmsnorm: eps=%g (need >= 0)", (double)eps);
    if (!krn_act_type_ok(yt) || !krn_cuda_aligned(y, (unsigned)krn_act_bytes(yt)))
        return dev_err_set(err, MEMRA_E_INVAL, "krn_cuda_rmsnorm: y type %d at %p (allowed: f32, f16, bf16, y aligned "
                           "to its element)", yt, y);
    const size_t t = (size_t)B * n;
    if (!krn_act_out_ok(y, yt, x, t)) /* other blocks' rows of x would be overwritten unread */
        return dev_err_set(err, MEMRA_E_INVAL, "krn_cuda_rmsnorm: a 16-bit y must not overlap x (an f32 y may be x)");
    const int vec = n % 4 == 0 && n <= 4 * RMS_V4 * ROW_THREADS && krn_cuda_aligned(x, 16) &&
                    krn_cuda_aligned(y, 4 * (unsigned)krn_act_bytes(yt)) && krn_cuda_aligned(w, 16);
    cudaStream_t st = (cudaStream_t)cuda_stream;
    if (yt == KRN_F16)
        rmsnorm_launch<KRN_F16>(vec, B, st, y, x, w, n, eps);
    else if (yt == KRN_BF16)
        rmsnorm_launch<KRN_BF16>(vec, B, st, y, x, w, n, eps);
    else
        rmsnorm_launch<KRN_F32>(vec, B, st, y, x, w, n, eps);
    return krn_cuda_launch_check(err, "krn_cuda_rmsnorm");
}

/* ---- the KV cache's element: f32, or f16/bf16 rounded to nearest even (krn_kv_cache) ---- */
static __device__ __forceinline__ void kv_put(void *cache, int type, size_t i, float x) {
    if (type == KRN_F16)
        ((__half *)cache)[i] = __float2half_rn(x);
    else if (type == KRN_BF16)
        ((__nv_bfloat16 *)cache)[i] = __float2bfloat16_rn(x);
    else
        ((float *)cache)[i] = x;
}

/* ---- rope: one thread per rotated pair ---- */
/* Rotate pair i of head xh (row b at position p); returns the pair's indices. Shared by rope and rope_store,
 * and its arithmetic (krn_cuda_rope.cuh) with the attention kernel that rotates q and k itself, so all give the
 * same bits. */
static __device__ __forceinline__ void rope_pair(float *xh, int i, int p, int n_rot, float freq_base,
                                                 float freq_scale, int neox, int *i0, int *i1) {
    const int half = n_rot / 2;
    float s, c;
    krn_rope_angle(i, p, n_rot, freq_base, freq_scale, &s, &c);
    *i0 = neox ? i : 2 * i;
    *i1 = neox ? i + half : 2 * i + 1;
    krn_rope_rot(xh[*i0], xh[*i1], s, c, &xh[*i0], &xh[*i1]);
}

__global__ void rope_kernel(float *__restrict__ x, const int32_t *__restrict__ pos, int B, int n_heads,
                            int head_dim, int n_rot, float freq_base, float freq_scale, int neox) {
    krn_pdl_enter();
    const int half = n_rot / 2;
    const size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)B * n_heads * half)
        return;
    const int i = (int)(idx % half);
    const size_t bh = idx / half; /* b * n_heads + h */
    const int b = (int)(bh / n_heads);
    int i0, i1;
    rope_pair(x + bh * head_dim, i, pos[b], n_rot, freq_base, freq_scale, neox, &i0, &i1);
}

/* rope_store: thread ranges, in order: the q pairs; the k pairs (rotated, then both values also stored into
 * the cache); k's unrotated dims (n_rot <= d < head_dim) copied to the cache; v copied to the cache. A row
 * whose pos is outside [0, n_ctx) is rotated but not stored (kv_store's rule). Each k element is written to
 * the cache by the thread that produced its final value: no ordering between threads is needed. */
__global__ void rope_store_kernel(krn_rope_store a, int early) {
    krn_pdl_enter_early(early);
    const int half = a.n_rot / 2, kv_dim = a.n_head_kv * a.head_dim, tail = a.head_dim - a.n_rot;
    const size_t nq = (size_t)a.B * a.n_head * half, nk = (size_t)a.B * a.n_head_kv * half;
    const size_t nt = (size_t)a.B * a.n_head_kv * tail, nv = (size_t)a.B * kv_dim;
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    int i0, i1;
    if (idx < nq) {
        const size_t bh = idx / half;
        rope_pair(a.q + bh * a.head_dim, (int)(idx % half), a.pos[bh / a.n_head], a.n_rot, a.freq_base,
                  a.freq_scale, a.neox, &i0, &i1);
        return;
    }
    idx -= nq;
    int b, e; /* row, element of k/v to store */
    if (idx < nk) {
        const size_t bh = idx / half;
        b = (int)(bh / a.n_head_kv);
        float *kh = a.k + bh * a.head_dim;
        rope_pair(kh, (int)(idx % half), a.pos[b], a.n_rot, a.freq_base, a.freq_scale, a.neox, &i0, &i1);
        const int p = a.pos[b];
        if (p < 0 || p >= a.n_ctx)
            return;
        const size_t dst = ((size_t)a.seq[b] * a.n_ctx + p) * kv_dim + (kh - a.k - (size_t)b * kv_dim);
        kv_put(a.cache.k, a.cache.type, dst + i0, kh[i0]);
        kv_put(a.cache.k, a.cache.type, dst + i1, kh[i1]);
        return;
    }
    idx -= nk;
    void *cache;
    const float *src;
    if (idx < nt) { /* k dims past n_rot */
        const size_t bh = idx / tail;
        b = (int)(bh / a.n_head_kv);
        e = (int)(bh % a.n_head_kv) * a.head_dim + a.n_rot + (int)(idx % tail);
        cache = a.cache.k;
        src = a.k;
    } else if ((idx -= nt) < nv) {
        b = (int)(idx / kv_dim);
        e = (int)(idx % kv_dim);
        cache = a.cache.v;
        src = a.v;
    } else {
        return;
    }
    const int p = a.pos[b];
    if (p < 0 || p >= a.n_ctx)
        return;
    kv_put(cache, a.cache.type, ((size_t)a.seq[b] * a.n_ctx + p) * kv_dim + e, src[(size_t)b * kv_dim + e]);
}

int krn_cuda_rope_store_check(const krn_rope_store *a, dev_err *err) {
    if (!a || a->B < 0 || a->n_head <= 0 || a->n_head_kv <= 0 || a->head_dim <= 0 || a->n_rot <= 0 ||
        a->n_rot > a->head_dim || a->n_rot % 2 != 0 || a->n_ctx <= 0)
        return dev_err_set(err, MEMRA_E_INVAL,
                           "krn_cuda_rope_store: B=%d n_head=%d n_head_kv=%d head_dim=%d n_rot=%d n_ctx=%d (need "
                           "B >= 0, heads > 0, 0 < n_rot <= head_dim, n_rot even, n_ctx > 0)", a ? a->B : -1,
                           a ? a->n_head : -1, a ? a->n_head_kv : -1, a ? a->head_dim : -1, a ? a->n_rot : -1,
                           a ? a->n_ctx : -1);
    if (!(a->freq_base > 0.0f) || !(a->freq_scale > 0.0f))
        return dev_err_set(err, MEMRA_E_INVAL, "krn_cuda_rope_store: freq_base=%g freq_scale=%g (need > 0)",
                           (double)a->freq_base, (double)a->freq_scale);
    if (a->B == 0)
        return 0;
    if (!a->q || !a->k || !a->v || !a->cache.k || !a->cache.v || !a->seq || !a->pos)
        return dev_err_set(err, MEMRA_E_INVAL, "krn_cuda_rope_store: NULL pointer argument");
    if (!krn_kv_type_ok(a->cache.type))
        return dev_err_set(err, MEMRA_E_INVAL, "krn_cuda_rope_store: cache type %d (allowed: f32, f16, bf16)",
                           a->cache.type);
    return 0;
}

extern "C" int krn_cuda_rope_store_async(void *cuda_stream, const krn_rope_store *a, dev_err *err) {
    const int rc = krn_cuda_rope_store_check(a, err);
    if (rc != 0 || a->B == 0)
        return rc;
    const size_t half = (size_t)a->n_rot / 2, kv_dim = (size_t)a->n_head_kv * a->head_dim;
    const size_t n = (size_t)a->B * (a->n_head * half + a->n_head_kv * half +
                                     (size_t)a->n_head_kv * (a->head_dim - a->n_rot) + kv_dim);
    if (n > (size_t)INT32_MAX * EW_THREADS)
        return dev_err_set(err, MEMRA_E_INVAL, "krn_cuda_rope_store: %zu threads, too many", n);
    krn_launch(rope_store_kernel, ew_blocks(n), EW_THREADS, 0, (cudaStream_t)cuda_stream, *a,
               krn_cuda_pdl_early(KRN_EARLY_ROPE));
    return krn_cuda_launch_check(err, "krn_cuda_rope_store");
}

extern "C" int krn_cuda_rope_async(void *cuda_stream, float *x, const int32_t *pos, int B, int n_heads,
                                   int head_dim, int n_rot, float freq_base, float freq_scale, int neox,
                                   dev_err *err) {
    if (B < 0 || n_heads <= 0 || head_dim <= 0 || n_rot <= 0 || n_rot > head_dim || n_rot % 2 != 0)
        return dev_err_set(err, MEMRA_E_INVAL,
                           "krn_cuda_rope: B=%d n_heads=%d head_dim=%d n_rot=%d (need B >= 0, n_heads > 0, "
                           "0 < n_rot <= head_dim, n_rot even)", B, n_heads, head_dim, n_rot);
    if (!(freq_base > 0.0f))
        return dev_err_set(err, MEMRA_E_INVAL, "krn_cuda_rope: freq_base=%g (need > 0)", (double)freq_base);
    if (B == 0)
        return 0;
    if (!x || !pos)
        return dev_err_set(err, MEMRA_E_INVAL, "krn_cuda_rope: NULL pointer argument");
    const size_t n = (size_t)B * n_heads * (n_rot / 2);
    krn_launch(rope_kernel, ew_blocks(n), EW_THREADS, 0, (cudaStream_t)cuda_stream, x, pos, B, n_heads, head_dim,
        n_rot, freq_base, freq_scale, neox ? 1 : 0);
    return krn_cuda_launch_check(err, "krn_cuda_rope");
}

/* ---- kv_store: one thread per element of k (and v) ---- */
__global__ void kv_store_kernel(krn_kv_cache c, const float *__restrict__ k, const float *__restrict__ v,
                                const int32_t *__restrict__ seq, const int32_t *__restrict__ pos, int B, int kv_dim,
                                int n_ctx) {
    krn_pdl_enter();
    const size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)B * kv_dim)
        return;
    const int b = (int)(idx / kv_dim), i = (int)(idx % kv_dim);
    int p = pos[b];
    if (p < 0 || p >= n_ctx) /* out of range: dropped (the caller checks positions on the host) */
        return;
    const size_t dst = ((size_t)seq[b] * n_ctx + p) * kv_dim + i;
    kv_put(c.k, c.type, dst, k[idx]);
    kv_put(c.v, c.type, dst, v[idx]);
}

extern "C" int krn_cuda_kv_store_async(void *cuda_stream, const krn_kv_cache *c, const float *k, const float *v,
                                       const int32_t *seq, const int32_t *pos, int B, int kv_dim, int n_ctx,
                                       dev_err *err) {
    int rc;
    if (!ew_check(err, &rc, "krn_cuda_kv_store", B, kv_dim, c, c ? c->k : NULL, c ? c->v : NULL))
        return rc;
    if (!k || !v || !seq || !pos || n_ctx <= 0 || !krn_kv_type_ok(c->type))
        return dev_err_set(err, MEMRA_E_INVAL, "krn_cuda_kv_store: NULL k/v/seq/pos, n_ctx=%d <= 0 or cache type %d "
                           "(allowed: f32, f16, bf16)", n_ctx, c->type);
    krn_launch(kv_store_kernel, ew_blocks((size_t)B * kv_dim), EW_THREADS, 0, (cudaStream_t)cuda_stream, *c, k, v,
        seq, pos, B, kv_dim, n_ctx);
    return krn_cuda_launch_check(err, "krn_cuda_kv_store");
}

/* ---- swiglu, add, add_bias ---- */
/* y of activation type YT: the f32 value, rounded on store. */
template <int YT>
__global__ void swiglu_kernel(krn_act_e<YT> *__restrict__ y, const float *__restrict__ g,
                              const float *__restrict__ u, size_t n, int early) {
    krn_pdl_enter_early(early);
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        const float a = g[i];
        y[i] = krn_act_of<YT>(a / (1.0f + expf(-a)) * u[i]);
    }
}

__global__ void add_kernel(float *y, const float *a, size_t n) {
    krn_pdl_enter();
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        y[i] += a[i];
}

__global__ void add_bias_kernel(float *y, const float *bias, size_t total, int n) {
    krn_pdl_enter();
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < total)
        y[i] += bias[i % n];
}

extern "C" int krn_cuda_swiglu_async(void *cuda_stream, void *y, int yt, const float *gate, const float *up, int B,
                                     int n, dev_err *err) {
    int rc;
    if (!ew_check(err, &rc, "krn_cuda_swiglu", B, n, y, gate, up))
        return rc;
    const size_t t = (size_t)B * n;
    if (!krn_act_type_ok(yt) || !krn_cuda_aligned(y, (unsigned)krn_act_bytes(yt)))
        return dev_err_set(err, MEMRA_E_INVAL, "krn_cuda_swiglu: y type %d at %p (allowed: f32, f16, bf16, y aligned "
                           "to its element)", yt, y);
    /* thread i writes y's element i and reads gate[i], up[i]: an f32 y may be gate or up (in place), a 16-bit
     * one would overwrite inputs other threads have yet to read */
    if (!krn_act_out_ok(y, yt, gate, t) || !krn_act_out_ok(y, yt, up, t))
        return dev_err_set(err, MEMRA_E_INVAL, "krn_cuda_swiglu: a %s y must not overlap gate or up (only an f32 y "
                           "may be computed in place)", yt == KRN_F16 ? "f16" : "bf16");
    cudaStream_t st = (cudaStream_t)cuda_stream;
    const int early = krn_cuda_pdl_early(KRN_EARLY_SWIGLU);
    if (yt == KRN_F16)
        krn_launch(swiglu_kernel<KRN_F16>, ew_blocks(t), EW_THREADS, 0, st, (uint16_t *)y, gate, up, t, early);
    else if (yt == KRN_BF16)
        krn_launch(swiglu_kernel<KRN_BF16>, ew_blocks(t), EW_THREADS, 0, st, (uint16_t *)y, gate, up, t, early);
    else
        krn_launch(swiglu_kernel<KRN_F32>, ew_blocks(t), EW_THREADS, 0, st, (float *)y, gate, up, t, early);
    return krn_cuda_launch_check(err, "krn_cuda_swiglu");
}

extern "C" int krn_cuda_add_async(void *cuda_stream, float *y, const float *a, int B, int n, dev_err *err) {
    int rc;
    if (!ew_check(err, &rc, "krn_cuda_add", B, n, y, a, a))
        return rc;
    const size_t t = (size_t)B * n;
    krn_launch(add_kernel, ew_blocks(t), EW_THREADS, 0, (cudaStream_t)cuda_stream, y, a, t);
    return krn_cuda_launch_check(err, "krn_cuda_add");
}

extern "C" int krn_cuda_add_bias_async(void *cuda_stream, float *y, const float *bias, int B, int n, dev_err *err) {
    int rc;
    if (!ew_check(err, &rc, "krn_cuda_add_bias", B, n, y, bias, bias))
        return rc;
    const size_t t = (size_t)B * n;
    krn_launch(add_bias_kernel, ew_blocks(t), EW_THREADS, 0, (cudaStream_t)cuda_stream, y, bias, t, n);
    return krn_cuda_launch_check(err, "krn_cuda_add_bias");
}

/* ---- argmax: a cluster of AM_CLUSTER blocks of AM_THREADS per row, each block a slice of the row; (value,
 * index) pairs merged with "larger value, then lower index". That merge picks the one element maximal in
 * (value, -index) among the non-NaN ones, whatever the order of merging, so neither the tree's shape nor the
 * slicing changes the result. A decode row is the vocabulary (128256 logits of the 8B shape, 513 KB, fresh in
 * L2): one block read it at one SM's share of L2 bandwidth, 8 round trips of AM_UNROLL float4 loads a thread;
 * the cluster's 8 blocks read 64 KB each, one round trip, and block 0 merges their 8 candidates through
 * distributed shared memory (no workspace, no tickets, no second kernel). In the 8B step's kernel trace its
 * increment is 3.3 us against one block's 6.1, the step 3.6 us shorter (docs/cuda-kernels.md). ---- */
#define AM_THREADS 1024
#define AM_UNROLL 4
#define AM_CLUSTER 8 /* blocks a row: the largest portable cluster */
static_assert(AM_THREADS / KRN_WARP == KRN_WARP && AM_CLUSTER <= KRN_WARP, "argmax: a warp's lane per candidate");
static __device__ __forceinline__ void am_merge(float *v, int *i, float ov, int oi) {
    if (ov > *v || (ov == *v && oi < *i)) {
        *v = ov;
        *i = oi;
    }
}

/* The butterfly of am_merge over lanes xor top .. 1: every lane ends with the merge of its 2 * top lanes. */
static __device__ __forceinline__ void am_warp_merge(float *v, int *i, int top) {
    for (int o = top; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, *v, o);
        const int oi = __shfl_xor_sync(0xffffffffu, *i, o);
        am_merge(v, i, ov, oi);
    }
}

/* Row blockIdx.x / AM_CLUSTER, slice rank = blockIdx.x % AM_CLUSTER (the block's rank in its cluster). */
__global__ void __launch_bounds__(AM_THREADS) argmax_kernel(int32_t *__restrict__ out, int32_t *__restrict__ dup,
                                                             const int32_t *__restrict__ dup_at, int n_dup,
                                                             const float *__restrict__ x, int n, int vec) {
    __cluster_barrier_arrive_relaxed(); /* phase 1: this block has started (waited on before the DSMEM stores) */
    krn_pdl_enter();
    __shared__ float sv[AM_THREADS / KRN_WARP];
    __shared__ int si[AM_THREADS / KRN_WARP];
    const int row = blockIdx.x / AM_CLUSTER, rank = blockIdx.x % AM_CLUSTER;
    const float *xr = x + (size_t)row * n;
    float bv = -INFINITY;
    int bi = INT32_MAX; /* no candidate yet; NaN never becomes one */
    if (vec) { /* n % 4 == 0, rows 16-byte aligned; this block's float4s [lo, hi) */
        const float4 *x4 = (const float4 *)xr;
        const int n4 = n / 4, q = (n4 + AM_CLUSTER - 1) / AM_CLUSTER, lo = rank * q, hi = min(n4, lo + q);
        const int step = AM_THREADS * AM_UNROLL;
        int i = lo + threadIdx.x;
        for (; i + (AM_UNROLL - 1) * AM_THREADS < hi; i += step) {
            float4 v[AM_UNROLL];
#pragma unroll
            for (int u = 0; u < AM_UNROLL; u++) /* every load issued before the first merge */
                v[u] = __ldg(&x4[i + u * AM_THREADS]);
#pragma unroll
            for (int u = 0; u < AM_UNROLL; u++) {
                const int e = 4 * (i + u * AM_THREADS);
                am_merge(&bv, &bi, v[u].x, e);
                am_merge(&bv, &bi, v[u].y, e + 1);
                am_merge(&bv, &bi, v[u].z, e + 2);
                am_merge(&bv, &bi, v[u].w, e + 3);
            }
        }
        for (; i < hi; i += AM_THREADS) {
            const float4 v = __ldg(&x4[i]);
            am_merge(&bv, &bi, v.x, 4 * i);
            am_merge(&bv, &bi, v.y, 4 * i + 1);
            am_merge(&bv, &bi, v.z, 4 * i + 2);
            am_merge(&bv, &bi, v.w, 4 * i + 3);
        }
    } else {
        const int q = (n + AM_CLUSTER - 1) / AM_CLUSTER, lo = rank * q, hi = min(n, lo + q);
        for (int i = lo + threadIdx.x; i < hi; i += AM_THREADS)
            am_merge(&bv, &bi, xr[i], i);
    }
    am_warp_merge(&bv, &bi, 16);
    const int lane = threadIdx.x % KRN_WARP, warp = threadIdx.x / KRN_WARP;
    if (lane == 0) {
        sv[warp] = bv;
        si[warp] = bi;
    }
    __syncthreads(); /* publishes sv[], si[] */
    if (warp == 0) {
        bv = sv[lane]; /* one warp's candidate a lane (the static_assert above) */
        bi = si[lane];
        am_warp_merge(&bv, &bi, 16);
    }
    __shared__ float cv[AM_CLUSTER]; /* rank 0's: every block's candidate, stored there by the block itself */
    __shared__ int ci[AM_CLUSTER];
    cg::cluster_group cl = cg::this_cluster();
    __cluster_barrier_wait(); /* phase 1 done: every block of the cluster has started (rank 0's cv[] exists) */
    if (threadIdx.x == 0) {
        *cl.map_shared_rank(&cv[rank], 0) = bv;
        *cl.map_shared_rank(&ci[rank], 0) = bi;
    }
    cl.sync(); /* phase 2, release/acquire: the candidates' stores before rank 0's reads below */
    if (rank != 0 || warp != 0)
        return;
    bv = lane < AM_CLUSTER ? cv[lane] : -INFINITY;
    bi = lane < AM_CLUSTER ? ci[lane] : INT32_MAX;
    am_warp_merge(&bv, &bi, AM_CLUSTER / 2);
    if (lane == 0) {
        const int r = bi != INT32_MAX && bv > -INFINITY ? bi : -1; /* nothing above -inf: -1 */
        out[row] = r;
        const int at = dup_at ? dup_at[row] : row; /* a step input: written before the kernel, read after the wait */
        if (dup && at >= 0 && at < n_dup)
            dup[at] = r;
    }
}

extern "C" int krn_cuda_argmax_async(void *cuda_stream, int32_t *out, int32_t *dup, const int32_t *dup_at,
                                     int n_dup, const float *x, int B, int n, dev_err *err) {
    int rc;
    if (!ew_check(err, &rc, "krn_cuda_argmax", B, n, out, x, x))
        return rc;
    if (B > INT32_MAX / AM_CLUSTER)
        return dev_err_set(err, MEMRA_E_INVAL, "krn_cuda_argmax: B=%d rows (at most %d)", B, INT32_MAX / AM_CLUSTER);
    const int vec = n % 4 == 0 && ((uintptr_t)x & 15) == 0;
    krn_launch_ex(argmax_kernel, dim3((unsigned)B * AM_CLUSTER), AM_THREADS, 0, (cudaStream_t)cuda_stream, AM_CLUSTER,
                  out, dup, dup_at, dup_at ? n_dup : B, x, n, vec);
    return krn_cuda_launch_check(err, "krn_cuda_argmax");
}
