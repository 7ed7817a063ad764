/* Fused dequant GEMV: y (B, n_out) = x (B, n_in) @ W^T for every krn_type, B <= 8 rows per launch.
 *
 * This file: the float types (f32, f16, bf16) and the host entry. One warp per output row, MM_WARPS rows
 * per block: each lane reads 8 consecutive weights per 16-byte load (4 loads in flight), or one at a time
 * when the row is not 16-byte aligned. The block types are in krn_cuda_matmul_q.cu.
 * Determinism: each lane accumulates in a fixed order, then a butterfly shuffle sum in a fixed order; no
 * atomics. The order does not depend on B, so a row's result has the same bits in any batch.
 * Shared mutable state: none. */
#include "kernels/cuda/krn_cuda_matmul.cuh"

/* Sum of 4 products in a fixed order, starting from t. */
static __device__ __forceinline__ float dot4(float t, float w0, float w1, float w2, float w3, float4 a) {
    t = fmaf(w0, a.x, t);
    t = fmaf(w1, a.y, t);
    t = fmaf(w2, a.z, t);
    return fmaf(w3, a.w, t);
}

/* ---- float types ---- */

/* 8 consecutive weights from 16 (f16, bf16) or 32 (f32) bytes, 16-byte aligned. */
template <int T> struct mm_f8 { uint4 a, b; };
template <int T> static __device__ __forceinline__ mm_f8<T> ld_f8(const uint8_t *p) {
    mm_f8<T> r;
    r.a = krn_ld_stream16(p);
    if (T == KRN_F32)
        r.b = krn_ld_stream16(p + 16);
    else
        r.b = make_uint4(0, 0, 0, 0);
    return r;
}
template <int T> static __device__ __forceinline__ void cvt_f8(const mm_f8<T> &r, float (&w)[8]) {
    if (T == KRN_F32) {
        const uint32_t u[8] = {r.a.x, r.a.y, r.a.z, r.a.w, r.b.x, r.b.y, r.b.z, r.b.w};
#pragma unroll
        for (int i = 0; i < 8; i++)
            w[i] = __uint_as_float(u[i]);
    } else {
        const uint32_t u[4] = {r.a.x, r.a.y, r.a.z, r.a.w};
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const uint16_t lo = (uint16_t)(u[i] & 0xFFFFu), hi = (uint16_t)(u[i] >> 16);
            w[2 * i] = T == KRN_F16 ? krn_h2f(lo) : krn_bf2f(lo);
            w[2 * i + 1] = T == KRN_F16 ? krn_h2f(hi) : krn_bf2f(hi);
        }
    }
}
template <int T> static __device__ __forceinline__ float ld_f1(const uint8_t *row, int e) {
    if (T == KRN_F32)
        return __ldg((const float *)row + e);
    const uint16_t h = __ldg((const unsigned short *)row + e);
    return T == KRN_F16 ? krn_h2f(h) : krn_bf2f(h);
}

template <int NB>
static __device__ __forceinline__ void fma8(const float (&w)[8], const float *x, int n_in, int e, float (&acc)[NB]) {
#pragma unroll
    for (int b = 0; b < NB; b++) {
        const float *xr = x + (size_t)b * n_in + e;
        const float4 a = krn_ld_f4(xr), c = krn_ld_f4(xr + 4);
        acc[b] = dot4(dot4(acc[b], w[0], w[1], w[2], w[3], a), w[4], w[5], w[6], w[7], c);
    }
}

/* VEC: n_in % 8 == 0 and W, x 16-byte aligned: lane reads weights [8*(lane + 32*j), +8) per step, 4 steps
 * of loads in flight. Otherwise lane reads weights lane + 32*j one by one. */
template <int T, int NB, bool VEC>
__global__ void __launch_bounds__(MM_WARPS *KRN_WARP)
    mm_float_kernel(float *__restrict__ y, const uint8_t *__restrict__ W, const float *__restrict__ x, int n_out,
                    int n_in, size_t row_bytes) {
    krn_pdl_enter();
    const int lane = threadIdx.x % KRN_WARP, warp = threadIdx.x / KRN_WARP;
    const int row = blockIdx.x * MM_WARPS + warp;
    if (row >= n_out)
        return;
    const uint8_t *rp = W + (size_t)row * row_bytes;
    const int esz = T == KRN_F32 ? 4 : 2;
    float acc[NB];
#pragma unroll
    for (int b = 0; b < NB; b++)
        acc[b] = 0.0f;
    if (VEC) {
        const int step = 8 * KRN_WARP;
        int e = 8 * lane;
        for (; e + 3 * step < n_in; e += 4 * step) {
            mm_f8<T> r[4];
#pragma unroll
            for (int u = 0; u < 4; u++)
                r[u] = ld_f8<T>(rp + (size_t)(e + u * step) * esz);
#pragma unroll
            for (int u = 0; u < 4; u++) {
                float w[8];
                cvt_f8<T>(r[u], w);
                fma8<NB>(w, x, n_in, e + u * step, acc);
            }
        }
        for (; e < n_in; e += step) {
            float w[8];
            cvt_f8<T>(ld_f8<T>(rp + (size_t)e * esz), w);
            fma8<NB>(w, x, n_in, e, acc);
        }
    } else {
        for (int e = lane; e < n_in; e += KRN_WARP) {
            const float w = ld_f1<T>(rp, e);
#pragma unroll
            for (int b = 0; b < NB; b++)
                acc[b] = fmaf(w, __ldg(x + (size_t)b * n_in + e), acc[b]);
        }
    }
#pragma unroll
    for (int b = 0; b < NB; b++) {
        const float r = krn_warp_sum(acc[b]);
        if (lane == 0)
            y[(size_t)b * n_out + row] = r;
    }
}

/* ---- host side ---- */

template <int T, int NB>
static void mm_launch_nb(const mm_args *a, int vec, cudaStream_t st) {
    const dim3 grid((unsigned)((a->n_out + MM_WARPS - 1) / MM_WARPS)), block(MM_WARPS * KRN_WARP);
    if (vec)
        krn_launch(mm_float_kernel<T, NB, true>, grid, block, 0, st, a->y, a->W, a->x, a->n_out, a->n_in,
            a->row_bytes);
    else
        krn_launch(mm_float_kernel<T, NB, false>, grid, block, 0, st, a->y, a->W, a->x, a->n_out, a->n_in,
            a->row_bytes);
}

template <int T>
static void mm_launch(const mm_args *a, int nb, int vec, cudaStream_t st) {
    switch (nb) {
    case 1: mm_launch_nb<T, 1>(a, vec, st); break;
    case 2: mm_launch_nb<T, 2>(a, vec, st); break;
    case 3: mm_launch_nb<T, 3>(a, vec, st); break;
    case 4: mm_launch_nb<T, 4>(a, vec, st); break;
    case 5: mm_launch_nb<T, 5>(a, vec, st); break;
    case 6: mm_launch_nb<T, 6>(a, vec, st); break;
    case 7: mm_launch_nb<T, 7>(a, vec, st); break;
    default: mm_launch_nb<T, 8>(a, vec, st); break;
    }
}

/* Elements and bytes per block of the types this file handles; 0 when unsupported. */
static int mm_type_layout(int t, int *be, int *bb) {
    switch (t) {
    case KRN_F32: *be = 1; *bb = 4; return 1;
    case KRN_F16: *be = 1; *bb = 2; return 1;
    case KRN_BF16: *be = 1; *bb = 2; return 1;
    case KRN_Q4_0: *be = 32; *bb = 18; return 1;
    case KRN_Q4_1: *be = 32; *bb = 20; return 1;
    case KRN_Q8_0: *be = 32; *bb = 34; return 1;
    case KRN_Q4_K: *be = 256; *bb = 144; return 1;
    case KRN_Q6_K: *be = 256; *bb = 210; return 1;
    default: return 0;
    }
}

extern "C" int krn_cuda_matmul_async(void *cuda_stream, float *y, const krn_weight *W, const float *x, int B,
                                     dev_err *err) {
    if (!W)
        return dev_err_set(err, MEMRA_E_INVAL, "krn_cuda_matmul: W is NULL");
    int be = 0, bb = 0;
    if (!mm_type_layout(W->type, &be, &bb))
        return dev_err_set(err, MEMRA_E_INVAL,
                           "krn_cuda_matmul: weight type %d unsupported (allowed: f32, f16, bf16, q8_0, q4_0, "
                           "q4_1, q4_k, q6_k)", W->type);
    if (B < 0 || W->n_out <= 0 || W->n_in <= 0)
        return dev_err_set(err, MEMRA_E_INVAL, "krn_cuda_matmul: B=%d n_out=%d n_in=%d (need B >= 0, n > 0)", B,
                           W->n_out, W->n_in);
    if (B == 0)
        return 0;
    if (!y || !x || !W->data)
        return dev_err_set(err, MEMRA_E_INVAL, "krn_cuda_matmul: NULL pointer (y=%p x=%p W->data=%p)", (void *)y,
                           (const void *)x, W->data);
    if (W->n_in % be != 0)
        return dev_err_set(err, MEMRA_E_INVAL, "krn_cuda_matmul: n_in=%d is not a multiple of %d (type %d blocks)",
                           W->n_in, be, W->type);
    const unsigned walign = W->type == KRN_F32 ? 4 : 2;
    if (!krn_cuda_aligned(W->data, walign) || !krn_cuda_aligned(x, 4))
        return dev_err_set(err, MEMRA_E_INVAL, "krn_cuda_matmul: W->data %p must be %u-byte aligned, x %p 4-byte",
                           W->data, walign, (const void *)x);
    const int is_float = be == 1;
    if (!is_float && !krn_cuda_aligned(x, 16))
        return dev_err_set(err, MEMRA_E_INVAL, "krn_cuda_matmul: x %p must be 16-byte aligned for block types",
                           (const void *)x);
    const int vec = is_float && W->n_in % 8 == 0 && krn_cuda_aligned(W->data, 16) && krn_cuda_aligned(x, 16);
    cudaStream_t st = (cudaStream_t)cuda_stream;
    for (int b0 = 0; b0 < B; b0 += MM_MAX_B) {
        const int nb = B - b0 < MM_MAX_B ? B - b0 : MM_MAX_B;
        mm_args a;
        a.y = y + (size_t)b0 * W->n_out;
        a.W = (const uint8_t *)W->data;
        a.x = x + (size_t)b0 * W->n_in;
        a.n_out = W->n_out;
        a.n_in = W->n_in;
        a.row_bytes = (size_t)(W->n_in / be) * bb;
        switch (W->type) {
        case KRN_F32: mm_launch<KRN_F32>(&a, nb, vec, st); break;
        case KRN_F16: mm_launch<KRN_F16>(&a, nb, vec, st); break;
        case KRN_BF16: mm_launch<KRN_BF16>(&a, nb, vec, st); break;
        default: mm_q_launch(W->type, &a, nb, st); break;
        }
        int rc = krn_cuda_launch_check(err, "krn_cuda_matmul");
        if (rc)
            return dev_err_wrap(err, "type %d, %dx%d, B=%d", W->type, W->n_out, W->n_in, B), rc;
    }
    return 0;
}
