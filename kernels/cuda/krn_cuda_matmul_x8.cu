/* x quantized to int8 (kernels/krn.h "x quantized to int8", MEMRA_CUDA_X8) on CUDA:
 *   - the quantize kernel: one warp per 32-element block, lane i holds element i (x of an activation type,
 *     widened exactly on load); the block's max |x| and the quants' sum by butterflies (exact in any order), so
 *     the bytes are krn_x8_quantize_host's over the widened rows;
 *   - the planar GEMV with int8 x: krn_cuda_matmul_p.cu's walk unchanged (items of R rows x U 16-byte
 *     vectors loaded one item ahead, the first before the PDL wait; the same launch shapes, krn_cuda_planes.cuh)
 *     but each vector's products are __dp4a over four bytes at a time: a q4 word is 2 logic ops and 2 dp4a
 *     for 8 weights (the f32 form: 8 lop3 + 8 fadd + 8 fma), a q8_0 word one dp4a for 4. Per vector and
 *     row of x, the integer sum isum is exact; then, in this order,
 *       q8_0  acc = fma(d_w * d_x, isum, acc)
 *       q4_0  acc = fma(d_w * d_x, isum, fma(-8 d_w, s_x, acc))
 *       q4_1  acc = fma(d_w * d_x, isum, fma(m_w, s_x, acc))
 *       q4_K  acc = fma(d1 * d_x, isum, fma(-m1, s_x, acc))        (d1, m1: the sub-block's scale and min)
 *       q6_K  acc = fma(d_w * d_x, sc0 * isum0 + sc1 * isum1, acc)  (halves' int8 scales; mx_compute_q6k)
 *     where (d_x, s_x) is the x block the vector lies in (a q8_0 vector is half a block). Threads add their
 *     vectors in increasing order, warps by butterfly, the 4 warp totals in warp order (mm_group_store): a
 *     row's bits depend on neither B nor R nor U. No atomics.
 * Shared mutable state: none. */
#include "kernels/cuda/krn_cuda_planes.cuh"

/* ---- quantize ---- */

/* x of activation type XT, each element widened exactly (krn_act_f): the bytes of quantizing the f32 rows. */
template <int XT>
__global__ void __launch_bounds__(128) mx_quantize_kernel(uint8_t *__restrict__ xq,
                                                          const krn_act_e<XT> *__restrict__ x, int B, int n,
                                                          size_t row_bytes) {
    krn_pdl_enter(); /* x is written by the previous kernel */
    const int lane = threadIdx.x % KRN_WARP, nblk = n / 32;
    const int gw = blockIdx.x * (blockDim.x / KRN_WARP) + threadIdx.x / KRN_WARP;
    if (gw >= B * nblk)
        return; /* whole warps leave together: gw is the warp's */
    const int b = gw / nblk, j = gw % nblk;
    const float v = krn_act_f<XT>(x[(size_t)b * n + 32 * j + lane]);
    float amax = fabsf(v);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    const bool finite = __all_sync(0xffffffffu, isfinite(v)); /* else q = 0, d = s = NaN, as the host */
    const float d = finite ? amax / 127.0f : __int_as_float(0x7fc00000);
    const int q = finite && d > 0.0f ? (int)fminf(fmaxf(rintf(v / d), -127.0f), 127.0f) : 0;
    uint8_t *row = xq + (size_t)b * row_bytes;
    row[32 * j + lane] = (uint8_t)(int8_t)q;
    int sum = q;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        sum += __shfl_xor_sync(0xffffffffu, sum, o);
    if (lane == 0)
        ((float2 *)(row + n))[j] = make_float2(d, finite ? d * (float)sum : d);
    const int pad = (int)(row_bytes - (size_t)n - (size_t)n / 4);
    if (j == 0 && lane < pad) /* the row's padding, zeroed as the host form does */
        row[n + n / 4 + lane] = 0;
}

extern "C" int krn_cuda_quantize_x8_async(void *cuda_stream, void *xq, const void *x, int xt, int B, int n,
                                          dev_err *err) {
    const size_t rb = krn_x8_row_bytes(n);
    if (!xq || !x || B <= 0 || !rb)
        return dev_err_set(err, MEMRA_E_INVAL, "krn_cuda_quantize_x8: need xq, x, B > 0 (got %d) and n a positive "
                           "multiple of 32 (got %d)", B, n);
    if (!krn_act_type_ok(xt))
        return dev_err_set(err, MEMRA_E_INVAL, "krn_cuda_quantize_x8: x type %d (allowed: f32, f16, bf16)", xt);
    if (!krn_cuda_aligned(xq, 16) || !krn_cuda_aligned(x, (unsigned)krn_act_bytes(xt)))
        return dev_err_set(err, MEMRA_E_INVAL, "krn_cuda_quantize_x8: xq %p must be 16-byte aligned, x %p aligned to "
                           "its element (%zu bytes)", xq, x, krn_act_bytes(xt));
    const long warps = (long)B * (n / 32);
    const dim3 grid((unsigned)((warps + 3) / 4)), block(128);
    cudaStream_t st = (cudaStream_t)cuda_stream;
    if (xt == KRN_F16)
        krn_launch(mx_quantize_kernel<KRN_F16>, grid, block, 0, st, (uint8_t *)xq, (const uint16_t *)x, B, n, rb);
    else if (xt == KRN_BF16)
        krn_launch(mx_quantize_kernel<KRN_BF16>, grid, block, 0, st, (uint8_t *)xq, (const uint16_t *)x, B, n, rb);
    else
        krn_launch(mx_quantize_kernel<KRN_F32>, grid, block, 0, st, (uint8_t *)xq, (const float *)x, B, n, rb);
    return krn_cuda_launch_check(err, "krn_cuda_quantize_x8");
}

/* ---- GEMV ---- */

/* Four int8 -32: dp4a of it with 4 quants of x adds -32 times their sum. */
#define MX_M32 ((int)0xE0E0E0E0u)

/* q6_K's acc[r][b] += the item's vectors (valid ones: v < nvec) against the quantized x rows. A vector is one
 * x block (d_x); its halves (elements 0..15, 16..31) have the int8 scales sc0, sc1. Per half, in int32,
 * z = -32 sum(q_x) (4 dp4a with MX_M32, once per row of x), then the 4 dp4a of the 6-bit words (0..63) with
 * q_x added to it: sum((q6 - 32) q_x), exact; isum = sc0 * sum0 + sc1 * sum1, at most 2 * 16 * 128 * 32 * 127
 * = 16646144 < 2^24 in magnitude, so (float)isum is exact; then acc = fma(d_w * d_x, isum, acc). The words are
 * decoded once per row of W for every row of x. */
template <int NB, int R, int U>
static __device__ __forceinline__ void mx_compute_q6k(const mp_item<KRN_Q6_K, R, U> &it, const uint8_t *__restrict__ xq,
                                                      size_t row_bytes, int n_in, int nvec, int c, int t,
                                                      float (&acc)[R][NB]) {
    mp_each_vector<U>(nvec, c, t, [&](int u, int v) {
        uint32_t q[R][8];
        int sc0[R], sc1[R];
        float dw[R];
#pragma unroll
        for (int r = 0; r < R; r++) {
            mp_q6k_words(it.q[r][u], it.h[r][u], q[r]);
            sc0[r] = mp_q6k_sc(it.s[r][u], 0);
            sc1[r] = mp_q6k_sc(it.s[r][u], 1);
            dw[r] = mp_q6k_d(it.s[r][u]);
        }
#pragma unroll
        for (int b = 0; b < NB; b++) {
            const uint8_t *row = xq + (size_t)b * row_bytes;
            const int4 xa = __ldg((const int4 *)(row + (size_t)v * 32));
            const int4 xb = __ldg((const int4 *)(row + (size_t)v * 32 + 16));
            const float dx = __ldg((const float *)(row + n_in) + 2 * (size_t)v); /* block v's d (then s) */
            const int xw[8] = {xa.x, xa.y, xa.z, xa.w, xb.x, xb.y, xb.z, xb.w}; /* elements 4i..4i+3 */
            int z0 = 0, z1 = 0;
#pragma unroll
            for (int k = 0; k < 4; k++) {
                z0 = __dp4a(MX_M32, xw[k], z0);
                z1 = __dp4a(MX_M32, xw[4 + k], z1);
            }
#pragma unroll
            for (int r = 0; r < R; r++) {
                int s0 = z0, s1 = z1;
#pragma unroll
                for (int k = 0; k < 4; k++) {
                    s0 = __dp4a((int)q[r][k], xw[k], s0);
                    s1 = __dp4a((int)q[r][4 + k], xw[4 + k], s1);
                }
                acc[r][b] = fmaf(dw[r] * dx, (float)(sc0[r] * s0 + sc1[r] * s1), acc[r][b]);
            }
        }
        });
}

/* acc[r][b] += the item's vectors (valid ones: v < nvec) against the quantized x rows (xq, row_bytes apart). */
template <int T, int NB, int R, int U>
static __device__ __forceinline__ void mx_compute(const mp_item<T, R, U> &it, const uint8_t *__restrict__ xq,
                                                  size_t row_bytes, int n_in, int nvec, int c, int t,
                                                  float (&acc)[R][NB]) {
    enum { VE = mp_layout<T>::VE };
    if constexpr (T == KRN_Q6_K) { /* two int8 scales per vector, no offset term: its own loop */
        mx_compute_q6k<NB, R, U>(it, xq, row_bytes, n_in, nvec, c, t, acc);
        return;
    }
    mp_each_vector<U>(nvec, c, t, [&](int u, int v) {
        float d1[R], m1[R]; /* per row: the factor of isum and of s_x */
#pragma unroll
        for (int r = 0; r < R; r++) {
            if constexpr (T == KRN_Q4_K) {
                mp_q4k_scale(it.s[r][u], v % 8, d1[r], m1[r]);
                m1[r] = -m1[r];
            } else {
                d1[r] = mp_s_d(it.s[r][u]);
                m1[r] = T == KRN_Q4_1 ? mp_s_m(it.s[r][u]) : T == KRN_Q4_0 ? -8.0f * d1[r] : 0.0f;
            }
        }
#pragma unroll
        for (int b = 0; b < NB; b++) {
            const uint8_t *row = xq + (size_t)b * row_bytes;
            const int4 xa = __ldg((const int4 *)(row + (size_t)v * VE));
            const int4 xb = VE == 32 ? __ldg((const int4 *)(row + (size_t)v * VE + 16)) : make_int4(0, 0, 0, 0);
            const float2 dx = __ldg((const float2 *)(row + n_in) + (size_t)v * VE / 32);
            const int xw[8] = {xa.x, xa.y, xa.z, xa.w, xb.x, xb.y, xb.z, xb.w}; /* elements 4i..4i+3 */
#pragma unroll
            for (int r = 0; r < R; r++) {
                int isum = 0;
#pragma unroll
                for (int k = 0; k < 4; k++) {
                    const int w = (int)mp_word_of(it.q[r][u], k);
                    if constexpr (T == KRN_Q8_0) {
                        isum = __dp4a(w, xw[k], isum);
                    } else { /* byte i of w: element 8k+i low nibble, 8k+4+i high nibble */
                        isum = __dp4a(w & 0x0F0F0F0F, xw[2 * k], isum);
                        isum = __dp4a((int)(((unsigned)w >> 4) & 0x0F0F0F0Fu), xw[2 * k + 1], isum);
                    }
                }
                float a = acc[r][b];
                if constexpr (T != KRN_Q8_0)
                    a = fmaf(m1[r], dx.y, a);
                acc[r][b] = fmaf(d1[r] * dx.x, (float)isum, a);
            }
        }
        });
}

/* The int8-x products of mp_kernel (krn_cuda_planes.cuh). */
struct mp_x8 {
    typedef float xe; /* mp_kernel's x, unread */
    template <int T, int NB, int R, int U>
    static __device__ __forceinline__ void compute(const mp_item<T, R, U> &it, const float *,
                                                   const uint8_t *__restrict__ xq, size_t xq_row, int n_in,
                                                   int nvec, int c, int t, float (&acc)[R][NB]) {
        mx_compute<T, NB, R, U>(it, xq, xq_row, n_in, nvec, c, t, acc);
    }
};

void mm_x8_launch(int type, const mm_args *a, int nb, cudaStream_t st) { mp_types<mp_go<mp_x8>>(type, a, nb, st); }
