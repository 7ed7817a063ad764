/* Row and element ops of the op table on CUDA: rmsnorm, rope, kv_store, swiglu, add, add_bias, argmax.
 * Reductions (rmsnorm's sum of squares, argmax) use one block per row with a fixed-order tree (per-thread
 * strided loop, warp butterfly, warp totals added in warp order), so results are deterministic.
 * Shared mutable state: none. */
#include <math.h>
#include "kernels/cuda/krn_cuda_util.cuh"

#define EW_THREADS 256   /* threads per block of the element-wise kernels */
#define ROW_THREADS 256  /* threads per row of rmsnorm and argmax (8 warps) */

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

/* ---- rmsnorm: one block per row ---- */
__global__ void __launch_bounds__(ROW_THREADS) rmsnorm_kernel(float *__restrict__ y, const float *__restrict__ x,
                                                               const float *__restrict__ w, int n, float eps) {
    krn_pdl_enter();
    __shared__ float red[32];
    const float *xr = x + (size_t)blockIdx.x * n;
    float *yr = y + (size_t)blockIdx.x * n;
    float ss = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        ss = fmaf(xr[i], xr[i], ss);
    ss = krn_block_sum(ss, red);
    const float scale = 1.0f / sqrtf(ss / (float)n + eps);
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        yr[i] = xr[i] * scale * w[i];
}

extern "C" int krn_cuda_rmsnorm_async(void *cuda_stream, float *y, const float *x, const float *w, int B, int n,
                                      float eps, dev_err *err) {
    int rc;
    if (!ew_check(err, &rc, "krn_cuda_rmsnorm", B, n, y, x, w))
        return rc;
    if (!(eps >= 0.0f))
        return dev_err_set(err, MEMRA_E_INVAL, "krn_cuda_rmsnorm: eps=%g (need >= 0)", (double)eps);
    krn_launch(rmsnorm_kernel, (unsigned)B, ROW_THREADS, 0, (cudaStream_t)cuda_stream, y, x, w, n, eps);
    return krn_cuda_launch_check(err, "krn_cuda_rmsnorm");
}

/* ---- rope: one thread per rotated pair ---- */
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
    float *xh = x + bh * head_dim;
    const float inv_freq = powf(freq_base, -(float)(2 * i) / (float)n_rot);
    const float theta = (float)pos[b] * freq_scale * inv_freq;
    float s, c;
    sincosf(theta, &s, &c);
    const int i0 = neox ? i : 2 * i, i1 = neox ? i + half : 2 * i + 1;
    const float a = xh[i0], bv = xh[i1];
    xh[i0] = a * c - bv * s;
    xh[i1] = a * s + bv * c;
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
__global__ void kv_store_kernel(float *__restrict__ kc, float *__restrict__ vc, const float *__restrict__ k,
                                const float *__restrict__ v, const int32_t *__restrict__ seq,
                                const int32_t *__restrict__ pos, int B, int kv_dim, int n_ctx) {
    krn_pdl_enter();
    const size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)B * kv_dim)
        return;
    const int b = (int)(idx / kv_dim), i = (int)(idx % kv_dim);
    int p = pos[b];
    if (p < 0 || p >= n_ctx) /* out of range: dropped (the caller checks positions on the host) */
        return;
    const size_t dst = ((size_t)seq[b] * n_ctx + p) * kv_dim + i;
    kc[dst] = k[idx];
    vc[dst] = v[idx];
}

extern "C" int krn_cuda_kv_store_async(void *cuda_stream, float *k_cache, float *v_cache, const float *k,
                                       const float *v, const int32_t *seq, const int32_t *pos, int B, int kv_dim,
                                       int n_ctx, dev_err *err) {
    int rc;
    if (!ew_check(err, &rc, "krn_cuda_kv_store", B, kv_dim, k_cache, v_cache, k))
        return rc;
    if (!v || !seq || !pos || n_ctx <= 0)
        return dev_err_set(err, MEMRA_E_INVAL, "krn_cuda_kv_store: NULL v/seq/pos or n_ctx=%d <= 0", n_ctx);
    krn_launch(kv_store_kernel, ew_blocks((size_t)B * kv_dim), EW_THREADS, 0, (cudaStream_t)cuda_stream, k_cache,
        v_cache, k, v, seq, pos, B, kv_dim, n_ctx);
    return krn_cuda_launch_check(err, "krn_cuda_kv_store");
}

/* ---- swiglu, add, add_bias ---- */
__global__ void swiglu_kernel(float *__restrict__ y, const float *__restrict__ g, const float *__restrict__ u,
                              size_t n) {
    krn_pdl_enter();
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        const float a = g[i];
        y[i] = a / (1.0f + expf(-a)) * u[i];
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

extern "C" int krn_cuda_swiglu_async(void *cuda_stream, float *y, const float *gate, const float *up, int B, int n,
                                     dev_err *err) {
    int rc;
    if (!ew_check(err, &rc, "krn_cuda_swiglu", B, n, y, gate, up))
        return rc;
    const size_t t = (size_t)B * n;
    krn_launch(swiglu_kernel, ew_blocks(t), EW_THREADS, 0, (cudaStream_t)cuda_stream, y, gate, up, t);
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

/* ---- argmax: one block per row; (value, index) pairs merged with "larger value, then lower index" ---- */
static __device__ __forceinline__ void am_merge(float *v, int *i, float ov, int oi) {
    if (ov > *v || (ov == *v && oi < *i)) {
        *v = ov;
        *i = oi;
    }
}

__global__ void __launch_bounds__(ROW_THREADS) argmax_kernel(int32_t *__restrict__ out, const float *__restrict__ x,
                                                              int n) {
    krn_pdl_enter();
    __shared__ float sv[32];
    __shared__ int si[32];
    const float *xr = x + (size_t)blockIdx.x * n;
    float bv = -INFINITY;
    int bi = INT32_MAX; /* no candidate yet; NaN never becomes one */
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        am_merge(&bv, &bi, xr[i], i);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
        const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
        am_merge(&bv, &bi, ov, oi);
    }
    const int lane = threadIdx.x % KRN_WARP, warp = threadIdx.x / KRN_WARP;
    if (lane == 0) {
        sv[warp] = bv;
        si[warp] = bi;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < (int)(blockDim.x / KRN_WARP); w++)
            am_merge(&bv, &bi, sv[w], si[w]);
        out[blockIdx.x] = bi == INT32_MAX ? 0 : bi;
    }
}

extern "C" int krn_cuda_argmax_async(void *cuda_stream, int32_t *out, const float *x, int B, int n, dev_err *err) {
    int rc;
    if (!ew_check(err, &rc, "krn_cuda_argmax", B, n, out, x, x))
        return rc;
    krn_launch(argmax_kernel, (unsigned)B, ROW_THREADS, 0, (cudaStream_t)cuda_stream, out, x, n);
    return krn_cuda_launch_check(err, "krn_cuda_argmax");
}
